"""The zoo's public traces (tests/data/hta_zoo: programs nobody here wrote): every command's figure
against the truth read straight from the trace's JSON (tests/zoo/truth.py, no profkit code).

The invariants (tests/invariants.py) run on the same traces in tests/test_invariants.py (ids
``hta_zoo/...``).  Where profkit's figure differs from the truth today the test is
xfail(strict=True) with what is wrong (#30), so it flips when the fix lands.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.captures import FAST_CAPTURES
from tests.conftest import DATA
from tests.invariants import OUTPUTS, Outputs
from tests.zoo.truth import Truth, load, truth_of

ZOO = DATA / "hta_zoo"
TRACES = sorted(path.name.removesuffix(".json.gz") for path in ZOO.glob("*.json.gz"))
# traces of a few calls, no loop (the old-Kineto one): no step to time, no steady state to break down
STEPLESS = ("legacy_inference_rank1",)
TIMED = tuple(n for n in TRACES if n not in STEPLESS)
RANK_PAIR = ("sampled_rank-0", "sampled_rank-1")  # two ranks of one job
BLOCKING_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
STEP_REL_TOL = 0.03  # profkit cuts steps on the GPU's timeline, ProfilerStep#N on the CPU's

# Truths profkit does not reproduce yet: (trace, check) -> why, each an xfail(strict) that flips when
# it is fixed.  Empty: the step-pattern, cut-off-last-step and stream-wait fixes of #30 made all three
# that were here pass.
KNOWN_WRONG: dict[tuple[str, str], str] = {}


def traces(check: str, only: tuple[str, ...] = ()) -> list:
    params = []
    for name in only or TRACES:
        marks = [] if f"hta_zoo/{name}" in FAST_CAPTURES else [pytest.mark.slow]
        if (name, check) in KNOWN_WRONG:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[name, check]))
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def outputs(name: str) -> Outputs:
    return OUTPUTS[ZOO / f"{name}.json.gz"]


def truth(name: str) -> Truth:
    return truth_of(ZOO / f"{name}.json.gz")


@pytest.mark.parametrize("module", ["truth.py", "capture_truth.py"])
def test_truth_never_asks_profkit(module: str) -> None:
    """The truth is read from the traces alone: neither the public traces' (truth.py, the JSON) nor
    the GPU zoo's (capture_truth.py: SQL, the JSON, the programs' lines) imports anything of
    profkit's (capture_truth's one zoo import is truth.py itself, relatively)."""
    import ast

    tree = ast.parse((Path(__file__).parent / "zoo" / module).read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in modules if name.split(".")[0] in ("profkit", "tests")}


def test_traces_are_htas_unchanged() -> None:
    """Each trace is byte for byte HTA's (SHA256SUMS), with its licence beside it."""
    sums = dict(reversed(line.split()) for line in (ZOO / "SHA256SUMS").read_text().splitlines())
    assert sorted(sums) == sorted(f"{name}.json.gz" for name in TRACES)
    for file, digest in sums.items():
        assert hashlib.sha256((ZOO / file).read_bytes()).hexdigest() == digest, file
    assert "MIT License" in (ZOO / "LICENSE").read_text()


@pytest.mark.parametrize("name", traces("steps"))
def test_step_count(name: str) -> None:
    expected = truth(name).steps or truth(name).forward_annotations
    assert bool(expected) == (name not in STEPLESS), "every zoo trace but the stepless ones has iterations"
    assert outputs(name).steps["summary"]["count"] == expected


@pytest.mark.parametrize("name", traces("median", tuple(n for n in TIMED if n != "alexnet")))
def test_step_median(name: str) -> None:
    summary = outputs(name).steps["summary"]
    assert summary["median_ns"] == pytest.approx(truth(name).step_median_ns, rel=STEP_REL_TOL)
    assert summary["source"] == "profiler_step"


@pytest.mark.parametrize("name", traces("last_step", tuple(n for n in TIMED if n != "alexnet")))
def test_no_steady_step_longer_than_any_real_step(name: str) -> None:
    steady = [s["duration_ns"] for s in outputs(name).steps["steps"] if s["phase"] == "steady"]
    assert max(steady) <= (1 + STEP_REL_TOL) * max(truth(name).step_ns)


@pytest.mark.parametrize("name", traces("kernels"))
def test_kernels_per_name(name: str) -> None:
    rows = outputs(name).json["kernels"]
    assert Counter({row["name"]: row["instances"] for row in rows}) == truth(name).kernel_names
    counts = outputs(name).report["capture"]["counts"]
    assert (counts["kernels"], counts["memcpys"], counts["memsets"]) == \
        (truth(name).kernels, truth(name).memcpys, truth(name).memsets)


@pytest.mark.parametrize("name", traces("graphs"))
def test_graph_replays(name: str) -> None:
    graphs, expected = outputs(name).json["graphs"], truth(name)
    if not expected.graph_launches:
        assert graphs is None
        return
    assert graphs["replays"] == expected.graph_launches
    assert graphs["kernels_in_replays"] == expected.graph_kernels


@pytest.mark.parametrize("name", traces("host"))
def test_host_refuses_without_python_stacks(name: str) -> None:
    assert truth(name).python_frames == 0
    assert "no Python stacks" in outputs(name).refusals["host"]


@pytest.mark.parametrize("name", traces("syncs"))
def test_blocking_syncs_counted(name: str) -> None:
    """Every call that blocks the CPU until the GPU is done is in the stalls table, once."""
    events = load(ZOO / f"{name}.json.gz")["traceEvents"]
    expected = Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("name") in BLOCKING_SYNCS
                       and e.get("cat") in ("cuda_runtime", "cuda_driver"))
    found = Counter()
    for row in (outputs(name).json["stalls"] or {}).get("rows") or []:
        for api in BLOCKING_SYNCS:
            if api in str(row["api"]):
                found[api] += row["count"]
    assert found == expected


@pytest.mark.parametrize("name", traces("wait_idle"))
def test_no_idle_charged_to_a_call_that_did_not_block(name: str) -> None:
    rows = (outputs(name).json["stalls"] or {}).get("rows") or []
    charged = [row for row in rows if row["cpu_blocked_ns"] == 0 and row["per_step"]["gpu_idle_ns"] > 0]
    assert not charged, [(row["api"], row["per_step"]["gpu_idle_ns"]) for row in charged]


@pytest.mark.parametrize("name", traces("gpu"))
def test_report_names_the_gpu(name: str) -> None:
    assert outputs(name).report["capture"]["gpu_name"] == truth(name).gpu


@pytest.mark.parametrize("name", traces("breakdown", TIMED))
def test_breakdown_communication_is_nccl(name: str) -> None:
    """Communication kernels are NCCL's: none where the trace ran none."""
    nccl = sum(name_count for kernel, name_count in truth(name).kernel_names.items() if "nccl" in kernel.lower())
    for row in outputs(name).json["breakdown"]:
        assert (row["communication_kernel_ns"] > 0) == (nccl > 0)


def test_ranks_of_one_job() -> None:
    """`profkit ranks` on two ranks' files: each rank, its steps, its kernel and NCCL time."""
    paths = [ZOO / f"{name}.json.gz" for name in RANK_PAIR]
    result = CliRunner().invoke(cli, ["ranks", *map(str, paths), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {row["rank"]: row for row in json.loads(result.stdout)}
    for name, path in zip(RANK_PAIR, paths):
        expected = truth_of(path)
        row = rows[expected.rank]
        assert Path(row["file"]).name == path.name
        assert row["steps"] == expected.steps
        events = [e for e in load(path)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
        assert row["kernel_ns"] == pytest.approx(1e3 * sum(e["dur"] for e in events))
        nccl = [e for e in events if "nccl" in e["name"].lower()]
        assert row["comm_kernel_ns"] == pytest.approx(1e3 * sum(e["dur"] for e in nccl))
    assert sorted(rows) == [0, 1]


@pytest.mark.slow
def test_readme_table() -> None:
    """tests/zoo/README.md's table is what `python -m tests.zoo.table` prints today."""
    from tests.zoo.table import table

    readme = (Path(__file__).parent / "zoo" / "README.md").read_text()
    held = readme.split("<!-- zoo-table -->\n", 1)[1].split("<!-- /zoo-table -->", 1)[0].strip()
    assert held == table(), "rerun: python -m tests.zoo.table, and paste it between the zoo-table marks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nccl_rank0", "graphs_triton_rank0"])
def test_ranks_of_one_rank_file(name: str) -> None:
    """`profkit ranks` on one rank's file: its rank, steps, and each collective's count and bytes."""
    path, expected = ZOO / f"{name}.json.gz", truth(name)
    result = CliRunner().invoke(cli, ["ranks", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.stdout)
    assert (row["rank"], row["steps"]) == (expected.rank, expected.steps)
    nccl = [c for c in row["collectives"] if c["sized"]]
    assert {c["calls"][0]: (c["count"], c["bytes_total"]) for c in nccl} == expected.collectives
