#!/usr/bin/env bash
# On the GPU host: the inductor cache that `sample_kernels/gpt.py --compile`
# leaves, packed as tests/data/kineto/gpt_compiled_inductor_cache.tar.xz, for
# `profkit kernels --with-code` and `profkit diff` on the gpt_compiled fixtures
# (inductor names its kernels deterministically for one model, torch and GPU,
# so this cache holds the code of the kernels in tests/data/kineto/gpt_compiled*).
# Only what profkit reads is kept: .ptx, .cubin, Triton's .json, the generated .py.
#
#   bash scripts/make_gpt_kernel_cache.sh OUTDIR
set -euo pipefail
DEST=$(realpath -m "${1:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
CACHE=$(mktemp -d /tmp/inductor-gpt.XXXX)
export TORCHINDUCTOR_CACHE_DIR=$CACHE TORCHINDUCTOR_COMPILE_THREADS=1 PYTHONPATH=$ROOT:${PYTHONPATH:-}
unset TRITON_CACHE_DIR
python3 "$ROOT/sample_kernels/gpt.py" --steps 3 --compile > "$DEST/gpt_kernel_cache.log" 2>&1
(cd "$CACHE" && find . -type f \( -name '*.ptx' -o -name '*.cubin' -o -name '*.json' -o -name '*.py' \) -print0 \
  | tar --null -T - -cJf "$DEST/gpt_compiled_inductor_cache.tar.xz")
ls -l "$DEST/gpt_compiled_inductor_cache.tar.xz"
