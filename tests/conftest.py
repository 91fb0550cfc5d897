"""Shared test fixtures: real exports from the GPU host, and GPU-test skipping."""

from __future__ import annotations

import lzma
import os
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
NSYS_DATA = DATA / "nsys"
NCU_DATA = DATA / "ncu"


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
