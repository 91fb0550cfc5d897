"""The interactive timeline's data (profkit/report/interactive_timeline.py) against nsys stats,
its size on an ~18k-kernel run, its cap on big ones, and that names cannot close its script block."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.ingest import build_export
from profkit.readers import open_trace
from profkit.report import interactive_timeline, write_report
from profkit.report.interactive_timeline import build_interactive_timeline
from tests.conftest import nsys_fixture
from tests.test_summaries import read_oracle


def kernel_totals(data: dict) -> dict[str, tuple[int, int]]:
    counts: Counter = Counter()
    totals: Counter = Counter()
    for kind, name, duration in zip(data["kind"], data["name"], data["duration"]):
        if data["kinds"][kind] == "kernel":
            counts[data["names"][name]] += 1
            totals[data["names"][name]] += duration
    return {n: (counts[n], totals[n]) for n in counts}


@pytest.mark.parametrize("fixture", ["nsys2023_nvtx", "nsys2025_gelu", "nsys2025_train_print"])
def test_every_kernel_of_a_small_run_is_in_the_page(fixture: str) -> None:
    with open_trace(nsys_fixture(fixture)) as trace:
        timeline = build_interactive_timeline(trace)
    data = json.loads(timeline.data_json)
    oracle = {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"]))
              for r in read_oracle(fixture, "cuda_gpu_kern_sum")}
    assert kernel_totals(data) == oracle
    assert len(data["duration"]) == len(data["row"]) == len(data["start_delta"]) == timeline.operations
    starts = [sum(data["start_delta"][: i + 1]) for i in range(min(50, len(data["start_delta"])))]
    assert starts == sorted(starts)


def test_big_runs_are_cut_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interactive_timeline, "MAX_OPERATIONS", 100)
    with open_trace(nsys_fixture("nsys2025_train_print")) as trace:
        timeline = build_interactive_timeline(trace)
    assert timeline.total_operations > 1000
    assert 100 <= timeline.operations <= 110  # the window's operations, plus any that straddle its ends
    assert timeline.window_source == "middle of the GPU span"


def test_names_cannot_close_the_data_block() -> None:
    text = interactive_timeline._safe_json({"names": ["</script><script>alert(1)</script>", "a&b", "<!--"]})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text)["names"][0] == "</script><script>alert(1)</script>"


def test_synthetic_18k_kernel_report_stays_under_3_mb(tmp_path: Path) -> None:
    """A hand-built scale input: a real export's rows replicated to ~18k kernels."""
    export = tmp_path / "synthetic_18k.sqlite"
    counts = build_export(nsys_fixture("nsys2025_train_print"), export, 18_000, 40_000)
    paths = write_report(export, tmp_path / "out")
    assert paths.html.stat().st_size < 3_000_000
    html = paths.html.read_text()
    start = html.index('<script type="application/json" id="tl-data">') + len('<script type="application/json" id="tl-data">')
    data = json.loads(html[start:html.index("</script>", start)])
    kinds = Counter(data["kinds"][k] for k in data["kind"])
    # the oracle: the export's own rows overlapping the window the page shows (its steady-state steps)
    lo, hi = (data["origin_ns"] + t for t in data["window"])
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as db:
        for kind, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY")):
            inside = db.execute(f'SELECT count(*) FROM {table} WHERE start < ? AND "end" > ?', (hi, lo)).fetchone()[0]
            assert kinds[kind] == inside
    assert counts["CUPTI_ACTIVITY_KIND_KERNEL"] >= 18_000 and kinds["kernel"] > 10_000
    assert data["steps"] and data["window_source"] == "steady-state steps"
