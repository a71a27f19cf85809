# The H200 runs of docs/results/*-h200*.md, as run through the device tool (see scripts/device_env.sh).
# Usage on the device, from the checkout: `bash scripts/h200_session.sh place|start|copy|pool|simple K/N|gputests FILES|poll S|collect`.
# Long jobs run detached from a copy (/tmp/kwb) so that a later call's fresh checkout cannot change
# them; each writes its log under /tmp/kwout.
set -u
source scripts/device_env.sh
MODEL=/tmp/kwcache/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
case "${1:-}" in
place)  # the model arrives in chunks appended to /tmp/q15.gguf
  echo "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046  /tmp/q15.gguf" | sha256sum -c - || exit 1
  mv /tmp/q15.gguf "$MODEL" && ln -sf "$MODEL" /tmp/kwcache/models/ ;;
start)
  bash "$0" copy
  cd /tmp/kwb
  export PYTHONPATH=/tmp/site:/tmp/kwb
  for t in cuda triton; do
    setsid nohup python3 -m kernelwright.cli study run -m "hf:qwen2.5-coder-1.5b?batch_size=40" \
      -r zero_shot+no_scaffold,zero_shot+scaffold -t builtin --target $t --device cuda \
      --max-tokens 768 --iters 50 --jobs 34 --out /tmp/st/$t > /tmp/kwout/study-$t.log 2>&1 < /dev/null &
  done
  cp examples/gemm_bias_gelu.py /tmp/kwout/
  setsid nohup bash -c "time python3 -m kernelwright.cli optimize /tmp/kwout/gemm_bias_gelu.py \
      --model qwen2.5-coder-1.5b --device cuda --target cuda --budget-minutes 6" \
      > /tmp/kwout/optimize.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
poll)  # wait up to $2 seconds for the detached jobs, printing where they are
  end=$((SECONDS + ${2:-300}))
  while [ $SECONDS -lt $end ] && pgrep -f "[k]ernelwright.cli (study|optimize)|[e]val_throughput" > /dev/null; do sleep 10; done
  for f in /tmp/kwout/*.log; do echo "== $f"; tail -c 1500 "$f" | tr '\r' '\n' | tail -n 8; done
  for t in cuda triton; do [ -f /tmp/st/$t/cells.jsonl ] && echo "$t cells: $(wc -l < /tmp/st/$t/cells.jsonl)"; done
  pgrep -fa "[k]ernelwright.cli (study|optimize)|[e]val_throughput" | cut -c1-120 ;;
pool)  # the throughput benchmark's pool pass, detached, on a quiet machine (nothing else running)
  cd /tmp/kwb
  PYTHONPATH=/tmp/site:/tmp/kwb setsid nohup python3 benchmarks/eval_throughput.py --set gpu --device cuda \
    --pass pool --save /tmp/kwout/pool.json > /tmp/kwout/pool.log 2>&1 < /dev/null &
  disown -a; sleep 2; echo started ;;
copy)  # the checkout as it is now, for detached jobs (start calls it)
  rm -rf /tmp/kwb && mkdir -p /tmp/kwb && cp -a kernelwright benchmarks scripts tests examples pyproject.toml /tmp/kwb/
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
  tar czf "$OUT/h200-runs.tgz" -C /tmp st kwout --exclude='*.gguf' 2>/dev/null; ls -la "$OUT" ;;
esac
