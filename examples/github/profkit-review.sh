#!/usr/bin/env bash
# The commands of profkit-review.yml, runnable anywhere:
#   profkit-review.sh ptx BASE_REV            machine-code checks + diff vs BASE_REV (Markdown on stdout)
#   profkit-review.sh trace BASE_REV          trace the sample at BASE_REV and at HEAD into review-traces/
#   profkit-review.sh diff BASE_RUN NEW_RUN   PR comment on stdout; exit 1 on a >= 5% regression of the
#                                             GPU kernel time per step or of the step time
# Settings (environment): KERNEL (file.py::kernel), SIGNATURE, CONSTEXPR, ARCH, SCRIPT (the program to trace).
set -euo pipefail
KERNEL=${KERNEL:-sample_kernels/triton_kernels.py::gelu_kernel}
SIGNATURE=${SIGNATURE:-*fp32:16,*fp32:16,i32:16}
CONSTEXPR=${CONSTEXPR:-BLOCK_SIZE=1024}
ARCH=${ARCH:-sm_90}
SCRIPT=${SCRIPT:-sample_kernels/train_mlp.py}
REGRESSION_PCT=${REGRESSION_PCT:-5}

case "${1:-}" in
  ptx)
    base=$2
    profkit ptx "$KERNEL" --signature "$SIGNATURE" --constexpr "$CONSTEXPR" --arch "$ARCH" \
      --check vectorized-loads --max-registers 64 --no-spills
    profkit ptx "$KERNEL" --signature "$SIGNATURE" --constexpr "$CONSTEXPR" --arch "$ARCH" \
      --rev "$base" --summary-only --format md
    ;;
  trace)
    base=$2
    mkdir -p review-traces
    git worktree add --detach review-base "$base"
    (cd review-base && profkit trace -o ../review-traces/base "$SCRIPT" -- --steps 30)
    git worktree remove --force review-base
    profkit trace -o review-traces/new "$SCRIPT" -- --steps 30
    ;;
  diff)
    profkit diff "$2" "$3" --format md --fail-on-regression "$REGRESSION_PCT" \
      --fail-on-kernel-regression "$REGRESSION_PCT"
    ;;
  *)
    echo "usage: $0 ptx BASE_REV | trace BASE_REV | diff BASE_RUN NEW_RUN" >&2
    exit 2
    ;;
esac
