#!/usr/bin/env bash
# What each tracer adds to one CUDA call (benchmarks/launch_cost.py), bare and under each, on the GPU
# host with the kit in .gpu-kit/:   bash scripts/launch_cost.sh OUTDIR   -> OUTDIR/launch_cost.txt
# (one LAUNCH_COST line per run), and nsys's own help (its CUDA options) in OUTDIR/nsys_help.txt.
set -uo pipefail
OUT=$(realpath -m "${1:?usage: launch_cost.sh OUTDIR}")
mkdir -p "$OUT"
ROOT=$PWD
source "$ROOT/.gpu-kit/setup.sh" > /dev/null 2>&1
(nsys --version; nsys profile --help) > "$OUT/nsys_help.txt" 2>&1
BENCH="$ROOT/benchmarks/launch_cost.py"
WORK=$(mktemp -d)
cd "$WORK" || exit 1
run() {  # label, command...
  local label=$1; shift
  timeout 120 "$@" --label "$label" 2>>"$OUT/launch_cost.stderr" | grep '^LAUNCH_COST' >> "$OUT/launch_cost.txt" \
    || echo "LAUNCH_COST_FAILED $label" >> "$OUT/launch_cost.txt"
  rm -f ./*.qdstrm ./*.nsys-rep ./*.sqlite
}
nsys_run() {  # label, nsys options...
  local label=$1; shift
  run "$label" nsys profile --sample=none --cpuctxsw=none -o "$WORK/r" --force-overwrite=true "$@" python3 "$BENCH"
}
for _ in $(seq "${ROUNDS:-1}"); do
  run "bare" python3 "$BENCH"
  run "torch.profiler CUDA only" python3 "$BENCH" --torch-profiler cuda
  run "torch.profiler CPU+CUDA" python3 "$BENCH" --torch-profiler cpu+cuda
  nsys_run "nsys -t none" -t none
  nsys_run "nsys -t cuda" -t cuda
  nsys_run "nsys -t cuda --cuda-event-trace=false" -t cuda --cuda-event-trace=false
  nsys_run "nsys -t cuda,nvtx --cuda-graph-trace=graph (profkit's)" -t cuda,nvtx --cuda-graph-trace=graph
done
cat "$OUT/launch_cost.txt"
