"""``--rank N`` on every per-trace command, over the three multi-rank inputs (profkit.readers.job).

Real captures of 2-rank DDP jobs (tests/data/ddp/README.md, 2 x H200, NCCL):
- ``whole``: one nsys export of the whole torchrun job (whole2/whole.sqlite);
- ``folder``: a folder of one nsys export per rank (per_rank2/rank{0,1}.sqlite);
- ``run``: a ``profkit trace --backend torch`` run folder of a torchrun job (its rank traces are
  kineto/rank{0,1}.json.gz, laid out by tests/run_folders.torchrun_run, with run.json and report.json).

Without --rank each answers for every rank (JSON a list with ``rank``, CSV a rank column, a table
per rank); --rank 1 gives exactly rank 1's part of that; for the folder and run forms that part is
what the command prints for rank 1's file alone, the oracle.  --rank 5 is one line, exit 2.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from tests.conftest import _decompressed
from tests.run_folders import DDP, torchrun_run

FORMS = ("whole", "folder", "run")
# every command that reads one trace; export writes files and has its own test below
JSON_COMMANDS = ("kernels", "api", "nvtx", "info", "steps", "breakdown", "stalls", "graphs", "occupancy", "host")
# the commands whose JSON is rows (a multi-rank input: one list, each row with its rank)
ROW_COMMANDS = ("kernels", "api", "nvtx", "breakdown", "occupancy")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path | None]]:
    """form -> (the multi-rank input, rank 1's own trace file where the form has one)."""
    root = tmp_path_factory.mktemp("ranks")
    folder = root / "per_rank"
    folder.mkdir()
    for r in (0, 1):
        shutil.copyfile(_decompressed(DDP / "per_rank2" / f"rank{r}.sqlite.xz"), folder / f"rank{r}.sqlite")
    run = torchrun_run(root, "torch")
    return {"whole": (_decompressed(DDP / "whole2" / "whole.sqlite.xz"), None),
            "folder": (folder, folder / "rank1.sqlite"),
            "run": (run, run / "trace_rank1.json.gz")}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args])


def cli_json(*args: Any) -> Any:
    result = invoke(*args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def rank_part(out: list[dict[str, Any]], rank: int) -> list[dict[str, Any]]:
    """Rank ``rank``'s part of a multi-rank JSON answer (its rows, or its one object)."""
    return [o for o in out if o["rank"] == rank]


def without_rank_keys(command: str, part: list[dict[str, Any]]) -> Any:
    """A rank's part as the command prints it for that rank's file alone (no rank keys added)."""
    if command == "breakdown":  # a row per rank even for one trace: only rank_source is the job's
        return [{k: v for k, v in row.items() if k != "rank_source"} for row in part]
    if command in ROW_COMMANDS:
        return [{k: v for k, v in row.items() if k != "rank"} for row in part]
    (one,) = part
    added = ("rank_source",) if command == "info" else ("rank", "rank_source")  # info reports the rank itself
    return {k: v for k, v in one.items() if k not in added} or None


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("command", [c for c in JSON_COMMANDS if c != "host"])
def test_rank_n_is_rank_ns_part_of_every_rank(inputs: dict, command: str, form: str) -> None:
    path, rank1_file = inputs[form]
    every = cli_json(command, path)
    assert isinstance(every, list), "a multi-rank input answers for every rank: a list"
    assert sorted({o["rank"] for o in every}) == [0, 1]
    one = cli_json(command, path, "--rank", "1")
    assert one == rank_part(every, 1)  # the same shape as every rank's: never one rank silently
    if command != "graphs":  # no rank replayed a CUDA graph: each rank's answer is None, alike
        assert without_rank_keys(command, rank_part(every, 0)) != without_rank_keys(command, one)  # not one twice
    if rank1_file is not None:
        alone = cli_json(command, rank1_file)
        if command == "info" and alone["rank"] is None:  # an nsys export records no rank: the folder names it
            alone["rank"] = 1
        assert without_rank_keys(command, one) == alone


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("command", [*JSON_COMMANDS, "export"])
def test_a_rank_the_input_does_not_hold_is_one_line(inputs: dict, command: str, form: str) -> None:
    result = invoke(command, inputs[form][0], "--rank", "5")
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert "there is no rank 5" in result.output and "ranks 0, 1" in result.output


@pytest.mark.parametrize("form", FORMS)
def test_host_names_the_rank_whose_trace_cannot_answer(inputs: dict, form: str) -> None:
    """None of the DDP captures recorded Python stacks: host says so for the rank asked, in one line."""
    path, rank1_file = inputs[form]
    result = invoke("host", path, "--rank", "1")
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert result.output.startswith("profkit: error: rank 1: ") and "no Python stacks" in result.output
    if rank1_file is not None:
        assert rank1_file.name in result.output


@pytest.mark.parametrize("form", FORMS)
def test_csv_has_a_rank_column_and_tables_a_block_per_rank(inputs: dict, form: str) -> None:
    path, _ = inputs[form]
    result = invoke("kernels", path, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert result.exit_code == 0 and next(iter(rows[0])) == "rank"
    assert {r["rank"] for r in rows} == {"0", "1"}
    table = invoke("steps", path, "--top", "2")
    assert table.exit_code == 0
    assert "rank 0 (rank from: " in table.output and "rank 1 (rank from: " in table.output
    only = invoke("steps", path, "--top", "2", "--rank", "1")
    assert "rank 1 (rank from: " in only.output and "rank 0 (rank from: " not in only.output


@pytest.mark.parametrize("form", FORMS)
def test_export_writes_a_file_per_rank(inputs: dict, form: str, tmp_path: Path) -> None:
    path, _ = inputs[form]
    every = invoke("export", path, "-o", tmp_path / "job.json.gz")
    assert every.exit_code == 0, every.output
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["job.rank0.json.gz", "job.rank1.json.gz"]
    one = invoke("export", path, "--rank", "1", "-o", tmp_path / "one.json.gz")
    assert one.exit_code == 0, one.output
    # the same events as rank 1's file of the run over every rank, and not rank 0's
    events = {line.split(": ", 1)[0]: line.split(": ", 2)[-1] for line in every.output.splitlines()}
    assert one.output.strip().split(": ", 2)[-1] == events["rank 1"] != events["rank 0"]


def test_host_per_rank_on_traces_with_python_stacks(tmp_path: Path) -> None:
    """Two real torch.profiler traces with stacks (tests/data/kineto: the MLP loop with and without a
    print), as the ranks of a folder and of a torch run folder: each rank's host time is its file's."""
    kineto = Path(__file__).parent / "data" / "kineto"
    folder = tmp_path / "folder"
    folder.mkdir()
    for r, name in enumerate(("mlp_print.json.gz", "mlp_noprint.json.gz")):
        shutil.copyfile(kineto / name, folder / f"rank{r}.json.gz")
    every = cli_json("host", folder)
    assert [o["rank"] for o in every] == [0, 1] and {o["rank_source"] for o in every} == {"file name"}
    for r, name in enumerate(("mlp_print.json.gz", "mlp_noprint.json.gz")):
        alone = cli_json("host", kineto / name)
        assert cli_json("host", folder, "--rank", r) == [every[r]]
        assert {k: v for k, v in every[r].items() if k not in ("rank", "rank_source")} == alone


def test_steps_and_breakdown_read_a_torch_run_folder_of_a_job(inputs: dict) -> None:
    """The issue's case: `steps --rank 1` and `breakdown --rank 1` on a `--backend torch` run folder."""
    run, rank1 = inputs["run"]
    (steps,) = cli_json("steps", run, "--rank", "1")
    assert steps["rank"] == 1 and steps["rank_source"] == "trace"  # Kineto's distributedInfo
    assert steps["steps"] == cli_json("steps", rank1)["steps"] and len(steps["steps"]) == 9
    (row,) = cli_json("breakdown", run, "--rank", "1")
    assert row["rank"] == 1 and row["file"] == rank1.name


def test_nsys_run_folder_of_a_job_is_its_whole_export(tmp_path: Path, inputs: dict) -> None:
    run = torchrun_run(tmp_path, "nsys")
    assert cli_json("kernels", run, "--rank", "1") == cli_json("kernels", inputs["whole"][0], "--rank", "1")


def test_a_single_trace_keeps_its_shape(inputs: dict) -> None:
    """One rank's file is not a multi-rank input: its JSON has no rank keys, and --rank is the rank
    it records or its name says (rank1.sqlite is rank 1)."""
    _, rank1 = inputs["folder"]
    single = cli_json("steps", rank1)
    assert isinstance(single, dict) and "rank" not in single
    bad = invoke("steps", rank1, "--rank", "3")
    assert bad.exit_code == 2 and "is rank 1, not rank 3" in bad.output


@pytest.mark.parametrize("backend", ["torch", "nsys"])
def test_ranks_reads_a_torchrun_run_folder(tmp_path: Path, backend: str) -> None:
    """`profkit ranks RUN_DIR` reads the run's rank traces, never run.json or report.json as ranks
    (it read them as rank files and exited 3), and says which files it skipped."""
    run = torchrun_run(tmp_path, backend)
    result = CliRunner().invoke(cli, ["ranks", str(run), "--format", "json", "--scheduler", "threads"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["rank"] for r in rows] == [0, 1] and not any("error" in r for r in rows)
    if backend == "torch":
        assert [Path(r["file"]).name for r in rows] == ["trace_rank0.json.gz", "trace_rank1.json.gz"]
        assert "skipped 2 files that hold no trace" in result.stderr
        assert "report.json" in result.stderr and "run.json" in result.stderr
    else:  # one export of the whole job, split into its ranks
        assert {Path(r["file"]).name for r in rows} == {"trace.sqlite"}


def test_a_run_json_of_the_wrong_shape_is_not_a_traceback(tmp_path: Path, inputs: dict) -> None:
    """run.json is input: a "files" that is no object, or rank_traces that are no names, leave the
    folder to be read as any folder (its two rank traces, by their recorded ranks)."""
    run = torchrun_run(tmp_path, "torch")
    record = json.loads((run / "run.json").read_text())
    for files in ([1, 2], {"rank_traces": "trace_rank0.json.gz"}, {"rank_traces": [0, 1]}):
        (run / "run.json").write_text(json.dumps({**record, "files": files}))
        out = cli_json("steps", run, "--rank", "1")
        assert [o["rank"] for o in out] == [1] and out[0]["rank_source"] == "trace"


def test_report_of_a_torch_run_folder_of_a_job_is_the_cross_rank_report(tmp_path: Path) -> None:
    run = torchrun_run(tmp_path, "torch")
    result = CliRunner().invoke(cli, ["report", str(run), "-o", str(tmp_path / "out"), "--scheduler", "threads"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = report["sections"]["ranks"]["tables"]["ranks"]["rows"]
    assert [(r["rank"], Path(r["file"]).name) for r in rows] == [(0, "trace_rank0.json.gz"), (1, "trace_rank1.json.gz")]


def test_kernels_of_each_rank_of_the_whole_export_are_its_devices_rows(inputs: dict) -> None:
    """The oracle of the whole-job form: SQL on the export, rank r being device r (torchrun on one node
    gives LOCAL_RANK r the device r; the ranks come from NCCL's payloads, not from that order)."""
    import sqlite3

    whole = inputs["whole"][0]
    conn = sqlite3.connect(f"file:{whole}?mode=ro&immutable=1", uri=True)
    try:
        per_device = dict((d, (n, ns)) for d, n, ns in conn.execute(
            'SELECT deviceId, count(*), sum("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY deviceId'))
    finally:
        conn.close()
    assert sorted(per_device) == [0, 1]
    for rank in (0, 1):
        rows = cli_json("kernels", whole, "--rank", rank)
        assert {r["rank"] for r in rows} == {rank}
        assert (sum(r["instances"] for r in rows), sum(r["total_ns"] for r in rows)) == per_device[rank]
