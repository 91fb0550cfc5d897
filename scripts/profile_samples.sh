#!/usr/bin/env bash
# Profile every sample kernel with `profkit trace` (Nsight Systems, then Nsight
# Compute on the busiest kernels) on the GPU host, and write
#
#   reports/<sample>/   report.html/.md/.json, run.json, ncu.csv, trace.sqlite(.xz)
#   reports/README.md   the CS336 lecture 6 GELU/softmax table, from these traces
#
# Run from the repository root with the GPU kit in .gpu-kit/ (it provides nsys):
#
#   bash scripts/profile_samples.sh [OUTDIR]        # default OUTDIR: reports
#
# The committed trace.sqlite is a scrubbed copy: nsys stores the profiled
# process's whole environment (META_DATA_CAPTURE ENVIRONMENT_VARIABLE rows,
# TARGET_INFO_SYSTEM_ENV.DeviceEnvironment), which can hold secrets; those rows
# are deleted.  The .nsys-rep and .ncu-rep files hold it too and are not copied.
# Files over 1 MiB are xz-compressed (scripts/samples_table.py reads .xz).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(realpath -m "${1:-$ROOT/reports}")
cd "$ROOT"
if [ -f .gpu-kit/setup.sh ]; then source .gpu-kit/setup.sh; fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext} PYTHONUNBUFFERED=1
# no inductor compile-worker pool: under ncu every worker process would be
# attached and initialised, which makes each ncu pass take minutes
export TORCHINDUCTOR_COMPILE_THREADS=1
PROFILE_TIMEOUT=${PROFILE_TIMEOUT:-0}   # seconds per sample, 0 = none
PY=${PYTHON:-python3}
WORK=${WORK:-/tmp/profile-samples}
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
FAILED=()

$PY -m profkit doctor || true

echo "== warming the CUDA extension and torch.compile caches (so traces hold kernels, not compiles)"
$PY sample_kernels/gelu.py --n 1024 --trials 1 --warmup 1 > /dev/null
$PY sample_kernels/softmax.py --rows 256 --cols 4096 --trials 1 --warmup 1 > /dev/null
$PY sample_kernels/vector_add.py --n 65536 --trials 1 --warmup 1 > /dev/null
$PY sample_kernels/bad_kernels.py --n 65536 --trials 1 --warmup 1 > /dev/null

scrub() {  # an nsys SQLite export, in place: drop the recorded environment
  $PY - "$1" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
if "META_DATA_CAPTURE" in tables:
    db.execute("DELETE FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'")
if "TARGET_INFO_SYSTEM_ENV" in tables:
    db.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
db.commit()
db.execute("VACUUM")
db.close()
EOF
}

profile() {  # name, ncu-top N, script and its arguments
  local name=$1 top=$2; shift 2
  # SAMPLES="gelu softmax" profiles only those (device time is scarce)
  if [ -n "${SAMPLES:-}" ] && [[ " $SAMPLES " != *" $name "* ]]; then return; fi
  local run="$WORK/$name" dest="$OUT/$name" caches="$WORK/caches/$name"
  # Each sample compiles into caches of its own, warmed by one run of the same
  # command (so the trace holds kernels, not compiles) and kept beside its report:
  # the report's kernel table reads the Triton and inductor kernels' machine code there.
  rm -rf "$caches" && mkdir -p "$caches"
  export TRITON_CACHE_DIR="$caches/triton" TORCHINDUCTOR_CACHE_DIR="$caches/inductor"
  echo "== $name: warming its kernel caches"
  timeout --kill-after=15 600 $PY "$@" > /dev/null 2>&1 || echo "  warm-up exit $?"
  echo "== $name: profkit trace --ncu-top $top $*"
  timeout --kill-after=15 "$PROFILE_TIMEOUT" $PY -m profkit trace -o "$run" --tmp-dir "$WORK" --ncu-top "$top" "$@"
  local status=$?
  pkill -f "ncu .*--export $run" 2>/dev/null
  if [ $status -ne 0 ]; then
    echo "  exit $status"; FAILED+=("$name (exit $status)")
  fi
  [ -f "$run/trace.sqlite" ] || return
  rm -rf "$dest" && mkdir -p "$dest"
  # everything the report made (html, md, json, figures), run.json, ncu.csv, the logs
  (cd "$run" && find . -type f ! -name '*.nsys-rep' ! -name '*.ncu-rep' ! -name 'trace.sqlite' \
      -exec cp --parents {} "$dest/" \;)
  cp "$run/trace.sqlite" "$dest/trace.sqlite" && scrub "$dest/trace.sqlite"
  find "$dest" -type f -size +1M ! -name '*.xz' -exec xz -T0 -9 -f {} \;
  local cache
  for cache in triton inductor; do  # scripts/render_reports.py unpacks them
    if [ -n "$(ls -A "$caches/$cache" 2>/dev/null)" ]; then
      tar -C "$caches" -cJf "$dest/${cache}_cache.tar.xz" "$cache"
    fi
  done
  ls -la "$dest"
}

# The lecture's GELU size (16384 x 16384 fp32, 1 GiB per tensor); softmax large
# enough (256 MiB in, 256 MiB out) that the H100/H200's 50-60 MB L2 cannot hold it.
profile gelu 3 sample_kernels/gelu.py --n 16384 --trials 5 --warmup 2
profile softmax 3 sample_kernels/softmax.py --rows 16384 --cols 4096 --trials 5 --warmup 2
profile vector_add 1 sample_kernels/vector_add.py --trials 10 --warmup 3
profile bad_kernels 2 sample_kernels/bad_kernels.py --trials 10 --warmup 3
profile train_print 1 sample_kernels/train_mlp.py --steps 20 --print-loss
profile train_noprint 0 sample_kernels/train_mlp.py --steps 20
profile sync_elementwise 0 scripts/sync_elementwise.py --steps 8

echo "== train_print vs train_noprint: step time with and without print(loss.item())"
if [ -f "$WORK/train_print/trace.sqlite" ] && [ -f "$WORK/train_noprint/trace.sqlite" ]; then
  $PY -m profkit report "$WORK/train_print/trace.sqlite" --baseline "$WORK/train_noprint/trace.sqlite" \
    -o "$OUT/train_print_vs_noprint" || FAILED+=("train_print_vs_noprint")
fi

echo "== reports/README.md"
if [ -d "$OUT/gelu" ] && [ -d "$OUT/softmax" ]; then
  $PY scripts/samples_table.py "$OUT/gelu" "$OUT/softmax" -o "$OUT/README.md" || FAILED+=("samples_table")
fi
du -sh "$OUT"/*
if [ ${#FAILED[@]} -ne 0 ]; then
  echo "failed: ${FAILED[*]}"
  exit 1
fi
