#!/usr/bin/env bash
# Makes the CUDA-graph and whole-job fixtures on the GPU host (issue: CUDA
# graphs, and one capture of a whole multi-GPU job).  Run from the repository
# root with the GPU kit copied to .gpu-kit/:
#
#   bash scripts/make_graph_fixtures.sh single OUTDIR   # one GPU: tests/data/graphs
#   bash scripts/make_graph_fixtures.sh ddp OUTDIR      # 2 (and 4) GPUs: tests/data/ddp/whole*
#
# single: sample_kernels/gpt.py under torch.compile(mode="reduce-overhead")
#   (forward and backward replayed as CUDA graphs, AdamW eager), the same
#   program three ways: nsys --cuda-graph-trace=graph (nsys's default: one
#   CUPTI_ACTIVITY_KIND_GRAPH_TRACE row per replay, no kernels), nsys
#   --cuda-graph-trace=node (every kernel of every replay), torch.profiler.
#   Also scripts/graph_probe.py (a hand-captured graph of elementwise kernels
#   between two eager kernels) at graph and node level.
# ddp: sample_kernels/gpt_ddp.py under torchrun, rank 1 slowed, captured as ONE
#   export of the whole job (`nsys profile torchrun ...`, exported with
#   --include-blobs=true so NCCL's NVTX payloads keep their bytes) and as one
#   export per rank (`torchrun --no-python nsys profile ...`) of the same job;
#   4 GPUs too where the host has them.
# Every export is scrubbed of the recorded environment, then its `nsys stats`
# oracles are made, then it is xz-compressed.
set -uo pipefail
PART=$1
DEST=$(realpath -m "${2:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
source "$ROOT/scripts/fixture_lib.sh"  # fixture_workdir, kineto_capture, NSYS_FLAGS, stats, finish_nsys
WORK=/tmp/fixtures/graphs_$PART
fixture_workdir "$WORK"
GPT=$ROOT/sample_kernels/gpt.py
GPT_DDP=$ROOT/sample_kernels/gpt_ddp.py
PROBE=$ROOT/scripts/graph_probe.py
LIMIT=240
# without --export: each capture is exported afterwards with --include-blobs=true
CAPTURE=(-t cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite true)

capture() {  # name, graph-trace mode (graph|node), command... -> <name>.sqlite
  local name=$1 mode=$2; shift 2
  echo "== nsys ($mode): $name"
  timeout $LIMIT nsys profile "${CAPTURE[@]}" --cuda-graph-trace="$mode" -o "$name" "$@" > "$name.stdout" 2>&1 \
    || echo "  exit $? (see $name.stdout)"
  rm -f ./*.qdstrm
  nsys export --type sqlite --include-blobs=true --force-overwrite true -o "$name.sqlite" "$name.nsys-rep" \
    > /dev/null 2>&1 || echo "  export failed: $name"
  rm -f "$name.nsys-rep"
}

versions() {
  { nsys --version; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > versions.txt 2>&1
  cat versions.txt
}

# sizes: GPU-bound steps of ~10 ms, so the three captures' step times compare
MODEL=(--steps 30 --dim 512 --layers 4 --heads 8 --seq 256 --batch 16 --vocab 8192)

if [ "$PART" = single ]; then
  mkdir -p graphs && cd graphs
  versions
  echo "== warm the inductor cache (bare run)"
  timeout $LIMIT python3 "$GPT" "${MODEL[@]}" --compile-mode reduce-overhead > warm.stdout 2>&1 || echo "  exit $?"
  tail -2 warm.stdout
  capture gpt_graphs_graph graph python3 "$GPT" "${MODEL[@]}" --compile-mode reduce-overhead --nvtx-steps
  capture gpt_graphs_node node python3 "$GPT" "${MODEL[@]}" --compile-mode reduce-overhead --nvtx-steps
  kineto_capture "$PWD/gpt_graphs_kineto" python3 "$GPT" "${MODEL[@]}" --compile-mode reduce-overhead \
    --annotate-steps --profile torch
  capture probe_graph graph python3 "$PROBE" --steps 20
  capture probe_node node python3 "$PROBE" --steps 20
  for db in *.sqlite; do
    # the GPU trace of a graph-level export: does nsys stats list the graph rows?
    cp "$db" /tmp/trace-copy.sqlite
    nsys stats -q --format csv --timeunit nsec --report cuda_gpu_trace -o /tmp/trace-copy /tmp/trace-copy.sqlite \
      > /dev/null 2>&1 && xz -9 -c /tmp/trace-copy_cuda_gpu_trace.csv > "${db%.sqlite}__cuda_gpu_trace.csv.xz"
    rm -f /tmp/trace-copy*
  done
  cd ..
  finish_nsys graphs
  python3 "$ROOT/scripts/scrub_export.py" --check graphs/*.json.gz graphs/*.sqlite.xz || echo "LEAK CHECK FAILED"
  ls -la graphs
  tar cf "$DEST/graphs_single.tar" graphs
fi

if [ "$PART" = ddp ]; then
  mkdir -p ddp && cd ddp
  versions
  GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
  echo "GPUs: $GPUS"
  DDP_ARGS=(--steps 12 --nvtx-steps --slow-rank 1)
  for n in 2 4; do
    [ "$GPUS" -ge $n ] || { echo "skip $n GPUs"; continue; }
    mkdir -p whole$n && (cd whole$n
      capture whole graph torchrun --standalone --nproc_per_node $n "$GPT_DDP" "${DDP_ARGS[@]}")
  done
  mkdir -p per_rank2 && (cd per_rank2
    echo "== per-rank nsys of the same job"
    timeout $LIMIT torchrun --standalone --nproc_per_node 2 --no-python nsys profile "${NSYS_FLAGS[@]}" \
      -o "rank%q{RANK}" python3 "$GPT_DDP" "${DDP_ARGS[@]}" > torchrun.stdout 2>&1 || echo "  exit $?"
    rm -f ./*.qdstrm ./*.nsys-rep)
  cd ..
  for d in ddp/whole2 ddp/whole4 ddp/per_rank2; do
    [ -d "$d" ] || continue
    finish_nsys "$d"
  done
  python3 "$ROOT/scripts/scrub_export.py" --check ddp/*/*.sqlite.xz || echo "LEAK CHECK FAILED"
  ls -la ddp/*
  tar cf "$DEST/graphs_ddp.tar" ddp
fi
xz -T0 -f "$DEST"/*.tar
ls -la "$DEST"
