#!/usr/bin/env bash
# Captures the zoo (tests/zoo/programs: small programs with planted truths, issue #30) on a GPU
# host.  Run from the repository root, with the GPU kit in .gpu-kit/ (nsys, ncu on PATH):
#
#   bash scripts/make_zoo.sh OUTDIR              # every program (2 GPUs for the distributed ones)
#   bash scripts/make_zoo.sh OUTDIR final_sync   # only the programs named
#   ZOO_STEPS=12 bash scripts/make_zoo.sh OUTDIR # steps per run (default 20)
#   ZOO_JOBS=6 bash scripts/make_zoo.sh OUTDIR   # programs captured at once (default 1)
#
# Programs run at once share the GPU: each export's truths come from its own rows, so sharing
# changes the timings, not what a truth checks; a program's bare run beside its captures is then
# no timing baseline (benchmarks/capture_overhead.py is, run alone).
#
# Each program PROG (zoo entry NAME, one program may make several entries) gives OUTDIR/zoo/NAME/:
#   NAME.bare.stdout           the program without a profiler: its ZOO_PLANT / ZOO_STEPS lines
#   NAME.graph.sqlite.xz       nsys profile --cuda-graph-trace=graph (nsys's default), Python sampling,
#                              exported with --include-blobs=true; scrubbed, then xz
#   NAME.node.sqlite.xz        the same at --cuda-graph-trace=node (every kernel of every replay)
#   NAME.*__<report>.csv       the `nsys stats` oracles of each scrubbed export
#   NAME.kineto.json.gz        torch.profiler (--trace-out), stacks and shapes, ProfilerStep#N; scrubbed
#   NAME.ncu_raw.csv.xz        (triton_suite only) ncu --section SpeedOfLight_RooflineChart --page raw --csv
#   NAME.*.stdout              each capture's console output
# Distributed programs run under torchrun --nproc_per_node 2, one nsys export per rank (rank%q{RANK}).
# A capture over ZOO_MAX_BYTES compressed (default 1.5 MB) is dropped and listed in OUTDIR/zoo/DROPPED,
# so the zoo stays small enough to commit; OUTDIR/zoo/SIZES lists what is kept.
# Leaves OUTDIR/zoo.tar.xz; its folder zoo/ unpacks into tests/data/.
set -uo pipefail
shopt -s nullglob
DEST=$(realpath -m "${1:?usage: make_zoo.sh OUTDIR [NAME...]}")
shift
ROOT=$PWD
PROGRAMS=$ROOT/tests/zoo/programs
STEPS=${ZOO_STEPS:-20}
MAX_BYTES=${ZOO_MAX_BYTES:-1500000}
LIMIT=${ZOO_LIMIT:-300}  # seconds per capture: a hang must not eat the device time
JOBS=${ZOO_JOBS:-1}
source "$ROOT/scripts/fixture_lib.sh"  # fixture_workdir, stats
fixture_workdir /tmp/zoo_work
export PYTHONPATH=$PROGRAMS:$PYTHONPATH
mkdir -p "$DEST" zoo

# name | program and its arguments | GPUs (1, or 2 for torchrun) [| Python samples per second, default
# 1000: fewer keep a long, Python-heavy program's export small [| steps, default ZOO_STEPS: fewer keep a
# program with many kernels per step under ZOO_MAX_BYTES]]; the longest first, so that programs
# run at once (ZOO_JOBS) end together
ENTRIES=(
  "compile_max_autotune|compile_modes.py --mode max-autotune|1"
  "hf_generate_static|hf_generate.py --cache static --new-tokens 16 --layers 2|1|500|10"
  "compile_reduce_overhead|compile_modes.py --mode reduce-overhead|1"
  "compile_train_compiled|compile_train.py|1"
  "hf_generate_dynamic|hf_generate.py --cache dynamic --new-tokens 16 --layers 2|1|500"
  "compile_default|compile_modes.py --mode default|1"
  "graphed_train|graphed_train.py|1"
  "final_sync|final_sync.py|1"
  "item_sync_sleep|item_sync_sleep.py --sleep-ms 3|1"
  "compile_train_eager|compile_train.py --eager|1"
  "python_loader|python_loader.py|1"
  "dataloader_workers|dataloader_workers.py --workers 4|1"
  "amp_bf16|amp_bf16.py|1"
  "stream_wait|stream_wait.py|1"
  "triton_suite|triton_suite.py|1"
  "fsdp2_slow_rank|fsdp2_slow_rank.py --slow-rank 1 --slow-ms 20|2"
  "ddp_grad_accum|ddp_grad_accum.py --accum 4|2"
  "ddp_slow_kernel|ddp_slow_kernel.py --slow-rank 1 --slow-ms 10|2"
)
NSYS=(-t cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite true)

{ nsys --version; ncu --version | tail -1; python3 --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import triton; print("triton", triton.__version__)'
  python3 -c 'import transformers; print("transformers", transformers.__version__)'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > zoo/versions.txt 2>&1

wanted() {  # name -> 0 when no names were given or it is one of them
  [ ${#ONLY[@]} -eq 0 ] && return 0
  local n; for n in "${ONLY[@]}"; do [ "$n" = "$1" ] && return 0; done; return 1
}

export_sqlite() {  # report base name -> base.sqlite (blobs kept: Python samples, NCCL payloads)
  nsys export --type sqlite --include-blobs=true --force-overwrite true -o "$1.sqlite" "$1.nsys-rep" \
    > /dev/null 2>&1 || echo "  export failed: $1"
  rm -f "$1.nsys-rep" ./*.qdstrm
}

keep_small() {  # file -> removed (and listed in DROPPED) when over MAX_BYTES
  local size; size=$(stat -c %s "$1")
  if [ "$size" -gt "$MAX_BYTES" ]; then echo "$1 $size" >> ../DROPPED; rm -f "$1"; fi
}

run_entry() {  # name, gpus, Python samples per second, steps, program args...
  local name=$1 gpus=$2 rate=$3 STEPS=$4; shift 4
  local program=("$@") launch=(python3) level
  local PYSAMPLE=(--python-sampling=true "--python-sampling-frequency=$rate")
  [ "$gpus" -gt 1 ] && launch=(torchrun --standalone --nproc_per_node "$gpus")
  mkdir -p "zoo/$name" && pushd "zoo/$name" > /dev/null || return
  echo "== $name: bare"
  timeout "$LIMIT" "${launch[@]}" "$PROGRAMS/${program[0]}" "${program[@]:1}" --steps "$STEPS" \
    > "$name.bare.stdout" 2>&1 || echo "  exit $? (see $name.bare.stdout)"
  for level in graph node; do
    echo "== $name: nsys ($level)"
    if [ "$gpus" -gt 1 ]; then  # one export per rank process
      timeout "$LIMIT" torchrun --standalone --nproc_per_node "$gpus" --no-python \
        nsys profile "${NSYS[@]}" --cuda-graph-trace="$level" -o "$name.$level.rank%q{RANK}" \
        python3 "$PROGRAMS/${program[0]}" "${program[@]:1}" --steps "$STEPS" > "$name.$level.stdout" 2>&1 \
        || echo "  exit $? (see $name.$level.stdout)"
      for rep in "$name.$level".rank*.nsys-rep; do export_sqlite "${rep%.nsys-rep}"; done
    else
      timeout "$LIMIT" nsys profile "${NSYS[@]}" "${PYSAMPLE[@]}" --cuda-graph-trace="$level" -o "$name.$level" \
        python3 "$PROGRAMS/${program[0]}" "${program[@]:1}" --steps "$STEPS" > "$name.$level.stdout" 2>&1 \
        || echo "  exit $? (see $name.$level.stdout)"
      export_sqlite "$name.$level"
    fi
  done
  echo "== $name: torch.profiler"
  # under torchrun each rank writes its own trace ({rank} in --trace-out)
  timeout "$LIMIT" "${launch[@]}" "$PROGRAMS/${program[0]}" "${program[@]:1}" --steps "$STEPS" \
    --trace-out "$name.kineto.rank{rank}.json" > "$name.kineto.stdout" 2>&1 \
    || echo "  exit $? (see $name.kineto.stdout)"
  if [ "${program[0]}" = triton_suite.py ]; then
    echo "== $name: ncu"
    # the suite's own kernels only: skip the 3 launches of the check against torch, keep one step's 3
    timeout "$LIMIT" ncu --section SpeedOfLight_RooflineChart --page raw --csv \
      --kernel-name regex:"matmul_kernel|layernorm_kernel" --launch-skip 3 --launch-count 3 \
      python3 "$PROGRAMS/${program[0]}" --steps 3 > "$name.ncu_raw.csv" 2> "$name.ncu.stderr" \
      || echo "  exit $? (see $name.ncu.stderr)"
    xz -9 -f "$name.ncu_raw.csv"
  fi
  # scrub first, then the oracles of the scrubbed file, then compress
  local db trace
  for db in ./*.sqlite; do
    python3 "$ROOT/scripts/scrub_export.py" "$db" || echo "  LEAK: $db"
    stats nsys "$(basename "$db")"
    xz -T0 -9 -f "$db"
    keep_small "$db.xz"
  done
  for trace in ./*.json; do
    python3 -m profkit scrub "$trace" -o "$trace.gz" > /dev/null || echo "  scrub failed: $trace"
    rm -f "$trace"
    keep_small "$trace.gz"
  done
  grep -h '^ZOO_' ./*.stdout > "$name.zoo_lines.txt" || true
  popd > /dev/null || return
}

ONLY=("$@")
T0=$SECONDS
for entry in "${ENTRIES[@]}"; do
  IFS='|' read -r name command gpus rate steps <<< "$entry"
  wanted "$name" || continue
  read -r -a program <<< "$command"
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  { run_entry "$name" "$gpus" "${rate:-1000}" "${steps:-$STEPS}" "${program[@]}"; echo "   $name done [$((SECONDS - T0)) s]"; } &
done
wait
python3 "$ROOT/scripts/scrub_export.py" --check zoo/*/*.sqlite.xz zoo/*/*.json.gz || echo "LEAK CHECK FAILED"
du -ab zoo | sort -n > zoo/SIZES
tar cf "$DEST/zoo.tar" zoo && xz -T0 -f "$DEST/zoo.tar"
echo "wrote $DEST/zoo.tar.xz ($(du -h "$DEST/zoo.tar.xz" | cut -f1)) in $((SECONDS - T0)) s"
