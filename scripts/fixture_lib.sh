# Shell functions shared by the fixture scripts (make_fixtures.sh,
# make_training_fixtures.sh, make_steady_fixtures.sh, make_graph_fixtures.sh,
# make_host_fixtures.sh); source it with ROOT set to the repository root.

NSYS_FLAGS=(-t cuda,nvtx,osrt --sample=none --cpuctxsw=none --export sqlite --force-overwrite true)

nsys25() {  # name, command... -> <name>.sqlite and <name>.stdout (Nsight Systems 2025.3)
  local name=$1; shift
  echo "== nsys 2025: $name"
  nsys profile "${NSYS_FLAGS[@]}" -o "$name" "$@" > "$name.stdout" 2>&1 || echo "  exit $? (see $name.stdout)"
  rm -f ./*.qdstrm
}

stats() {  # nsys binary, export -> <export>_<report>.csv ; runs on a copy (stats may touch the file)
  # a folder of its own: make_zoo.sh runs several captures at once
  local bin=$1 db=$2 base=${2%.sqlite} work f
  work=$(mktemp -d /tmp/stats-XXXXXX)
  cp "$db" "$work/copy.sqlite"
  "$bin" stats -q --format csv --timeunit nsec \
    --report cuda_gpu_kern_sum --report cuda_api_sum --report nvtx_sum \
    --report cuda_gpu_mem_time_sum --report cuda_gpu_mem_size_sum \
    -o "$work/copy" "$work/copy.sqlite" > /dev/null 2>&1
  for f in "$work"/copy_*.csv; do mv "$f" "${base}__$(basename "$f" | sed 's/^copy_//')"; done
  rm -rf "$work"
}

finish_nsys() {  # folder: scrub, nsys stats oracles of the scrubbed file, xz every export in it
  local db
  for db in "$1"/*.sqlite; do
    python3 "$ROOT/scripts/scrub_export.py" "$db" || echo "  LEAK: $db"
    (cd "$1" && stats nsys "$(basename "$db")")
    xz -T0 -9 -f "$db"
  done
  rm -f "$1"/*.nsys-rep
}

fixture_workdir() {  # folder: the GPU kit, the capture environment, then a fresh folder to work in (cd there)
  source "$ROOT/.gpu-kit/setup.sh" >/dev/null
  export PYTHONPATH=$ROOT:$PYTHONPATH
  # one inductor cache for all runs; no compile-worker pool (nsys would follow every worker)
  export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor TORCHINDUCTOR_COMPILE_THREADS=1 PYTHONUNBUFFERED=1
  # NVLink multicast off: on a shared host it can take the GPUs out of service
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  rm -rf "$1" && mkdir -p "$1" && cd "$1" || exit 1
}

kineto_capture() {  # out (a path without .json), program command... -> out.json.gz and out.stdout
  # the sample programs write their torch.profiler trace to --trace-out; LIMIT bounds a hang
  local out=$1; shift
  echo "== torch.profiler: $(basename "$out")"
  timeout "${LIMIT:-180}" "$@" --trace-out "$out.json" > "$out.stdout" 2>&1 || echo "  exit $? (see $out.stdout)"
  [ -f "$out.json" ] && gzip -9 -f "$out.json"
}
