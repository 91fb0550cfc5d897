"""One clock: report, steps, breakdown and export put each step and idle stretch at the same
time, to the ns, and a time copied from one is a time the others take (issue 26).

Oracles, read from the raw files, not through profkit: the zero (an nsys export's time 0;
the start of a Kineto trace's "Trace" event, torch.profiler's own span), and the GPU
operations on each side of an idle stretch (the export's CUPTI tables, the trace's
kernel/gpu_memcpy/gpu_memset events, their microseconds read as decimals).  The nsys MLP
export's capture begins 0.55 s after its time 0, the gap that made the clocks disagree.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import nsys_fixture

DATA = Path(__file__).parent / "data"
HEADER = "s from session start"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _fixtures() -> list:
    return [pytest.param(lambda: nsys_fixture("nsys2025_train_print"), id="nsys_mlp_print"),
            pytest.param(lambda: DATA / "kineto" / "mlp_print.json.gz", id="kineto_mlp_print")]


def _ns(us: Decimal) -> int:
    return int((us * 1000).to_integral_value())


def _raw_kineto(path: Path) -> dict:
    with gzip.open(path, "rb") as fh:
        return json.loads(fh.read(), parse_float=Decimal)


def _zero(path: Path) -> int:
    """The session start on the trace's clock, from the raw file."""
    if path.suffix == ".sqlite":
        with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
            (start,) = db.execute("SELECT startTime FROM ANALYSIS_DETAILS").fetchone()
        assert start > 0  # the capture begins after the zero: the two must not be confused
        return 0
    spans = [e for e in _raw_kineto(path)["traceEvents"] if e.get("cat") == "Trace"]
    return min(_ns(Decimal(e["ts"])) for e in spans)


def _gpu_ops(path: Path, device: int) -> set[tuple[int, int]]:
    """(start, end) ns of every kernel, copy and set on ``device``, from the raw file."""
    if path.suffix == ".sqlite":
        with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return {(a, b) for table in ("KERNEL", "MEMCPY", "MEMSET") if f"CUPTI_ACTIVITY_KIND_{table}" in tables
                    for a, b in db.execute(f"SELECT start, end FROM CUPTI_ACTIVITY_KIND_{table} WHERE deviceId = ?",
                                           (device,))}
    return {(_ns(Decimal(e["ts"])), _ns(Decimal(e["ts"])) + _ns(Decimal(e["dur"])))
            for e in _raw_kineto(path)["traceEvents"]
            if e.get("cat") in GPU_CATS and e.get("ph") == "X" and int(e["args"].get("device", e["pid"])) == device}


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def _md_column(text: str, title: str) -> list[str]:
    """The cells of the first Markdown table with a column ``title``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if title in cells:
            at, out = cells.index(title), []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                out.append([c.strip() for c in row.strip().strip("|").split("|")][at])
            return out
    raise AssertionError(f"no column {title!r} in:\n{text[:2000]}")


def _report(path: Path, out: Path) -> dict:
    _invoke("report", path, "-o", out)
    return json.loads((out / "report.json").read_text())


def _exported_gpu_ops(out: Path) -> set[tuple[int, int]]:
    data = json.loads(out.read_bytes(), parse_float=Decimal)
    base = int(data.get("baseTimeNanoseconds", 0))
    return {(base + _ns(Decimal(e["ts"])), base + _ns(Decimal(e["ts"])) + _ns(Decimal(e["dur"])))
            for e in data["traceEvents"] if e.get("cat") in GPU_CATS and e.get("ph") == "X"}


def _seconds(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


@pytest.mark.parametrize("fixture", _fixtures())
def test_an_idle_stretch_from_report_json_round_trips_through_export_window(fixture, tmp_path: Path) -> None:
    path = fixture()
    report = _report(path, tmp_path / "report")
    zero = _zero(path)
    utilization = report["sections"]["utilization"]["tables"]
    stretches = utilization["idle_gaps"]["rows"] + utilization.get("steady_idle_gaps", {}).get("rows", [])
    assert stretches
    for gap in stretches[:3] + stretches[-2:]:
        a, b = gap["start_ns"], gap["end_ns"]
        assert (gap["start_s"], gap["end_s"]) == (_seconds(a - zero), _seconds(b - zero))
        out = tmp_path / f"window_{a}.json"
        _invoke("export", path, "-o", out, "--window", f"{gap['start_s']}:{gap['end_s']}")
        ops = _gpu_ops(path, gap["device"])
        touching = {(s, e) for s, e in ops if e >= a and s <= b}
        # idle: nothing runs inside it; its neighbours end where it starts and start where it ends
        assert all(e == a or s == b for s, e in touching), gap
        assert any(e == a for _, e in touching) and any(s == b for s, _ in touching), gap
        assert _exported_gpu_ops(out) == touching


@pytest.mark.parametrize("fixture", _fixtures())
def test_report_steps_breakdown_and_export_agree_on_steps_and_idle_stretches(fixture, tmp_path: Path) -> None:
    path = fixture()
    zero = _zero(path)
    report = _report(path, tmp_path / "report")
    steps = json.loads(_invoke("steps", path, "--format", "json"))["steps"]
    assert len(steps) >= 5
    printed = _md_column(_invoke("steps", path, "--format", "md", "--limit", "0"), f"Start ({HEADER})")
    assert printed == [_seconds(s["start_ns"] - zero) for s in steps]
    in_report = report["sections"]["steps"]["tables"]["steps"]["rows"]
    assert [(r["index"], r["start_ns"], r["end_ns"], r["start_s"]) for r in in_report] == \
        [(s["index"], s["start_ns"], s["end_ns"], _seconds(s["start_ns"] - zero)) for s in steps][:len(in_report)]

    # the longest idle stretches: the report's and breakdown's are the same stretches, at the same printed time
    (row,) = json.loads(_invoke("breakdown", path, "--format", "json"))
    assert row["session_start_ns"] == zero
    idle = {(g["start_ns"], g["end_ns"]) for g in row["longest_idle"]}
    gaps = report["sections"]["utilization"]["tables"]["idle_gaps"]["rows"]
    assert idle == {(g["start_ns"], g["end_ns"]) for g in gaps}
    at = _md_column(_invoke("breakdown", path, "--format", "md"), f"At ({HEADER})")
    assert at == [_seconds(g["start_ns"] - zero) for g in row["longest_idle"]]
    assert sorted(at) == sorted(g["start_s"] for g in gaps)

    # export: --steps and --window (the printed start of a step to the next one's) cut at the same ns
    middle = steps[len(steps) // 2]
    by_steps, by_window = tmp_path / "steps.json", tmp_path / "window.json"
    _invoke("export", path, "-o", by_steps, "--steps", f"{middle['index']}:{middle['index']}")
    data = json.loads(by_steps.read_bytes(), parse_float=Decimal)
    base = int(data.get("baseTimeNanoseconds", 0))
    (step,) = [e for e in data["traceEvents"] if e.get("cat") == "step" and e["args"]["step"] == middle["index"]]
    assert base + _ns(Decimal(step["ts"])) == middle["start_ns"]
    assert _ns(Decimal(step["dur"])) == middle["end_ns"] - middle["start_ns"]
    following = printed[steps.index(middle) + 1]
    _invoke("export", path, "-o", by_window, "--window", f"{printed[steps.index(middle)]}:{following}")
    ops = _exported_gpu_ops(by_window)
    # a step starts at its first GPU operation, or at its range's start where it opened on an idle GPU
    assert middle["start_ns"] in {s for s, _ in ops} | {middle["cpu_start_ns"]}
    assert min(s for s, _ in ops) <= middle["start_ns"] or middle["start_ns"] == middle["cpu_start_ns"]
    # the window's end is the next step's start: its first operation, or its range's start
    following_step = steps[steps.index(middle) + 1]
    assert middle["end_ns"] == following_step["start_ns"]
    assert max(s for s, _ in ops) <= middle["end_ns"]


def test_report_names_the_zero_and_where_the_capture_began(tmp_path: Path) -> None:
    path = nsys_fixture("nsys2025_train_print")
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        (start,) = db.execute("SELECT startTime FROM ANALYSIS_DETAILS").fetchone()
    facts = dict(map(tuple, _report(path, tmp_path / "r")["sections"]["capture"]["facts"]))
    assert HEADER in facts["Times"] and f"the capture began at {_seconds(start)} s" in facts["Times"]


def test_window_takes_decimal_seconds_exactly() -> None:
    from profkit.cli.export import parse_window
    from profkit.model.clock import parse_seconds, seconds_text

    assert parse_window("23.199000512:23.2") == (23_199_000_512, 23_200_000_000)
    assert parse_window(":1e-9") == (None, 1)
    for ns in (0, 1, 999_999_999, 1_000_000_000, 4_882_689_216_044_160, -5):
        assert parse_seconds(seconds_text(ns)) == ns
