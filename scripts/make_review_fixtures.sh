#!/usr/bin/env bash
# On the GPU host: the fixtures of `profkit diff` / `kernels --with-code` that the
# training fixtures do not cover.
#   - kineto/mlp_gpu_{print,noprint,noprint_b}: sample_kernels/train_mlp.py sized so
#     the GPU, not the host, bounds a step (dim 2048, batch 2048: ~4 ms of GEMMs per
#     step against ~2 ms of launches).  Only then does a print(loss.item()) per step
#     cost time: it drains the launch queue every step, so the next step's launches
#     are no longer hidden behind the GPU's work.  (The small MLP of the training
#     fixtures is launch-bound: there a sync per step costs nothing measurable.)
#   - gpt_compiled_inductor_cache.tar.xz: the compiled code of the gpt --compile kernels.
#
#   bash scripts/make_review_fixtures.sh OUTDIR     -> OUTDIR/review_fixtures.tar.xz
set -uo pipefail
DEST=$(realpath -m "${1:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
export PYTHONPATH=$ROOT:${PYTHONPATH:-} PYTHONUNBUFFERED=1
WORK=/tmp/review-fixtures
rm -rf "$WORK" && mkdir -p "$WORK/kineto"
MLP=$ROOT/sample_kernels/train_mlp.py
SIZE=(--dim 2048 --batch 2048 --layers 4 --steps 30 --no-nvtx-steps --with-stack --profile torch)
for run in "mlp_gpu_print --print-loss" "mlp_gpu_noprint" "mlp_gpu_noprint_b"; do
  set -- $run
  name=$1; shift
  echo "== kineto: $name"
  timeout 180 python3 "$MLP" "${SIZE[@]}" "$@" --trace-out "$WORK/kineto/$name.json" > "$WORK/kineto/$name.stdout" 2>&1 \
    || echo "  exit $? (see $name.stdout)"
  gzip -9 -f "$WORK/kineto/$name.json"
done
bash "$ROOT/scripts/make_gpt_kernel_cache.sh" "$WORK/kineto"
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' > "$WORK/kineto/review_versions.txt"
tar -C "$WORK" -cJf "$DEST/review_fixtures.tar.xz" kineto
ls -l "$DEST"
