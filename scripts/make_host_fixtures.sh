#!/usr/bin/env bash
# Makes the `profkit host` fixtures on the GPU host: captures of
# sample_kernels/hf_llama.py (a Hugging Face Llama, random weights) in train and
# generate mode, each with a planted 5 ms host sleep per step
# (planted_host_work(); its file and line are in each .stdout):
#
#   bash scripts/make_host_fixtures.sh OUTDIR      # one GPU, ~4 minutes
#   HF_GENERATE=1 bash scripts/make_host_fixtures.sh OUTDIR   # + model.generate() capture (~1 min more)
#
# Leaves OUTDIR/host_fixtures.tar.xz; its folder host/ unpacks into tests/data/:
#   host/nsys/llama_{train,generate}_nsys.sqlite.xz   nsys 2025.3, -t cuda,nvtx,osrt, Python
#       sampling (NVTX eventType 34 payloads; exported from the .nsys-rep with
#       --include-blobs=true), NVTX step ranges; scrubbed of the environment
#   host/nsys/*__<report>.csv     `nsys stats` oracles of the scrubbed export
#   host/nsys/*__pysamples.txt    counts of Python samples / payload bytes in the export
#   host/nsys/*.stdout            the program's output (planted line, per-step times)
#   host/kineto/llama_{train,generate}_kineto.json.gz   torch.profiler, --with-stack, record_function steps
#   host/bare/llama_{train,generate}_bare.stdout        no profiler: step times for the overhead comparison
#   host/versions.txt, host/nsys_python_help.txt
set -uo pipefail
shopt -s nullglob  # a capture that failed leaves no file: globs below skip it
DEST=$(realpath -m "${1:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
source .gpu-kit/setup.sh >/dev/null
export PYTHONPATH=$ROOT:$PYTHONPATH PYTHONUNBUFFERED=1
WORK=/tmp/fixtures/host
rm -rf "$WORK" && mkdir -p "$WORK/host" && cd "$WORK/host" || exit 1
source "$ROOT/scripts/fixture_lib.sh"  # stats
LLAMA=$ROOT/sample_kernels/hf_llama.py
LIMIT=150  # seconds per capture: a hang must not eat the device time
PLANT=(--plant-sleep-ms 5)
TRAIN=(--mode train --steps 12 "${PLANT[@]}")
GEN=(--mode generate --steps 64 "${PLANT[@]}")  # batch 1, 128-token prompt, 64 new tokens
# extra program arguments for every run, e.g. HOST_FIXTURE_ARGS="--batch 8" (or "--tiny" for a CPU dry run)
read -r -a EXTRA <<< "${HOST_FIXTURE_ARGS:-}"
PY_FREQ=1000  # Hz; nsys 2025.3 documents 1..2000 (dropped below if nsys rejects it)
mkdir -p nsys kineto bare
T0=$SECONDS

{ nsys --version; python3 --version
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  python3 -c 'import accelerate; print("accelerate", accelerate.__version__)'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > versions.txt 2>&1
cat versions.txt
nsys profile --help 2>&1 | grep -i -A4 python > nsys_python_help.txt
echo "== nsys profile --help | grep -i -A4 python"; cat nsys_python_help.txt

pysamples() {  # export -> counts of Python sampling events and payload bytes (stdout); rc 1 if none
  python3 - "$1" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
cols = {r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")} if "NVTX_EVENTS" in tables else set()
n = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 34").fetchone()[0] if cols else 0
nbytes = nblob = 0
if "binaryData" in cols:
    nblob, nbytes = db.execute("SELECT count(binaryData), coalesce(sum(length(binaryData)), 0) FROM NVTX_EVENTS "
                               "WHERE eventType = 34 AND length(binaryData) > 0").fetchone()
print(f"python_sampling_events={n} with_payload={nblob} payload_bytes={nbytes}")
if "NVTX_PAYLOAD_SCHEMAS" in tables:
    names = [r[0] for r in db.execute("SELECT * FROM NVTX_PAYLOAD_SCHEMAS").description]
    col = "name" if "name" in names else names[0]
    print("schemas:", sorted({str(r[0]) for r in db.execute(f"SELECT {col} FROM NVTX_PAYLOAD_SCHEMAS")}))
n = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType != 34").fetchone()[0] if cols else 0
print(f"other_nvtx_events={n}")
sys.exit(0 if nblob else 1)
EOF
}

nsys_py() {  # name, program arguments -> nsys/<name>.sqlite (+ .stdout, __pysamples.txt)
  local name=$1; shift
  local freq=(--python-sampling-frequency=$PY_FREQ) sample=--sample=none try flags
  for try in 1 2; do
    flags=(-t cuda,nvtx,osrt "$sample" --cpuctxsw=none --python-sampling=true "${freq[@]}" --force-overwrite true)
    echo "== nsys + python sampling: $name (try $try: ${flags[*]}) [$((SECONDS - T0)) s]"
    rm -f "$name".*
    timeout $LIMIT nsys profile "${flags[@]}" -o "$name" python3 "$LLAMA" "$@" "${EXTRA[@]}" > "$name.stdout" 2>&1 \
      || echo "  profile exit $? (see $name.stdout)"
    rm -f ./*.qdstrm
    if [ ! -f "$name.nsys-rep" ]; then  # an option was refused: retry with the default frequency
      tail -5 "$name.stdout"; freq=(); continue
    fi
    timeout $LIMIT nsys export --type=sqlite --include-blobs=true --force-overwrite=true \
      --output "$name.sqlite" "$name.nsys-rep" > "$name.export.log" 2>&1 || echo "  export exit $? (see $name.export.log)"
    [ -f "$name.sqlite" ] || { echo "  no export"; continue; }
    if pysamples "$name.sqlite" > "${name}__pysamples.txt"; then break; fi
    cat "${name}__pysamples.txt"
    [ $try = 1 ] && echo "  no Python samples with payloads: retrying with CPU sampling on"
    sample=--sample=process-tree
  done
  cat "${name}__pysamples.txt" 2>/dev/null; grep -E "planted:|steady_mean" "$name.stdout"
}

kineto() {  # name, program arguments -> kineto/<name>.json.gz (with stacks)
  local name=$1; shift
  echo "[$((SECONDS - T0)) s]"
  kineto_capture "$WORK/host/kineto/$name" python3 "$LLAMA" "$@" "${EXTRA[@]}" --profile torch --with-stack \
    --annotate-steps
  grep -E "steady_mean" "kineto/$name.stdout"
}

bare() {  # name, program arguments -> bare/<name>.stdout (no profiler, no annotations)
  local name=$1; shift
  echo "== bare: $name [$((SECONDS - T0)) s]"
  timeout $LIMIT python3 "$LLAMA" "$@" "${EXTRA[@]}" > "bare/$name.stdout" 2>&1 || echo "  exit $? (see bare/$name.stdout)"
  grep -E "gpu_step_ms|steady_mean" "bare/$name.stdout"
}

# bare runs first: a quiet GPU, and they warm the page cache for the imports
bare llama_train_bare "${TRAIN[@]}"
bare llama_generate_bare "${GEN[@]}"

cd nsys
nsys_py llama_train_nsys "${TRAIN[@]}" --nvtx-steps
nsys_py llama_generate_nsys "${GEN[@]}" --nvtx-steps
[ "${HF_GENERATE:-0}" = 1 ] && nsys_py llama_hfgenerate_nsys "${GEN[@]}" --hf-generate --nvtx-steps
cd ..

# Kineto with stacks is big: 8 train steps (5 active), 24 tokens (21 active)
kineto llama_train_kineto --mode train --steps 8 "${PLANT[@]}"
kineto llama_generate_kineto --mode generate --steps 24 "${PLANT[@]}"

echo "== scrub, oracles, xz [$((SECONDS - T0)) s]"
for db in nsys/*.sqlite; do
  python3 "$ROOT/scripts/scrub_export.py" "$db" || echo "  LEAK: $db"
  base=$(basename "$db" .sqlite)
  (cd nsys && stats nsys "$base.sqlite"
   # host-side oracles: OS runtime calls (the planted sleep) and every NVTX range with its times
   cp "$base.sqlite" /tmp/stats-extra.sqlite
   nsys stats -q --format csv --timeunit nsec --report osrt_sum --report nvtx_pushpop_trace \
     -o /tmp/stats-extra /tmp/stats-extra.sqlite > /dev/null 2>&1
   for f in /tmp/stats-extra_*.csv; do [ -f "$f" ] && mv "$f" "${base}__$(basename "$f" | sed 's/^stats-extra_//')"; done
   rm -f /tmp/stats-extra.sqlite)
  xz -T0 -9 -f "$db"
done
rm -f nsys/*.nsys-rep nsys/*.qdstrm ./*.qdstrm
python3 "$ROOT/scripts/scrub_export.py" --check kineto/*.json.gz nsys/*.sqlite.xz || echo "LEAK CHECK FAILED"
for f in kineto/*.json.gz nsys/*.sqlite.xz; do
  [ "$(stat -c %s "$f")" -gt $((16 * 1024 * 1024)) ] && echo "TOO BIG (> 16 MiB): $f"
done
ls -la nsys kineto bare
cd "$WORK"
tar cf "$DEST/host_fixtures.tar" host
xz -T0 -f "$DEST/host_fixtures.tar"
ls -la "$DEST"
echo "done in $((SECONDS - T0)) s"
