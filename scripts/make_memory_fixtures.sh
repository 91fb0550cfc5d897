#!/usr/bin/env bash
# Makes the `profkit memory` fixtures: sample_kernels/gpt_memory.py (sample_kernels/gpt.py's GPT,
# AdamW) under torch.profiler(profile_memory=True, with_stack=True), 2 unrecorded steps then 6
# recorded, once as it is and once with a planted leak (one activation-sized tensor per step kept
# in a list).  Each .stdout holds MEM_TRUTH: the parameters' and optimizer state's bytes from the
# model itself, the leaked bytes per step and the line that keeps them.
#
#   bash scripts/make_memory_fixtures.sh OUTDIR     # on the CPU (the host allocator): ~1 minute
#
# On a GPU host the same program records the CUDA caching allocator's events instead (allocated
# and reserved); tests/data/memory/README.md says which machine made the committed files.
# Leaves OUTDIR/memory/{gpt_memory,gpt_memory_leak}.json.gz and .stdout.
set -euo pipefail
DEST=$(realpath -m "${1:-$PWD/fixtures-out}")/memory
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DEST"
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
cd "$DEST"
python "$ROOT/sample_kernels/gpt_memory.py" --steps 6 --trace-out gpt_memory.json.gz \
  2>/dev/null | grep -v '^USDT' > gpt_memory.stdout
python "$ROOT/sample_kernels/gpt_memory.py" --steps 6 --leak --trace-out gpt_memory_leak.json.gz \
  2>/dev/null | grep -v '^USDT' > gpt_memory_leak.stdout
python -c "import torch, platform; print('torch', torch.__version__, '|', platform.processor() or platform.machine())" \
  > versions.txt
ls -la "$DEST"
