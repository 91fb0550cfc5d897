"""`profkit report` on PyTorch profiler (Kineto) traces: the real captures in tests/data/kineto.

The oracle is the raw JSON, read here directly: kernels per name from the
``cat == "kernel"`` events, GPU busy time as the union of the kernel, memcpy
and memset intervals, launch configurations from the kernels' args, the GPU
from ``deviceProperties``.  Times are ns as the model defines them:
``round(ts * 1000)`` and ``round(dur * 1000)``.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.report import ReportPaths, write_report
from tests.conftest import DATA, Lazy, default_run

KINETO = sorted((DATA / "kineto").rglob("*.json.gz")) if (DATA / "kineto").is_dir() else []
pytestmark = pytest.mark.skipif(not KINETO, reason="no Kineto fixtures in tests/data/kineto yet")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def raw(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def interval(event: dict) -> tuple[int, int]:
    start = round(event["ts"] * 1000)
    return start, start + round(event["dur"] * 1000)


def union_length(intervals: list[tuple[int, int]]) -> int:
    covered, reach = 0, None
    for s, e in sorted(intervals):
        if reach is None or s >= reach:
            covered, reach = covered + e - s, e
        elif e > reach:
            covered, reach = covered + e - reach, e
    return covered


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ReportPaths]:
    root = tmp_path_factory.mktemp("kineto-reports")
    by_name = {path.name: path for path in KINETO}
    return Lazy(lambda name: write_report(by_name[name], root / name))


@pytest.mark.parametrize("path", default_run(KINETO), ids=lambda p: p.name)
def test_kernels_and_gpu_busy_equal_the_raw_events(path: Path, reports: dict[str, ReportPaths]) -> None:
    data = json.loads(reports[path.name].json.read_text())
    events = [e for e in raw(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    kernels = [e for e in events if e["cat"] == "kernel"]
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in kernels:
        s, t = interval(e)
        expected[e["name"]][0] += 1
        expected[e["name"]][1] += t - s
    rows = data["sections"]["kernels"]["tables"]["kernels"]["rows"]
    assert {r["name"]: [r["instances"], r["total_ns"]] for r in rows} == dict(expected)
    # the utilization figure and the capture: the union of every GPU operation, overlaps once
    busy = union_length([interval(e) for e in events])
    assert data["capture"]["gpu_busy_ns"] == busy
    whole = data["sections"]["utilization"]["figures"]["utilization"]["data"]["views"][0]
    assert sum(d["busy_ns"] for d in whole["devices"]) == busy
    lanes = data["sections"]["timeline"]["figures"]["timeline"]["data"]["streams"]
    per_stream = Counter((e["args"]["stream"], e["cat"]) for e in events)
    kinds = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
    assert {(lane["stream_id"], kinds[lane["kind"]]): lane["operations"] for lane in lanes} == dict(per_stream)


@pytest.mark.parametrize("path", default_run(KINETO), ids=lambda p: p.name)
def test_capture_and_occupancy_from_the_trace(path: Path, reports: dict[str, ReportPaths]) -> None:
    doc = raw(path)
    data = json.loads(reports[path.name].json.read_text())
    facts = dict(data["sections"]["capture"]["facts"])
    device = doc["deviceProperties"][0]
    assert facts["GPU"] == device["name"] and facts["SM count"] == str(device["numSms"])
    assert facts["Compute capability"] == f"{device['computeMajor']}.{device['computeMinor']}"
    assert "Nsight Systems version" not in facts and facts["Profiler"].startswith("PyTorch profiler")
    # occupancy rows: every launch counted once, with the registers and block its args recorded
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    configs = Counter((e["name"], e["args"]["registers per thread"], tuple(e["args"]["block"])) for e in kernels
                      if "registers per thread" in e["args"] and "block" in e["args"])
    rows = data["sections"]["occupancy"]["tables"]["occupancy"]["rows"]
    got: Counter = Counter()
    for r in rows:
        got[(r["name"], r["registers_per_thread"], (r["block_x"], r["block_y"], r["block_z"]))] += r["launches"]
        assert 0 < r["theoretical_occupancy_pct"] <= 100 and r["limiter"]
    assert got == configs


@pytest.mark.parametrize("path", default_run(KINETO), ids=lambda p: p.name)
def test_every_section_renders(path: Path, reports: dict[str, ReportPaths]) -> None:
    paths = reports[path.name]
    html, md = paths.html.read_text(), paths.md.read_text()
    for section in ("Capture", "Timeline", "GPU utilization", "CUDA kernels", "CUDA API", "Annotated ranges",
                    "Kernels per annotated range", "Memory copies and sets", "Occupancy and registers",
                    "Synchronization stalls"):
        assert f"## {section}" in md and f">{section}</h2>" in html
    data = json.loads(paths.json.read_text())
    assert data["export"] == path.name and data["findings"]
    # times read from the capture's start, not from the host clock's epoch
    gaps = data["sections"]["utilization"]["tables"].get("idle_gaps", {"rows": []})["rows"]
    assert all(0 <= float(g["start_s"]) < 3600 for g in gaps)


def test_cli_report_on_a_kineto_trace(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(DATA / "kineto" / "mlp_plain.json.gz"), "-o", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str((tmp_path / "r" / "report.html").resolve())
