#!/usr/bin/env bash
# Makes the training-loop fixtures (Kineto traces and nsys 2025.3 exports of
# sample_kernels/gpt.py, gpt_ddp.py and train_mlp.py) on the GPU host.
# Run from the repository root with the GPU kit copied to .gpu-kit/:
#
#   bash scripts/make_training_fixtures.sh single OUTDIR   # one GPU: tests/data/kineto, tests/data/nsys/nsys2025_{gpt,mlp}_*
#   bash scripts/make_training_fixtures.sh ddp OUTDIR      # two GPUs: tests/data/ddp
#
# Each part leaves one tar.xz in OUTDIR whose folders unpack into tests/data/.
# nsys exports are scrubbed of the profiled process's environment
# (scripts/scrub_export.py) before their `nsys stats` oracles are made, so the
# oracles describe the committed file; every capture is checked for an
# environment block before it is packed.
set -uo pipefail
PART=$1
DEST=$(realpath -m "${2:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
source "$ROOT/scripts/fixture_lib.sh"  # fixture_workdir, kineto_capture, NSYS_FLAGS, nsys25, stats, finish_nsys
WORK=/tmp/fixtures/$PART
fixture_workdir "$WORK"
GPT=$ROOT/sample_kernels/gpt.py
GPT_DDP=$ROOT/sample_kernels/gpt_ddp.py
MLP=$ROOT/sample_kernels/train_mlp.py
LIMIT=180  # seconds per capture: a hang must not eat the device time

kineto() {  # name, script and its arguments -> kineto/<name>.json.gz (torch.profiler)
  local name=$1; shift
  kineto_capture "$WORK/kineto/$name" python3 "$@"
}

versions() {
  { nsys --version; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > versions.txt 2>&1
  cat versions.txt
}

if [ "$PART" = single ]; then
  mkdir -p kineto nsys
  versions
  rm -rf /tmp/inductor  # the first compiled run is cold: its trace shows the compile
  kineto gpt_compiled_cold "$GPT" --steps 8 --compile --annotate-steps --profile torch-noschedule
  kineto gpt_compiled "$GPT" --steps 12 --compile --annotate-steps --profile torch
  kineto gpt_eager "$GPT" --steps 12 --annotate-steps --profile torch
  kineto gpt_noschedule "$GPT" --steps 6 --annotate-steps --profile torch-noschedule
  kineto mlp_print "$MLP" --steps 20 --no-nvtx-steps --with-stack --profile torch --print-loss
  kineto mlp_noprint "$MLP" --steps 20 --no-nvtx-steps --with-stack --profile torch
  kineto mlp_noprint_b "$MLP" --steps 20 --no-nvtx-steps --with-stack --profile torch
  kineto mlp_annotated "$MLP" --steps 20 --no-nvtx-steps --annotate-steps --profile torch-noschedule
  kineto mlp_plain "$MLP" --steps 20 --no-nvtx-steps --profile torch-noschedule
  for i in 1 2 3 4 5; do
    slow=(); [ $i = 4 ] && slow=(--slow-kernel)
    kineto hist_run$i "$MLP" --steps 20 --no-nvtx-steps --profile torch "${slow[@]}"
  done

  cd nsys
  nsys25 nsys2025_gpt_eager python3 "$GPT" --steps 12 --nvtx-steps
  nsys25 nsys2025_gpt_compiled python3 "$GPT" --steps 12 --compile --nvtx-steps
  nsys25 nsys2025_mlp_nvtx python3 "$MLP" --steps 20
  nsys25 nsys2025_mlp_plain python3 "$MLP" --steps 20 --no-nvtx-steps
  cd ..
  finish_nsys nsys
  python3 "$ROOT/scripts/scrub_export.py" --check kineto/*.json.gz nsys/*.sqlite.xz || echo "LEAK CHECK FAILED"
  ls -la kineto nsys
  tar cf "$DEST/training_single.tar" versions.txt kineto nsys
fi

if [ "$PART" = ddp ]; then
  mkdir -p ddp/kineto ddp/kineto_slow ddp/nsys ddp/nsys_slow
  versions
  python3 -c 'import torch; print("GPUs:", torch.cuda.device_count())'
  TORCHRUN=(torchrun --standalone --nproc_per_node 2)
  DDP_ARGS=(--steps 12 --annotate-steps)
  for spec in "kineto|" "kineto_slow|--slow-rank 1"; do
    dir=ddp/${spec%%|*}; extra=${spec#*|}
    echo "== ddp kineto: $dir"
    timeout $LIMIT "${TORCHRUN[@]}" "$GPT_DDP" "${DDP_ARGS[@]}" $extra --profile torch \
      --trace-out "$WORK/$dir/rank{rank}.json" > "$dir/torchrun.stdout" 2>&1 || echo "  exit $?"
    gzip -9 -f "$dir"/rank*.json
  done
  for spec in "nsys|" "nsys_slow|--slow-rank 1"; do
    dir=ddp/${spec%%|*}; extra=${spec#*|}
    echo "== ddp nsys: $dir"
    # one nsys per rank process; %q{RANK} is the rank torchrun gives that process
    (cd "$dir" && timeout $LIMIT "${TORCHRUN[@]}" --no-python nsys profile "${NSYS_FLAGS[@]}" -o "rank%q{RANK}" \
      python3 "$GPT_DDP" "${DDP_ARGS[@]}" --nvtx-steps $extra > torchrun.stdout 2>&1 || echo "  exit $?")
    rm -f ./*.qdstrm "$dir"/*.qdstrm
    finish_nsys "$dir"
  done
  python3 "$ROOT/scripts/scrub_export.py" --check ddp/*/*.json.gz ddp/*/*.sqlite.xz || echo "LEAK CHECK FAILED"
  ls -la ddp/*
  tar cf "$DEST/training_ddp.tar" versions.txt ddp
fi
xz -T0 -f "$DEST"/*.tar
ls -la "$DEST"
