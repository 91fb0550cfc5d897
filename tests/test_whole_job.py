"""One export of a whole multi-GPU job is several ranks (profkit.model.rank_view).

Real captures (tests/data/ddp/README.md): ``whole2/whole.sqlite`` is
``nsys profile torchrun --nproc_per_node 2 gpt_ddp.py --slow-rank 1`` as one
export (two rank processes, one per H200, exported with --include-blobs=true);
``per_rank2/rank{0,1}.sqlite`` is the same job captured one export per rank.
Oracles: SQL straight on the exports, nsys stats' CSV of the whole export, and
the per-rank captures.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from profkit.model import Trace
from profkit.model.rank_view import DEVICE_INDEX, NCCL, PROCESS_ORDER, job_layout, rank_views
from tests.conftest import _decompressed
from tests.synthetic_trace import SyntheticSource

DDP = Path(__file__).parent / "data" / "ddp"
needs_whole = pytest.mark.skipif(not (DDP / "whole2" / "whole.sqlite.xz").exists(), reason="whole-job fixture missing")


def _whole() -> Path:
    return _decompressed(DDP / "whole2" / "whole.sqlite.xz")


def _per_rank() -> list[Path]:
    return [_decompressed(DDP / "per_rank2" / f"rank{r}.sqlite.xz") for r in (0, 1)]


def _sql(path: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "profkit", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _ranks_json(*paths: Path) -> list[dict]:
    result = _run(["ranks", *map(str, paths), "--format", "json", "--scheduler", "threads"])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# Per device: (pid, NCCL kernel ns, all kernel ns), in SQL on the export.  Rank r is device r:
# torchrun on one node gives LOCAL_RANK r the device r (the fixture's gpt_ddp.py sets it so).
KERNELS_PER_DEVICE = """
    SELECT k.deviceId, (k.globalPid >> 24) & 0xFFFFFF AS pid,
           sum(CASE WHEN s.value LIKE 'nccl%' THEN k."end" - k.start ELSE 0 END),
           sum(k."end" - k.start), count(*)
    FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
    GROUP BY k.deviceId, pid ORDER BY k.deviceId"""


@needs_whole
def test_whole_job_export_is_two_ranks_with_each_devices_kernels():
    per_device = _sql(_whole(), KERNELS_PER_DEVICE)
    assert len(per_device) == 2 and len({pid for _, pid, *_ in per_device}) == 2  # one process per GPU
    rows = _ranks_json(_whole())
    assert [r["rank"] for r in rows] == [0, 1]
    assert {r["rank_source"] for r in rows} == {NCCL}
    for row, (device, _, nccl, total, _) in zip(rows, per_device):
        assert row["rank"] == device
        assert nccl > 0
        assert row["comm_kernel_ns"] == nccl
        assert row["compute_kernel_ns"] == total - nccl  # only compute and NCCL kernels in this program
        assert row["kernel_ns"] == total
    # and the ranks together are the whole export, as nsys stats sums it
    import csv

    with (DDP / "whole2" / "whole__cuda_gpu_kern_sum.csv").open() as f:
        stats_total = sum(int(k["Total Time (ns)"]) for k in csv.DictReader(f))
    assert sum(r["kernel_ns"] for r in rows) == stats_total


@needs_whole
def test_each_rank_has_its_own_steps():
    steps_sql = _sql(_whole(), """
        SELECT (e.globalTid >> 24) & 0xFFFFFF, count(*) FROM NVTX_EVENTS e
        LEFT JOIN StringIds s ON s.id = e.textId
        WHERE coalesce(e.text, s.value) = 'train_step' GROUP BY 1 ORDER BY 1""")
    result = _run(["steps", str(_whole()), "--format", "json"])
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)
    assert [r["rank"] for r in ranks] == [0, 1]
    pid_of_device = {device: pid for device, pid, *_ in _sql(_whole(), KERNELS_PER_DEVICE)}
    for r in ranks:
        assert r["summary"]["count"] == dict(steps_sql)[pid_of_device[r["rank"]]] == 12
        assert r["summary"]["source"] == "nvtx" and r["rank_source"] == NCCL
    # launches per step are one rank's, not the two GPUs' interleaved: each rank's steps hold the
    # same number of GPU operations as the same rank's steps in the per-rank capture, give or take
    # a few (measured: 321-322 a steady step in both; the whole file read as one gave 600+)
    alone = _run(["steps", str(_per_rank()[0]), "--format", "json"])
    per_file = json.loads(alone.stdout)["steps"]
    whole0 = ranks[0]["steps"]
    steady = [s["launches"] for s in whole0 if s["phase"] == "steady"]
    steady_alone = [s["launches"] for s in per_file if s["phase"] == "steady"]
    assert abs(sorted(steady)[len(steady) // 2] - sorted(steady_alone)[len(steady_alone) // 2]) <= 5


@needs_whole
def test_straggler_of_the_whole_job_export_is_rank_1(tmp_path):
    result = _run(["report", str(_whole()), "-o", str(tmp_path), "--scheduler", "threads"])
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    ranks = report["sections"]["ranks"]["tables"]["ranks"]["rows"]
    assert [(r["rank"], r["rank_source"]) for r in ranks] == [(0, NCCL), (1, NCCL)]
    straggler = report["sections"]["ranks"]["data"]["straggler"]
    assert straggler["rank"] == 1 and straggler["cause"] == "GPU compute"
    assert [w["rank"] for w in straggler["waits"]] == [0] and straggler["waits"][0]["wait_per_step_ns"] > 0
    assert any(f.startswith("Rank 1 is the straggler") for f in report["findings"])


# The whole-job export and the per-rank exports are two runs of the same job, so their figures
# agree within the runs' noise, not exactly.  Measured on these fixtures (whole vs per-rank):
#   step median   rank 0 36.78 vs 35.66 ms (+3.1%), rank 1 36.83 vs 35.65 ms (+3.3%)
#   compute/step  rank 0 3.088 vs 3.114 ms (-0.8%), rank 1 32.589 vs 32.602 ms (-0.04%)
#   comm/step     rank 0 31.78 vs 30.87 ms (+2.9%; the wait for rank 1), rank 1 85.2 vs 85.6 µs (-0.4%)
# The whole-job capture runs both ranks under one nsys, which costs each step ~1 ms more.
TOLERANCE = {"step_median_ns": 0.05, "compute_per_step_ns": 0.02, "comm_per_step_ns": 0.05}


@pytest.mark.slow  # reads the whole job and both per-rank captures (~15 s)
@needs_whole
def test_whole_job_ranks_match_the_per_rank_capture(tmp_path):
    whole = _ranks_json(_whole())
    per_rank = _ranks_json(*_per_rank())
    assert [r["rank"] for r in whole] == [r["rank"] for r in per_rank] == [0, 1]
    for w, p in zip(whole, per_rank):
        assert w["steps"] == p["steps"]
        for key, tolerance in TOLERANCE.items():
            assert abs(w[key] - p[key]) <= tolerance * p[key], (w["rank"], key, w[key], p[key])
    for paths, out in ((([_whole()]), tmp_path / "whole"), (_per_rank(), tmp_path / "per_rank")):
        result = _run(["report", *map(str, paths), "-o", str(out), "--scheduler", "threads"])
        assert result.returncode == 0, result.stderr
    stragglers = [json.loads((tmp_path / d / "report.json").read_text())["sections"]["ranks"]["data"]["straggler"]
                  for d in ("whole", "per_rank")]
    assert [(s["rank"], s["cause"]) for s in stragglers] == [(1, "GPU compute")] * 2


@needs_whole
def test_rank_from_device_index_without_payloads(tmp_path):
    """An export made without --include-blobs has no NCCL payload bytes: the ranks then come
    from the device order, and on one node they are the same ranks as NCCL's."""
    from profkit.readers import open_trace

    copy = tmp_path / "no_blobs.sqlite"
    shutil.copyfile(_whole(), copy)
    conn = sqlite3.connect(copy)
    conn.execute("UPDATE NVTX_EVENTS SET binaryData = NULL")
    conn.commit()
    conn.close()
    with open_trace(_whole()) as t:
        by_nccl = job_layout(t)
    with open_trace(copy) as t:
        by_device = job_layout(t)
    assert by_nccl.source == NCCL and by_device.source == DEVICE_INDEX
    assert [(p.rank, p.pids, p.devices) for p in by_device.ranks] == [(p.rank, p.pids, p.devices)
                                                                        for p in by_nccl.ranks]
    result = _run(["ranks", str(copy), "--scheduler", "threads"])
    assert result.returncode == 0 and "rank from: device index" in result.stderr


@needs_whole
def test_a_rank_view_holds_exactly_its_processes_rows():
    """Every table with a pid column, cut by pid, row for row: counted in SQL on the export."""
    from profkit.readers import open_trace

    count_sql = {
        "kernels": "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE (globalPid >> 24) & 0xFFFFFF = {pid}",
        "memcpy": "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE (globalPid >> 24) & 0xFFFFFF = {pid}",
        "memset": "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE (globalPid >> 24) & 0xFFFFFF = {pid}",
        "api": "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE (globalTid >> 24) & 0xFFFFFF = {pid}",
        "threads": "SELECT count(*) FROM ThreadNames WHERE (globalTid >> 24) & 0xFFFFFF = {pid}",
    }
    with open_trace(_whole()) as trace:
        views = rank_views(trace)
        assert len(views) == 2
        for view in views:
            (pid,) = view.meta.extra["rank_pids"]
            assert view.meta.rank is not None and view.meta.world_size == 2
            for table, query in count_sql.items():
                assert view.count(table) == _sql(_whole(), query.format(pid=pid))[0][0], table
            # rows keep the export's order (rowid), so columns loaded at different times line up
            in_order = [c for (c,) in _sql(_whole(), "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                                     f"WHERE (globalPid >> 24) & 0xFFFFFF = {pid} ORDER BY rowid")]
            assert view.array("kernels", "correlation").tolist() == in_order
            assert view.table("devices", ["device"])["device"].tolist() == list(view.meta.extra["rank_devices"])
            assert set(view.array("kernels", "device").tolist()) == set(view.meta.extra["rank_devices"])


@pytest.mark.slow  # every single-trace command on the whole-job export (~8 s)
@needs_whole
def test_single_trace_commands_on_a_whole_job_export(tmp_path):
    whole = str(_whole())
    one = _run(["steps", whole, "--rank", "1", "--format", "json"])
    assert one.returncode == 0, one.stderr
    assert [r["rank"] for r in json.loads(one.stdout)] == [1]
    table = _run(["steps", whole])
    assert "rank 0 (rank from: NCCL payload)" in table.stdout and "rank 1 (rank from: NCCL payload)" in table.stdout
    missing = _run(["steps", whole, "--rank", "5"])
    assert missing.returncode == 2 and "ranks 0, 1" in missing.stderr and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    rows = _run(["breakdown", whole, "--format", "json"])
    assert rows.returncode == 0, rows.stderr
    assert [(r["rank"], r["rank_source"]) for r in json.loads(rows.stdout)] == [(0, NCCL), (1, NCCL)]
    # a diff compares one rank: without --rank it says so in one line
    ask = _run(["diff", whole, whole])
    assert ask.returncode == 2 and "--rank" in ask.stderr and len(ask.stderr.strip().splitlines()) == 1
    same = _run(["diff", whole, str(_per_rank()[1]), "--rank", "1", "--format", "json"])
    assert same.returncode == 0, same.stderr
    step = json.loads(same.stdout)["step"]
    # the base is rank 1 of the whole job: its steady steps and median are that rank's
    assert step["base_steps"] == step["new_steps"] == 9  # the cut-off 11th step is teardown
    assert step["base_median_ns"] == json.loads(one.stdout)[0]["summary"]["median_ns"]


# -- which processes are ranks, on hand-built traces (shapes no fixture has) ------------------
def _gpu_trace(work: list[tuple[int, int]]) -> Trace:
    """One kernel per (pid, device)."""
    n = len(work)
    return Trace(SyntheticSource({"kernels": {
        "name": ["k"] * n, "start": [10 * i for i in range(n)], "end": [10 * i + 5 for i in range(n)],
        "pid": [p for p, _ in work], "device": [d for _, d in work], "stream": [7] * n,
        "correlation": list(range(n))}}))


def test_one_process_on_two_gpus_stays_one_rank():
    assert not job_layout(_gpu_trace([(1, 0), (1, 1), (1, 0)])).is_job


def test_processes_sharing_a_gpu_are_one_rank():
    layout = job_layout(_gpu_trace([(5, 0), (9, 1), (7, 1)]))  # pid 7 helps on pid 9's GPU
    assert [(p.rank, p.pids, p.devices) for p in layout.ranks] == [(0, (5,), (0,)), (1, (7, 9), (1,))]
    assert layout.source == DEVICE_INDEX


def test_device_order_not_process_order():
    layout = job_layout(_gpu_trace([(5, 3), (9, 2)]))
    assert [(p.rank, p.pids) for p in layout.ranks] == [(0, (9,)), (1, (5,))]


def test_ranks_of_several_gpus_each_are_in_process_order():
    layout = job_layout(_gpu_trace([(9, 0), (9, 1), (5, 2), (5, 3)]))
    assert layout.source == PROCESS_ORDER
    assert [(p.rank, p.pids, p.devices) for p in layout.ranks] == [(0, (5,), (2, 3)), (1, (9,), (0, 1))]
