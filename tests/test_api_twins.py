"""Every CLI command has its Python twin, and the twin answers what the command's JSON says.

The commands are enumerated from click (``profkit.cli.COMMANDS``): a new command fails
``test_every_command_has_a_twin`` until it gets a twin here (or a reason it has none).  Each
twin is compared with the command's ``--format json`` through click's CliRunner, on real
captures, for a single trace and for a multi-rank input (a ``profkit trace --backend torch`` run
folder of a 2-rank torchrun job, tests/run_folders.torchrun_run, whose every rank answers).
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import profkit
from profkit.cli import COMMANDS, cli
from profkit.output import rows_to_json
from tests.conftest import DATA, ncu_fixture, nsys_fixture
from tests.run_folders import torchrun_run

SYNC_SITES = "nsys2023_sync_sites"  # an nsys export with sync sites, NVTX and steps
KINETO = DATA / "kineto"

# Commands that answer no question about a trace, so no Profile method mirrors them, and why.
NO_TWIN = {
    "trace": "runs a program under a profiler (nsys on a GPU host): its product is the run folder every twin reads",
    "report": "writes report.html/.md/.json; its parts are the twins here (steps, breakdown, stalls, host, ...)",
    "ptx": "compiles kernels to machine code (profkit.ptx is its library); it reads no trace",
}


def cli_json(*args: Any) -> Any:
    result = CliRunner().invoke(cli, [*map(str, args), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def records(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as the CLI would print them (numpy scalars as JSON numbers)."""
    return json.loads(rows_to_json(frame.to_dict(orient="records")))


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=float))


def same_object_answer(frame: Any, out: Any, rows_key: str) -> None:
    """A Profile method's frame against an object command's JSON (rows under ``rows_key``, the rest in
    attrs); a multi-rank input: every rank's rows with ``rank``, each rank's rest in ``attrs["ranks"]``."""
    if isinstance(out, list):
        assert records(frame) == [{"rank": r["rank"], **row} for r in out for row in r[rows_key] or []]
        assert plain(frame.attrs["ranks"]) == [{k: v for k, v in r.items() if k != rows_key} for r in out]
    else:
        assert records(frame) == out[rows_key]
        assert plain(frame.attrs) == {k: v for k, v in out.items() if k != rows_key}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return torchrun_run(tmp_path_factory.mktemp("twins"), "torch")


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real torch.profiler traces with Python stacks as the ranks of one folder."""
    folder = tmp_path_factory.mktemp("stacks")
    for r, name in enumerate(("mlp_print.json.gz", "mlp_noprint.json.gz")):
        shutil.copyfile(KINETO / name, folder / f"rank{r}.json.gz")
    return folder


def _inputs(run: Path) -> list[Path]:
    return [nsys_fixture(SYNC_SITES), run]


def twin_rows(command: str, method: str) -> Callable[..., None]:
    def check(run: Path, stacks: Path, tmp_path: Path) -> None:
        for path in _inputs(run):
            with profkit.open(path) as p:
                frame = getattr(p, method)()
            expected = cli_json(command, path)
            assert expected, f"{command} printed no rows: nothing would be compared"
            assert records(frame) == expected
    return check


def twin_object(command: str, rows_key: str, inputs: Callable[[Path, Path], list[Path]] | None = None,
                ) -> Callable[..., None]:
    def check(run: Path, stacks: Path, tmp_path: Path) -> None:
        for path in (inputs or (lambda r, s: _inputs(r)))(run, stacks):
            with profkit.open(path) as p:
                frame = getattr(p, command)()
            same_object_answer(frame, cli_json(command, path), rows_key)
    return check


def twin_info(run: Path, stacks: Path, tmp_path: Path) -> None:
    for path in _inputs(run):
        with profkit.open(path) as p:
            assert plain(p.info()) == cli_json("info", path)


def twin_graphs(run: Path, stacks: Path, tmp_path: Path) -> None:
    path = DATA / "graphs" / "gpt_graphs_kineto.json.gz"
    with profkit.open(path) as p:
        frame = p.graphs()
    assert len(frame), "no graph replayed: nothing would be compared"
    same_object_answer(frame, cli_json("graphs", path), "graphs")
    with profkit.open(run) as p:  # no rank replayed a graph: each rank's answer is its rank keys only
        frame = p.graphs()
    assert frame.empty and frame.attrs["ranks"] == cli_json("graphs", run)


def twin_roofline(run: Path, stacks: Path, tmp_path: Path) -> None:
    csv = ncu_fixture("matmul_details_import.csv")
    with profkit.open(csv) as p:
        frame = p.roofline()
    expected = cli_json("roofline", csv)
    assert expected["launches"]
    assert records(frame) == expected["launches"] + expected["kernels"]
    assert frame.attrs["hint"] == expected["hint"]


def twin_ranks(run: Path, stacks: Path, tmp_path: Path) -> None:
    with profkit.open(run, rank=1) as p:  # ranks is the job's, whatever rank the Profile shows
        frame = p.ranks()
    expected = cli_json("ranks", run, "--scheduler", "threads")
    assert [r["rank"] for r in expected] == [0, 1]
    assert records(frame) == expected


def twin_diff(run: Path, stacks: Path, tmp_path: Path) -> None:
    base, new = KINETO / "mlp_print.json.gz", KINETO / "mlp_noprint.json.gz"
    with profkit.open(base) as p:
        assert plain(p.diff(new)) == cli_json("diff", base, new)


def twin_export(run: Path, stacks: Path, tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "api").mkdir()
    result = CliRunner().invoke(cli, ["export", str(run), "-o", str(tmp_path / "cli" / "job.json.gz")])
    assert result.exit_code == 0, result.output
    with profkit.open(run) as p:
        written = p.export(tmp_path / "api" / "job.json.gz")
    assert [w["rank"] for w in written] == [0, 1]
    for w in written:
        line = next(li for li in result.output.splitlines() if li.startswith(f"rank {w['rank']}: "))
        assert f"{w['events']:,} events ({w['kernels']:,} kernels, {w['flows']:,} launch arrows)" in line
        name = Path(w["path"]).name
        assert gzip.decompress((tmp_path / "api" / name).read_bytes()) == \
            gzip.decompress((tmp_path / "cli" / name).read_bytes())


def twin_scrub(run: Path, stacks: Path, tmp_path: Path) -> None:
    from profkit.scrub import scrub

    source = KINETO / "mlp_print.json.gz"
    removed = scrub(source, tmp_path / "api.json.gz")
    expected = cli_json("scrub", source, "-o", tmp_path / "cli.json.gz")
    assert [{"what": k, "count": v} for k, v in removed.items()] == expected


def twin_doctor(run: Path, stacks: Path, tmp_path: Path) -> None:
    from dataclasses import asdict

    from profkit.capture.doctor import run_checks

    assert plain([asdict(c) for c in run_checks()]) == cli_json("doctor")


def twin_history(run: Path, stacks: Path, tmp_path: Path) -> None:
    """`history add` is profkit.history.add_run of the trace's run_summary; `history show` its trend."""
    from dataclasses import asdict

    from profkit.history import add_run, run_summary, trend

    db_cli, db_api = tmp_path / "cli.sqlite", tmp_path / "api.sqlite"
    runs = [KINETO / f"hist_run{i}.json.gz" for i in (1, 2, 3, 4)]
    for i, path in enumerate(runs):
        added = CliRunner().invoke(cli, ["history", "add", str(path), "--label", f"r{i}", "--commit", f"c{i}",
                                         "--db", str(db_cli)])
        assert added.exit_code == 0, added.output
        with profkit.open(path) as p:
            add_run(db_api, run_summary(p.trace), label=f"r{i}", commit=f"c{i}")
    shown = cli_json("history", "show", "--db", db_cli, "--plot", tmp_path / "trend.png")
    assert len(shown["runs"]) == 4

    def when_left_out(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:  # the clock time of each add
        return [{k: v for k, v in r.items() if k != "added_utc"} for r in rows]

    assert when_left_out(plain([asdict(t) for t in trend(db_api, shown["metric"], 3)])) == when_left_out(shown["runs"])


def twin_memory(run: Path, stacks: Path, tmp_path: Path) -> None:
    path = DATA / "memory" / "gpt_memory_leak.json.gz"  # torch.profiler(profile_memory=True)
    with profkit.open(path) as p:
        found = p.memory()
    assert found["devices"], "no allocator recorded: nothing would be compared"
    assert plain(found) == cli_json("memory", path)


def twin_occupancy(run: Path, stacks: Path, tmp_path: Path) -> None:
    for path in _inputs(run):
        with profkit.open(path) as p:
            frame = p.occupancy()
        assert records(frame) == cli_json("occupancy", path)


TWINS: dict[str, Callable[..., None]] = {
    "kernels": twin_rows("kernels", "kernels"),
    "api": twin_rows("api", "api"),
    "nvtx": twin_rows("nvtx", "nvtx"),
    "breakdown": twin_rows("breakdown", "breakdown"),
    "info": twin_info,
    "steps": twin_object("steps", "steps"),
    "stalls": twin_object("stalls", "rows"),
    "host": twin_object("host", "functions", lambda run, stacks: [KINETO / "mlp_print.json.gz", stacks]),
    "graphs": twin_graphs,
    "occupancy": twin_occupancy,
    "memory": twin_memory,
    "roofline": twin_roofline,
    "ranks": twin_ranks,
    "diff": twin_diff,
    "export": twin_export,
    "scrub": twin_scrub,
    "doctor": twin_doctor,
    "history": twin_history,
}


def test_every_command_has_a_twin() -> None:
    """A command added to the CLI fails here until it has a twin in TWINS, or a reason in NO_TWIN."""
    assert not set(TWINS) & set(NO_TWIN)
    missing = sorted(set(COMMANDS) - set(TWINS) - set(NO_TWIN))
    assert not missing, f"commands without a Python twin: {missing}"
    assert not set(TWINS) - set(COMMANDS), "a twin of a command that is gone"


@pytest.mark.parametrize("command", sorted(TWINS))
def test_twin_equals_the_cli(command: str, run: Path, stacks: Path, tmp_path: Path) -> None:
    TWINS[command](run, stacks, tmp_path)


def test_straggler_is_the_rank_slowed_on_purpose() -> None:
    """kineto_slow: rank 1 runs an extra 30 ms kernel per step (tests/data/ddp/README.md); the
    Profile's straggler is the cross-rank report's, and it names rank 1."""
    from profkit.analysis.ranks.cross_rank import straggler

    folder = DATA / "ddp" / "kineto_slow"
    with profkit.open(folder) as p:
        found = p.straggler()
        assert found is not None and found["rank"] == 1
        assert found == straggler(profkit.api.ranks_json([folder], scheduler="threads"))
        assert sorted(p.steps()["rank"].unique()) == [0, 1]  # every rank, never rank 0 alone
    with profkit.open(folder, rank=1) as p:
        assert set(p.steps()["rank"]) == {1}
        with pytest.raises(profkit.errors.ProfkitError, match="there is no rank 5"):
            profkit.open(folder, rank=5)
