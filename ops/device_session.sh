# The device runs of docs/results/ (GPU studies and benchmarks), through the device tool; see
# ops/README.md. Usage on the device, from the checkout:
#   bash ops/device_session.sh chunk|place|check|skel|skelt|gemm|search|steps STUDY...|kb|side|start|opt|
#                              ray|scaling|copy|pool|simple K/N|gputests FILES|handshake|poll S|collect
# Long jobs run detached (`setsid nohup`: a job left in the call's process group dies with the call)
# from a copy of the checkout (/tmp/kwb), so that a later call's fresh checkout cannot change them;
# each writes its log under /tmp/kwout. The machine is given back shortly after a call ends: while a
# job runs, keep a call in flight (`poll S`). The same sequence runs on an H100 or an H200.
set -u
source ops/device_env.sh
MODEL=/tmp/kwcache/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
case "${1:-}" in
chunk)  # `chunk dNN`: one chunk of the model, carried as .carry/dNN, in order; named, since chunks
  # carried by earlier calls may still lie there. A call carries at most 64 MiB with the tree (about
  # 11 MiB): `head -c 46M MODEL > .carry/d00` (it travels with .whl), then `tail -c
  # +$((46*1048576+1)) MODEL | split -b 50M -d -a 2 --numeric-suffixes=1 - .carry/d` (d01..d21).
  # The last chunk, `place`, the studies and a `poll` fit in one call.
  cat ".carry/$2" >> /tmp/q15.gguf && ls -la /tmp/q15.gguf ;;
place)  # the model arrives in chunks appended to /tmp/q15.gguf; dequantised once here, so that the
  # studies started next do not each dequantise it at once
  echo "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  /tmp/q15.gguf" | sha256sum -c - || exit 1
  mv /tmp/q15.gguf "$MODEL" && ln -sf "$MODEL" /tmp/kwcache/models/
  python3 -c "from kernelwright.llm import make_backend; print(make_backend('hf:qwen2.5-coder-1.5b').loaded_from)" ;;
check)  # the scaffold oracle regions through the evaluator (the judge split), detached, from a copy
  # of its own (/tmp/kwc: `search` replaces /tmp/kwb while this may still run)
  bash "$0" copy /tmp/kwc
  cd /tmp/kwc
  PYTHONPATH=/tmp/site:/tmp/kwc setsid nohup python3 benchmarks/scaffold_check.py --device cuda --target cuda \
    --target triton --jobs 4 --out /tmp/kwout/scaffold-check.md > /tmp/kwout/scaffold-check.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
skel)  # the oracle-region skeletons against eager and torch.compile, detached, from a copy of its own
  # (/tmp/kws); builds first with 12 jobs, then the timed runs one at a time. `skel --variants` also
  # times every launch variant (about 4x as long)
  bash "$0" copy /tmp/kws
  cd /tmp/kws
  PYTHONPATH=/tmp/site:/tmp/kws setsid nohup python3 benchmarks/skeleton_speed.py --device cuda --target cuda \
    --target triton --jobs 12 --iters 30 --out /tmp/kwout/skeleton-speed-h200.md "${@:2}" \
    > /tmp/kwout/skeleton-speed.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
skelt)  # the same, timed as device time in one process (benchmarks/device_time.py), every
  # launch variant with it, detached; the suite in three processes side by side (the builds and
  # torch.compile take the time; the device lock keeps the timed calls apart): tables
  # skeleton-device-time-L1..L3.md. `skelt fg ARGS` runs one in the foreground (a quick look)
  bash "$0" copy /tmp/kwt
  cd /tmp/kwt
  export PYTHONPATH=/tmp/site:/tmp/kwt
  if [ "${2:-}" = fg ]; then
    python3 benchmarks/skeleton_speed.py --device cuda --target cuda --target triton --device-time --jobs 12 \
      --out /tmp/kwout/skeleton-device-time-fg.md "${@:3}"; exit
  fi
  for level in 1 2 3; do
    setsid nohup python3 benchmarks/skeleton_speed.py --device cuda --target cuda --target triton --device-time \
      --tasks builtin:$level --jobs 5 --out /tmp/kwout/skeleton-device-time-L$level.md \
      > /tmp/kwout/skeleton-device-time-L$level.log 2>&1 < /dev/null &
  done
  disown -a; sleep 2; echo started ;;
gemm)  # the Triton GEMM skeletons (oracle epilogue) against eager and torch.compile, with
  # their TF32 counterfactual, detached, from a copy of its own (/tmp/kwg)
  bash "$0" copy /tmp/kwg
  cd /tmp/kwg
  PYTHONPATH=/tmp/site:/tmp/kwg setsid nohup python3 benchmarks/gemm_check.py --device cuda --iters 30 \
    --out /tmp/kwout/gemm-check-h200.md builtin/L1/10_matmul builtin/L2/01_linear_gelu_scale \
    builtin/L2/10_linear_bias_hardswish_clamp builtin/L3/01_mlp_block builtin/L3/07_two_expert_mixture \
    examples/gemm_bias_gelu.py tests/fixtures/tasks/bmm_relu_fp16.py > /tmp/kwout/gemm-check.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
search)  # zero_shot+scaffold vs search, CUDA and Triton on the GPU, side by side
  # (studies/builtin-zero-shot-vs-search-*.toml); with them plain copies of the references timed on
  # the same GPU. `search cpp` adds C++ on the host's CPU (all three beside the scaffold check
  # oversubscribe 16 cores)
  bash "$0" copy
  cd /tmp/kwb
  export PYTHONPATH=/tmp/site:/tmp/kwb
  for t in cuda triton ${2:-}; do
    kind=gpu; [ $t = cpp ] && kind=cpu
    setsid nohup python3 -m kernelwright.cli.main study run studies/builtin-zero-shot-vs-search-$t-$kind.toml \
      --out /tmp/st/$t > /tmp/kwout/study-$t.log 2>&1 < /dev/null &
  done
  setsid nohup python3 benchmarks/copy_timing.py --device cuda --rounds 3 --out /tmp/kwout/copy-timing.md \
    > /tmp/kwout/copy-timing.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
steps)  # the built-in search studies: `steps STUDY...`, each the name of a study file under
  # studies/ (e.g. builtin-search-cuda-gpu builtin-search-triton-gpu-12min), side by side, the model
  # on the GPU for all; C++ on the host's CPU. Three studies at most on 16 cores. Every cell begins
  # at once (jobs = 28): a verified kernel's launch variants queue behind other cells' first
  # candidates (EvalRun.priority). One evaluation slot a study is the bottleneck: slots = 4 gives
  # more (the timed stage holds the GPU alone anyway); a clock a cell (cell_minutes) makes the whole
  # study end inside one session (12 minutes a cell with 4 slots: all 28 Triton cells in 14 minutes)
  bash "$0" copy
  cd /tmp/kwb
  export PYTHONPATH=/tmp/site:/tmp/kwb
  for name in "${@:2}"; do
    setsid nohup python3 -m kernelwright.cli.main study run studies/$name.toml --out /tmp/st/$name \
      > "/tmp/kwout/study-$name.log" 2>&1 < /dev/null &
  done
  disown -a; sleep 2; echo started ;;
kb)  # the KernelBench subset, CUDA and Triton side by side, every cell begun at once (the files of
  # studies/kernelbench-subset-*.toml as they are). The data travels carried as .carry/kernelbench
  # (a copy of ../shared/kernelbench) and is put where the study files name it, the copy's sibling
  bash "$0" copy
  rm -rf /tmp/shared/kernelbench && mkdir -p /tmp/shared && cp -a .carry/kernelbench /tmp/shared/kernelbench
  cd /tmp/kwb
  export PYTHONPATH=/tmp/site:/tmp/kwb
  for t in cuda triton; do
    setsid nohup python3 -m kernelwright.cli.main study run studies/kernelbench-subset-$t.toml --out /tmp/st/kb-$t \
      "${@:2}" > /tmp/kwout/study-kb-$t.log 2>&1 < /dev/null &
  done
  disown -a; sleep 2; echo started ;;
fallback)  # the whole-program fallback's compile rate (studies/fallback-compile-cuda.toml), before and
  # after the CUDA target's prompt change, side by side: "before" is this checkout with the old
  # target template (carried as .carry/old_target.jinja), "after" the checkout as it is. Needs `kb`'s
  # data copy (/tmp/shared/kernelbench) and /tmp/kwb
  rm -rf /tmp/kwfb && cp -a /tmp/kwb /tmp/kwfb && cp .carry/old_target.jinja /tmp/kwfb/kernelwright/prompts/templates/_target.jinja
  for side in before:/tmp/kwfb after:/tmp/kwb; do
    name=${side%%:*}; tree=${side#*:}
    (cd "$tree" && PYTHONPATH=/tmp/site:$tree setsid nohup python3 -m kernelwright.cli.main study run studies/fallback-compile-cuda.toml --out /tmp/st/fb-$name \
      > /tmp/kwout/study-fb-$name.log 2>&1 < /dev/null &)
  done
  disown -a; sleep 2; echo started ;;
gpubg)  # the GPU-marked tests, detached from a copy of their own (/tmp/kwg), logged to kwout/gputests.log
  bash "$0" copy /tmp/kwg
  cd /tmp/kwg
  PYTHONPATH=/tmp/site:/tmp/kwg setsid nohup python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 "${@:2}" \
    > /tmp/kwout/gputests.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
side)  # two studies side by side on one GPU (CUDA and Triton targets, the built-in suite at
  # full size, zero_shot+scaffold: one sample a cell, so both can finish in a session;
  # studies/builtin-zero-shot-scaffold-*-gpu.toml) with plain copies of the references timed beside them
  bash "$0" copy
  cd /tmp/kwb
  export PYTHONPATH=/tmp/site:/tmp/kwb
  for t in cuda triton; do
    setsid nohup python3 -m kernelwright.cli.main study run studies/builtin-zero-shot-scaffold-$t-gpu.toml \
      --out /tmp/st/$t > /tmp/kwout/study-$t.log 2>&1 < /dev/null &
  done
  setsid nohup python3 benchmarks/copy_timing.py --device cuda --rounds 3 --out /tmp/kwout/copy-timing.md \
    > /tmp/kwout/copy-timing.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
start)  # scaffold on vs off on the built-in suite, CUDA and Triton side by side
  # (studies/builtin-scaffold-on-off-*-gpu.toml), and optimize on examples/gemm_bias_gelu.py beside them
  bash "$0" copy
  cd /tmp/kwb
  export PYTHONPATH=/tmp/site:/tmp/kwb
  for t in cuda triton; do
    setsid nohup python3 -m kernelwright.cli.main study run studies/builtin-scaffold-on-off-$t-gpu.toml \
      --out /tmp/st/$t > /tmp/kwout/study-$t.log 2>&1 < /dev/null &
  done
  cp examples/gemm_bias_gelu.py /tmp/kwout/
  setsid nohup bash -c "time python3 -m kernelwright.cli.main optimize /tmp/kwout/gemm_bias_gelu.py \
      --model qwen2.5-coder-1.5b --device cuda --target cuda --budget-minutes 6" \
      > /tmp/kwout/optimize.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
opt)  # `opt TARGET MINUTES`: optimize on examples/gemm_bias_gelu.py, detached, from a copy
  # of its own (/tmp/kwo), its output folder beside the copied module in /tmp/kwout; TARGET `auto`
  # passes none (optimize's own pick: Triton for a GEMM with an epilogue)
  bash "$0" copy /tmp/kwo
  cp /tmp/kwo/examples/gemm_bias_gelu.py /tmp/kwout/
  cd /tmp/kwo
  t=${2:-auto}; flag="--target $t"; [ "$t" = auto ] && flag=""
  PYTHONPATH=/tmp/site:/tmp/kwo setsid nohup bash -c "time python3 -m kernelwright.cli.main optimize \
      /tmp/kwout/gemm_bias_gelu.py --model qwen2.5-coder-1.5b --device cuda $flag \
      --budget-minutes ${3:-6}; echo exit \$?" > /tmp/kwout/optimize-$t.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
scaling)  # on a kind with several GPUs (nvidia-h200-x2 or larger): the suite's oracle and
  # wrong regions through Ray on 1 GPU and on all of them, one GPU's workers killed in the last run,
  # detached, from a copy of its own (/tmp/kwr); `scaling ARGS` passes more (e.g. --slots 2). Ray may
  # not be in the device image (`python3 -c "import ray"`): its cp312 wheel is 79 MB (2.60.0), more
  # than one call carries: carry it in two chunks as the model's, `cat` them into /tmp/ray.whl and
  # `pip install --no-index --no-deps --target /tmp/site` it with msgpack, jsonschema's set and click
  # downloaded beside .whl/ (`ray r0`, `ray r1`). On one GPU: `scaling --tasks builtin:1:1-3 --units 1
  # --units 1 --slots 4`
  bash "$0" copy /tmp/kwr
  cd /tmp/kwr
  PYTHONPATH=/tmp/site:/tmp/kwr setsid nohup python3 benchmarks/ray_scaling.py --device cuda --target cuda \
    --target triton --kill --out /tmp/kwout/scaling.md "${@:2}" > /tmp/kwout/scaling.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
ray)  # `ray r0` then `ray r1`: Ray's cp312 wheel (79 MB: `head -c 42M WHEEL > .carry/r0`, `tail -c
  # +$((42*1048576+1)) WHEEL > .carry/r1`), carried a chunk a call, the second with its dependencies
  # (.carry/raydeps: msgpack, click, jsonschema, attrs, referencing, rpds-py, jsonschema-specifications,
  # protobuf; the image has the rest), installed into /tmp/site
  cat ".carry/$2" >> /tmp/ray.whl && ls -la /tmp/ray.whl
  if [ "$2" = r1 ]; then
    mv /tmp/ray.whl /tmp/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      /tmp/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl .carry/raydeps/*.whl
    python3 -c "import ray; print('ray', ray.__version__)"
  fi ;;
handshake)  # the device-side timing handshake's fixed cost (benchmarks/gpu_event_handshake.py), in the
  # foreground: a few minutes, nothing else on the GPU
  python3 benchmarks/gpu_event_handshake.py "${@:2}" | tee /tmp/kwout/handshake.md ;;
poll)  # wait up to $2 seconds for the detached jobs, printing where they are. Only command lines that
  # start with python count: the call's own `bash -c` names the jobs too, and matching it would wait
  # out the whole poll after the jobs had ended
  jobs='^python[0-9.]* .*(kernelwright.cli.main (study|optimize)|eval_throughput|scaffold_check|copy_timing|skeleton_speed|gemm_check|ray_scaling)'
  end=$((SECONDS + ${2:-300}))
  while [ $SECONDS -lt $end ] && pgrep -f "$jobs" > /dev/null; do sleep 10; done
  for f in /tmp/kwout/*.log; do echo "== $f"; tail -c 1500 "$f" | tr '\r' '\n' | tail -n 8; done
  for f in /tmp/st/*/cells.jsonl; do [ -f "$f" ] && echo "$f: $(wc -l < "$f") cells"; done
  pgrep -fa "$jobs" | cut -c1-120 ;;
pool)  # the throughput benchmark's pool pass, detached, on a quiet machine (nothing else running)
  cd /tmp/kwb
  PYTHONPATH=/tmp/site:/tmp/kwb setsid nohup python3 benchmarks/eval_throughput.py --set gpu --device cuda \
    --pass pool --save /tmp/kwout/pool.json > /tmp/kwout/pool.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
copy)  # `copy [DIR]`: the checkout as it is now, for detached jobs (default /tmp/kwb)
  dest=${2:-/tmp/kwb}
  rm -rf "$dest" && mkdir -p "$dest" && cp -a kernelwright benchmarks scripts ops tests examples studies pyproject.toml "$dest/"
  echo copied ;;
simple)  # its simple pass, detached; saved after every candidate, continued from its save if present.
  # `simple K/N` runs part K of N (saved in simple-K.json); parts may run side by side (times add up).
  part=${2:-1/1}; k=${part%/*}
  cd /tmp/kwb
  PYTHONPATH=/tmp/site:/tmp/kwb setsid nohup python3 benchmarks/eval_throughput.py --set gpu --device cuda \
    --pass simple --part "$part" --save /tmp/kwout/simple-$k.json >> /tmp/kwout/simple-$k.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
gputests)  # the GPU-marked tests, in the foreground (pytest and pytest-timeout come from the carried wheels)
  python3 -m pytest -q -m gpu -p no:cacheprovider "${@:2}" ;;
collect)
  tar czf "$OUT/device-runs.tgz" -C /tmp st kwout --exclude='*.gguf' 2>/dev/null; ls -la "$OUT" ;;
esac
