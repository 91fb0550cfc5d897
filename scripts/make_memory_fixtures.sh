#!/usr/bin/env bash
# Makes the `profkit memory` fixtures: sample_kernels/gpt_memory.py (sample_kernels/gpt.py's GPT,
# AdamW) under torch.profiler(profile_memory=True, with_stack=True), 2 unrecorded steps then 6
# recorded, once as it is and once with a planted leak (one activation-sized tensor per step kept
# in a list).  Each .stdout holds MEM_TRUTH: the parameters' and optimizer state's bytes from the
# model itself, the leaked bytes per step and the line that keeps them, and on a GPU the
# allocator's own per-step peaks (torch.cuda.max_memory_allocated/reserved).
#
#   bash scripts/make_memory_fixtures.sh OUTDIR        # on the CPU (the host allocator): ~1 minute
#   bash scripts/make_memory_fixtures.sh OUTDIR gpu    # on the GPU host, the GPU kit in .gpu-kit/
#
# On the GPU host (OUTDIR/memory_gpu/) the same loop also writes the CUDA caching allocator's
# snapshot (its history recorded from the start) beside each Kineto trace, and:
#   gpt_oom.pickle.xz     the planted out-of-memory error: the sequence length doubles every step
#                         (attention on the math path, memory ~ seq^2) until an allocation fails;
#                         the snapshot is dumped by the program's out-of-memory observer;
#   gpt_memory_nsys.sqlite.xz  the loop under nsys --cuda-memory-usage=true (scrubbed), with the
#                         snapshot of that same run (gpt_memory_nsys.pickle.xz).
# tests/data/memory/README.md says which machine made the committed files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=${2:-cpu}
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ "$MODE" = gpu ]; then
  DEST=$(realpath -m "${1:-$PWD/fixtures-out}")/memory_gpu
  source "$ROOT/.gpu-kit/setup.sh" >/dev/null
else
  DEST=$(realpath -m "${1:-$PWD/fixtures-out}")/memory
fi
mkdir -p "$DEST"
cd "$DEST"
PROGRAM=$ROOT/sample_kernels/gpt_memory.py
capture() {  # name, program flags... -> name.stdout (MEM_TRUTH) and what the flags write
  local name=$1; shift
  echo "== $name"
  python3 "$PROGRAM" "$@" 2> "$name.stderr" | grep -v '^USDT' > "$name.stdout" || echo "  exit $? (see $name.stderr)"
}
if [ "$MODE" = gpu ]; then
  capture gpt_memory --steps 6 --trace-out gpt_memory.json.gz --snapshot gpt_memory.pickle
  capture gpt_memory_leak --steps 6 --leak --trace-out gpt_memory_leak.json.gz --snapshot gpt_memory_leak.pickle
  capture gpt_oom --oom --snapshot gpt_oom.pickle
  echo "== gpt_memory_nsys"
  nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --cuda-memory-usage=true --force-overwrite true \
    -o gpt_memory_nsys python3 "$PROGRAM" --steps 6 --snapshot gpt_memory_nsys.pickle \
    > gpt_memory_nsys.stdout 2> gpt_memory_nsys.stderr || echo "  exit $? (see gpt_memory_nsys.stderr)"
  nsys export --type sqlite --force-overwrite true -o gpt_memory_nsys.sqlite gpt_memory_nsys.nsys-rep > /dev/null 2>&1
  rm -f gpt_memory_nsys.nsys-rep ./*.qdstrm
  python3 "$ROOT/scripts/scrub_export.py" gpt_memory_nsys.sqlite || echo "  LEAK: gpt_memory_nsys.sqlite"
  for trace in gpt_memory.json.gz gpt_memory_leak.json.gz; do  # the traces' environments out
    python3 -m profkit scrub "$trace" -o "scrubbed-$trace" > /dev/null && mv "scrubbed-$trace" "$trace"
  done
  xz -9 -f ./*.pickle gpt_memory_nsys.sqlite
  { nsys --version; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > versions.txt 2>&1
else
  capture gpt_memory --steps 6 --trace-out gpt_memory.json.gz
  capture gpt_memory_leak --steps 6 --leak --trace-out gpt_memory_leak.json.gz
  rm -f ./*.stderr
  python3 -c "import torch, platform; print('torch', torch.__version__, '|', platform.processor() or platform.machine())" \
    > versions.txt
fi
ls -la "$DEST"
