"""Peak memory in `profkit diff` and `profkit history` (#33), on the real GPT captures of
tests/data/memory: the loop as it is against the loop that keeps one 256 KiB tensor per step.

Truths: the ``MEM_TRUTH`` lines the program printed under the capture (each step's
``torch.cuda.max_memory_allocated``/``max_memory_reserved`` after a reset at the step's start, the
leaked bytes per step), never profkit's own figures.  "One side without memory" is the same
capture with its allocator events taken out.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from profkit.analysis.compare.memory import HIGHER, LOWER, memory_diff, peak_change, run_peaks
from profkit.analysis.compare.noise import NO_CHANGE
from profkit.cli import cli
from profkit.errors import ProfkitError
from profkit.output import parse_bytes
from profkit.readers import open_trace

ROOT = Path(__file__).resolve().parents[1]
MEMORY = ROOT / "tests" / "data" / "memory"
PLAIN, LEAK = MEMORY / "cuda" / "gpt_memory.json.gz", MEMORY / "cuda" / "gpt_memory_leak.json.gz"
HOST_PLAIN, HOST_LEAK = MEMORY / "gpt_memory.json.gz", MEMORY / "gpt_memory_leak.json.gz"


def planted(trace: Path) -> dict:
    stdout = trace.with_name(trace.name.removesuffix(".json.gz") + ".stdout")
    line = next(x for x in stdout.read_text().splitlines() if x.startswith("MEM_TRUTH "))
    return json.loads(line.split(" ", 1)[1])


def truth_medians(trace: Path) -> tuple[float, float]:
    """The program's own per-step peaks (allocated, reserved), as medians."""
    t = planted(trace)
    return float(np.median(t["step_peak_allocated_bytes"])), float(np.median(t["step_peak_reserved_bytes"]))


@pytest.fixture(scope="module")
def no_memory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plain loop's capture with its allocator events ("[memory]") taken out: what
    torch.profiler writes without profile_memory=True."""
    with gzip.open(PLAIN, "rt") as fh:
        data = json.load(fh)
    kept = [e for e in data["traceEvents"] if e.get("name") != "[memory]"]
    assert len(kept) < len(data["traceEvents"])
    out = tmp_path_factory.mktemp("nomem") / "gpt_memory_nomem.json.gz"
    with gzip.open(out, "wt") as fh:
        json.dump({**data, "traceEvents": kept}, fh)
    return out


def diff(*args: object) -> object:
    return CliRunner().invoke(cli, ["diff", *map(str, args)])


def diff_json(base: Path, new: Path) -> dict:
    result = diff(base, new, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- diff: the figures -------------------------------------------------------------------------------------


def test_the_leaks_median_peaks_are_the_programs_own_and_higher() -> None:
    memory = diff_json(PLAIN, LEAK)["memory"]
    (gpu,) = memory["devices"]
    assert gpu["device"] == 0 and gpu["label"] == "GPU 0"
    (base_alloc, base_res), (new_alloc, new_res) = truth_medians(PLAIN), truth_medians(LEAK)
    a, r = gpu["allocated"], gpu["reserved"]
    assert (a["base_median_bytes"], a["new_median_bytes"]) == (base_alloc, new_alloc)
    assert (r["base_median_bytes"], r["new_median_bytes"]) == (base_res, new_res)
    assert a["delta_bytes"] == new_alloc - base_alloc > 0
    assert a["base_steps"] == planted(PLAIN)["steps_recorded"] and a["new_steps"] == planted(LEAK)["steps_recorded"]
    # every leaked step peaks above every plain one: the interval excludes 0, and 1.4 MiB counts
    assert a["verdict"] == HIGHER and a["ci_low_pct"] > 0 and not a["exact"]
    assert memory["verdict"] == HIGHER and memory["note"] is None
    # reserved: the caching allocator grew a segment in the last step only; the median did not move
    assert r["verdict"] == NO_CHANGE and r["delta_bytes"] == 0


def test_the_other_way_round_is_lower() -> None:
    (gpu,) = diff_json(LEAK, PLAIN)["memory"]["devices"]
    assert gpu["allocated"]["verdict"] == LOWER
    assert gpu["allocated"]["delta_bytes"] == truth_medians(PLAIN)[0] - truth_medians(LEAK)[0]


def test_identical_peaks_are_an_exact_no_change_without_a_test() -> None:
    (gpu,) = diff_json(PLAIN, PLAIN)["memory"]["devices"]
    for figure in ("allocated", "reserved"):
        c = gpu[figure]
        assert c["exact"] and c["verdict"] == NO_CHANGE and c["delta_bytes"] == 0
        assert c["ci_low_pct"] is None and c["p_value"] is None


def test_a_constant_difference_is_a_change_when_it_reaches_the_threshold() -> None:
    """Zero variance on both sides: no interval to compute, the difference itself decides, with
    1 MiB or 1% (whichever is smaller) as what counts; even two steps a side get a verdict."""
    peaks = np.array(planted(PLAIN)["step_peak_allocated_bytes"], dtype=float)
    assert np.ptp(peaks) == 0  # the plain loop peaks alike in every step
    grown = peak_change(peaks, peaks + (1 << 20))
    assert grown["exact"] and grown["verdict"] == HIGHER and grown["delta_bytes"] == 1 << 20
    assert "exact" in grown["why"] and "at least" in grown["why"]
    tiny = peak_change(peaks, peaks + 4096)
    assert tiny["exact"] and tiny["verdict"] == NO_CHANGE and "under" in tiny["why"]
    assert peak_change(peaks[:2], peaks[:2] - (2 << 20))["verdict"] == LOWER
    # a small run: 1% of it counts before 1 MiB does
    small = np.full(4, 1_000_000.0)
    assert peak_change(small, small + 20_000)["verdict"] == HIGHER


def test_the_host_allocator_is_compared_where_no_gpu_was_recorded() -> None:
    """The CPU captures record only the host allocator (device -1, no reserved bytes).  `diff` refuses
    them (no GPU kernels), so the library is asked; each leaked step peaks one tensor higher."""
    with open_trace(HOST_PLAIN) as plain, open_trace(HOST_LEAK) as leak:
        memory = memory_diff(plain, leak)
        peaks = run_peaks(leak)
    (host,) = memory["devices"]
    assert host["device"] == -1 and host["label"] == "host allocator" and host["reserved"] is None
    assert host["allocated"]["verdict"] == HIGHER
    assert set(np.diff(peaks.devices[0].allocated)) == {planted(HOST_LEAK)["leak_bytes_per_step"]}


# -- diff: the words ---------------------------------------------------------------------------------------


def test_text_markdown_and_csv_say_it() -> None:
    text = diff(PLAIN, LEAK)
    assert text.exit_code == 0, text.output
    [line] = [x for x in text.stdout.splitlines() if x.startswith("Peak memory")]
    assert line.startswith("Peak memory (GPU 0): higher — median per-step peak allocated 81.9 MiB → 83.3 MiB")
    md = diff(PLAIN, LEAK, "--format", "md").stdout
    assert "Peak memory (GPU 0): higher" in md
    assert md.index("Peak memory") < md.index("<details>")  # with the verdict, not folded away
    rows = csv.DictReader(io.StringIO(diff(PLAIN, LEAK, "--format", "csv").stdout))
    memory_rows = [r for r in rows if r["kind"] == "memory"]
    assert [r["status"] for r in memory_rows] == [HIGHER, NO_CHANGE]  # allocated, reserved
    base, new = truth_medians(PLAIN)[0], truth_medians(LEAK)[0]
    assert (float(memory_rows[0]["base"]), float(memory_rows[0]["new"])) == (base, new)
    assert memory_rows[0]["unit"] == "bytes"


def test_one_side_without_allocator_events_is_one_line(no_memory: Path) -> None:
    for base, new, has, lacks in ((no_memory, LEAK, "NEW", "BASE"), (LEAK, no_memory, "BASE", "NEW")):
        result = diff(base, new)
        assert result.exit_code == 0, result.output
        [line] = [x for x in result.stdout.splitlines() if "Peak memory" in x]
        assert f"only {has}" in line and f"{lacks} ({no_memory.name}) did not" in line
        memory = diff_json(base, new)["memory"]
        assert memory["devices"] == [] and memory["verdict"] == "unknown"


def test_neither_side_with_allocator_events_says_nothing(no_memory: Path) -> None:
    result = diff(no_memory, no_memory)
    assert result.exit_code == 0, result.output
    assert "Peak memory" not in result.stdout and "memory" not in result.stderr
    assert diff_json(no_memory, no_memory)["memory"] is None


# -- diff: the gate ----------------------------------------------------------------------------------------


def test_the_gate_fires_under_the_real_growth_and_not_over_it() -> None:
    grown = int(truth_medians(LEAK)[0] - truth_medians(PLAIN)[0])  # 1,441,792 B
    for size, code in (("1MiB", 1), ("1.4MB", 1), (str(grown - 1), 1),    # smaller than the growth
                       (str(grown), 0), ("1.5MB", 0), ("2MiB", 0), ("2GiB", 0)):  # as large or larger
        result = diff(PLAIN, LEAK, "--fail-on-memory-growth", size)
        assert result.exit_code == code, (size, result.output)
        if code:
            [reason] = result.stderr.strip().splitlines()
            assert reason.startswith("profkit: peak memory (GPU 0) grew") and f"{grown:,} B" in reason
        else:
            assert result.stderr == ""
    # less memory never fails it
    assert diff(LEAK, PLAIN, "--fail-on-memory-growth", "0").exit_code == 0
    assert diff(PLAIN, PLAIN, "--fail-on-memory-growth", "0").exit_code == 0


def test_the_gate_without_memory_on_a_side_is_an_error(no_memory: Path) -> None:
    result = diff(no_memory, LEAK, "--fail-on-memory-growth", "1MiB")
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("profkit: error: --fail-on-memory-growth: only NEW")
    neither = diff(no_memory, no_memory, "--fail-on-memory-growth", "1MiB")
    assert neither.exit_code == 2
    [line] = neither.stderr.strip().splitlines()
    assert "neither trace recorded allocator events" in line and "profile_memory=True" in line


@pytest.mark.parametrize("size", ["2gb", "-1MiB", "1.5B", "MiB", "", "1e9", "2 GiBs", "0x100"])
def test_a_bad_size_is_exit_2_and_one_line(size: str) -> None:
    done = subprocess.run([sys.executable, "-m", "profkit", "diff", str(PLAIN), str(LEAK), "--fail-on-memory-growth",
                           size], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("profkit: error: --fail-on-memory-growth:") and repr(size) in line
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_sizes_are_read_strictly() -> None:
    assert parse_bytes("2GiB") == 2 * 1024 ** 3
    assert parse_bytes("512MiB") == 512 * 1024 ** 2
    assert parse_bytes("100MB") == 100 * 1000 ** 2
    assert parse_bytes("0.1MB") == 100_000  # exactly, not 100000.00000000001
    assert parse_bytes("4096") == parse_bytes("4096B") == parse_bytes("4 KiB") == 4096
    with pytest.raises(ProfkitError, match="not a whole number of bytes"):
        parse_bytes("1.5B")


# -- history -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory, no_memory: Path) -> tuple[Path, list[str]]:
    """A run without memory first (its table has no memory columns yet), then plain, plain, leak, plain."""
    db = tmp_path_factory.mktemp("history") / "history.db"
    said = []
    for i, run in enumerate([no_memory, PLAIN, PLAIN, LEAK, PLAIN], start=1):
        result = CliRunner().invoke(cli, ["history", "add", str(run), "--db", str(db), "--label", f"run{i}",
                                          "--commit", f"{i:040x}"])
        assert result.exit_code == 0, result.output
        said.append(result.stdout.strip())
    return db, said


def test_history_add_stores_the_median_peaks(history_db: tuple[Path, list[str]]) -> None:
    db, said = history_db
    assert "peak memory" not in said[0]
    assert said[1].endswith("peak memory 81.9 MiB allocated, 84.0 MiB reserved (median per step)")
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT peak_allocated_bytes, peak_reserved_bytes, peak_allocated_samples "
                              "FROM runs ORDER BY id").fetchall()
    assert stored[0] == (None, None, None)
    assert stored[1][:2] == truth_medians(PLAIN) and stored[3][:2] == truth_medians(LEAK)
    assert json.loads(stored[3][2]) == planted(LEAK)["step_peak_allocated_bytes"]


def trend(db: Path, tmp_path: Path, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["history", "show", "--db", str(db), "--format", "json",
                                      "--plot", str(tmp_path / "trend.png"), *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_history_flags_the_leak_on_peak_memory_and_no_other(history_db: tuple[Path, list[str]],
                                                            tmp_path: Path) -> None:
    runs = trend(history_db[0], tmp_path, "--metric", "peak_memory")["runs"]
    assert [r["verdict"] for r in runs] == ["missing", "baseline", NO_CHANGE, HIGHER, NO_CHANGE]
    assert [r["label"] for r in runs if r["regression"]] == ["run4"]
    plain, leak = truth_medians(PLAIN)[0], truth_medians(LEAK)[0]
    assert [r["value_bytes"] for r in runs] == [None, plain, plain, leak, plain]
    assert runs[3]["baseline_bytes"] == plain and runs[3]["value_ns"] is None
    reserved = trend(history_db[0], tmp_path, "--metric", "peak_reserved")["runs"]
    assert [r["value_bytes"] for r in reserved[1:]] == [truth_medians(p)[1] for p in (PLAIN, PLAIN, LEAK, PLAIN)]
    assert not any(r["regression"] for r in reserved)  # the leak's median reserved peak is the plain one's


def test_history_show_prints_the_peak_columns(history_db: tuple[Path, list[str]], tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["history", "show", "--db", str(history_db[0]), "--format", "md",
                                      "--plot", str(tmp_path / "trend.png")])
    assert result.exit_code == 0, result.output
    header, _, *rows = [x for x in result.stdout.splitlines() if x.startswith("|")]
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[-2:] == ["Peak allocated", "Peak reserved"] and "Value (ns)" in cells
    assert [[c.strip() for c in r.strip("|").split("|")][-2:] for r in rows] == [
        ["", ""], ["81.9 MiB", "84.0 MiB"], ["81.9 MiB", "84.0 MiB"], ["83.3 MiB", "84.0 MiB"], ["81.9 MiB", "84.0 MiB"]]
    default = trend(history_db[0], tmp_path)["runs"]  # gpu_time: the peaks ride along in JSON
    assert default[3]["peak_allocated_bytes"] == truth_medians(LEAK)[0]
    assert default[3]["value_ns"] is not None and default[3]["value_bytes"] is None


def test_a_history_without_memory_shows_no_peak_columns(no_memory: Path, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    for _ in range(2):
        assert CliRunner().invoke(cli, ["history", "add", str(no_memory), "--db", str(db)]).exit_code == 0
    result = CliRunner().invoke(cli, ["history", "show", "--db", str(db), "--format", "md",
                                      "--plot", str(tmp_path / "t.png")])
    assert result.exit_code == 0 and "Peak" not in result.stdout and "Value (ns)" in result.stdout
    missing = trend(db, tmp_path, "--metric", "peak_memory")["runs"]
    assert [r["verdict"] for r in missing] == ["missing", "missing"]
