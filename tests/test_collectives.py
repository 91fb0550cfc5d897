"""Collective message sizes and bandwidth, against the raw JSON of the real 2-rank DDP captures.

Oracles: the NCCL kernel events of each torch.profiler trace, read here with
json/gzip (their args 'Collective name', 'In msg nelems', ...), and nccl-tests'
formulas (doc/PERFORMANCE.md) applied to those numbers; nsys exports do not
record sizes, so their ranks must say "not recorded", never 0."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from profkit.analysis.ranks.collectives import DTYPE_BYTES, busbw_factor, by_size
from profkit.analysis.ranks.cross_rank import cross_rank
from profkit.analysis.steps.windows import step_of
from profkit.readers import open_trace
from profkit.ranks.inputs import RankInput
from profkit.ranks.per_rank import summarize_rank

DDP = Path(__file__).parent / "data" / "ddp"
needs_ddp = pytest.mark.skipif(not (DDP / "kineto" / "rank0.json.gz").exists(), reason="DDP fixtures missing")
FLOAT_BYTES = 4  # the fixtures' dtype 'Float' is IEEE single precision
COLUMNS = ["collective", "msg_in_nelems", "msg_out_nelems", "msg_dtype", "group_size", "process_group"]


@pytest.fixture
def ddp_nsys_ranks() -> list[Path]:
    from tests.conftest import _decompressed

    return [_decompressed(DDP / "nsys" / f"rank{r}.sqlite.xz") for r in (0, 1)]


@pytest.fixture
def ddp_nsys_rank0(ddp_nsys_ranks) -> Path:
    return ddp_nsys_ranks[0]


def _raw_nccl_kernels(path: Path) -> list[dict]:
    """The NCCL kernel events of a trace, in time order, straight from its JSON."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
    return sorted(kernels, key=lambda e: e["ts"])


def _raw_fields(args: dict) -> tuple:
    group = f"{args['Process Group Name']} ({args['Process Group Description']})" \
        if "Process Group Name" in args else ""
    return (args.get("Collective name", ""), args.get("In msg nelems", -1), args.get("Out msg nelems", -1),
            args.get("dtype", ""), args.get("Group size", -1), group)


def _model_fields(path: Path) -> list[tuple]:
    with open_trace(path) as trace:
        k = trace.table("kernels", ["name", "start"] + COLUMNS)
    k = k[k["name"].astype(str).str.contains("nccl", case=False)].sort_values("start", kind="stable")
    return [tuple(str(v) if isinstance(v, str) else int(v) for v in row)
            for row in k[COLUMNS].astype(object).itertuples(index=False)]


def _ranks(folder: str) -> list[Path]:
    return [DDP / folder / f"rank{r}.json.gz" for r in (0, 1)]


def _summaries(paths: list[Path]) -> list[dict]:
    return [summarize_rank(RankInput(p, r)) for r, p in enumerate(paths)]


@needs_ddp
@pytest.mark.parametrize("folder", ["kineto", pytest.param("kineto_slow", marks=pytest.mark.slow)])
@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_reader_fills_the_collective_columns_as_the_json_says(folder, rank):
    path = DDP / folder / f"rank{rank}.json.gz"
    raw = _raw_nccl_kernels(path)
    assert sum("Collective name" in e["args"] for e in raw) >= 18  # the fixture records them
    assert sorted(_model_fields(path)) == sorted(_raw_fields(e["args"]) for e in raw)


@needs_ddp
def test_nsys_kernels_have_unknown_sizes_not_zero(ddp_nsys_rank0):
    with open_trace(ddp_nsys_rank0) as trace:
        k = trace.table("kernels", ["name"] + COLUMNS)
    nccl = k[k["name"].astype(str).str.startswith("nccl")]
    assert len(nccl) > 0
    for column in ("msg_in_nelems", "msg_out_nelems", "group_size"):
        assert (nccl[column] == -1).all()
    for column in ("collective", "msg_dtype", "process_group"):
        assert set(nccl[column].astype(str)) == {""}


@needs_ddp
def test_record_param_comms_op_gives_sizes_to_kernels_without_them(tmp_path):
    """Older torch records the call on its record_param_comms op only: the op's
    args reach the kernel with the same External id."""
    with gzip.open(DDP / "kineto" / "rank0.json.gz", "rt") as f:
        doc = json.load(f)
    keys = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "Process Group Name",
            "Process Group Description")
    ops = {e["args"]["External id"]: _raw_fields(e["args"]) for e in doc["traceEvents"]
           if e.get("cat") == "cpu_op" and e.get("name") == "record_param_comms"}
    expected = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and "nccl" in e["name"].lower():
            for key in keys:
                e["args"].pop(key, None)
            expected.append(ops.get(e["args"].get("External id"), ("", -1, -1, "", -1, "")))
    synthetic = tmp_path / "synthetic_ops_only_rank0.json.gz"
    with gzip.open(synthetic, "wt") as f:
        json.dump(doc, f)
    assert sum(x[0] == "allreduce" for x in expected) == 18
    assert sorted(_model_fields(synthetic)) == sorted(expected)


@needs_ddp
@pytest.mark.parametrize("folder", ["kineto", "kineto_slow"])
def test_sizes_and_bandwidth_equal_the_raw_json(folder):
    raw = {r: _raw_nccl_kernels(p) for r, p in enumerate(_ranks(folder))}
    job = cross_rank(_summaries(_ranks(folder)))
    [row] = job["collectives"]
    assert row["collective"] == "AllReduce"
    sized = {r: [e for e in events if "In msg nelems" in e["args"]] for r, events in raw.items()}
    for events in sized.values():
        assert {e["args"]["dtype"] for e in events} == {"Float"}
        assert all(e["args"]["In msg nelems"] == e["args"]["Out msg nelems"] for e in events)
    sizes = {r: [e["args"]["In msg nelems"] * FLOAT_BYTES for e in events] for r, events in sized.items()}
    pooled = sizes[0] + sizes[1]
    assert row["msg_bytes_min"] == min(pooled) and row["msg_bytes_max"] == max(pooled)
    assert row["msg_bytes_median"] == statistics.median(pooled)
    assert row["bytes_per_rank"] == max(sum(s) for s in sizes.values())
    assert row["group_size"] == 2 and row["sized_ranks"] == [0, 1]
    # The sized calls are the same on both ranks, in the same order: the i-th is
    # one all-reduce, whose time is its shorter kernel (the rank that waited less).
    assert sizes[0] == sizes[1]
    seconds = [min(round(a["dur"] * 1000), round(b["dur"] * 1000)) for a, b in zip(sized[0], sized[1])]
    algbw = sum(sizes[0]) / sum(seconds)  # bytes per ns = GB/s
    n = 2
    assert row["algbw_gbps"] == pytest.approx(algbw, rel=1e-12)
    assert row["busbw_gbps"] == pytest.approx(algbw * 2 * (n - 1) / n, rel=1e-12)
    assert row["bandwidth_paired"] is True
    # and per message size: the 1 MiB and the 13 MiB gradient buckets separately
    expected = {}
    for size, t in zip(sizes[0], seconds):
        calls, total_bytes, total_ns = expected.get(size, (0, 0, 0))
        expected[size] = (calls + 1, total_bytes + size, total_ns + t)
    got = {b["msg_bytes_min"]: b for b in row["by_size"]}
    assert sorted(got) == sorted(expected) and all(b["exact"] for b in got.values())
    for size, (calls, total_bytes, total_ns) in expected.items():
        assert got[size]["count"] == calls
        assert got[size]["busbw_gbps"] == pytest.approx(total_bytes / total_ns * 2 * (n - 1) / n, rel=1e-12)


@pytest.mark.slow  # profkit ranks in a child process (~5 s); test_sizes_and_bandwidth_equal_the_raw_json: the oracle
@needs_ddp
def test_per_rank_json_rows_carry_sizes(tmp_path):
    import os

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    result = subprocess.run([sys.executable, "-m", "profkit", "ranks", *map(str, _ranks("kineto")), "--format",
                             "json", "--scheduler", "threads"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    for row in rows:
        events = [e for e in _raw_nccl_kernels(DDP / "kineto" / f"rank{row['rank']}.json.gz")
                  if "In msg nelems" in e["args"]]
        total = sum(e["args"]["In msg nelems"] * FLOAT_BYTES for e in events)
        assert row["comm_bytes"] == total
        [c] = row["collectives"]
        assert c["count"] == len(_raw_nccl_kernels(DDP / "kineto" / f"rank{row['rank']}.json.gz"))
        assert c["bytes_total"] == total and c["calls"] == ["allreduce"]
        ns = sum(round(e["dur"] * 1000) for e in events)
        assert c["algbw_gbps"] == pytest.approx(total / ns, rel=1e-12)
        assert "calls_ns" not in c  # per-call lists stay on the worker side


@needs_ddp
def test_nsys_report_says_not_recorded(tmp_path, ddp_nsys_ranks):
    from profkit.report.ranks import write_ranks_report

    summaries = _summaries(ddp_nsys_ranks)
    job = cross_rank(summaries)
    write_ranks_report(job, summaries, tmp_path)
    section = json.loads((tmp_path / "report.json").read_text())["sections"]["collectives"]
    rows = section["tables"]["collectives"]["rows"]
    assert {r["collective"] for r in rows} >= {"AllReduce"}
    for r in rows:
        assert r["message_size"] == "not recorded in this nsys export"
        for key in ("msg_bytes_min", "msg_bytes_max", "bytes_per_rank", "algbw_gbps", "busbw_gbps"):
            assert r[key] is None
    assert any("not recorded in the nsys exports of rank 0, 1" in n for n in section["notes"])
    assert all(r["comm_bytes"] is None for r in job["ranks"])
    md = (tmp_path / "report.md").read_text()
    assert "not recorded in this nsys export" in md


@needs_ddp
def test_nsys_and_kineto_ranks_mix(tmp_path, ddp_nsys_rank0):
    from profkit.report.ranks import write_ranks_report

    kineto = DDP / "kineto" / "rank1.json.gz"
    summaries = _summaries([ddp_nsys_rank0, kineto])
    job = cross_rank(summaries)
    write_ranks_report(job, summaries, tmp_path)
    rows = {r["collective"]: r for r in job["collectives"]}
    sizes = [e["args"]["In msg nelems"] * FLOAT_BYTES for e in _raw_nccl_kernels(kineto)
             if "In msg nelems" in e["args"]]
    assert rows["AllReduce"]["sized_ranks"] == [1] and rows["AllReduce"]["unsized_ranks"] == [0]
    assert rows["AllReduce"]["msg_bytes_min"] == min(sizes) and rows["AllReduce"]["bytes_per_rank"] == sum(sizes)
    # the two files are different runs (24 and 18 calls): no pairing, rank 1's own time is a lower bound
    assert rows["AllReduce"]["bandwidth_paired"] is False
    report = json.loads((tmp_path / "report.json").read_text())
    assert any("nsys exports of rank 0" in n for n in report["sections"]["collectives"]["notes"])
    assert any("at least" in f for f in report["findings"] if f.startswith("AllReduce"))


def test_dtype_sizes_equal_torchs():
    torch = pytest.importorskip("torch")
    checked = 0
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                  torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128):
        legacy = torch.empty(0, dtype=dtype).type()  # 'torch.FloatTensor': c10's ScalarType name inside
        name = legacy.removeprefix("torch.").removesuffix("Tensor")
        assert DTYPE_BYTES[name] == torch.empty(0, dtype=dtype).element_size(), name
        checked += 1
    assert checked == 12


@pytest.mark.parametrize("name, n, factor", [
    ("allreduce", 8, 2 * 7 / 8), ("AllReduce", 2, 1.0), ("allgather", 4, 3 / 4), ("_allgather_base", 4, 3 / 4),
    ("allgather_into_tensor_coalesced", 4, 3 / 4), ("reduce_scatter", 8, 7 / 8), ("ReduceScatter", 8, 7 / 8),
    ("_reduce_scatter_base", 8, 7 / 8), ("all_to_all", 4, 3 / 4), ("broadcast", 8, 1.0), ("Reduce", 8, 1.0),
    ("barrier", 8, None), ("allreduce", None, None),
])
def test_busbw_factors_are_nccl_tests(name, n, factor):
    assert busbw_factor(name, n) == factor


def test_step_of_against_a_loop():
    rng = np.random.default_rng(7)
    bounds = np.cumsum(rng.integers(0, 50, 12))  # contiguous steps, some empty
    starts, ends = bounds[:-1], bounds[1:]
    shuffled = rng.permutation(len(starts))
    times = rng.integers(-10, int(bounds[-1]) + 10, 500)
    got = step_of(times, starts[shuffled], ends[shuffled])
    for t, g in zip(times.tolist(), got.tolist()):
        holding = [i for i, k in enumerate(shuffled) if starts[k] <= t < ends[k]]
        assert g == (holding[0] if holding else -1)


def test_many_sizes_group_into_power_of_two_ranges():
    sizes = np.array([1000, 1500, 2048, 3000, 5000, 9000, 17000, 40000, 70000, 130000, 300000, 600000, 1 << 20, -1])
    ns = np.arange(1, len(sizes) + 1, dtype=np.int64) * 1000
    rows = by_size(ns, sizes, "allgather", 4)
    for row in rows:
        assert not row["exact"] and row["msg_bytes_max"] == 2 * row["msg_bytes_min"]
        mine = [(s, t) for s, t in zip(sizes.tolist(), ns.tolist()) if row["msg_bytes_min"] <= s < row["msg_bytes_max"]]
        assert row["count"] == len(mine)
        assert row["busbw_gbps"] == pytest.approx(sum(s for s, _ in mine) / sum(t for _, t in mine) * 3 / 4)
    assert sum(r["count"] for r in rows) == len(sizes) - 1  # the unknown size is left out
