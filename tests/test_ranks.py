"""`profkit ranks` and the Dask engine: real exports as ranks, a real dask scheduler."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.cli import cli
from profkit.ranks.inputs import rank_from_name
from tests.conftest import nsys_fixture

PROGRAM = "nsys2025_train_print"      # a real MLP training export with NVTX steps
OTHER_PROGRAM = "nsys2025_gelu"       # a different program


@pytest.mark.parametrize("name, pattern, rank", [
    ("rank3.sqlite", None, 3),
    ("trace_rank_12.json.gz", None, 12),
    ("job-rank-0.pt.trace.json", None, 0),
    ("worker_7.json.gz", None, 7),
    ("host1_12345.1700000000000.pt.trace.json", None, None),
    ("gpu05-node.sqlite", r"gpu(\d+)", 5),
    ("a.sqlite", None, None),
])
def test_rank_from_file_name(name, pattern, rank):
    assert rank_from_name(name, pattern) == rank


def test_bad_rank_regex_is_one_line():
    result = CliRunner().invoke(cli, ["ranks", str(nsys_fixture(PROGRAM)), "--rank-from", "("])
    assert result.exit_code == 2
    assert "--rank-from" in result.output and "Traceback" not in result.output


def _ranks_of(tmp_path: Path, fixture: str, n: int) -> list[Path]:
    """n copies of one real export, named rank0..rank{n-1} (the same program on every rank)."""
    paths = []
    for r in range(n):
        p = tmp_path / f"rank{r}.sqlite"
        shutil.copyfile(nsys_fixture(fixture), p)
        paths.append(p)
    return paths


def _run(args: list[str], prelude: str | None = None) -> subprocess.CompletedProcess:
    """``python -m profkit ARGS`` (or ``python -c PRELUDE ARGS``) in its own process."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    start = ["-c", prelude] if prelude else ["-m", "profkit"]
    return subprocess.run([sys.executable, *start, *args], capture_output=True, text=True, env=env, timeout=300)


def test_ranks_rows_and_partial_exit(tmp_path):
    paths = _ranks_of(tmp_path, PROGRAM, 2)
    bad = tmp_path / "rank2.sqlite"
    bad.write_bytes(paths[0].read_bytes()[:50_000])  # truncated copy: a bad rank file
    result = _run(["ranks", *map(str, paths), str(bad), "--format", "json", "--scheduler", "threads"])
    assert result.returncode == 3, result.stderr
    rows = json.loads(result.stdout)
    good = [r for r in rows if "error" not in r]
    assert [r["rank"] for r in good] == [0, 1]
    assert [r["rank"] for r in rows if "error" in r] == [2]
    assert "rank2.sqlite" in result.stderr and "Traceback" not in result.stderr
    # identical files: identical rows
    assert {k: v for k, v in good[0].items() if k not in ("rank", "file")} == \
        {k: v for k, v in good[1].items() if k not in ("rank", "file")}


def test_different_programs_are_refused(tmp_path):
    a = tmp_path / "rank0.sqlite"
    b = tmp_path / "rank1.sqlite"
    shutil.copyfile(nsys_fixture(PROGRAM), a)
    shutil.copyfile(nsys_fixture(OTHER_PROGRAM), b)
    result = _run(["ranks", str(a), str(b), "--scheduler", "threads"])
    assert result.returncode == 2
    assert "different programs" in result.stderr
    assert len(result.stderr.strip().splitlines()[-1:]) == 1 and "Traceback" not in result.stderr


def test_unreachable_scheduler_is_one_line(tmp_path):
    paths = _ranks_of(tmp_path, PROGRAM, 1)
    # the real command in its own process, with a 1 s connect timeout instead of 10 s
    prelude = "import profkit.ranks.engine as e; e.CONNECT_TIMEOUT_S = 1; from profkit.cli import main; main()"
    result = _run(["ranks", str(paths[0]), "--scheduler", f"tcp://127.0.0.1:{_free_port()}"], prelude=prelude)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:" in last and "Traceback" not in result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # starts a Dask scheduler and two workers (~12 s)
def test_real_dask_scheduler_gives_the_same_json(tmp_path):
    paths = [str(p) for p in _ranks_of(tmp_path, PROGRAM, 2)]
    default = _run(["ranks", *paths, "--format", "json"])
    assert default.returncode == 0, default.stderr

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--dashboard-address", ":0", "--no-show"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        _wait_for_port(port)
        for _ in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
                 "--host", "127.0.0.1", "--no-dashboard"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_for_workers(port, 2)
        remote = _run(["ranks", *paths, "--format", "json", "--scheduler", f"tcp://127.0.0.1:{port}"])
        assert remote.returncode == 0, remote.stderr
        assert json.loads(remote.stdout) == json.loads(default.stdout)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def _wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"dask scheduler did not open port {port}")


def _wait_for_workers(port: int, n: int, timeout: float = 60) -> None:
    from distributed import Client

    with Client(f"tcp://127.0.0.1:{port}", timeout=timeout) as client:
        client.wait_for_workers(n, timeout=timeout)


# -- the real 2-rank DDP captures (tests/data/ddp, 2 x H200, NCCL; see its README) -------------
DDP = Path(__file__).parent / "data" / "ddp"
needs_ddp = pytest.mark.skipif(not (DDP / "nsys" / "rank0.sqlite.xz").exists(), reason="DDP fixtures missing")


def _ddp_nsys(folder: str) -> list[Path]:
    from tests.conftest import _decompressed

    return [_decompressed(DDP / folder / f"rank{r}.sqlite.xz") for r in (0, 1)]


def _ranks_json(*paths: Path) -> list[dict]:
    result = _run(["ranks", *map(str, paths), "--format", "json", "--scheduler", "threads"])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@needs_ddp
def test_comm_kernel_ns_equals_nccl_kernels_in_nsys_stats():
    import csv

    rows = _ranks_json(*_ddp_nsys("nsys"))
    assert [r["rank"] for r in rows] == [0, 1]
    for row in rows:
        oracle = DDP / "nsys" / f"rank{row['rank']}__cuda_gpu_kern_sum.csv"
        with oracle.open() as f:
            kernels = list(csv.DictReader(f))
        nccl = sum(int(k["Total Time (ns)"]) for k in kernels if k["Name"].startswith("nccl"))
        total = sum(int(k["Total Time (ns)"]) for k in kernels)
        assert nccl > 0
        assert row["comm_kernel_ns"] == nccl
        assert row["kernel_ns"] == total
        assert row["compute_kernel_ns"] + row["comm_kernel_ns"] == total  # no other kernel types here


@needs_ddp
@pytest.mark.parametrize("folder", ["kineto_slow", pytest.param("nsys_slow", marks=pytest.mark.slow)])
def test_the_rank_slowed_on_purpose_is_the_straggler(folder, tmp_path):
    paths = _ddp_nsys(folder) if folder.startswith("nsys") else [DDP / folder / f"rank{r}.json.gz" for r in (0, 1)]
    result = _run(["report", *map(str, paths), "-o", str(tmp_path), "--scheduler", "threads"])
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    straggler = report["sections"]["ranks"]["data"]["straggler"]
    assert straggler["rank"] == 1 and straggler["cause"] == "GPU compute"
    assert [w["rank"] for w in straggler["waits"]] == [0] and straggler["waits"][0]["wait_per_step_ns"] > 0
    assert any(f.startswith("Rank 1 is the straggler") for f in report["findings"])


@needs_ddp
def test_nsys_and_kineto_ranks_mix():
    rows = _ranks_json(_ddp_nsys("nsys")[0], DDP / "kineto" / "rank1.json.gz")
    assert [(r["rank"], r["file"].endswith(".json.gz")) for r in rows] == [(0, False), (1, True)]
    assert all(r["steps"] > 0 and r["comm_kernel_ns"] > 0 for r in rows)


@needs_ddp
@pytest.mark.parametrize("folder", ["nsys_slow", "nsys"])
def test_the_wait_per_step_is_the_measured_extra_communication_time(folder):
    """Rank 0's "waits X per step" is its NCCL kernel time per steady step minus the straggler's
    (summed here in SQL over each step's window; the mean over the steps steady on both ranks, the
    job's steady steps), not the difference in compute: on the slowed capture those are 30.9 ms
    against 29.3 ms of extra compute."""
    import sqlite3
    import statistics

    from profkit.analysis.ranks.cross_rank import straggler
    from profkit.analysis.steps import find_steps
    from profkit.ranks.per_rank import summarize_trace
    from profkit.readers import open_trace

    summaries, per_rank = [], []
    for rank, path in enumerate(_ddp_nsys(folder)):
        with open_trace(path) as trace:
            summaries.append({**summarize_trace(trace, rank), "file": path.name})
            steady = find_steps(trace).steady
        with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
            per_rank.append({int(i): db.execute(
                "SELECT coalesce(sum(k.end - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.shortName WHERE s.value LIKE 'nccl%' "
                "AND k.start >= ? AND k.start < ?", (int(a), int(b))).fetchone()[0]
                for i, a, b in zip(steady["index"], steady["start_ns"], steady["end_ns"])})
    both = sorted(set(per_rank[0]) & set(per_rank[1]))
    comm = [statistics.mean(p[i] for i in both) for p in per_rank]
    found = straggler(summaries)
    assert found["rank"] == 1
    (wait,) = found["waits"]
    assert wait["rank"] == 0
    assert wait["wait_per_step_ns"] == pytest.approx(comm[0] - comm[1], rel=0.01)
    compute_gap = summaries[1]["compute_per_step_ns"] - summaries[0]["compute_per_step_ns"]
    assert abs(wait["wait_per_step_ns"] - compute_gap) > 1_000_000
