#!/usr/bin/env bash
# Makes the real Nsight Compute fixtures of `profkit roofline` (issue #23) on
# the GPU host (H100/H200).  Run from the repository root with the GPU kit
# copied to .gpu-kit/:
#
#   bash scripts/make_roofline_fixtures.sh OUTDIR     # -> OUTDIR/roofline.tar.xz, about 3 minutes
#
# Unpack the tar.xz into tests/data/ncu/roofline/.  Every capture runs
# sample_kernels/roofline_probe.py under ncu with --profile-from-start off:
# the probe warms each case up, then brackets exactly one call with
# cudaProfilerStart/Stop and an NVTX range named after the case, so each
# kernel of that call is profiled once (one launch, one result).
#
# Reports (each: <r>_raw.csv.xz = `ncu --import <r>.ncu-rep --csv --page raw`,
# every metric; <r>_details.csv.xz = the same with --page details, as profkit
# imports it; <r>_nvtx.csv.xz = raw page with kernels renamed after their NVTX
# range, i.e. result ID -> case; <r>.cases.json = the probe's record of its
# windows: shapes M/N/K, 2*M*N*K, dtype, minimum DRAM bytes, skipped or not;
# <r>.stdout = ncu's and the probe's output):
#   gemm_fp32    4096^3 fp32 GEMM, TF32 off: compute bound on the FP32 FMA pipe
#   gemm_bf16    8192^3 bf16 GEMM: compute bound on the bf16 tensor roof
#   gemm_fp8     8192^3 torch._scaled_mm float8_e4m3fn: the fp8 tensor roof
#                (cases.json says "skipped: ..." where the GPU cannot)
#   memory       c = a + b (2^26 fp32) and row sums of 8192x8192 fp32: memory bound
#   gelu         sample_kernels/gelu.py's manual, pytorch, cuda, triton and
#                compiled GELU on 8192x8192 fp32, every kernel of each once
#   softmax      the same five variants of sample_kernels/softmax.py, 65536x1024
#   old_way      gemm_bf16 + elementwise captured with profkit's own SECTIONS and
#                METRICS (profkit/capture/ncu.py) and no roofline metrics: the
#                backwards-compatibility input (details and raw pages)
# Roofline reports collect the sections SpeedOfLight, SpeedOfLight_RooflineChart
# and SpeedOfLight_HierarchicalTensorRooflineChart plus --metrics from
# scripts/roofline_metrics.py: DRAM/L2/L1 bytes, duration, clocks, the SASS
# FP op counters, every sm__ops_path_tensor_src_* counter this chip lists, and
# the peaks.  Metric names come from this GPU's own listing (metrics_list.txt,
# metrics_all.txt.xz), so a name the chip lacks is left out instead of failing
# the capture; should ncu still refuse, the capture is retried with the "mid"
# list (tensor counters' .sum only), the "safe" list (no tensor counters), then
# the sections alone (capture_log.txt says which was used).
# Also packed: versions.txt, metrics_selection.txt (what was asked for and
# why), summary.txt (scripts/roofline_summary.py: a first look, incl. counted
# FLOPs / 2*M*N*K per GEMM).  Clocks as profkit profiles (--clock-control none).
# No environment is written anywhere: ncu CSVs carry none and no log copies it.
set -uo pipefail
DEST=$(realpath -m "${1:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
if [ -f .gpu-kit/setup.sh ]; then source .gpu-kit/setup.sh >/dev/null; fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
# one extension and inductor cache, warmed before profiling; no compile-worker pool
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
export TORCHINDUCTOR_COMPILE_THREADS=1 PYTHONUNBUFFERED=1
WORK=/tmp/fixtures/roofline
rm -rf "$WORK" && mkdir -p "$WORK"
cd "$WORK" || exit 1
PROBE=$ROOT/sample_kernels/roofline_probe.py
LIMIT=150   # seconds per capture: a hang must not eat the device time
LOG=$WORK/capture_log.txt
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
elapsed() { say "   [${SECONDS}s]"; }

# ---- versions; warm the CUDA extension and inductor caches (CPU work) while ncu lists the metrics
{ ncu --version
  python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } > versions.txt 2>&1
cat versions.txt
say "== warming caches (gelu, softmax)"
timeout 300 python3 "$PROBE" --cases gelu --warm-only > warm_gelu.log 2>&1 &
WARM1=$!
timeout 300 python3 "$PROBE" --cases softmax --warm-only > warm_softmax.log 2>&1 &
WARM2=$!

say "== ncu metric listing"
timeout 120 ncu --query-metrics > metrics_list.txt 2>&1
grep -q '__' metrics_list.txt || timeout 120 ncu --query-metrics --chips gh100 > metrics_list.txt 2>&1
timeout 120 ncu --query-metrics-mode all > metrics_all.txt 2>&1
grep -q '__' metrics_all.txt || timeout 120 ncu --query-metrics-mode all --chips gh100 > metrics_all.txt 2>&1
say "   base names listed: $(grep -c '__' metrics_list.txt), full names: $(grep -c '__' metrics_all.txt)"
grep -i 'ops_path_tensor' metrics_list.txt | head -40
METRICS_FULL=$(python3 "$ROOT/scripts/roofline_metrics.py" full metrics_all.txt metrics_list.txt 2> metrics_selection.txt)
METRICS_MID=$(python3 "$ROOT/scripts/roofline_metrics.py" mid metrics_all.txt metrics_list.txt 2>> metrics_selection.txt)
METRICS_SAFE=$(python3 "$ROOT/scripts/roofline_metrics.py" safe metrics_all.txt 2>> metrics_selection.txt)
for level in full mid safe; do
  list=METRICS_${level^^}; echo; echo "$level:"; tr , '\n' <<< "${!list}"
done >> metrics_selection.txt
say "   metrics asked for: full $(tr , '\n' <<< "$METRICS_FULL" | grep -c .), mid $(tr , '\n' <<< "$METRICS_MID" | grep -c .), safe $(tr , '\n' <<< "$METRICS_SAFE" | grep -c .)"
elapsed

wait $WARM1; say "   warm gelu: exit $?"; grep -E 'UNSUPPORTED|WARNING|Error' warm_gelu.log | head -5
wait $WARM2; say "   warm softmax: exit $?"; grep -E 'UNSUPPORTED|WARNING|Error' warm_softmax.log | head -5
elapsed

NCU_COMMON=(--clock-control none --profile-from-start off --nvtx --launch-count 60 --force-overwrite)
ROOF_SECTIONS=(--section SpeedOfLight --section SpeedOfLight_RooflineChart
               --section SpeedOfLight_HierarchicalTensorRooflineChart)
LEVELS=(full mid safe bare)   # a level ncu refuses is dropped for the captures after it

imported() {  # report base -> <r>_raw.csv, <r>_details.csv, <r>_nvtx.csv; true if the raw page has a launch
  local r=$1
  [ -s "$r.ncu-rep" ] || return 1
  timeout 120 ncu --import "$r.ncu-rep" --csv --page raw > "${r}_raw.csv" 2> "${r}_import.err"
  timeout 120 ncu --import "$r.ncu-rep" --csv --page details > "${r}_details.csv" 2>> "${r}_import.err"
  # result ID -> NVTX range (= probe case); small form first, whole raw page if ncu won't filter on import
  timeout 120 ncu --import "$r.ncu-rep" --csv --page raw --print-nvtx-rename kernel \
    --metrics gpu__time_duration.sum > "${r}_nvtx.csv" 2>> "${r}_import.err"
  grep -q '^"[0-9]' "${r}_nvtx.csv" || timeout 120 ncu --import "$r.ncu-rep" --csv --page raw \
    --print-nvtx-rename kernel > "${r}_nvtx.csv" 2>> "${r}_import.err"
  grep -q '^"[0-9]' "${r}_nvtx.csv" || rm -f "${r}_nvtx.csv"
  [ -s "${r}_import.err" ] || rm -f "${r}_import.err"
  grep -q '^"[0-9]' "${r}_raw.csv"
}

capture() {  # report base, probe cases: roofline sections + metrics, best level ncu accepts
  local r=$1 cases=$2 level flags rc
  for level in "${LEVELS[@]}"; do
    case $level in
      full) flags=("${ROOF_SECTIONS[@]}" --metrics "$METRICS_FULL") ;;
      mid)  flags=("${ROOF_SECTIONS[@]}" --metrics "$METRICS_MID") ;;
      safe) flags=("${ROOF_SECTIONS[@]}" --metrics "$METRICS_SAFE") ;;
      *)    flags=("${ROOF_SECTIONS[@]}") ;;
    esac
    say "== ncu $r ($cases, metrics: $level)"
    rm -f "$r.ncu-rep" "${r}"_*.csv
    timeout -k 15 $LIMIT ncu "${NCU_COMMON[@]}" "${flags[@]}" -o "$r" \
      python3 "$PROBE" --cases "$cases" --json-out "$r.cases.json" > "$r.stdout" 2>&1
    rc=$?
    if imported "$r"; then
      say "   ok: $(grep -c '^"[0-9]' "${r}_raw.csv") launches, $(grep -c '^window ' "$r.stdout") windows, exit $rc"
      grep -E '^(UNSUPPORTED|WARNING [a-z])' "$r.stdout" | tee -a "$LOG"
      elapsed
      return 0
    fi
    cp "$r.stdout" "$r.$level.failed.stdout"
    if grep -qiE '==ERROR==.*metric' "$r.stdout"; then
      # ncu refused a metric: drop this level for the captures after this one too, try the next
      say "   ncu refused the $level list: $(grep -iE '==ERROR==.*metric' "$r.stdout" | head -2 | tr '\n' ' ')"
      LEVELS=($(printf '%s\n' "${LEVELS[@]}" | grep -vx "$level"))
      continue
    fi
    if ! grep -q '^window ' "$r.stdout"; then  # every case skipped (fp8 where unsupported): nothing to profile
      say "   skipped, no window opened: $(grep -E '^UNSUPPORTED' "$r.stdout" | head -3 | tr '\n' ' ')"
      rm -f "$r.$level.failed.stdout"
      elapsed; return 1
    fi
    say "   FAILED (exit $rc): $(grep -E '==ERROR==' "$r.stdout" | head -3 | tr '\n' ' ')"
    tail -5 "$r.stdout" | sed 's/^/     | /'
    # the program itself broke or hung: another metric list will not help
    if [ $rc = 124 ] || [ $rc = 137 ] || grep -q '^Traceback' "$r.stdout"; then elapsed; return 1; fi
  done
  elapsed
  return 1
}

# ---- GEMMs of known shape (one report each: the report is the case)
capture gemm_fp32 gemm_fp32
capture gemm_bf16 gemm_bf16
capture gemm_fp8 gemm_fp8
# ---- memory-bound elementwise and reduction kernels
capture memory elementwise,reduction
# ---- the lecture's GELU and softmax variants
capture gelu gelu
capture softmax softmax

# ---- the OLD way: profkit's own sections and metrics, no roofline metrics
OLD_FLAGS=($(python3 -c 'from profkit.capture.ncu import BASE_SECTIONS as SECTIONS, BASE_METRICS as METRICS
print(" ".join(f"--section {s}" for s in SECTIONS), "--metrics", ",".join(METRICS))'))
[ ${#OLD_FLAGS[@]} -gt 0 ] || OLD_FLAGS=(--section SpeedOfLight --section Occupancy --section LaunchStats
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum)
say "== ncu old_way (${OLD_FLAGS[*]})"
timeout -k 15 $LIMIT ncu "${OLD_FLAGS[@]}" "${NCU_COMMON[@]}" -o old_way \
  python3 "$PROBE" --cases gemm_bf16,elementwise --json-out old_way.cases.json > old_way.stdout 2>&1
say "   exit $?"
imported old_way && say "   ok: $(grep -c '^"[0-9]' old_way_raw.csv) launches" || say "   FAILED: old_way"
elapsed

# ---- a first look, then pack
REPORTS=(gemm_fp32 gemm_bf16 gemm_fp8 memory gelu softmax old_way)
python3 "$ROOT/scripts/roofline_summary.py" "${REPORTS[@]}" > summary.txt 2>&1
cat summary.txt
ls -la
xz -T0 -9 -f ./*.csv
xz -T0 -9 -f metrics_all.txt
tar cf "$DEST/roofline.tar" ./*.csv.xz ./*.cases.json ./*.stdout ./*.err versions.txt \
  metrics_list.txt metrics_all.txt.xz metrics_selection.txt summary.txt capture_log.txt 2>/dev/null
xz -T0 -9 -f "$DEST/roofline.tar"
tar tvJf "$DEST/roofline.tar.xz"
say "done in ${SECONDS}s; reports (.ncu-rep, not packed) stay in $WORK"
ls -la "$DEST"
