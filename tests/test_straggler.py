"""The straggler and what makes it late, on the real 2-rank DDP captures (tests/data/ddp, see its README):
rank 1 runs an extra 30 ms ``spin_kernel`` per step, so rank 0 waits for it in the all-reduce.

Oracles come from the raw files: which kernel only one rank runs (SQL over each export's kernel table,
or the Kineto JSON's kernel events), and its time per instance."""

from __future__ import annotations

import gzip
import json
import sqlite3
import statistics
from pathlib import Path

import pytest

from tests.conftest import DATA, _decompressed

DDP = DATA / "ddp"
# (folder, files): per-rank nsys exports, one export of the whole job, per-rank torch.profiler traces
INPUTS = {
    "kineto_slow": ["kineto_slow/rank0.json.gz", "kineto_slow/rank1.json.gz"],
    "nsys_slow": ["nsys_slow/rank0.sqlite.xz", "nsys_slow/rank1.sqlite.xz"],
    "whole2": ["whole2/whole.sqlite.xz"],
}
CASES = ["kineto_slow", pytest.param("nsys_slow", marks=pytest.mark.slow),
         pytest.param("whole2", marks=pytest.mark.slow)]


def paths(case: str) -> list[Path]:
    return [_decompressed(DDP / f) if f.endswith(".xz") else DDP / f for f in INPUTS[case]]


_summaries: dict[str, list[dict]] = {}


def summaries(case: str) -> list[dict]:
    from profkit.api import ranks_json

    if case not in _summaries:
        _summaries[case] = ranks_json(paths(case), scheduler="threads")
    return _summaries[case]


def kernels_of_one_rank_only(case: str) -> dict[str, list[int]]:
    """Kernel name -> its durations (ns), for the kernels that only one rank (file, or GPU of the
    whole-job export) runs: from the raw rows, not through profkit."""
    names: list[dict[str, list[int]]] = []
    for path in paths(case):
        if path.name.endswith(".json.gz"):
            with gzip.open(path) as f:
                events = json.load(f)["traceEvents"]
            per: dict[str, list[int]] = {}
            for e in events:
                if e.get("cat") == "kernel" and e.get("ph") == "X":
                    per.setdefault(e["name"], []).append(round(e["dur"] * 1000))
            names.append(per)
            continue
        with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
            rows = db.execute("SELECT k.deviceId, s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                              "JOIN StringIds s ON s.id = k.demangledName").fetchall()
        for device in sorted({r[0] for r in rows}):
            per = {}
            for d, name, ns in rows:
                if d == device:
                    per.setdefault(name, []).append(ns)
            names.append(per)
    assert len(names) == 2
    return {n: ns for i, per in enumerate(names) for n, ns in per.items() if n not in names[1 - i]}


@pytest.mark.parametrize("case", CASES)
def test_the_gpu_cause_is_the_kernel_only_the_straggler_runs(case: str) -> None:
    from profkit.analysis.ranks import straggler
    from profkit.api import rank_table_json

    only_one = kernels_of_one_rank_only(case)
    (kernel, durations), = only_one.items()  # the oracle: exactly one kernel only one rank runs
    assert "spin_kernel" in kernel

    found = straggler(summaries(case))
    assert found["rank"] == 1 and found["cause"] == "GPU compute"
    culprit = found["culprit"]
    assert culprit["kind"] == "kernel" and culprit["name"] == "spin_kernel" and culprit["full_name"] == kernel
    assert culprit["only_straggler"] and culprit["others_ns_per_step"] == 0
    # one 30 ms spin per step: its time per steady step is one instance's
    assert culprit["ns_per_step"] == pytest.approx(statistics.mean(durations), rel=0.02)
    (wait,) = found["waits"]
    assert wait["rank"] == 0 and culprit["excess_ns_per_step"] >= 0.9 * wait["wait_per_step_ns"]

    rows = rank_table_json(summaries(case))  # what `profkit ranks --format json` prints
    assert [r["straggler"] for r in rows] == [False, True]
    assert rows[0]["wait_per_step_ns"] == wait["wait_per_step_ns"] and rows[1]["wait_per_step_ns"] == 0
    sentence = rows[1]["straggler_evidence"]
    assert sentence.startswith("Rank 1 is the straggler: ") and "on its GPU in spin_kernel" in sentence
    assert "rank 0 waits" in sentence and rows[0]["straggler_evidence"] is None


def test_ranks_table_and_csv_name_the_straggler() -> None:
    import csv
    import io

    from click.testing import CliRunner

    from profkit.cli import cli

    folder = str(DDP / "kineto_slow")
    table = CliRunner().invoke(cli, ["ranks", folder, "--scheduler", "threads"], env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert "Straggler" in table.output
    sentences = [line for line in table.output.splitlines() if "straggler" in line.lower() and "Rank" in line]
    assert any(line.startswith("Rank 1 is the straggler:") for line in sentences)
    assert "No straggler" not in table.output
    out = CliRunner().invoke(cli, ["ranks", folder, "--scheduler", "threads", "--format", "csv"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output[out.output.index("rank,"):])))
    assert [(r["rank"], r["straggler"]) for r in rows] == [("0", "False"), ("1", "True")]
    assert "spin_kernel" in rows[1]["straggler_evidence"] and float(rows[0]["wait_per_step_ns"]) > 25e6


@pytest.mark.parametrize("case", ["kineto_slow", "kineto"])
def test_the_report_says_it_once_and_never_no_straggler_beside_it(case: str) -> None:
    from profkit.analysis.ranks.cross_rank import cross_rank
    from profkit.api import ranks_json
    from profkit.report.ranks import ranks_findings, straggler_sentence

    data = ranks_json([DDP / case / f"rank{r}.json.gz" for r in (0, 1)], scheduler="threads")
    job = cross_rank(data)
    findings = ranks_findings(job)
    named = [f for f in findings if "is the straggler" in f]
    assert named == [straggler_sentence(job["straggler"], 2)]
    assert not any(f.startswith("No straggler") for f in findings)
    if case == "kineto":  # no planted slowdown: rank 0's host lags, and no one cost explains it
        assert job["straggler"]["rank"] == 0 and job["straggler"]["culprit"] is None
        assert "on its host" in named[0] or "delay is on its host" in named[0]


# -- phases: one plan for every rank ---------------------------------------------------------

def test_phase_plan_takes_the_longest_warmup_and_spreads_teardown() -> None:
    from profkit.analysis.steps.job_phases import TEARDOWN, phase_plan

    w, s = "warmup", "steady"
    assert phase_plan([[w, s, s, s], [w, w, s, s]]) == [w, w, s, s]
    assert phase_plan([[s, s, TEARDOWN], [s, s, s]]) == [s, s, TEARDOWN]
    assert phase_plan([[s, s, s], [s, s]]) == [s, s, TEARDOWN]  # rank 1 never reached step 2
    assert phase_plan([]) == []


def test_report_and_per_rank_steps_agree_on_every_phase() -> None:
    """The cross-rank report's phase of each step is what each rank's steps say under the job's plan;
    a planted disagreement (rank 1 calling step 1 warm-up too, hand-built from its real phases) moves
    step 1 to warm-up on both."""
    from profkit.analysis.ranks.cross_rank import aligned_steps
    from profkit.analysis.ranks.culprit import job_plan
    from profkit.analysis.steps import find_steps
    from profkit.analysis.steps.job_phases import job_steps, with_job_phases
    from profkit.readers import open_trace

    data = summaries("kineto_slow")
    plan = job_plan(data)
    report_phases = [row["phase"] for row in aligned_steps(data)]
    assert report_phases == plan
    with open_trace(DDP / "kineto_slow" / "rank0.json.gz") as r0, \
            open_trace(DDP / "kineto_slow" / "rank1.json.gz") as r1:
        for own in job_steps([r0, r1]):
            assert own.steps["phase"].tolist() == plan
    planted = [dict(d, step_table=[dict(s) for s in d["step_table"]]) for d in data]
    planted[1]["step_table"][1]["phase"] = "warmup"
    moved = job_plan(planted)
    assert moved[:2] == ["warmup", "warmup"] and [row["phase"] for row in aligned_steps(planted)] == moved
    with open_trace(DDP / "kineto_slow" / "rank0.json.gz") as trace:
        own = find_steps(trace)
        mine = with_job_phases(own, moved)
    assert mine.steps["phase"].tolist() == moved
    assert mine.summary["steady_count"] == own.summary["steady_count"] - 1


# -- the host-cause path: its pieces on the real Llama capture (no 2-rank capture with stacks here) -----

def test_a_host_cost_only_the_straggler_has_is_named_to_the_line() -> None:
    """The straggler's host costs are the real ones of the Llama capture with its planted 5 ms sleep;
    the other rank's are the same rows without the sleep (hand-built from the real ones: no 2-rank
    capture with Python stacks exists here).  The cause is the sleep, named with its caller's line."""
    from profkit.analysis.ranks.culprit import HOST, _host_costs, find_culprit
    from profkit.readers import open_trace
    from profkit.report.ranks import straggler_sentence

    with open_trace(DATA / "host" / "kineto" / "llama_train_kineto.json.gz") as trace:
        host = _host_costs(trace)
    sleep = [r for r in host["rows"] if r["name"] == "sleep (built-in) called from planted_host_work (hf_llama.py:43)"]
    assert len(sleep) == 1 and 4.9e6 <= sleep[0]["ns_per_step"] <= 5.5e6
    without_sleep = {"rows": [r for r in host["rows"] if r is not sleep[0]], "cut": host["cut"]}
    slow = {"rank": 1, "costs": {"kernels": None, "host": host, "sync": None}}
    other = {"rank": 0, "costs": {"kernels": None, "host": without_sleep, "sync": None}}
    culprit = find_culprit(slow, [other], bar=sleep[0]["ns_per_step"])
    assert culprit["kind"] == HOST and culprit["name"] == sleep[0]["name"]
    assert culprit["excess_ns_per_step"] == pytest.approx(sleep[0]["ns_per_step"], rel=0.05)
    said = straggler_sentence({"rank": 1, "culprit": culprit, "cause": "host", "compute_per_step_ns": 0,
                               "waits": [{"rank": 0, "wait_per_step_ns": 5.2e6}]}, 2)
    assert said.startswith("Rank 1 is the straggler: ")
    assert "of every step on its host in sleep (built-in) called from planted_host_work (hf_llama.py:43)" in said
    # the same rows on both ranks: nothing in excess, no culprit
    assert find_culprit(slow, [{"rank": 0, "costs": slow["costs"]}], bar=5e6) is None


def test_a_planted_sync_line_is_named_between_two_real_runs() -> None:
    """The join on two real runs of one GPU-bound MLP loop (tests/data/kineto/review): one prints
    ``loss.item()`` every step (``--print-loss``), the other does not.  They are two runs, not two ranks
    of a job (no collective to wait in), so ``find_culprit`` is asked directly, with the step time they
    differ by as the bar; the raw JSON's ``item`` built-ins are the oracle."""
    from profkit.analysis.ranks.culprit import HOST, find_culprit
    from profkit.ranks.per_rank import summarize_trace
    from profkit.readers import open_trace

    review = DATA / "kineto" / "review"
    runs = {}
    for name in ("mlp_gpu_print", "mlp_gpu_noprint"):
        with open_trace(review / f"{name}.json.gz") as trace:
            runs[name] = summarize_trace(trace)
        with gzip.open(review / f"{name}.json.gz") as f:
            events = json.load(f)["traceEvents"]
        frames = {e["args"]["Python id"]: e["name"] for e in events if e.get("cat") == "python_function"}
        # loss.item() in the loop: an item built-in whose Python parent is train_mlp.py's main
        items = [e for e in events if e.get("cat") == "python_function"
                 and e["name"].startswith("<built-in method item of Tensor object")
                 and frames.get(e["args"].get("Python parent id"), "").startswith("train_mlp.py(")]
        steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        assert len(items) == (len(steps) if name == "mlp_gpu_print" else 0)
        runs[name]["item_ns"] = statistics.mean(e["dur"] * 1000 for e in items) if items else 0.0
    late, other = runs["mlp_gpu_print"], runs["mlp_gpu_noprint"]
    slower_by = late["step_median_ns"] - other["step_median_ns"]
    assert slower_by > 0
    culprit = find_culprit(late, [other], bar=slower_by)
    assert culprit["kind"] == HOST and culprit["only_straggler"]
    assert culprit["name"].startswith("Tensor.item (built-in) called from main (train_mlp.py:")
    assert culprit["ns_per_step"] == pytest.approx(late["item_ns"], rel=0.05)
    assert culprit["excess_ns_per_step"] >= slower_by


def test_without_python_stacks_a_host_sleep_is_its_os_call() -> None:
    """nsys2025_mlp_sleep (train_slow_loader.py --sleep-ms 5, OS runtime traced, no Python sampling):
    the step thread's clock_nanosleep per steady step is one planted sleep (SQL: the calls' mean).  The
    other rank's costs are the same rows without it (hand-built from the real ones)."""
    from profkit.analysis.ranks.culprit import OS, _os_costs, find_culprit
    from profkit.readers import open_trace
    from profkit.report.ranks import straggler_sentence
    from tests.conftest import nsys_fixture

    from profkit.analysis.steps import find_steps

    path = nsys_fixture("nsys2025_mlp_sleep")
    with open_trace(path) as trace:
        os_costs = _os_costs(trace)
        steady = find_steps(trace).steady
    first, last = int(steady["start_ns"].iloc[0]), int(steady["end_ns"].iloc[-1])
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        sql = ("SELECT {} FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
               "WHERE s.value = 'clock_nanosleep' AND o.start >= ? AND o.end <= ?")
        (mean_sleep,) = db.execute(sql.format("avg(o.end - o.start)"), (first, last)).fetchone()
        (in_steady,) = db.execute(sql.format("sum(o.end - o.start)"), (first, last)).fetchone()
    assert 4.9e6 < mean_sleep < 5.6e6
    (sleep,) = [r for r in os_costs["rows"] if r["name"] == "clock_nanosleep"]
    # each step's sleep comes before its first GPU operation, so the first steady step's lies in the
    # warm-up step before it: 18 sleeps in 19 steady steps
    assert sleep["ns_per_step"] == pytest.approx(in_steady / len(steady), rel=1e-3)
    other = {"rows": [r for r in os_costs["rows"] if r is not sleep], "cut": os_costs["cut"]}
    culprit = find_culprit({"costs": {"os": os_costs}}, [{"costs": {"os": other}}], bar=mean_sleep)
    assert culprit["kind"] == OS and culprit["name"] == "clock_nanosleep"
    said = straggler_sentence({"rank": 1, "culprit": culprit, "cause": "host", "compute_per_step_ns": 0,
                               "waits": [{"rank": 0, "wait_per_step_ns": mean_sleep}]}, 2)
    assert "of every step on its host in the OS call clock_nanosleep (rank 0 waits" in said
