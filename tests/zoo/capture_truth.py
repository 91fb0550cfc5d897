"""What a GPU zoo capture (tests/data/zoo, made by scripts/make_zoo.sh) holds, read without profkit:

- from the nsys export's own rows, by SQL: the "step" NVTX ranges the program pushes, kernels (and
  how many ran as CUDA graph nodes), graph launches and instantiations, blocking sync calls;
- from the Kineto JSON: tests/zoo/truth.py;
- from what the program planted and printed under that very capture (``ZOO_PLANT``: the file:line
  of each planted sync, slow line or final sync; ``ZOO_STEPS``: its own step times from CUDA
  events; ``ZOO_TRUTH``: what it computed, e.g. a GEMM's FLOPs).

Nothing here imports profkit (tests/test_zoo_gpu.py checks that).
"""

from __future__ import annotations

import json
import lzma
import statistics
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ZOO_DATA = Path(__file__).resolve().parent.parent / "data" / "zoo"
LEVELS = ("graph", "node", "kineto")
BLOCKING_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


@dataclass
class Planted:
    """The program's own lines printed under one capture."""

    plants: dict[str, str]  # kind -> file:line ("sync", "slow", "final_sync", "wait")
    step_ms: list[float]  # its own step times (CUDA events around each step)
    truth: dict = field(default_factory=dict)  # ZOO_TRUTH, when it prints one


@dataclass
class ExportTruth:
    """An nsys export's rows, counted by SQL."""

    step_ranges: list[tuple[int, int]]  # (start, end) ns of each "step" NVTX range
    kernels: int
    graph_node_kernels: int  # kernel rows with graphNodeId set (node-level capture)
    graph_replays: int  # rows of CUPTI_ACTIVITY_KIND_GRAPH_TRACE (graph-level capture)
    graph_launches: int  # cudaGraphLaunch calls
    graph_instantiations: int  # cudaGraphInstantiate* calls
    blocking_syncs: list[tuple[str, int, int]]  # (API, start, end) of each blocking sync call
    # per step range: how long before it the program recorded its start event (cudaEventRecord):
    # on an idle GPU the event runs at once, so its own span begins that much before the range
    event_lead_ns: list[int] = field(default_factory=list)


def captures() -> list[tuple[str, str, Path]]:
    """(program, level, path) of every committed capture."""
    found = []
    for folder in sorted(p for p in ZOO_DATA.iterdir() if p.is_dir()):
        for level in LEVELS:
            name = f"{folder.name}.{level}"
            path = folder / (f"{name}.sqlite.xz" if level != "kineto" else f"{folder.name}.kineto.rank0.json.gz")
            if path.is_file():
                found.append((folder.name, level, path))
    return found


def planted(program: str, level: str) -> Planted:
    lines = {}
    for line in (ZOO_DATA / program / f"{program}.{level}.stdout").read_text().splitlines():
        key, _, payload = line.partition(" ")
        if key in ("ZOO_PLANT", "ZOO_STEPS", "ZOO_TRUTH"):
            lines[key] = json.loads(payload)
    return Planted(plants=lines["ZOO_PLANT"], step_ms=lines["ZOO_STEPS"]["step_ms"], truth=lines.get("ZOO_TRUTH", {}))


def unpacked(path: Path) -> Path:
    """An .sqlite.xz unpacked once into the temp folder (never beside the committed file); the copy is
    named by the packed file's size and time, so a re-captured fixture is never read as the old one."""
    stat = path.stat()
    target = (Path(tempfile.gettempdir()) / "profkit-zoo-truth"
              / f"{stat.st_size}-{stat.st_mtime_ns}-{path.name.removesuffix('.xz')}")
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        with lzma.open(path) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst)
        partial.replace(target)
    return target


def export_truth(path: Path) -> ExportTruth:
    db = sqlite3.connect(f"file:{unpacked(path)}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

        def count(sql: str) -> int:
            return db.execute(sql).fetchone()[0] or 0

        def runtime_calls(prefix: str) -> list[tuple[str, int, int]]:
            return db.execute(
                "SELECT s.value, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                "WHERE s.value LIKE ? ORDER BY r.start", (prefix + "%",)).fetchall()

        steps = db.execute(
            "SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE COALESCE(n.text, s.value) = 'step' AND n.end IS NOT NULL ORDER BY n.start").fetchall()
        syncs = [(name.split("_v")[0], start, end) for api in BLOCKING_SYNCS for name, start, end in runtime_calls(api)]
        records = [start for _, start, _ in runtime_calls("cudaEventRecord")]
        leads = []
        for start, _ in steps:
            before = [r for r in records if r < start]
            leads.append(start - before[-1] if before and start - before[-1] < 1_000_000 else 0)
        return ExportTruth(
            step_ranges=[tuple(r) for r in steps],
            kernels=count("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"),
            graph_node_kernels=count("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL"),
            graph_replays=count("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
            if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables else 0,
            graph_launches=len(runtime_calls("cudaGraphLaunch")),
            graph_instantiations=len(runtime_calls("cudaGraphInstantiate")),
            blocking_syncs=sorted(syncs, key=lambda s: s[1]), event_lead_ns=leads)
    finally:
        db.close()


def steady_period_ms(program: str, level: str, path: Path, steps: int, steady: list[int]) -> float:
    """The steady step period: the GPU's (the median of the program's own CUDA-event spans) or the
    host's (the median start-to-start interval), whichever is longer -- a pipeline runs at its
    slowest stage's rate.  (The median of each step's longer one is biased up where host and GPU
    jitter around the same period: the steps' longer figures add up to more than the run.)"""
    from .truth import truth_of  # the Kineto JSON's own truth (no profkit either)

    own = planted(program, level).step_ms[-steps:]
    if level == "kineto":
        host = [ns / 1e6 for ns in truth_of(path).step_ns]
    else:
        ranges = export_truth(path).step_ranges
        host = [(b[0] - a[0]) / 1e6 for a, b in zip(ranges, ranges[1:])] + [(ranges[-1][1] - ranges[-1][0]) / 1e6]
    return max(statistics.median(own[i] for i in steady), statistics.median(host[i] for i in steady))
