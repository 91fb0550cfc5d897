"""The GPU zoo (tests/data/zoo: programs with planted truths, captured on an H100 by
scripts/make_zoo.sh with nsys at graph and node level and with torch.profiler): every command's
figure against the truth from the export's own rows (SQL), the Kineto JSON, or what the program
planted and printed under that capture (tests/zoo/capture_truth.py, tests/zoo/truth.py; neither
imports profkit: tests/test_zoo.py checks both).

Where profkit's figure is wrong today the test is xfail(strict=True) with what is wrong (#30), so
it flips when the fix lands.  The invariants (tests/invariants.py) run on these captures too, in
tests/test_invariants.py (ids ``zoo/...``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.captures import readable
from tests.invariants import OUTPUTS, Outputs
from tests.zoo.capture_truth import ZOO_DATA, captures, export_truth, planted, steady_period_ms
from tests.zoo.truth import truth_of

CAPTURES = captures()
STEP_REL_TOL = 0.03
# Truths profkit does not reproduce yet: (program.level, check) -> what is wrong.
KNOWN_WRONG: dict[tuple[str, str], str] = {
    # nsys without profkit's launcher: a sync's line is known only from a Python sample taken while
    # it ran; these syncs are shorter than the 1 ms sample spacing (0.03-0.5 ms), so most have none
    # and stay "source unknown" (amp_bf16's, which block longer, are found)
    **{(f"{program}.{level}", "sync_line"): "most of its syncs are shorter than the sample spacing: no sample "
       "shows their line" for program in ("item_sync_sleep", "graphed_train") for level in ("graph", "node")},
}


def ident(program: str, level: str) -> str:
    return f"{program}.{level}"


def cases(check: str, wanted: tuple[str, ...] = (), levels: tuple[str, ...] = ("graph", "node", "kineto")) -> list:
    params = []
    for program, level, path in CAPTURES:
        if (wanted and program not in wanted) or level not in levels:
            continue
        key = ident(program, level)
        marks = [pytest.mark.slow]
        if (key, check) in KNOWN_WRONG:
            marks.append(pytest.mark.xfail(strict=True, reason=f"#30: {KNOWN_WRONG[key, check]}"))
        params.append(pytest.param(program, level, path, marks=marks, id=key))
    return params


def outputs(path: Path) -> Outputs:
    return OUTPUTS[readable(path)]


def steady_indices(out: Outputs) -> list[int]:
    return [i for i, step in enumerate(out.steps["steps"]) if step.get("phase") == "steady"]


def test_the_zoo_has_its_programs() -> None:
    """At least 12 programs, each captured by nsys and with its bare run beside it."""
    programs = {program for program, _, _ in CAPTURES}
    assert len(programs) >= 12, sorted(programs)
    for program in programs:
        assert (ZOO_DATA / program / f"{program}.bare.stdout").is_file()


@pytest.mark.parametrize("program, level, path", cases("step_count"))
def test_step_count(program: str, level: str, path: Path) -> None:
    """nsys: one step per "step" NVTX range; Kineto: one per ProfilerStep#N."""
    expected = len(export_truth(path).step_ranges) if level != "kineto" else truth_of(path).steps
    assert outputs(path).steps["summary"]["count"] == expected


@pytest.mark.parametrize("program, level, path", cases("step_median"))
def test_step_median(program: str, level: str, path: Path) -> None:
    """Each step lasts at least its GPU span (the program's own CUDA events around it) and at least
    the host's start-to-start interval (the "step" ranges by SQL; torch.profiler's ProfilerStep#N,
    which run from one prof.step() to the next): a GPU-bound loop's period is the first, a
    host-bound one's (a batch to wait for, a sleep, the loop's own work) the second.  The steady
    median against the median of that truth over the steps profkit calls steady; torch.profiler's
    steps are the program's last ones (its first two are the profiler's warm-up)."""
    out = outputs(path)
    steps = out.steps["steps"]
    assert len(planted(program, level).step_ms) - len(steps) == (2 if level == "kineto" else 0)
    expected = steady_period_ms(program, level, path, len(steps), steady_indices(out))
    assert out.steps["summary"]["median_ns"] / 1e6 == pytest.approx(expected, rel=STEP_REL_TOL)


@pytest.mark.parametrize("program, level, path", cases("per_step"))
def test_no_step_is_shorter_than_its_gpu_span(program: str, level: str, path: Path) -> None:
    """Step by step, not only the median: no steady step but the last (which has no next step to
    end at) is shorter than the program's CUDA events say its GPU work took -- less the time the
    program recorded its start event before the step's range (run at once on an idle GPU, the
    event begins its own span before the step does)."""
    out = outputs(path)
    own = planted(program, level).step_ms
    steps = out.steps["steps"]
    offset = len(own) - len(steps)
    lead = export_truth(path).event_lead_ns if level != "kineto" else [0] * len(steps)
    short = [(i, steps[i]["duration_ns"] / 1e6, own[i + offset]) for i in steady_indices(out)[:-1]
             if steps[i]["duration_ns"] / 1e6 < 0.99 * own[i + offset] - lead[i] / 1e6]
    assert not short


@pytest.mark.parametrize("program, level, path", cases("kernels", levels=("graph", "node")))
def test_kernel_count(program: str, level: str, path: Path) -> None:
    rows = outputs(path).json["kernels"]
    assert sum(row["instances"] for row in rows) == export_truth(path).kernels


@pytest.mark.parametrize("program, level, path", cases("graphs", levels=("graph", "node")))
def test_graph_replays_and_captures(program: str, level: str, path: Path) -> None:
    """Replays = cudaGraphLaunch calls; instantiations = cudaGraphInstantiate calls (SQL)."""
    truth, graphs = export_truth(path), outputs(path).json.get("graphs")
    if truth.graph_launches == 0:
        assert not graphs or not graphs.get("replays")
        return
    assert graphs["replays"] == truth.graph_launches
    assert graphs["instantiations"] == truth.graph_instantiations
    if level == "node":
        assert graphs["kernels_in_replays"] == truth.graph_node_kernels


@pytest.mark.parametrize("program, level, path", cases("final_sync", wanted=("final_sync",)))
def test_a_sync_after_the_loop_costs_no_step(program: str, level: str, path: Path) -> None:
    """The one sync lies after the last step: no stall row charges a step, and no finding prices it
    per step."""
    out = outputs(path)
    for row in out.json["stalls"]["rows"]:
        assert row["in_steps"] == 0 and row["per_step"]["gpu_idle_ns"] == 0, row
    assert not [f for f in out.findings if "per step" in f and "sync" in f.lower()]


@pytest.mark.parametrize("program, level, path", cases("final_sync_host", wanted=("final_sync",),
                                                      levels=("graph", "node")))
def test_a_sync_after_the_loop_is_no_steps_host_time(program: str, level: str, path: Path) -> None:
    """The host ran ahead of this GPU-bound loop: it launched every step, then waited in the final
    sync while the GPU ran the steady steps.  That wait (the sync call, from SQL: after the last
    step range ends) is no step's host time, and idle in it with the steps' work already queued is
    no sync's: the verdict names no blocking sync, as the truth says (sync idle per step 0)."""
    truth = export_truth(path)
    last_range_end = max(end for _, end in truth.step_ranges)
    assert truth.blocking_syncs and all(start >= last_range_end for _, start, _ in truth.blocking_syncs)
    host = outputs(path).json["host"]
    assert host["summary"]["host_windows"] == "cpu"
    sync_rows = [r for r in host["functions"] if r["function"] == "synchronize"]
    assert all(r["self_ns_per_step"] == 0 for r in sync_rows)
    assert host["verdict"]["parts_ns_per_step"]["sync"] == 0 and "sync" not in host["verdict"]["sentence"]


@pytest.mark.parametrize("program, level, path", cases("stream_wait", wanted=("stream_wait",)))
def test_a_stream_wait_is_charged_no_idle(program: str, level: str, path: Path) -> None:
    """cudaStreamWaitEvent never blocks the CPU: no GPU idle is charged to it."""
    rows = [r for r in outputs(path).json["stalls"]["rows"] if "StreamWaitEvent" in r["api"]]
    assert rows and all(r["gpu_idle_ns"] == 0 for r in rows)


@pytest.mark.parametrize("program, level, path",
                         cases("sync_line", wanted=("item_sync_sleep", "graphed_train", "amp_bf16")))
def test_the_planted_sync_line_leads_the_stalls(program: str, level: str, path: Path) -> None:
    """The planted per-step sync (an .item()) is the costliest stall in the steps, at its line."""
    plant = planted(program, level).plants["sync"]
    rows = [r for r in outputs(path).json["stalls"]["rows"] if r["in_steps"]]
    top = max(rows, key=lambda r: r["per_step"]["gpu_idle_ns"] + r["per_step"]["cpu_blocked_ns"])
    assert top["source"] is not None and f"{Path(top['source']).name}" == plant


@pytest.mark.parametrize("program, level, path", cases("no_wrong_line", wanted=("item_sync_sleep", "graphed_train",
                                                                               "amp_bf16"), levels=("graph", "node")))
def test_no_sync_in_the_steps_is_pinned_to_another_line(program: str, level: str, path: Path) -> None:
    """From nsys's Python samples a sync gets a line only where a sample fell inside the call: each
    sync of the steps with a line in the program's own file is at the planted line, never at the
    line sampled before or after it."""
    plant = planted(program, level).plants["sync"]
    mine = [Path(r["source"]).name for r in outputs(path).json["stalls"]["rows"]
            if r["in_steps"] and r["source"] and Path(r["source"]).name.startswith(f"{program}.py:")]
    assert mine and set(mine) == {plant} if program != "item_sync_sleep" else set(mine) <= {plant}


@pytest.mark.parametrize("program, level, path", cases("slow_line", wanted=("item_sync_sleep", "python_loader")))
def test_the_planted_slow_line_and_its_cost_in_the_host_table(program: str, level: str, path: Path) -> None:
    """item_sync_sleep's planted line sleeps in main(): the table's row is that line.  python_loader's
    calls make_batch, whose time the table spreads over the innermost frames it runs (randrange and
    its helpers lead, make_batch's own self time is smaller): there the verdict is data loading,
    named make_batch, at the time the program measured around the call, and make_batch's row holds
    that time inclusive."""
    plant = planted(program, level)
    host = outputs(path).json["host"]
    rows = host["functions"]
    if program == "python_loader":
        truth_ms = plant.truth["make_batch_ms_per_step"]
        (row,) = [r for r in rows if r["function"] == "make_batch"]
        assert row["inclusive_ns_per_step"] / 1e6 == pytest.approx(truth_ms, rel=0.2)
        verdict = host["verdict"]
        assert verdict["kind"] == "data" and verdict["causes"][0]["label"].startswith("make_batch (")
        assert verdict["causes"][0]["ns_per_step"] / 1e6 == pytest.approx(truth_ms, rel=0.2)
    else:
        assert plant.plants["slow"] in [f"{Path(r['file']).name}:{r['line']}" for r in rows[:3]]


def test_triton_suite_roofline_against_the_planted_work() -> None:
    """ncu's standard roofline capture of one step: the fp32 GEMM's FLOPs are 2·n³ (the program's
    ZOO_TRUTH), the LayerNorm is memory-bound, and the bf16 GEMM, whose tensor-core FLOPs that
    capture cannot count, gets no bound rather than one derived from zeros."""
    truth = planted("triton_suite", "bare").truth
    result = CliRunner().invoke(cli, ["roofline", str(ZOO_DATA / "triton_suite" / "triton_suite.ncu_raw.csv.xz"),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    fp32_gemm, bf16_gemm, layernorm = json.loads(result.stdout)["launches"]
    assert fp32_gemm["flops"] == pytest.approx(truth["gemm_flops"], rel=1e-6)
    assert fp32_gemm["bound"] == "compute" and fp32_gemm["roof"] == "fp32"
    assert bf16_gemm["bound"] is None and "tensor" in bf16_gemm["verdict"]
    assert layernorm["bound"] == "memory" and layernorm["roof"] == "DRAM"
    # DRAM traffic of the LayerNorm: at most its logical bytes (read x, write y) and at least 85% of
    # them (the rest hits in L2)
    assert 0.85 * truth["layernorm_bytes"] <= layernorm["dram_bytes"] <= truth["layernorm_bytes"]


@pytest.mark.slow
def test_readme_table() -> None:
    """tests/zoo/README.md holds today's table (python -m tests.zoo.gpu_table)."""
    from tests.zoo.gpu_table import table

    readme = (Path(__file__).parent / "zoo" / "README.md").read_text()
    between = readme.split("<!-- gpu-zoo-table -->\n", 1)[1].split("\n<!-- /gpu-zoo-table -->", 1)[0]
    assert between.strip() == table()
