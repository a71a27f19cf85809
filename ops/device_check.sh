#!/usr/bin/env bash
# Run the evaluator's GPU checks on a machine with an NVIDIA GPU and the image's own torch/triton.
# Usage: OUT=/some/folder bash ops/device_check.sh   (logs land in $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/kw-device}"
mkdir -p "$OUT"
if [ -d .whl ]; then  # packages the image lacks (pydantic), carried as wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 KERNELWRIGHT_CACHE=/tmp/kw-cache
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
} 2>&1 | tee "$OUT/env.txt"
python3 -m pytest tests/evaluate/test_evaluator_gpu.py -v --timeout 900 -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log"
for c in cuda triton; do
  python3 -m kernelwright.cli.main eval --device cuda --task builtin/L2/01_linear_gelu_scale \
    --candidate examples/candidates/linear_gelu_scale_$c.py --json > "$OUT/example_$c.json" 2>&1
  python3 - "$OUT/example_$c.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[1].split('/')[-1]}: verdict={r['verdict']} custom={r['custom_kernel']} "
      f"runtime={r['runtime_ms']} ref={r['ref_runtime_ms']} speedup={r['speedup']} faster={r['faster']}")
PY
done
