#!/usr/bin/env bash
# One GPU-host session's work, in one call (device time is scarce: few, full calls).  Run from the
# repository root with the GPU kit in .gpu-kit/ and profkit's runtime wheels in .whl/:
#
#   bash scripts/gpu_session.sh OUTDIR PART...
#
# Parts:
#   tests      pytest -m gpu over the GPU test files (GPU_TESTS: other ids)  -> OUTDIR/gpu_tests.log, and
#              the run folders' ncu.csv, report.json and snapshots            -> OUTDIR/gpu_test_runs.tar.xz
#   zoo        scripts/make_zoo.sh, the 1-GPU programs, ZOO_JOBS at once    -> OUTDIR/zoo.tar.xz
#   memory     scripts/make_memory_fixtures.sh OUTDIR gpu                   -> OUTDIR/memory_gpu.tar.xz
#   oom        only its planted out-of-memory run                           -> OUTDIR/memory_oom.tar.xz
#   overhead   benchmarks/capture_overhead.py, alone on the GPU             -> OUTDIR/capture_overhead.md
#              (OVERHEAD_ARGS: its arguments, shell-quoted)
# Parts named together run at once, except overhead, which times steps and so runs after the rest.
# SESSION_LIMIT (seconds, default 540) bounds the parts run at once; what they wrote is kept.
set -uo pipefail
OUTDIR=$(realpath -m "${1:?usage: gpu_session.sh OUTDIR PART...}")
shift
ROOT=$PWD
LIMIT=${SESSION_LIMIT:-540}
mkdir -p "$OUTDIR"
exec > >(tee -a "$OUTDIR/session.log") 2>&1  # logs: session, gpu_tests, zoo, memory
T0=$SECONDS
source "$ROOT/.gpu-kit/setup.sh"
# profkit's runtime packages the host lacks: each wheel only when its module does not import
# (the host's own versions stay first on the path)
declare -A MODULE_OF=([pyyaml]=yaml [python_dateutil]=dateutil [markdown_it_py]=markdown_it [py_spy]=SKIP
                      [importlib_metadata]=importlib_metadata [pillow]=PIL [attrs]=attr)
missing=()
for wheel in "$ROOT"/.whl/*.whl; do
  dist=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z' 'a-z')
  module=${MODULE_OF[$dist]:-$dist}
  if [ "$module" = SKIP ] || ! python3 -c "import $module" 2>/dev/null; then missing+=("$wheel"); fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${#missing[@]} wheels: $(for w in "${missing[@]}"; do basename "$w" | cut -d- -f1; done | tr '\n' ' ')"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-extra "${missing[@]}"
  export PYTHONPATH=$PYTHONPATH:/tmp/site-extra PATH=$PATH:/tmp/site-extra/bin
fi
export PYTHONPATH=$ROOT:$PYTHONPATH PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m profkit doctor || true
echo "[setup done: $((SECONDS - T0)) s]"

run_tests() {
  # shellcheck disable=SC2086
  timeout "$LIMIT" python3 -m pytest -p no:cacheprovider -m gpu -v --no-header -rA --tb=short --basetemp=/tmp/gpu-tests \
    ${GPU_TESTS:-tests/test_trace_cli.py tests/test_capture_torch.py tests/test_samples_gpu.py \
      tests/test_trace_distributed_gpu.py} > "$OUTDIR/gpu_tests.log" 2>&1
  echo "gpu tests: exit $? ($(tail -1 "$OUTDIR/gpu_tests.log"))"
  (cd /tmp/gpu-tests && find . \( -name ncu.csv -o -name report.json -o -name '*snapshot*.pickle' \) -print0 \
    | tar cJf "$OUTDIR/gpu_test_runs.tar.xz" --null -T -)
}
run_zoo() {  # the 1-GPU entries (this host has one GPU)
  ZOO_JOBS=${ZOO_JOBS:-6} ZOO_LIMIT=${ZOO_LIMIT:-240} timeout "$LIMIT" bash "$ROOT/scripts/make_zoo.sh" /tmp/zoo-out \
    ${ZOO_NAMES:-compile_max_autotune hf_generate_static compile_reduce_overhead compile_train_compiled \
      hf_generate_dynamic compile_default graphed_train final_sync item_sync_sleep compile_train_eager python_loader \
      dataloader_workers amp_bf16 stream_wait triton_suite} > "$OUTDIR/zoo.log" 2>&1
  echo "zoo: exit $?"
  if [ -f /tmp/zoo-out/zoo.tar.xz ]; then cp /tmp/zoo-out/zoo.tar.xz "$OUTDIR/"
  else (cd /tmp/zoo_work && tar cJf "$OUTDIR/zoo.tar.xz" zoo); fi  # cut short: what it wrote
}
run_memory() {
  timeout "$LIMIT" bash "$ROOT/scripts/make_memory_fixtures.sh" /tmp/memory-out gpu > "$OUTDIR/memory.log" 2>&1
  echo "memory: exit $?"
  (cd /tmp/memory-out && tar cJf "$OUTDIR/memory_gpu.tar.xz" memory_gpu)
}

run_oom() {
  mkdir -p /tmp/memory-oom && cd /tmp/memory-oom || return
  timeout 120 python3 "$ROOT/sample_kernels/gpt_memory.py" --oom --snapshot gpt_oom.pickle > gpt_oom.stdout 2> gpt_oom.stderr
  echo "oom: exit $?"
  xz -9 -f gpt_oom.pickle; tar cJf "$OUTDIR/memory_oom.tar.xz" gpt_oom.*
  cd "$ROOT" || return
}

pids=()
overhead=0
for part in "$@"; do
  case $part in
    tests) run_tests & pids+=($!) ;;
    zoo) run_zoo & pids+=($!) ;;
    memory) run_memory & pids+=($!) ;;
    oom) run_oom & pids+=($!) ;;
    overhead) overhead=1 ;;
    *) echo "unknown part: $part" ;;
  esac
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "[parts done: $((SECONDS - T0)) s]"
if [ $overhead = 1 ]; then
  eval "overhead_args=(${OVERHEAD_ARGS:-})"
  timeout "${OVERHEAD_LIMIT:-$LIMIT}" python3 "$ROOT/benchmarks/capture_overhead.py" "${overhead_args[@]}" > "$OUTDIR/capture_overhead.md" 2>&1
  echo "overhead: exit $?"
fi
echo "[session: $((SECONDS - T0)) s]"
# what comes back from the host: at most 8 files of 16 MiB each
cd "$OUTDIR" || exit 1
# the parts' logs in one archive (session.log stays plain: the call's reply shows its tail)
logs=(zoo.log memory.log gpu_tests.log)
present=(); for log in "${logs[@]}"; do [ -f "$log" ] && present+=("$log"); done
if [ ${#present[@]} -gt 0 ]; then tar cJf logs.tar.xz "${present[@]}" && rm "${present[@]}"; fi
for archive in ./*.tar.xz; do
  [ -f "$archive" ] || continue
  if [ "$(stat -c %s "$archive")" -gt 15000000 ]; then split -b 15000000 "$archive" "$archive.part-" && rm "$archive"; fi
done
ls -la
