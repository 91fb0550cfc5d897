"""The run folders under reports/ (real `profkit trace` runs on the GPU host), rebuilt for tests."""

from __future__ import annotations

import json
import lzma
import shutil
import tarfile
from pathlib import Path

REPORTS = Path(__file__).resolve().parent.parent / "reports"


def unpacked_run(name: str, root: Path, caches: tuple[str, ...] = ("triton",), ncu: bool = False) -> Path:
    """reports/NAME as `profkit trace` left it on the GPU host, rebuilt under ``root``: the export
    decompressed into root/NAME/, the kept kernel caches (``<kind>_cache.tar.xz``, each of which
    was the folder ``<kind>`` on the host) unpacked into root/NAME/caches/ (a run folder's caches are
    read only below it or the user's cache folders) and named in run.json's kernel_caches instead of
    the host's folders, ncu.csv copied when ``ncu``."""
    source = REPORTS / name
    run = root / name
    run.mkdir()
    with lzma.open(source / "trace.sqlite.xz") as src, open(run / "trace.sqlite", "wb") as dst:
        shutil.copyfileobj(src, dst)
    if ncu:
        shutil.copyfile(source / "ncu.csv", run / "ncu.csv")
    record = json.loads((source / "run.json").read_text())
    kept = {}
    for kind in caches:
        assert Path(record["kernel_caches"][kind]).name == kind
        with tarfile.open(source / f"{kind}_cache.tar.xz") as tar:
            tar.extractall(run / "caches", filter="data")
        kept[kind] = str(run / "caches" / kind)
    record["kernel_caches"] = kept
    (run / "run.json").write_text(json.dumps(record))
    return run
