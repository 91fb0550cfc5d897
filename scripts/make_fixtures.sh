#!/usr/bin/env bash
# Makes the real fixtures under tests/data on the GPU host (H100/H200).
# Run from the repository root with the GPU kit copied to .gpu-kit/ and the
# Nsight Systems 2023.4 tarball copied to .tools-carry/:
#
#   bash scripts/make_fixtures.sh nsys OUTDIR   # nsys 2025.3 + 2023.4 exports, nsys stats oracles
#   bash scripts/make_fixtures.sh ncu OUTDIR    # ncu CSVs, cudaOccupancy* values
#   bash scripts/make_fixtures.sh nvtx OUTDIR   # every NVTX flavour, both nsys versions
#   bash scripts/make_fixtures.sh sync_apis OUTDIR  # the blocking CUDA calls PyTorch never makes
#
# Each part leaves one tar.xz in OUTDIR to unpack into tests/data/.
set -uo pipefail
PART=$1
DEST=$(realpath "${2:-$PWD/fixtures-out}")
ROOT=$PWD
mkdir -p "$DEST"
source .gpu-kit/setup.sh >/dev/null
export PYTHONPATH=$ROOT:$PYTHONPATH
export TORCH_EXTENSIONS_DIR=/tmp/torch_ext TORCHINDUCTOR_CACHE_DIR=/tmp/inductor PYTHONUNBUFFERED=1
WORK=/tmp/fixtures/$PART
rm -rf "$WORK" && mkdir -p "$WORK"
cd "$WORK"

source "$ROOT/scripts/fixture_lib.sh"  # NSYS_FLAGS, nsys25, stats

if [ "$PART" = nsys ]; then
  # warm the extension and inductor caches so traces hold kernels, not compiles
  python3 "$ROOT/sample_kernels/gelu.py" --n 1024 --trials 1 --warmup 1 > /dev/null
  python3 "$ROOT/sample_kernels/softmax.py" --rows 256 --cols 1024 --trials 1 --warmup 1 > /dev/null
  python3 "$ROOT/sample_kernels/bad_kernels.py" --n 65536 --trials 1 --warmup 1 > /dev/null
  python3 "$ROOT/sample_kernels/vector_add.py" --n 65536 --trials 1 --warmup 1 > /dev/null

  nsys25 nsys2025_gelu python3 "$ROOT/sample_kernels/gelu.py" --n 4096 --trials 5 --warmup 2
  nsys25 nsys2025_softmax python3 "$ROOT/sample_kernels/softmax.py" --rows 4096 --cols 1024 --trials 5 --warmup 2
  nsys25 nsys2025_bad python3 "$ROOT/sample_kernels/bad_kernels.py" --n 4194304 --trials 3 --warmup 1
  nsys25 nsys2025_train_print python3 -m profkit.capture.launch "$ROOT/sample_kernels/train_mlp.py" --steps 20 --print-loss
  nsys25 nsys2025_train_noprint python3 -m profkit.capture.launch "$ROOT/sample_kernels/train_mlp.py" --steps 20
  nsys25 nsys2025_sync python3 -m profkit.capture.launch "$ROOT/scripts/sync_elementwise.py" --steps 8

  # Nsight Systems 2023.4 (export schema 3.7): elementwise programs only
  mkdir -p /tmp/nsys2023 && tar xJf "$ROOT/.tools-carry/nsys-2023.4-cli.tar.xz" -C /tmp/nsys2023
  NSYS23=/tmp/nsys2023/nsys/target-linux-x64/nsys
  for spec in "vector_add|$ROOT/sample_kernels/vector_add.py --n 4194304 --trials 5 --warmup 2" \
              "sync|-m profkit.capture.launch $ROOT/scripts/sync_elementwise.py --steps 8"; do
    name=nsys2023_${spec%%|*}; cmd=${spec#*|}
    echo "== nsys 2023: $name"
    $NSYS23 profile "${NSYS_FLAGS[@]}" -o "$name" python3 $cmd > "$name.stdout" 2>&1 || echo "  exit $?"
    rm -f ./*.qdstrm
  done

  for db in nsys2025_*.sqlite; do stats nsys "$db"; done
  for db in nsys2023_*.sqlite; do stats "$NSYS23" "$db"; done
  nsys --version > versions.txt; $NSYS23 --version >> versions.txt; nvidia-smi >> versions.txt
  ls -la
  for db in *.sqlite; do xz -T0 -9 "$db"; done
  tar cf "$DEST/nsys_fixtures.tar" ./*.sqlite.xz ./*.csv ./*.stdout versions.txt
fi

if [ "$PART" = nvtx ]; then
  mkdir -p /tmp/nsys2023 && tar xJf "$ROOT/.tools-carry/nsys-2023.4-cli.tar.xz" -C /tmp/nsys2023
  NSYS23=/tmp/nsys2023/nsys/target-linux-x64/nsys
  nsys25 nsys2025_nvtx python3 "$ROOT/scripts/nvtx_probe.py"
  echo "== nsys 2023: nsys2023_nvtx"
  $NSYS23 profile "${NSYS_FLAGS[@]}" -o nsys2023_nvtx python3 "$ROOT/scripts/nvtx_probe.py" > nsys2023_nvtx.stdout 2>&1 || echo "  exit $?"
  rm -f ./*.qdstrm
  stats nsys nsys2025_nvtx.sqlite
  stats "$NSYS23" nsys2023_nvtx.sqlite
  for db in *.sqlite; do
    python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(sys.argv[1], c.execute('select eventType, count(*) from NVTX_EVENTS group by 1').fetchall())" "$db"
  done
  ls -la
  for db in *.sqlite; do xz -T0 -9 "$db"; done
  tar cf "$DEST/nvtx_fixtures.tar" ./*.sqlite.xz ./*.csv ./*.stdout
fi

if [ "$PART" = sync_apis ]; then
  mkdir -p /tmp/nsys2023 && tar xJf "$ROOT/.tools-carry/nsys-2023.4-cli.tar.xz" -C /tmp/nsys2023
  NSYS23=/tmp/nsys2023/nsys/target-linux-x64/nsys
  nvcc -O2 -arch=native -o sync_apis "$ROOT/scripts/sync_apis.cu"
  nsys25 nsys2025_sync_apis ./sync_apis 6
  $NSYS23 profile "${NSYS_FLAGS[@]}" -o nsys2023_sync_apis ./sync_apis 6 > nsys2023_sync_apis.stdout 2>&1 || echo "  exit $?"
  rm -f ./*.qdstrm
  stats nsys nsys2025_sync_apis.sqlite
  stats "$NSYS23" nsys2023_sync_apis.sqlite
  for db in *.sqlite; do xz -T0 -9 "$db"; done
  tar cf "$DEST/sync_apis_fixtures.tar" ./*.sqlite.xz ./*.csv ./*.stdout
fi

if [ "$PART" = ncu ]; then
  NCU_SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats
                --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum)
  nvcc -O3 -arch=sm_90 -Xptxas -v -o occupancy_probe "$ROOT/scripts/occupancy_probe.cu" 2> probe_ptxas.txt
  ./occupancy_probe table > occupancy_api.json
  ncu --clock-control none "${NCU_SECTIONS[@]}" -f -o probe ./occupancy_probe launch > probe.stdout 2>&1
  ncu --import probe.ncu-rep --csv --page details > probe_details_import.csv
  ncu --import probe.ncu-rep --csv --page raw > probe_raw_import.csv
  ncu --clock-control none "${NCU_SECTIONS[@]}" -f -o matmul python3 "$ROOT/scripts/matmul_probe.py" > matmul.stdout 2>&1
  ncu --import matmul.ncu-rep --csv --page details > matmul_details_import.csv
  ncu --import matmul.ncu-rep --csv --page raw > matmul_raw_import.csv
  # live CSV straight from a run: ==PROF== lines and program output come first
  ncu --clock-control none --csv --page details "${NCU_SECTIONS[@]}" -c 40 \
    python3 "$ROOT/sample_kernels/gelu.py" --n 2048 --trials 1 --warmup 0 --variants manual,pytorch,cuda,triton > gelu_live_details.csv 2>&1
  ncu --clock-control none --csv --page raw "${NCU_SECTIONS[@]}" -c 20 \
    python3 "$ROOT/sample_kernels/bad_kernels.py" --n 1048576 --trials 1 --warmup 0 > bad_live_raw.csv 2>&1
  ncu --version > versions.txt
  ls -la
  tar cf "$DEST/ncu_fixtures.tar" ./*.csv ./*.json ./*.txt ./*.ncu-rep ./*.stdout
fi
xz -T0 -f "$DEST"/*.tar
ls -la "$DEST"
