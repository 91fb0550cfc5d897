"""Shared test fixtures: real exports from the GPU host, and GPU-test skipping."""

from __future__ import annotations

import lzma
import os
import shutil
from pathlib import Path

import pytest

# pytest-xdist's workers get COLUMNS=80 from their parent (execnet), where a plain run has no
# COLUMNS: tables would be fitted to 80 columns instead of a pipe's (profkit.terminal).  Tests
# that want a width set their own.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)

DATA = Path(__file__).parent / "data"
NSYS_DATA = DATA / "nsys"
NCU_DATA = DATA / "ncu"


# The default run (`python -m pytest`) leaves out the tests marked slow: pyproject's addopts
# holds -m "not slow", and `python -m pytest -m "slow or not slow"` runs everything.  A test
# that runs over every committed capture keeps the small ones below in the default run
# (``default_run``): both nsys versions (NVTX, sync APIs), a bad export, a training loop with
# steps, syncs and NVTX; torch.profiler traces with a schedule, stacks and annotations.  The
# others (GPT, the MLP GPU captures, the DDP ranks, the rest of the nsys exports) run with slow;
# each kind of record they hold is in a small one too.
FAST_NSYS = frozenset({"nsys2023_nvtx", "nsys2023_sync_apis", "nsys2025_bad", "nsys2025_nvtx", "nsys2025_sync",
                       "nsys2025_train_print"})
FAST_KINETO = frozenset({"hist_run1.json.gz", "mlp_annotated.json.gz", "mlp_print.json.gz"})


def default_run(values, fast=FAST_NSYS | FAST_KINETO, key=lambda v: Path(str(v)).name) -> list:
    """``values`` for ``parametrize``: those whose ``key`` is in ``fast`` as they are, the
    others marked slow (same ids)."""
    return [v if key(v) in fast else pytest.param(v, marks=pytest.mark.slow) for v in values]


class Lazy(dict):
    """A dict that makes a missing value on first use (``make(key)``) and keeps it: a module's
    reports are written only for the parameters that run."""

    def __init__(self, make) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key):
        value = self[key] = self.make(key)
        return value


def nsys_fixture(name: str) -> Path:
    """Path to the real export ``tests/data/nsys/<name>.sqlite``.

    Exports are committed xz-compressed; the first call decompresses one next
    to it (ignored by git) and later calls reuse it.
    """
    packed = NSYS_DATA / f"{name}.sqlite.xz"
    if not packed.exists():
        raise FileNotFoundError(f"no fixture {packed}")
    return _decompressed(packed)


def nsys_fixture_names(prefix: str = "") -> list[str]:
    """Names of all committed nsys fixtures (without .sqlite.xz)."""
    return sorted(p.name[: -len(".sqlite.xz")] for p in NSYS_DATA.glob(f"{prefix}*.sqlite.xz"))


def ncu_fixture(name: str) -> Path:
    """Path to ``tests/data/ncu/<name>``; big files are committed as ``<name>.xz``
    and decompressed once next to it (ignored by git)."""
    plain = NCU_DATA / name
    packed = NCU_DATA / f"{name}.xz"
    if packed.exists():
        return _decompressed(packed)
    if not plain.exists():
        raise FileNotFoundError(f"no fixture {plain}")
    return plain


def _decompressed(packed: Path) -> Path:
    """``x.xz`` decompressed to ``x`` beside it (ignored by git), redone only when
    the .xz is newer; written under a temporary name so parallel runs never
    see half a file."""
    plain = packed.with_suffix("")
    if not plain.exists() or plain.stat().st_mtime < packed.stat().st_mtime:
        tmp = plain.with_name(f"{plain.name}.tmp{os.getpid()}")
        with lzma.open(packed) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        tmp.replace(plain)
    return plain


def oracle_csv(export_name: str, report: str, folder: Path = NSYS_DATA) -> Path:
    """The `nsys stats --report <report>` CSV made on the GPU host for an export."""
    return folder / f"{export_name}__{report}.csv"


def recorded_gpu_name(export_name: str) -> str:
    """The GPU an export was captured on, read straight from its TARGET_INFO_GPU
    table (the fixtures come from both H200 and H100 hosts)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{nsys_fixture(export_name)}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute("SELECT name FROM TARGET_INFO_GPU ORDER BY id LIMIT 1").fetchone()[0]
    finally:
        conn.close()


def _have_gpu() -> bool:
    if os.environ.get("PROFKIT_FORCE_GPU_TESTS") == "1":
        return True
    if shutil.which("nvidia-smi") is None:
        return False
    return Path("/dev/nvidiactl").exists()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _have_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the GPU host)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def queued_oracle(ops: list[tuple[int, int, int, int]]) -> list[list[int]]:
    """The stretches with launched work waiting to start, from raw rows (device, launch call's end,
    start, end), as ``profkit.analysis.timeline.queued`` defines them: the launch latency is the
    median wait of the operations launched onto a drained device (every operation started before
    them had ended); an operation waits from its launch's end plus that latency to its start."""
    import statistics

    waits = []
    for device in {op[0] for op in ops}:
        latest_end = None
        for _, launched, start, end in sorted((op for op in ops if op[0] == device), key=lambda op: op[2]):
            if (latest_end is None or latest_end <= launched) and start >= launched:
                waits.append(start - launched)
            latest_end = end if latest_end is None else max(latest_end, end)
    latency = int(statistics.median(waits)) if waits else 0
    merged: list[list[int]] = []
    for a, b in sorted((launched + latency, start) for _, launched, start, _ in ops if start > launched + latency):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged
