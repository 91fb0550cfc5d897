#!/usr/bin/env bash
# What `profkit trace --backend torch` costs an inference loop, and what --window saves
# (issue 22).  On the GPU host, from the repository root:
#
#   bash benchmarks/torch_backend_window.sh OUTDIR
#
# The program is sample_kernels/hf_llama.py's model.generate() (8-layer Llama, random
# weights, bf16, batch 1), TOKENS new tokens, each a record_function step range:
#   bare      no profiler: per-token host times and the wall time
#   window    --backend torch --window WINDOW: only that window is recorded (stacks on)
#   whole     --backend torch: the whole program under the profiler (stacks on)
# Then `profkit steps` and `profkit host` on the window's trace.  OUTDIR gets each run's
# stdout, wall times (times.txt) and the two traces' sizes.
set -uo pipefail
OUT=$(realpath -m "${1:-/tmp/torch-window}")
TOKENS=${TOKENS:-300}
WINDOW=${WINDOW:-8:10}
mkdir -p "$OUT"
[ -f .gpu-kit/setup.sh ] && source .gpu-kit/setup.sh >/dev/null
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
ARGS=(--mode generate --hf-generate --steps "$TOKENS" --annotate-steps --no-nvtx-steps)
wall() {  # name command...: runs it, appends "name seconds exit" to times.txt
  local name=$1; shift
  local t0=$SECONDS
  timeout 280 "$@" > "$OUT/$name.stdout" 2>&1
  echo "$name $((SECONDS - t0)) $?" | tee -a "$OUT/times.txt"
}
: > "$OUT/times.txt"
wall bare python3 sample_kernels/hf_llama.py "${ARGS[@]}"
wall window python3 -m profkit trace --backend torch --window "$WINDOW" -o "$OUT/window" \
  sample_kernels/hf_llama.py -- "${ARGS[@]}"
wall whole python3 -m profkit trace --backend torch -o "$OUT/whole" sample_kernels/hf_llama.py -- "${ARGS[@]}"
ls -l "$OUT"/window/trace.json.gz "$OUT"/whole/trace.json.gz 2>&1 | tee "$OUT/sizes.txt"
python3 -m profkit steps "$OUT/window" > "$OUT/window_steps.txt" 2>&1
python3 -m profkit host "$OUT/window" > "$OUT/window_host.txt" 2>&1
grep -h "steady_mean_step_ms\|host_step_ms" "$OUT"/*.stdout | cut -c1-400
