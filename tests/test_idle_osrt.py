"""OS runtime calls in the trace model and in the longest GPU idle stretches.

Oracle: the export's own OSRT_API rows read here with plain SQL (the calls
nsys's osrt_sum counts: eventClass 27), and the launching thread found in
SQL from the GPU operation that ends a gap (its correlation id in
CUPTI_ACTIVITY_KIND_RUNTIME); never the reader's own queries.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import defaultdict

import pytest
from click.testing import CliRunner

from profkit.analysis.breakdown import rank_breakdown
from profkit.analysis.breakdown.idle import TOP_PER_KIND
from profkit.cli import cli
from profkit.readers import open_trace
from profkit.report.build import build_report
from profkit.report.json_report import report_dict
from profkit.report.text import duration
from tests.conftest import DATA, nsys_fixture

MASK = 0xFFFFFF
# Both export schemas (3.7: nsys 2023.4; 3.20: nsys 2025.3).
FIXTURES = ["nsys2023_sync", "nsys2025_mlp_plain", "nsys2025_train_print"]


def sql(name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{nsys_fixture(name)}?mode=ro&immutable=1", uri=True)


def oracle_osrt(conn: sqlite3.Connection, pid: int, tid: int, g0: int, g1: int) -> list[tuple[str, int, int]]:
    """(name, calls, ns inside [g0, g1)) of the thread's OS runtime calls overlapping the window,
    most time first (then by name), at most TOP_PER_KIND.  In the exports tested here one thread's
    OS calls do not nest (nestingLevel is 0 in every call row), so their summed time is the time
    they cover."""
    rows = conn.execute(f"""SELECT s.value, o.start, o."end" FROM OSRT_API AS o JOIN StringIds AS s ON s.id = o.nameId
        WHERE o.eventClass = 27 AND (o.globalTid >> 24) & {MASK} = ? AND o.globalTid & {MASK} = ?
          AND o."end" > ? AND o.start < ?""", (pid, tid, g0, g1)).fetchall()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, start, end in rows:
        totals[name][0] += 1
        totals[name][1] += min(end, g1) - max(start, g0)
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][1], kv[0]))[:TOP_PER_KIND]
    return [(name, n, ns) for name, (n, ns) in ranked]


def launching_thread(conn: sqlite3.Connection, device: int, at: int) -> tuple[int, int]:
    """(pid, tid) of the CUDA call that launched the GPU operation starting at ``at`` on ``device``."""
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        row = conn.execute(f"""SELECT (r.globalTid >> 24) & {MASK}, r.globalTid & {MASK} FROM {table} AS g
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r ON r.correlationId = g.correlationId
            WHERE g.deviceId = ? AND g.start = ? ORDER BY r.start LIMIT 1""", (device, at)).fetchone()
        if row:
            return row
    raise AssertionError(f"no GPU operation starts at {at}")


def as_tuples(items: list[dict]) -> list[tuple[str, int, int]]:
    return [(i["name"], i["count"], i["overlap_ns"]) for i in items]


@pytest.mark.parametrize("name", FIXTURES)
def test_osrt_table_holds_the_export_calls(name: str) -> None:
    with sql(name) as conn:
        rows = conn.execute(f"""SELECT o.start, o."end", (o.globalTid >> 24) & {MASK}, o.globalTid & {MASK}, s.value
            FROM OSRT_API AS o JOIN StringIds AS s ON s.id = o.nameId WHERE o.eventClass = 27
            ORDER BY o.rowid""").fetchall()
    with open_trace(nsys_fixture(name)) as trace:
        assert trace.has("osrt")
        osrt = trace.table("osrt")
    assert len(rows) > 10_000
    assert list(zip(osrt.start, osrt["end"], osrt.pid, osrt.tid, osrt.name.astype(str))) == [tuple(r) for r in rows]


def test_kineto_records_no_os_runtime_calls() -> None:
    with open_trace(DATA / "kineto" / "mlp_plain.json.gz") as trace:
        assert not trace.has("osrt")
        assert len(trace.table("osrt")) == 0
        gaps = rank_breakdown(trace)["longest_idle"]
    assert gaps and all(g["osrt"] == [] for g in gaps)


def test_nested_operators_of_one_name_count_their_time_once() -> None:
    """Kineto nests operators of the same name (aten::mse_loss_backward inside itself): the time a
    name covers in a stretch is the union of its events there, never more than the stretch."""
    path = DATA / "kineto" / "review" / "mlp_gpu_plain.json.gz"
    with open_trace(path) as trace:
        gaps = rank_breakdown(trace)["longest_idle"]
    with gzip.open(path, "rt") as f:
        ops = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    nested = 0
    for gap in gaps:
        for kind in ("ranges", "api", "cpu_ops"):
            assert all(0 < item["overlap_ns"] <= gap["duration_ns"] for item in gap[kind])
        for item in gap["cpu_ops"]:
            spans = sorted((max(round(e["ts"] * 1000), gap["start_ns"]),
                            min(round(e["ts"] * 1000) + round(e["dur"] * 1000), gap["end_ns"])) for e in ops
                           if e["name"] == item["name"] and e["tid"] == gap["tid"]
                           and round(e["ts"] * 1000) < gap["end_ns"]
                           and round(e["ts"] * 1000) + round(e["dur"] * 1000) > gap["start_ns"])
            covered, reach = 0, None
            for start, end in spans:
                if reach is None or start > reach:
                    covered += end - start
                    reach = end
                elif end > reach:
                    covered += end - reach
                    reach = end
            assert (item["count"], item["overlap_ns"]) == (len(spans), covered)
            nested += covered < sum(end - start for start, end in spans)
    assert nested  # the case arises in this trace


@pytest.mark.parametrize("name", FIXTURES)
def test_longest_idle_names_the_launching_threads_os_calls(name: str) -> None:
    with open_trace(nsys_fixture(name)) as trace:
        gaps = rank_breakdown(trace)["longest_idle"]
    assert gaps
    with sql(name) as conn:
        for gap in gaps:
            expected = oracle_osrt(conn, gap["pid"], gap["tid"], gap["start_ns"], gap["end_ns"])
            assert as_tuples(gap["osrt"]) == expected
    # the OS calls do show up: blocking in ioctl (driver), loading modules (stat64, mmap64)
    assert any(gap["osrt"] for gap in gaps)


@pytest.mark.parametrize("name", ["nsys2023_sync", "nsys2025_mlp_plain"])
def test_report_gap_table_says_what_the_launching_thread_did(name: str) -> None:
    with open_trace(nsys_fixture(name)) as trace:
        report = report_dict(build_report(trace))
    rows = report["sections"]["utilization"]["tables"]["idle_gaps"]["rows"]
    assert rows
    with sql(name) as conn:
        for row in rows:
            pid, tid = launching_thread(conn, row["device"], row["end_ns"])
            assert (row["pid"], row["tid"]) == (pid, tid)
            expected = oracle_osrt(conn, pid, tid, row["start_ns"], row["end_ns"])
            assert as_tuples(row["osrt"]) == expected
            for call, _, _ in expected[:2]:  # the table cell names the two longest
                assert f"{call} " in row["cpu"]
    longest = max(rows, key=lambda r: r["duration_ns"])
    finding = next(f for f in report["findings"] if f.startswith("The longest idle stretch"))
    assert longest["cpu"] and longest["cpu"] in finding


def test_a_host_that_sleeps_each_step_is_named_in_the_steady_idle_stretches() -> None:
    """nsys2025_mlp_sleep: train_slow_loader.py --sleep-ms 5 sleeps on the launching thread every
    step (time.sleep -> clock_nanosleep), so the GPU waits.  Over the steady-state steps, every one
    of the longest idle stretches has that thread in clock_nanosleep for the 5 ms, and the table
    of `profkit breakdown --steady` says so."""
    name = "nsys2025_mlp_sleep"
    with open_trace(nsys_fixture(name)) as trace:
        gaps = rank_breakdown(trace, steady=True)["longest_idle"]
    assert len(gaps) == 5
    with sql(name) as conn:
        for gap in gaps:
            expected = oracle_osrt(conn, gap["pid"], gap["tid"], gap["start_ns"], gap["end_ns"])
            assert as_tuples(gap["osrt"]) == expected
            call, count, ns = expected[0]
            assert (call, count) == ("clock_nanosleep", 1) and 5_000_000 <= ns < 6_000_000
    out = CliRunner().invoke(cli, ["breakdown", "--steady", "--format", "md", str(nsys_fixture(name))])
    assert out.exit_code == 0, out.output
    assert "OS: clock_nanosleep 5.0" in out.output


@pytest.mark.parametrize(("name", "bound"), [("nsys2025_mlp_sleep", False), ("nsys2025_mlp_plain", True)])
def test_a_sleeping_host_is_not_called_launch_bound(name: str, bound: bool) -> None:
    """Both loops run short kernels and leave the GPU idle >90% of the steady state, waiting on the
    host.  The small MLP's idle time is gaps of tens of µs between launches (launch-bound); the
    sleeping loop's is one ~24 ms stretch a step (the sleep and building the batch on the CPU),
    which no kernel fusion or CUDA graph would remove."""
    with open_trace(nsys_fixture(name)) as trace:
        row = rank_breakdown(trace, steady=True)
    launch = row["launch"]
    assert row["idle_pct"] > 90 and launch["short_kernel_pct"] > 50
    assert launch["launch_bound"] is bound
    if bound:
        assert launch["long_gap_pct"] < 10 and "CUDA graph" in launch["verdict"]
    else:
        assert launch["long_gap_pct"] > 80 and "not launch-bound" in launch["verdict"]
        assert all(gap["duration_ns"] > 20_000_000 for gap in row["longest_idle"])


def _longest_gap_sql(conn: sqlite3.Connection, lo: int, hi: int) -> tuple[int, int, int]:
    """The longest stretch in [lo, hi) with no GPU operation on a device working in it, swept over the raw rows."""
    best = (0, 0, -1)
    devices = [d for (d,) in conn.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    for device in devices:
        rows = sorted(r for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
                      for r in conn.execute(f'SELECT max(start, ?), min("end", ?) FROM {t} '
                                            f'WHERE deviceId = ? AND "end" > ? AND start < ?', (lo, hi, device, lo, hi)))
        if not rows:
            continue
        reach = lo  # the window's edges count: from lo to the first operation, from the last one to hi
        for start, end in [*rows, (hi, hi)]:
            if start > reach and start - reach > best[1] - best[0]:
                best = (reach, start, device)
            reach = max(reach, end)
    return best


def test_the_report_names_what_the_host_did_in_the_steady_states_longest_idle() -> None:
    """The whole capture's longest idle stretch is start-up; the report also gives the steady
    state's, with the launching thread's calls: on the slow-loader loop, its 5 ms sleep."""
    from profkit.analysis.steps import find_steps

    name = "nsys2025_mlp_sleep"
    with open_trace(nsys_fixture(name)) as trace:
        result = find_steps(trace)
        report = report_dict(build_report(trace))
    rows = report["sections"]["utilization"]["tables"]["steady_idle_gaps"]["rows"]
    gap = rows[0]
    with sql(name) as conn:
        assert (gap["start_ns"], gap["end_ns"], gap["device"]) == _longest_gap_sql(conn, *result.steady_window)
        pid, tid = launching_thread(conn, gap["device"], gap["end_ns"])
        expected = oracle_osrt(conn, pid, tid, gap["start_ns"], gap["end_ns"])
    assert (gap["pid"], gap["tid"]) == (pid, tid) and as_tuples(gap["osrt"]) == expected
    assert expected[0][0] == "clock_nanosleep"
    finding = next(f for f in report["findings"] if f.startswith("In the steady state the longest GPU idle"))
    assert report["findings"].index(finding) == 1  # right after the steady-state headline
    assert f"OS: clock_nanosleep {duration(expected[0][2])}" in finding and f"(in step {gap['step']})" in finding
    steps = result.steps.set_index("index")
    for row in rows:  # every steady stretch: in its step (the one holding most of it), the host asleep 5 ms
        held = {i: min(step.end_ns, row["end_ns"]) - max(step.start_ns, row["start_ns"]) for i, step in steps.iterrows()}
        assert row["step"] == max(held, key=held.get)
        assert row["osrt"][0]["name"] == "clock_nanosleep" and "OS: clock_nanosleep 5." in row["cpu"]
    assert [r["duration_ns"] for r in rows] == sorted((r["duration_ns"] for r in rows), reverse=True)


def _gaps_sql(conn: sqlite3.Connection, lo: int, hi: int, top: int) -> list[tuple[int, int, int]]:
    """Every idle stretch of every device inside [lo, hi), by a sweep over the raw rows."""
    found = []
    rows = conn.execute(" UNION ALL ".join(
        f'SELECT deviceId, max(start, {lo}), min("end", {hi}) FROM {table} WHERE "end" > {lo} AND start < {hi}'
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone())
        + " ORDER BY 1, 2").fetchall()
    by_device: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for device, start, end in rows:
        by_device[device].append((start, end))
    for device, ops in by_device.items():
        reach = lo  # the window's edges count: idle from lo to the first operation, and to hi after the last
        for start, end in ops:
            if start > reach:
                found.append((reach, start, device))
            reach = max(reach, end)
        if reach < hi:
            found.append((reach, hi, device))
    found.sort(key=lambda g: (g[0] - g[1], g[0]))
    return found[:top]


@pytest.mark.parametrize("name", ["nsys2023_sync", "nsys2025_mlp_sleep", "nsys2025_train_print", "nsys2025_gelu"])
def test_longest_gaps_within_a_window_equal_a_sweep_over_the_raw_rows(name: str) -> None:
    """The steady state's idle stretches come from the merged busy intervals, clipped to the
    window; oracle: a sweep over the export's own rows, clipped first, per device."""
    from profkit.analysis.breakdown.idle import longest_gaps_within

    with open_trace(nsys_fixture(name)) as trace, sql(name) as conn:
        first, last = conn.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
        span = last - first
        for lo, hi in ((first, last + 1), (first + span // 3, first + 2 * span // 3),
                       (first + span // 2, last - span // 10), (first - 10, first + span // 7)):
            assert longest_gaps_within(trace, lo, hi, top=5) == _gaps_sql(conn, lo, hi, 5)
