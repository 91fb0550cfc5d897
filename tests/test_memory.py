"""`profkit memory` on real torch.profiler(profile_memory=True) captures of a GPT training loop
(tests/data/memory, made by scripts/make_memory_fixtures.sh on the CPU: the host allocator).

Truths come from the trace's own JSON ('[memory]' events: Total Allocated after each event) and
from what the program planted and printed (MEM_TRUTH: the leaked tensor's bytes, the function
that keeps it, the parameters' bytes from the model itself), never from profkit's code.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profkit.analysis.memory import BEFORE_TRACE, memory_report
from profkit.readers import open_trace

DATA = Path(__file__).parent / "data" / "memory"
PLAIN = DATA / "gpt_memory.json.gz"
LEAK = DATA / "gpt_memory_leak.json.gz"


def planted(trace: Path) -> dict:
    line = next(x for x in trace.with_name(trace.name.replace(".json.gz", ".stdout")).read_text().splitlines()
                if x.startswith("MEM_TRUTH "))
    return json.loads(line.split(" ", 1)[1])


def raw_memory(trace: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time ns, bytes, total allocated) of the host allocator's events, straight from the JSON."""
    events = json.load(gzip.open(trace))["traceEvents"]
    rows = sorted((round(e["ts"] * 1000), e["args"]["Bytes"], e["args"]["Total Allocated"]) for e in events
                  if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0)
    return tuple(np.array(c, dtype=np.int64) for c in zip(*rows))


def raw_ranges(trace: Path, name: str) -> list[tuple[int, int]]:
    events = json.load(gzip.open(trace))["traceEvents"]
    return sorted((round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events
                  if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(name))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profkit", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def reports() -> dict[Path, dict]:
    out = {}
    for path in (PLAIN, LEAK):
        with open_trace(path) as trace:
            out[path] = memory_report(trace)
    return out


@pytest.mark.parametrize("path", [PLAIN, LEAK], ids=["plain", "leak"])
def test_each_steps_peak_is_the_highest_total_allocated_the_json_records_in_it(reports, path) -> None:
    (host,) = reports[path]["devices"]
    assert host["device"] == -1
    t, size, total = raw_memory(path)
    # the steps are the trace's own step ranges: their CPU times, to the nanosecond
    windows = {(s["index"], s["phase"]) for s in host["steps"]}
    assert len(windows) == len(raw_ranges(path, "ProfilerStep#"))
    steps_json = json.loads(cli("steps", path, "--format", "json").stdout)
    cpu = {s["index"]: (s["cpu_start_ns"], s["cpu_end_ns"]) for s in steps_json["steps"]}
    assert sorted(cpu.values()) in (raw_ranges(path, "ProfilerStep#"), raw_ranges(path, "train_step"))
    for step in host["steps"]:
        lo, hi = cpu[step["index"]]
        before = total[t < lo]
        level = int(before[-1]) if len(before) else int(total[0] - size[0])
        inside = total[(t >= lo) & (t < hi)]
        assert step["start_allocated_bytes"] == level
        assert step["peak_allocated_bytes"] == max([level, *inside.tolist()])
        after = total[t < hi]
        assert step["end_allocated_bytes"] == int(after[-1])


@pytest.mark.parametrize("path", [PLAIN, LEAK], ids=["plain", "leak"])
def test_what_holds_the_peak_adds_up_to_it(reports, path) -> None:
    (host,) = reports[path]["devices"]
    peak = host["peak"]["allocated_bytes"]
    assert peak == max(s["peak_allocated_bytes"] for s in host["steps"])
    assert sum(p["bytes"] for p in host["held_by_phase"]) == peak
    before = sum(p["bytes"] for p in host["held_by_phase"] if p["part"] == BEFORE_TRACE)
    # torch's host allocator counts only the blocks it saw while recording (the first event's
    # Total Allocated is its own Bytes), so on the CPU nothing is "allocated before the trace":
    # the parameters (MEM_TRUTH) made earlier are not in its totals at all
    t, size, total = raw_memory(path)
    assert total[0] == size[0] and before == 0
    assert {p["part"] for p in host["held_by_phase"]} <= {"forward", "backward", "optimizer step", "other"}
    assert sum(s["bytes"] for s in host["held_by_site"]) <= peak


def test_the_planted_leak_is_named_with_its_function_and_size(reports) -> None:
    (host,) = reports[LEAK]["devices"]
    truth = planted(LEAK)
    growth = host["growth"]
    assert growth["leaking"]
    assert growth["growth_per_step_bytes"] == truth["leak_bytes_per_step"]
    top = growth["sites"][0]
    assert top["bytes_per_step"] == truth["leak_bytes_per_step"]
    # the innermost frame is the planted function, or a built-in it called (torch.empty), named with it
    assert top["function"] == truth["leak_function"] or top["function"].endswith(f"called from {truth['leak_function']}")
    assert top["file"] == truth["leak_site"].split(":")[0]
    # the step-end levels from the raw JSON grow by exactly the planted tensor per steady step
    ends = np.array(growth["end_allocated_bytes"])
    assert set(np.diff(ends).tolist()) == {truth["leak_bytes_per_step"]}


def test_the_same_loop_without_the_leak_is_not_called_leaking(reports) -> None:
    (host,) = reports[PLAIN]["devices"]
    assert not host["growth"]["leaking"]
    assert host["growth"]["sites"] == []
    assert set(np.diff(host["growth"]["end_allocated_bytes"]).tolist()) == {0}


def test_cli_says_it_in_words_and_json_equals_the_api(reports) -> None:
    out = cli("memory", LEAK)
    assert out.returncode == 0, out.stderr
    assert "leaking" in out.stdout and "main (gpt_memory.py)" in out.stdout
    as_json = json.loads(cli("memory", LEAK, "--format", "json").stdout)
    assert as_json == json.loads(json.dumps(reports[LEAK]))


def test_a_trace_without_allocator_events_gets_one_line_and_exit_2() -> None:
    out = cli("memory", Path(__file__).parent / "data" / "kineto" / "mlp_print.json.gz")
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "profile_memory=True" in out.stderr


def test_the_report_has_a_memory_section_and_its_findings(tmp_path) -> None:
    out = cli("report", LEAK, "-o", tmp_path / "r")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    text = json.dumps(report)
    assert "Memory (host allocator): leaking" in text
    assert "Memory" in (tmp_path / "r" / "report.md").read_text()


# -- PyTorch memory snapshots (tests/data/memory/cs336_snapshots: a CS336 student's program) -----
SNAPSHOTS = DATA / "cs336_snapshots"


def snapshot(name: str) -> Path:
    from tests.conftest import _decompressed

    return _decompressed(SNAPSHOTS / f"{name}.pickle.xz")


def raw_snapshot(path: Path) -> dict:
    import pickle

    return pickle.loads(path.read_bytes())  # the test's own reading of a committed, trusted file


def allocated_series(snap: dict) -> tuple[np.ndarray, np.ndarray]:
    """(time ns, bytes allocated after each alloc / free_completed), ending at the dump's state:
    the active blocks of the segments."""
    events = [e for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_completed")]
    change = np.array([e["size"] if e["action"] == "alloc" else -e["size"] for e in events], dtype=np.int64)
    at_dump = sum(b["size"] for s in snap["segments"] for b in s["blocks"]
                  if b["state"] in ("active_allocated", "active_pending_free"))
    return (np.array([e["time_us"] * 1000 for e in events], dtype=np.int64),
            at_dump - int(change.sum()) + np.cumsum(change))


@pytest.mark.parametrize("name", ["medium_128_training", "medium_128_inference"])
def test_a_snapshots_peak_and_segments_are_its_own(name) -> None:
    path = snapshot(name)
    snap = raw_snapshot(path)
    t, allocated = allocated_series(snap)
    report = json.loads(cli("memory", path, "--format", "json").stdout)
    (gpu,) = report["devices"]
    assert gpu["peak"]["allocated_bytes"] == int(allocated.max())  # to the byte
    assert gpu["peak"]["time_ns"] == int(t[np.argmax(allocated)])
    assert gpu["at_dump"]["reserved_bytes"] == sum(s["total_size"] for s in snap["segments"])
    assert gpu["largest_free_block_bytes"] == max(b["size"] for s in snap["segments"] for b in s["blocks"]
                                                  if b["state"] == "inactive")
    assert sum(p["bytes"] for p in gpu["held_by_phase"]) == gpu["peak"]["allocated_bytes"]
    assert gpu["steps"] == [] and report["oom"] == []


def test_a_snapshots_sites_are_its_own_file_and_line_and_the_optimizer_step_is_named() -> None:
    path = snapshot("medium_128_training")
    snap = raw_snapshot(path)
    (gpu,) = json.loads(cli("memory", path, "--format", "json").stdout)["devices"]
    peak_ns = gpu["peak"]["time_ns"]
    # the blocks alive at the peak, from the raw history: allocated at or before it, not freed by then
    live: dict[int, dict] = {}
    for e in snap["device_traces"][0]:
        if e["time_us"] * 1000 > peak_ns:
            break
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    site = gpu["held_by_site"][0] if not gpu["held_by_site"][0]["site"].startswith("no Python") \
        else gpu["held_by_site"][1]
    file, line = site["file"], int(site["site"].rsplit(":", 1)[1].rstrip(")"))

    def innermost_user_frame(frames):
        python = [f for f in frames if f["filename"].endswith(".py") and f["line"] > 0]
        user = [f for f in python if "site-packages/" not in f["filename"]]
        return (user or python or [None])[0]

    raw = sum(e["size"] for e in live.values()
              if (f := innermost_user_frame(e["frames"])) and (f["filename"], f["line"]) == (file, line))
    assert site["bytes"] == raw
    (start,) = [a["time_us"] for a in snap["external_annotations"] if a["stage"] == "START"]
    (end,) = [a["time_us"] for a in snap["external_annotations"] if a["stage"] == "END"]
    in_step = sum(e["size"] for e in live.values() if start <= e["time_us"] < end)
    assert {p["part"]: p["bytes"] for p in gpu["held_by_phase"]}["optimizer step"] == in_step > 0


def test_a_pickle_that_would_run_code_is_refused_before_anything_runs(tmp_path) -> None:
    """A hand-built hostile pickle (bad input): unpickling it with pickle.load would create a file."""
    import os
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    hostile = tmp_path / "snapshot.pickle"
    hostile.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Payload()]]}))
    out = cli("memory", hostile)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "refused" in out.stderr and not marker.exists()


@pytest.mark.parametrize("content", [b"\x80\x04\x95", pytest.param(None, id="truncated"),
                                     __import__("pickle").dumps([1, 2, 3])], ids=["stub", "truncated", "a-list"])
def test_a_damaged_or_foreign_pickle_gets_one_line(tmp_path, content) -> None:
    """Hand-built bad inputs: a pickle header alone, a real snapshot cut in half, a pickled list."""
    if content is None:
        content = snapshot("medium_128_inference").read_bytes()[:500_000]
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(content)
    out = cli("memory", bad)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_past_the_attribution_cap_the_smaller_blocks_are_one_row_and_the_parts_still_add_up(monkeypatch) -> None:
    import profkit.analysis.memory as memory

    with open_trace(snapshot("medium_128_training")) as trace:
        whole = memory_report(trace)["devices"][0]
        monkeypatch.setattr(memory, "MAX_ATTRIBUTED", 5)
        capped = memory_report(trace)["devices"][0]
    assert capped["peak"] == whole["peak"]
    assert sum(p["bytes"] for p in capped["held_by_phase"]) == capped["peak"]["allocated_bytes"]
    sites = {s["site"]: s for s in capped["held_by_site"]}
    assert memory.SMALLER_BLOCKS in sites
    assert sites[memory.SMALLER_BLOCKS]["count"] > 0


def _snapshot_file(tmp_path: Path, history: list, segments: list | None = None) -> Path:
    """A hand-built snapshot (bad input): one device's history, and segments."""
    import pickle

    path = tmp_path / "crafted.pickle"
    path.write_bytes(pickle.dumps({"segments": segments or [], "device_traces": [history]}))
    return path


FRAMES = [{"filename": "x.py", "line": 3, "name": "f"}]


@pytest.mark.parametrize("history", [
    [{"action": "alloc", "addr": 1, "size": 2**62, "time_us": 1, "frames": FRAMES},
     {"action": "alloc", "addr": 2, "size": 2**62, "time_us": 2, "frames": FRAMES}],
    [{"action": "alloc", "addr": 1, "size": 5, "time_us": 2**62, "frames": FRAMES}],
    [{"action": "alloc", "addr": 1, "size": -1000, "time_us": 1, "frames": FRAMES},
     {"action": "free_completed", "addr": 1, "size": -1000, "time_us": 2, "frames": FRAMES}],
], ids=["sizes-past-int64", "time-past-int64", "negative-sizes"])
def test_impossible_sizes_and_times_are_skipped_never_wrapped(tmp_path, history) -> None:
    """Hand-built bad snapshots: no traceback, and no negative or wrapped byte count in any output."""
    out = cli("memory", _snapshot_file(tmp_path, history), "--format", "json")
    assert "Traceback" not in out.stderr
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (out.returncode, out.stderr)


def test_a_history_that_disagrees_with_its_segments_never_goes_below_zero(tmp_path) -> None:
    history = [{"action": "alloc", "addr": 1, "size": 5, "time_us": 1, "frames": FRAMES}]
    out = cli("memory", _snapshot_file(tmp_path, history, [{"device": 0, "total_size": 8, "blocks": None}]),
              "--format", "json")
    assert out.returncode == 0, out.stderr
    (gpu,) = json.loads(out.stdout)["devices"]
    assert gpu["peak"]["allocated_bytes"] == 5
    assert all(p["bytes"] >= 0 for p in gpu["held_by_phase"])


def test_kineto_memory_events_without_a_usable_total_are_skipped(tmp_path) -> None:
    """Hand-built bad input: the leak capture with its [memory] events' totals damaged."""
    doc = json.load(gzip.open(LEAK))
    damaged = 0
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]" and damaged < 50:
            e["args"]["Total Allocated"] = ["x", None, -5, 2**70, "1e400"][damaged % 5]
            damaged += 1
    bad = tmp_path / "damaged.json"
    bad.write_text(json.dumps(doc))
    out = cli("memory", bad, "--format", "json")
    assert out.returncode == 0, out.stderr
    (host,) = json.loads(out.stdout)["devices"]
    assert min(s["peak_allocated_bytes"] for s in host["steps"]) >= 0
    assert host["peak"]["allocated_bytes"] <= raw_memory(LEAK)[2].max()


def test_a_step_after_the_snapshots_record_is_left_out() -> None:
    """gpt_memory_leak.pickle's history ends before torch.profiler's last ProfilerStep#N begins
    (its annotations say when; no allocator event lies in it).  That step used to be listed as a
    steady step with 0 B growth beside "every steady step ends 256 KiB higher"."""
    from tests.conftest import _decompressed

    path = _decompressed(DATA / "cuda" / "gpt_memory_leak.pickle.xz")
    snap = raw_snapshot(path)
    last_event_us = max(e["time_us"] for trace in snap["device_traces"] for e in trace)
    starts = {a["name"]: a["time_us"] for a in snap["external_annotations"]
              if a["stage"] == "START" and a["name"].startswith("ProfilerStep#")}
    after = sorted(int(name.rpartition("#")[2]) for name, t in starts.items() if t > last_event_us)
    assert after, "the fixture has a step after its record"
    with open_trace(path) as trace:
        device = memory_report(trace)["devices"][0]
    assert device["unrecorded_steps"] == after
    listed = [s["index"] for s in device["steps"]]
    assert not set(after) & set(listed) and listed
    steady = [s for s in device["steps"] if s["phase"] == "steady"]
    assert all(s["growth_bytes"] > 0 for s in steady)  # the leak's every step, none at 0 B


def test_each_input_without_memory_is_told_how_its_kind_records_it(tmp_path) -> None:
    """The hint follows the input: an nsys export without memory data is told nsys's option, a
    memory snapshot given to the report is told to use profkit memory (the report cannot read one)."""
    from tests.conftest import _decompressed, nsys_fixture

    nsys = cli("memory", nsys_fixture("nsys2025_gelu"))
    assert nsys.returncode == 2 and "--cuda-memory-usage=true" in nsys.stderr and "torch.profiler" not in nsys.stderr
    snapshot = _decompressed(DATA / "cuda" / "gpt_memory.pickle.xz")
    report = cli("report", snapshot, "-o", tmp_path / "report")
    assert report.returncode == 2 and len(report.stderr.strip().splitlines()) == 1
    assert "memory snapshot" in report.stderr and f"profkit memory {snapshot.name}" in report.stderr


def test_a_trace_keeps_its_steps_without_allocator_events() -> None:
    """An nsys --cuda-memory-usage trace of a healthy loop calls cudaMalloc at start-up only: its
    later steps hold no allocator event and are steps all the same (only a snapshot's history ends
    where its record does).  The steps are the export's own NVTX ranges."""
    import sqlite3

    from profkit.analysis.memory import step_peaks
    from tests.conftest import _decompressed

    export = _decompressed(DATA / "cuda" / "gpt_memory_nsys.sqlite.xz")
    with open_trace(export) as trace:
        device = memory_report(trace)["devices"][0]
    from profkit.analysis.steps import find_steps

    with sqlite3.connect(export) as db:
        last_malloc = db.execute("SELECT max(start) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchone()[0]
        kernels_after = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start > ?",
                                   (last_malloc,)).fetchone()[0]
    assert kernels_after > 0  # the loop runs on after its last cudaMalloc
    with open_trace(export) as trace:
        found = len(find_steps(trace).steps)
        assert len(step_peaks(trace)["devices"][0]["steps"]) == found
    assert not device.get("unrecorded_steps") and len(device["steps"]) == found >= 3
    # the snapshot's stale step is left out of the peaks a diff or the history compares, too
    snap = _decompressed(DATA / "cuda" / "gpt_memory_leak.pickle.xz")
    with open_trace(snap) as trace:
        left_out = memory_report(trace)["devices"][0]["unrecorded_steps"]
        peaks = step_peaks(trace)["devices"][0]["steps"]
    assert left_out and not {s["index"] for s in peaks} & set(left_out)
