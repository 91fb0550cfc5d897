#!/usr/bin/env bash
# On the GPU host: the fixtures that show step finding and idle attribution
# hold on a GPU-bound loop, where run-to-run noise is small.
#   nsys/nsys2025_mlp_gpu_{nvtx,plain}: sample_kernels/train_mlp.py sized so the
#       GPU bounds a step (dim 2048, batch 2048), with NVTX step ranges and with
#       no annotation at all (steps must then come from the kernel pattern);
#   kineto/review/mlp_gpu_{annotated,plain}: the same under torch.profiler, with
#       record_function step ranges and without;
#   nsys/nsys2025_mlp_sleep: sample_kernels/train_slow_loader.py, a loop whose
#       host sleeps each step (OS-runtime trace on): the longest GPU idle is a
#       clock_nanosleep on the launching thread;
#   gpt_compiled_run/: `profkit trace --ncu-top 6` of gpt.py --compile: a run
#       folder with the nsys export, ncu CSV and the inductor cache it used, so
#       the report's kernel table can show machine code next to achieved bandwidth.
#
#   bash scripts/make_steady_fixtures.sh OUTDIR [all|run]  -> OUTDIR/steady_fixtures.tar.xz
#   (`run`: only the gpt --compile run folder)
# The host needs profkit's runtime wheels (orjson, msgspec) in .gpu-kit/wheels/,
# which setup.sh installs.
set -uo pipefail
DEST=$(realpath -m "${1:-$PWD/fixtures-out}")
PART=${2:-all}
ROOT=$PWD
mkdir -p "$DEST"
source .gpu-kit/setup.sh >/dev/null
export PYTHONPATH=$ROOT:$PYTHONPATH PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=1
WORK=/tmp/steady-fixtures
rm -rf "$WORK" && mkdir -p "$WORK/nsys" "$WORK/kineto/review"
cd "$WORK/nsys"
source "$ROOT/scripts/fixture_lib.sh"  # NSYS_FLAGS, nsys25, stats, finish_nsys
MLP=$ROOT/sample_kernels/train_mlp.py
SIZE=(--dim 2048 --batch 2048 --layers 4 --steps 30)
LIMIT=180

if [ "$PART" = all ]; then
nsys25 nsys2025_mlp_gpu_nvtx python3 "$MLP" "${SIZE[@]}" --nvtx-steps
nsys25 nsys2025_mlp_gpu_plain python3 "$MLP" "${SIZE[@]}" --no-nvtx-steps
nsys25 nsys2025_mlp_sleep python3 "$ROOT/sample_kernels/train_slow_loader.py" --steps 20 --sleep-ms 5
finish_nsys .

cd "$WORK/kineto/review"
for run in "mlp_gpu_annotated --annotate-steps" "mlp_gpu_plain"; do
  set -- $run
  name=$1; shift
  echo "== kineto: $name"
  timeout $LIMIT python3 "$MLP" "${SIZE[@]}" --no-nvtx-steps --profile torch-noschedule "$@" \
    --trace-out "$PWD/$name.json" > "$name.stdout" 2>&1 || echo "  exit $? (see $name.stdout)"
  gzip -9 -f "$name.json"
done
fi

echo "== profkit trace --ncu-top 6: gpt --compile"
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor
cd "$WORK"
timeout 300 python3 -m profkit trace --ncu-top 6 -o "$WORK/gpt_compiled_run" "$ROOT/sample_kernels/gpt.py" \
  -- --compile --steps 12 --nvtx-steps > gpt_compiled_run.log 2>&1 || echo "  exit $? (see gpt_compiled_run.log)"
tail -5 gpt_compiled_run.log
tar -C "$WORK" -cJf "$WORK/gpt_compiled_run/inductor_cache.tar.xz" inductor
rm -f gpt_compiled_run/*.nsys-rep

{ nsys --version; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > versions.txt 2>&1
cat versions.txt
python3 "$ROOT/scripts/scrub_export.py" --check kineto/review/*.json.gz nsys/*.sqlite.xz gpt_compiled_run/trace.sqlite || echo "LEAK CHECK FAILED"
ls -la nsys kineto/review gpt_compiled_run
tar -C "$WORK" -cJf "$DEST/steady_fixtures.tar.xz" versions.txt nsys kineto gpt_compiled_run gpt_compiled_run.log
ls -la "$DEST"
