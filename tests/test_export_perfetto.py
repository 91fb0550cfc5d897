"""`profkit export --to perfetto`: Chrome trace-event JSON from every real nsys fixture.

Checked on the raw JSON, with json.load here and not with profkit's readers:
- every event has the fields the Trace Event Format requires for its phase;
- complete events of one track nest (Perfetto and Chrome draw a track as a stack);
- each flow id has exactly one start and one finish, each bound to a slice on its
  track that encloses its timestamp (the launch call, the kernel);
- kernel names, instances and total ns equal `nsys stats --report
  cuda_gpu_kern_sum` (the oracle CSV beside each fixture);
- no string carries a NUL (the form the recorded environment takes in nsys).
And: profkit reads its own export back (the Kineto reader) with the same
kernel summary as nsys stats; bad input gives one line and exit 2, and no
file is left behind.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.export.perfetto import export_perfetto
from profkit.readers import open_trace
from tests.conftest import default_run, nsys_fixture, nsys_fixture_names
from tests.test_summaries import read_oracle

FIXTURES = nsys_fixture_names()
KINETO_DATA = Path(__file__).parent / "data" / "kineto"
KINETO_FIXTURES = sorted(str(p.relative_to(KINETO_DATA)) for p in KINETO_DATA.rglob("*.json.gz"))

# Trace Event Format (Google's spec): the fields each phase needs.
REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid", "cat"},
    "i": {"name", "ph", "ts", "pid", "tid", "s"},
    "C": {"name", "ph", "ts", "pid", "args"},
    "s": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
    "f": {"name", "ph", "ts", "pid", "tid", "id", "cat"},
    "M": {"name", "ph", "pid", "args"},
}


def ns(value: float) -> int:
    return round(value * 1000)


def load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def oracle_kernels(fixture: str) -> dict[str, tuple[int, int]]:
    return {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"]))
            for r in read_oracle(fixture, "cuda_gpu_kern_sum")}


def check_trace_events(doc: dict) -> list[dict]:
    events = doc["traceEvents"]
    for e in events:
        assert e["ph"] in REQUIRED, e
        missing = REQUIRED[e["ph"]] - set(e)
        assert not missing, (missing, e)
        assert isinstance(e["pid"], int) and isinstance(e.get("tid", 0), int), e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), e
    text = json.dumps(doc)
    assert "\\u0000" not in text
    return events


def check_nesting(events: list[dict]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Complete events of each (pid, tid) nest; returns the slices per track."""
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    for track, slices in tracks.items():
        slices.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        open_ends: list[int] = []
        for start, end in slices:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"slices cross on track {track}: {start}-{end}"
            open_ends.append(end)
    return tracks


def encloses(slices: list[tuple[int, int]], t: int) -> bool:
    return any(start <= t <= end for start, end in slices)


def check_flows(events: list[dict], tracks: dict) -> int:
    flows: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in flows[e["id"]], f"flow id {e['id']} has two '{e['ph']}' events"
            flows[e["id"]][e["ph"]] = e
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} is not paired: {pair}"
        start, finish = pair["s"], pair["f"]
        assert start["cat"] == finish["cat"] and start["name"] == finish["name"]
        assert finish.get("bp") == "e"
        assert encloses(tracks[(start["pid"], start["tid"])], ns(start["ts"])), start
        assert encloses(tracks[(finish["pid"], finish["tid"])], ns(finish["ts"])), finish
        assert ns(start["ts"]) <= ns(finish["ts"]), pair  # a launch precedes its kernel
    return len(flows)


@pytest.mark.parametrize("fixture", default_run(FIXTURES))
def test_export_is_a_valid_trace_with_nsys_kernel_totals(fixture: str, tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    with open_trace(nsys_fixture(fixture)) as trace:
        result = export_perfetto(trace, out)
    doc = load(out)
    events = check_trace_events(doc)
    assert len(events) == result.events
    tracks = check_nesting(events)
    assert check_flows(events, tracks) == result.flows

    totals: Counter = Counter()
    counts: Counter = Counter()
    for e in events:
        if e["ph"] == "X" and e["cat"] == "kernel":
            counts[e["name"]] += 1
            totals[e["name"]] += ns(e["dur"])
            args = e["args"]
            assert len(args["grid"]) == len(args["block"]) == 3 and args["registers per thread"] >= 0
            assert args["correlation"] >= 0
    want = oracle_kernels(fixture)
    assert {n: (counts[n], totals[n]) for n in counts} == want
    if want:
        assert result.flows > 0  # every kernel of these captures was launched by a traced call
        assert any(e["ph"] == "C" for e in events)


@pytest.mark.parametrize("fixture", default_run(FIXTURES))
def test_export_reads_back_with_the_same_kernel_summary(fixture: str, tmp_path: Path) -> None:
    """nsys -> export -> Kineto reader: the same kernels; and that Kineto-read trace exports
    again (the export from a Kineto source) into a valid trace with the same kernels."""
    out, again = tmp_path / "trace.json", tmp_path / "again.json.gz"
    with open_trace(nsys_fixture(fixture)) as trace:
        export_perfetto(trace, out)
    with open_trace(out) as back:
        assert back.meta.source == "kineto"
        kernels = back.table("kernels", ["name", "start", "end"])
        export_perfetto(back, again)
    got = {}
    for name, group in kernels.groupby("name", observed=True):
        got[str(name)] = (len(group), int((group["end"] - group["start"]).sum()))
    want = oracle_kernels(fixture)
    assert got == want
    events = check_trace_events(load(again))
    check_flows(events, check_nesting(events))
    counts: Counter = Counter()
    totals: Counter = Counter()
    for e in events:
        if e["ph"] == "X" and e["cat"] == "kernel":
            counts[e["name"]] += 1
            totals[e["name"]] += ns(e["dur"])
    assert {n: (counts[n], totals[n]) for n in counts} == want


def test_window_keeps_only_overlapping_events(tmp_path: Path) -> None:
    fixture = "nsys2025_train_print"
    whole, part = tmp_path / "whole.json", tmp_path / "part.json"
    with open_trace(nsys_fixture(fixture)) as trace:
        export_perfetto(trace, whole)
    kernels = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in load(whole)["traceEvents"]
                     if e["ph"] == "X" and e["cat"] == "kernel")
    lo, hi = kernels[len(kernels) // 3][0], kernels[len(kernels) // 2][0]
    with open_trace(nsys_fixture(fixture)) as trace:
        export_perfetto(trace, part, window_ns=(lo, hi))
    events = check_trace_events(load(part))
    check_flows(events, check_nesting(events))
    inside = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert len(inside) == sum(1 for s, e in kernels if s < hi and e >= lo)
    assert all(ns(e["ts"]) < hi and ns(e["ts"]) + ns(e["dur"]) >= lo for e in events if e["ph"] == "X")


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_cli_writes_gzip_and_plain_json(tmp_path: Path) -> None:
    export = str(nsys_fixture("nsys2023_nvtx"))
    for name in ("t.json", "t.json.gz"):
        code, output = run_cli("export", export, "--to", "perfetto", "-o", str(tmp_path / name))
        assert code == 0, output
        assert load(tmp_path / name)["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.json.gz"]  # no temporary files left


@pytest.mark.parametrize("args, message", [
    (["--to", "speedscope"], "unknown export format"),
    (["--window", "5:1"], "window is empty"),
    (["--window", "1000:1001"], "no events between"),
    (["--window", "abc"], "--window"),
    (["--steps", "x:y"], "--steps"),
    (["--window", "1:2", "--steps", "1:2"], "give one of them"),
])
def test_cli_bad_options_one_line_exit_2_no_file(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    code, output = run_cli("export", str(nsys_fixture("nsys2023_nvtx")), "-o", str(out), *args)
    assert code == 2
    assert message in output and len(output.strip().splitlines()) == 1, output
    assert list(tmp_path.iterdir()) == []


def test_cli_unwritable_output_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "folder" / "t.json"
    code, output = run_cli("export", str(nsys_fixture("nsys2023_nvtx")), "-o", str(missing))
    assert code == 2 and "cannot write" in output and len(output.strip().splitlines()) == 1, output
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, output = run_cli("export", str(nsys_fixture("nsys2023_nvtx")), "-o", str(locked / "t.json"))
        import os
        if os.geteuid() != 0:  # root writes anywhere
            assert code == 2 and "cannot write" in output, output
            assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


def test_cli_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    export = nsys_fixture("nsys2023_nvtx")
    before = export.stat().st_mtime_ns, export.stat().st_size
    code, output = run_cli("export", str(export), "-o", str(export))
    assert code == 2 and "input" in output
    assert (export.stat().st_mtime_ns, export.stat().st_size) == before


def test_interrupted_export_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from profkit.export import chrome_events

    def broken(*args, **kwargs):  # noqa: ANN002, ANN003
        yield ['{"ph":"X"']
        raise KeyboardInterrupt

    monkeypatch.setattr(chrome_events, "api_events", broken)
    with open_trace(nsys_fixture("nsys2023_nvtx")) as trace, pytest.raises(KeyboardInterrupt):
        export_perfetto(trace, tmp_path / "t.json.gz")
    assert list(tmp_path.iterdir()) == []


def test_cli_steps_cut_and_steps_track(tmp_path: Path) -> None:
    """--steps 2:4 keeps what overlaps steps 2 to 4 as `profkit steps` prints them, and the
    steps track shows those steps."""
    export = str(nsys_fixture("nsys2025_train_print"))
    code, output = run_cli("steps", export, "--format", "json")
    assert code == 0, output
    steps = {s["index"]: s for s in json.loads(output)["steps"]}
    lo, hi = steps[2]["start_ns"], steps[4]["end_ns"]
    out = tmp_path / "steps.json.gz"
    code, output = run_cli("export", export, "--steps", "2:4", "-o", str(out))
    assert code == 0, output
    events = check_trace_events(load(out))
    check_flows(events, check_nesting(events))
    slices = [e for e in events if e["ph"] == "X"]
    assert all(ns(e["ts"]) < hi and ns(e["ts"]) + ns(e["dur"]) >= lo for e in slices)
    kernels = [e for e in slices if e["cat"] == "kernel"]
    assert kernels and all(lo <= ns(e["ts"]) < hi for e in kernels[1:-1])
    shown = {e["args"]["step"]: e for e in slices if e["cat"] == "step"}
    assert {2, 3, 4} <= set(shown)
    for index in (2, 3, 4):
        assert ns(shown[index]["ts"]) == steps[index]["start_ns"]
        assert shown[index]["args"]["phase"] == steps[index]["phase"]
    code, output = run_cli("export", export, "--steps", "50:60", "-o", str(tmp_path / "none.json"))
    assert code == 2 and "no steps 50 to 60" in output
    assert not (tmp_path / "none.json").exists()


@pytest.mark.parametrize("fixture", default_run(KINETO_FIXTURES))
def test_kineto_trace_exports_with_its_own_kernel_totals(fixture: str, tmp_path: Path) -> None:
    """A torch.profiler trace -> export: valid, paired, nested, and per kernel name the count
    and the sum of round(dur * 1000) of the source JSON's own 'kernel' events."""
    source = KINETO_DATA / fixture
    raw = load(source)
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            want[e["name"]][0] += 1
            want[e["name"]][1] += round(e["dur"] * 1000)
    out = tmp_path / "out.json.gz"
    with open_trace(source) as trace:
        result = export_perfetto(trace, out)
    events = check_trace_events(load(out))
    assert check_flows(events, check_nesting(events)) == result.flows
    got: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in events:
        if e["ph"] == "X" and e["cat"] == "kernel":
            got[e["name"]][0] += 1
            got[e["name"]][1] += ns(e["dur"])
    assert dict(got) == dict(want)
