#!/usr/bin/env bash
# One device call of session 14 (issues 32, 30): where nsys's cost on the static-cache decode loop
# goes (nsys alone with each trace kind), then the zoo's re-captured entries.
#   bash scripts/overhead_probe.sh OUTDIR        (TRAIN=1: GPU-bound training too)
set -uo pipefail
OUT=$(realpath -m "${1:?usage: overhead_probe.sh OUTDIR}")
mkdir -p "$OUT"
(source .gpu-kit/setup.sh > /dev/null 2>&1; nsys --version; nsys profile --help) > "$OUT/nsys_help.txt" 2>&1
OVERHEAD_LIMIT=150 OVERHEAD_ARGS='--only "static cache" --repeat 1 --modes "nsys alone (-t none),nsys alone (-t cuda),nsys alone (-t cuda-hw)"' \
  bash scripts/gpu_session.sh "$OUT" overhead 2>&1 | tail -2
mv "$OUT/capture_overhead.md" "$OUT/overhead_decode.md"
tail -n 6 "$OUT/overhead_decode.md"
SESSION_LIMIT=${ZOO_LIMIT_S:-190} ZOO_NAMES=${ZOO_NAMES:-"hf_generate_static python_loader"} ZOO_JOBS=2 \
  bash scripts/gpu_session.sh "$OUT" zoo 2>&1 | tail -3
[ "${TRAIN:-0}" = 1 ] || exit 0
OVERHEAD_LIMIT=115 OVERHEAD_ARGS='--only "GPU-bound" --repeat 1 --modes "nsys (default),nsys alone (-t none),nsys alone (-t cuda)"' \
  bash scripts/gpu_session.sh "$OUT" overhead 2>&1 | tail -2
mv "$OUT/capture_overhead.md" "$OUT/overhead_train.md"
tail -n 6 "$OUT/overhead_train.md"
