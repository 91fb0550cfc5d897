"""`profkit stalls` through click's CliRunner, on the real exports and on damaged copies of them.

The damaged copies (tables dropped, rows deleted) are built in the tests from
a real fixture: they stand for exports made without some trace options.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.sync.stalls import analyze_stalls
from profkit.cli import cli
from profkit.readers import open_trace
from tests.conftest import nsys_fixture

REQUIRED_KEYS = {"source", "code", "api", "count", "cpu_blocked_ns", "gpu_idle_ns", "nvtx"}
ROOT = Path(__file__).parents[1]


def sites_of(*args: str) -> list:
    """The sync sites of ``stalls ARGS --format json``: its "rows"."""
    return json.loads(invoke(*args, "--format", "json"))["rows"]


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, ["stalls", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def failing(*args: str) -> str:
    result = CliRunner().invoke(cli, ["stalls", *args])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert result.stdout == "" and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("profkit: error: "), result.stderr
    return lines[0]


def copy_of(name: str, tmp_path: Path, *sql: str) -> Path:
    """A writable copy of a real export with ``sql`` applied (tables dropped, rows deleted)."""
    path = tmp_path / f"{name}-modified.sqlite"
    shutil.copyfile(nsys_fixture(name), path)
    with sqlite3.connect(path) as db:
        for statement in sql:
            db.execute(statement)
    return path


def test_json_lists_sites_with_the_documented_keys() -> None:
    out = json.loads(invoke(str(nsys_fixture("nsys2025_train_print")), "--format", "json"))
    assert set(out) == {"rows", "findings", "by_nvtx", "step_stats", "step_range"}  # --compare adds "comparison"
    sites = out["rows"]
    assert isinstance(sites, list) and len(sites) == 4
    for site in sites:
        assert REQUIRED_KEYS | {"kind", "cause", "thread", "per_step"} <= set(site)
        assert site["source"] is None or site["source"].rpartition(":")[2].isdigit()
        assert isinstance(site["count"], int) and isinstance(site["gpu_idle_ns"], int)
    top = sites[0]
    assert top["source"].endswith("sample_kernels/train_mlp.py:59") and top["count"] == 20
    assert top["code"] == 'print(f"step {step} loss {loss.item():.5f}")' and top["nvtx"] == "samples:step"
    assert top["per_step"]["syncs"] == 1.0
    unknown = [s for s in sites if s["source"] is None]
    assert [(s["code"], s["cause"]) for s in unknown] == [(None, "blocking copy")]


def test_json_equals_the_library() -> None:
    path = nsys_fixture("nsys2025_sync")
    with open_trace(path) as trace:
        expected = analyze_stalls(trace).sites
    assert sites_of(str(path)) == json.loads(json.dumps(expected))


def test_compare_print_and_noprint() -> None:
    out = json.loads(invoke(str(nsys_fixture("nsys2025_train_print")), "--format", "json",
                            "--compare", str(nsys_fixture("nsys2025_train_noprint"))))
    assert set(out) == {"rows", "findings", "by_nvtx", "step_stats", "step_range", "comparison"}
    assert out["rows"] == sites_of(str(nsys_fixture("nsys2025_train_print")))
    compare = out["comparison"]
    assert compare["other_rows"] == sites_of(str(nsys_fixture("nsys2025_train_noprint")))
    assert len(compare["sites_only_in_a"]) == 1 and compare["sites_only_in_a"][0].startswith("train_mlp.py:59 ")
    assert compare["median_difference_ns"] == compare["a"]["median_ns"] - compare["b"]["median_ns"] > 0
    text = invoke(str(nsys_fixture("nsys2025_train_print")), "--compare", str(nsys_fixture("nsys2025_train_noprint")))
    # the verdict is profkit diff's (a 4.4% longer median whose 95% interval includes 0), not the sign
    assert "no change (+4.4%, 95% interval" in text
    assert "sync sites only in nsys2025_train_print.sqlite: train_mlp.py:59" in text


def test_markdown_keeps_code_verbatim_in_findings() -> None:
    out = invoke(str(nsys_fixture("nsys2025_sync")), "--format", "md", "--threshold", "1")
    assert out.startswith("## Synchronization stalls: nsys2025_sync.sqlite")
    assert "- sync_elementwise.py:31 `torch.cuda.synchronize() # explicit` synchronizes 7 times in the steady steps, 1 per step" in out
    assert "### Sync sites, by GPU idle caused per steady step" in out
    assert "### Per NVTX range" in out and "### Steps" in out
    assert "| sync_elementwise.py:26 | if y.max() &gt; 0: # truthiness | truthiness |" in out  # table cell


def test_table_and_csv() -> None:
    out = invoke(str(nsys_fixture("nsys2023_sync")))
    assert "source unknown" in out and "cudaDeviceSynchronize" in out
    assert "Steps" in out  # no annotation: from the repeating launch pattern
    rows = list(csv.DictReader(io.StringIO(invoke(str(nsys_fixture("nsys2025_sync")), "--format", "csv"))))
    assert len(rows) == 7 and {r["cause"] for r in rows} >= {".item()", "truthiness", "blocking copy"}


def test_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "runs" / "train_mlp-20261122-230000"
    run.mkdir(parents=True)
    shutil.copyfile(nsys_fixture("nsys2025_train_print"), run / "trace.sqlite")
    monkeypatch.chdir(tmp_path)  # so that only run.json can say where the sources are
    # the recorded paths are relative to where the program ran ("../../../work/main/...")
    assert sites_of(str(run))[0]["local_path"] is None
    # Rebuild the recording host's layout under tmp_path, so the test does not depend on
    # where this checkout sits: the program ran three folders below a root holding
    # work/main/sample_kernels/train_mlp.py.
    host = tmp_path / "host"
    (host / "work" / "main" / "sample_kernels").mkdir(parents=True)
    shutil.copyfile(ROOT / "sample_kernels" / "train_mlp.py", host / "work" / "main" / "sample_kernels" / "train_mlp.py")
    cwd = host / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"cwd": str(cwd)}))
    top = sites_of(str(run))[0]
    # the recorded path resolved against run.json's cwd
    assert top["count"] == 20 and Path(top["local_path"]).name == "train_mlp.py"
    assert Path(top["local_path"]).is_file()
    assert top["local_code"] == top["code"]
    # a folder holding one export under another name
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(nsys_fixture("nsys2025_sync"), other / "mine.sqlite")
    assert len(sites_of(str(other))) == 7
    # a `profkit trace --backend torch` run folder: its trace.json.gz, as the file itself reads
    kineto = ROOT / "tests" / "data" / "kineto" / "mlp_print.json.gz"
    torch_run = tmp_path / "runs" / "train_mlp-20261122-230500"
    torch_run.mkdir()
    shutil.copyfile(kineto, torch_run / "trace.json.gz")
    (torch_run / "run.json").write_text(json.dumps({"cwd": str(cwd), "backend": "torch"}))
    by_folder = sites_of(str(torch_run))
    assert by_folder and [s["count"] for s in by_folder] == [s["count"] for s in sites_of(
        str(torch_run / "trace.json.gz"))]


def test_bad_targets(tmp_path: Path) -> None:
    line = failing(str(tmp_path))
    assert "holds no PyTorch profiler trace" in line and "nsys export (*.sqlite)" in line
    for name in ("a.sqlite", "b.sqlite"):
        shutil.copyfile(nsys_fixture("nsys2025_sync"), tmp_path / name)
    assert "several exports (a.sqlite, b.sqlite)" in failing(str(tmp_path))
    assert "no such file" in failing(str(tmp_path / "missing.sqlite"))
    line = failing(str(nsys_fixture("nsys2025_sync")), "--step-range", "epoch")
    assert "no range named 'epoch'" in line and "samples:step" in line
    from tests.test_report_timeline import build_synthetic

    build_synthetic(tmp_path / "no-steps.sqlite", 400, seed=1)  # hand-built: one kernel name at random times
    # --force: the hand-built trace shares no kernel name with the real one (another program)
    assert "no-steps.sqlite" in failing(str(nsys_fixture("nsys2025_sync")), "--compare", str(tmp_path / "no-steps.sqlite"),
                                        "--force")


def test_run_folder_with_an_unreadable_run_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(nsys_fixture("nsys2025_sync"), run / "trace.sqlite")
    (run / "run.json").write_text("{not json")
    assert "run.json: unreadable" in failing(str(run))


def test_input_is_not_modified() -> None:
    path = nsys_fixture("nsys2025_sync")
    before = path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())
    invoke(str(path), "--format", "json")
    assert (path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())) == before


# -- exports missing some data ------------------------------------------------------------
def test_export_without_cuda_api_trace(tmp_path: Path) -> None:
    path = copy_of("nsys2025_sync", tmp_path, "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    line = failing(str(path))
    assert "CUDA API trace data" in line and "-t cuda" in line


def test_export_without_nvtx(tmp_path: Path) -> None:
    path = copy_of("nsys2025_sync", tmp_path, "DROP TABLE NVTX_EVENTS")
    sites = sites_of(str(path))
    assert all(s["source"] is None and s["nvtx"] == "(no NVTX range)" for s in sites)
    assert sum(s["count"] for s in sites) == 56


@pytest.mark.parametrize("name, label", [("nsys2025_sync", "CUPTI sync type 2"), ("nsys2023_sync", "Stream sync")])
def test_sync_rows_without_their_api_calls(tmp_path: Path, name: str, label: str) -> None:
    # the CUPTI synchronization rows still show the syncs when their API calls are missing
    path = copy_of(name, tmp_path, """DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN
        (SELECT id FROM StringIds WHERE value LIKE 'cudaStreamSynchronize%')""")
    with open_trace(path) as trace:
        r = analyze_stalls(trace)
    cupti = [e for e in r.events if e.api.startswith("CUPTI synchronization")]
    assert len(cupti) == 48 and {e.api for e in cupti} == {f"CUPTI synchronization ({label})"}
    assert all(e.tid == 0 and e.source is None and e.device == 0 for e in cupti)
    # the pageable copies now block on their own; the pinned ones are no events
    copies = [e for e in r.events if e.api == "cudaMemcpyAsync"]
    assert len(copies) == 24 and all(e.copy_pattern == "Device-to-Host to Pageable" for e in copies)
    assert {e.cause for e in cupti} == {"CUPTI synchronization"}
