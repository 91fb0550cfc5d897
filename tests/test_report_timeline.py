"""profkit.analysis.timeline.busy on the trace model: binned busy time per stream, GPU utilization, NVTX bars.

Checked against a brute-force computation in plain Python (every interval,
read directly from the export's SQLite, clipped to every bin) on the real
exports, and on a hand-built scale/edge export (overlapping streams, several
devices, operations spanning many bins, zero-length operations).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profkit.analysis.kernels import summaries
from profkit.analysis.timeline import busy as timeline
from profkit.analysis.timeline.ranges import enclosing_ranges, nvtx_bars, nvtx_window
from profkit.model.sync_sites import readable_range
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

REAL = ["nsys2025_train_print", "nsys2025_sync", "nsys2023_vector_add", "nsys2023_nvtx", "nsys2025_nvtx"]
TABLES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
          "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}


def intervals(path: Path) -> list[tuple[str, int, int, int, int, int]]:
    """(kind, device, pid, stream, start, end) of every GPU operation, read directly (pid -1 if not recorded)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        out = []
        for kind, table in TABLES.items():
            if table in present:
                columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
                pid = "(globalPid >> 24) & 16777215" if "globalPid" in columns else "-1"
                out += [(kind, *row) for row in conn.execute(
                    f'SELECT deviceId, {pid}, streamId, start, "end" FROM {table}')]
        return out
    finally:
        conn.close()


def brute_bins(ops: list[tuple[int, int]], bins: timeline.TimeBins) -> list[int]:
    """Sum of each interval's overlap with each bin."""
    out = [0] * bins.count
    for start, end in ops:
        for b in range(bins.count):
            lo, hi = bins.start_ns + b * bins.width_ns, bins.start_ns + (b + 1) * bins.width_ns
            out[b] += max(0, min(end, hi) - max(start, lo))
    return out


def brute_union_bins(ops: list[tuple[int, int]], bins: timeline.TimeBins) -> list[int]:
    """Length of the union of the intervals within each bin."""
    out = []
    for b in range(bins.count):
        lo, hi = bins.start_ns + b * bins.width_ns, bins.start_ns + (b + 1) * bins.width_ns
        clipped = sorted((max(s, lo), min(e, hi)) for s, e in ops if min(e, hi) > max(s, lo))
        covered, reach = 0, lo
        for s, e in clipped:
            if e > reach:
                covered += e - max(s, reach)
                reach = e
        out.append(covered)
    return out


def brute_gaps(ops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    gaps, reach = [], None
    for s, e in sorted(ops):
        if reach is not None and s > reach:
            gaps.append((reach, s))
        reach = e if reach is None else max(reach, e)
    return sorted(gaps, key=lambda g: (g[0] - g[1], g[0]))


def check_against_brute_force(path: Path, bins: timeline.TimeBins) -> None:
    ops = intervals(path)
    with open_trace(path) as trace:
        lanes = timeline.stream_busy(trace, bins)
        utilization = timeline.gpu_utilization(trace, bins, gaps=10**6)
    expected_lanes = {}
    for kind, dev, pid, stream, s, e in ops:
        expected_lanes.setdefault((dev, None if pid < 0 else pid, stream, kind), []).append((s, e))
    assert {(a.device_id, a.pid, a.stream_id, a.kind) for a in lanes} == set(expected_lanes)
    for lane in lanes:
        mine = expected_lanes[(lane.device_id, lane.pid, lane.stream_id, lane.kind)]
        assert lane.operations == len(mine)
        assert lane.busy_ns == sum(e - s for s, e in mine)
        assert lane.busy_per_bin.tolist() == brute_bins(mine, bins)
    by_device: dict[int, list[tuple[int, int]]] = {}
    for _, dev, _, _, s, e in ops:
        by_device.setdefault(dev, []).append((s, e))
    assert [u.device_id for u in utilization] == sorted(by_device)
    for util in utilization:
        mine = by_device[util.device_id]
        expected = brute_union_bins(mine, bins)
        assert util.busy_per_bin.tolist() == expected
        assert util.busy_ns == sum(expected)
        assert util.gaps == brute_gaps(mine)
        assert util.first_ns == min(s for s, _ in mine) and util.last_ns == max(e for _, e in mine)


@pytest.mark.parametrize("name", REAL)
@pytest.mark.parametrize("count", [1, 7, 300])
def test_real_exports_equal_brute_force(name: str, count: int) -> None:
    path = nsys_fixture(name)
    with open_trace(path) as trace:
        window = timeline.time_window(trace)
    assert window is not None
    check_against_brute_force(path, timeline.make_bins(*window, count))


@pytest.mark.parametrize("name", REAL)
def test_utilization_equals_capture_busy_time(name: str) -> None:
    path = nsys_fixture(name)
    with open_trace(path) as trace:
        busy = timeline.gpu_busy(trace)
        bins = timeline.make_bins(*timeline.time_window(trace), 1000)
        utilization = timeline.gpu_utilization(trace, bins)
    assert {u.device_id: u.busy_ns for u in utilization} == {d["device"]: d["busy_ns"] for d in busy["per_device"]}
    assert all(int(u.busy_per_bin.max()) <= bins.width_ns for u in utilization)
    # the union of every operation's interval, from the raw rows
    ops = sorted((s, e) for *_, s, e in intervals(path))
    covered, reach = 0, None
    for s, e in ops:
        if reach is None or s >= reach:
            covered, reach = covered + e - s, e
        elif e > reach:
            covered, reach = covered + e - reach, e
    assert busy["busy_ns"] == covered


def test_sub_window_drops_what_lies_outside() -> None:
    path = nsys_fixture("nsys2025_train_print")
    with open_trace(path) as trace:
        lo, hi = timeline.gpu_window(trace)
        bins = timeline.make_bins(lo + (hi - lo) // 2, hi, 50)
        lanes = timeline.stream_busy(trace, bins)
        utilization = timeline.gpu_utilization(trace, bins, gaps=10**6)
    inside = [(s, e) for kind, *_, s, e in intervals(path) if kind == "kernel" and s >= bins.start_ns
              and e <= bins.end_ns]
    kernel = next(a for a in lanes if a.kind == "kernel")
    assert kernel.operations == len(inside) and kernel.busy_ns == sum(e - s for s, e in inside)
    # utilization cuts busy time at the window's edges; gaps are those wholly inside it
    every = [(s, e) for *_, s, e in intervals(path)]
    assert utilization[0].busy_per_bin.tolist() == brute_union_bins(every, bins)
    assert utilization[0].gaps == [g for g in brute_gaps(every) if g[0] >= bins.start_ns and g[1] <= bins.end_ns]


# -- hand-built scale/edge export -----------------------------------------------------------------
def build_synthetic(path: Path, n: int, seed: int) -> None:
    """A minimal export (hand-built for this test): kernels and memcpys on two devices, three streams,
    overlapping, some spanning many bins, some of zero length."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, "end" INT, deviceId INT, contextId INT,
                                                 streamId INT, demangledName INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, "end" INT, deviceId INT, contextId INT,
                                                 streamId INT, bytes INT, copyKind INT);
        INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.20.3');
        INSERT INTO StringIds VALUES (1, 'k');
    """)
    kernels, copies = [], []
    for _ in range(n):
        start = rng.randrange(1_000, 1_000_000)
        length = rng.choice([0, 1, rng.randrange(1, 500), rng.randrange(1, 50_000), rng.randrange(1, 400_000)])
        row = (start, start + length, rng.choice([0, 1]), 1, rng.choice([7, 13, 21]))
        (kernels if rng.random() < 0.8 else copies).append(row)
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, 1)", kernels)
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, 8, 1)", copies)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_synthetic_overlaps(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "synthetic.sqlite"
    build_synthetic(path, 400, seed)
    with open_trace(path) as trace:
        window = timeline.time_window(trace)
    for count in (1, 13, 97):
        check_against_brute_force(path, timeline.make_bins(*window, count))


def test_only_the_longest_gaps_are_kept() -> None:
    path = nsys_fixture("nsys2025_train_print")
    ops = [(s, e) for *_, s, e in intervals(path)]
    with open_trace(path) as trace:
        (device0,) = timeline.gpu_utilization(trace, timeline.make_bins(*timeline.time_window(trace), 10), gaps=5)
    assert len(brute_gaps(ops)) > 1000
    assert device0.gaps == brute_gaps(ops)[:5]


def test_make_bins_cover_the_window() -> None:
    for start, end, count in [(0, 10, 3), (5, 6, 1000), (100, 100, 4), (0, 999_999_999_999, 1000)]:
        bins = timeline.make_bins(start, end, count)
        assert bins.start_ns == start and bins.end_ns >= end and bins.width_ns >= 1
        assert bins.count <= count and bins.end_ns - bins.width_ns < max(end, start + 1)
    with pytest.raises(ValueError):
        timeline.make_bins(0, 10, 0)


def test_busiest_window() -> None:
    bins = timeline.TimeBins(1000, 10, 10)
    busy = np.array([0, 0, 5, 10, 10, 0, 0, 0, 1, 0])
    assert timeline.busiest_window(busy, bins, 0.9) == (1020, 1050)
    assert timeline.busiest_window(busy, bins, 1.0) == (1020, 1090)
    assert timeline.busiest_window(np.zeros(10, dtype=np.int64), bins) is None


# -- NVTX -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["nsys2025_nvtx", "nsys2023_nvtx", "nsys2025_train_print"])
def test_nvtx_bars_are_the_ranges_of_nvtx_sum(name: str) -> None:
    with open_trace(nsys_fixture(name)) as trace:
        summary = summaries.nvtx_summary(trace)
    with open_trace(nsys_fixture(name)) as trace:
        window = nvtx_window(trace)
        bars, total = nvtx_bars(trace, window[0], window[1] + 1)
    assert total == len(bars) == sum(r["instances"] for r in summary)
    counts: dict[tuple, int] = {}
    for bar in bars:
        counts[(bar.text, bar.style)] = counts.get((bar.text, bar.style), 0) + 1
        assert bar.end_ns >= bar.start_ns
    # sync-site ranges are drawn decoded ("sync: .item() at train_mlp.py:59: ...")
    assert counts == {(readable_range(r["name"]), r["style"]): r["instances"] for r in summary}
    totals: dict[tuple, int] = {}
    for bar in bars:
        totals[(bar.text, bar.style)] = totals.get((bar.text, bar.style), 0) + bar.end_ns - bar.start_ns
    assert totals == {(readable_range(r["name"]), r["style"]): r["total_ns"] for r in summary}
    # levels: a range inside another one of the same thread sits deeper
    for inner in bars:
        for outer in bars:
            if (outer is not inner and outer.tid == inner.tid
                    and outer.start_ns < inner.start_ns and inner.end_ns < outer.end_ns):
                assert inner.depth > outer.depth, (inner, outer)


def test_nvtx_bars_limit_keeps_the_longest() -> None:
    with open_trace(nsys_fixture("nsys2025_train_print")) as trace:
        window = nvtx_window(trace)
        every, total = nvtx_bars(trace, *window)
        some, total_again = nvtx_bars(trace, *window, limit=5)
        long_only, _ = nvtx_bars(trace, *window, min_duration_ns=10_000_000)
    assert total == total_again == len(every) and len(some) == 5
    lengths = sorted((b.end_ns - b.start_ns for b in every), reverse=True)
    assert sorted((b.end_ns - b.start_ns for b in some), reverse=True) == lengths[:5]
    assert all(b.end_ns - b.start_ns >= 10_000_000 for b in long_only)
    assert len(long_only) == sum(1 for n in lengths if n >= 10_000_000)


def test_enclosing_ranges_innermost_first() -> None:
    with open_trace(nsys_fixture("nsys2025_nvtx")) as trace:
        bars, _ = nvtx_bars(trace, 0, 1 << 62)
        inner = next(b for b in bars if b.text == "probe:inner")
        names = enclosing_ranges(trace, inner.start_ns + 1, inner.end_ns - 1)
    assert names[0] == "probe:inner" and ":step 0" in names
