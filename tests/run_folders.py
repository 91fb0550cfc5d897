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


DDP = Path(__file__).resolve().parent / "data" / "ddp"


def torchrun_run(root: Path, backend: str) -> Path:
    """A `profkit trace` run folder of a 2-rank torchrun job, from the committed DDP captures (2 x H200,
    tests/data/ddp/README.md), laid out as `profkit trace` lays it: ``--backend torch`` keeps one
    trace per rank (trace_rank{0,1}.json.gz, run.json's files.rank_traces), the nsys backend one export
    of the whole job (trace.sqlite).  run.json comes from ``RunRecord``; report.json and trace.log,
    which every run folder holds, are there so that readers must tell them from traces."""
    from profkit.capture.run import RunRecord
    from tests.conftest import _decompressed

    run = root / f"ddp-{backend}"
    run.mkdir()
    record = RunRecord(command=["-m", "torch.distributed.run", "--nproc-per-node", "2", "gpt_ddp.py"],
                       cwd=str(root), run_dir=str(run), backend=backend, status="ok", exit_code=0)
    if backend == "torch":
        names = [f"trace_rank{r}.json.gz" for r in (0, 1)]
        for r, name in enumerate(names):
            shutil.copyfile(DDP / "kineto" / f"rank{r}.json.gz", run / name)
        record.files = {"trace": names[0], "rank_traces": names, "log": "trace.log"}  # type: ignore[dict-item]
    else:
        shutil.copyfile(_decompressed(DDP / "whole2" / "whole.sqlite.xz"), run / "trace.sqlite")
        record.files = {"trace": "trace.sqlite", "log": "trace.log"}
    record.write(run)
    (run / "trace.log").write_text("[rank0] step 0\n[rank1] step 0\n")
    (run / "report.json").write_text(json.dumps({"title": "cross-rank report", "ranks": []}))
    return run
