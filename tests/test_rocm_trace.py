"""A ROCm (HIP) Kineto trace: Holistic Trace Analysis's MI250 trace (tests/data/hta_rocm, MIT).

Issue 24's rough edges on it: the report said "CUDA kernels", "CUDA: hipLaunchKernel" and
"Host-to-Device (2 operations, -2 B)".  The oracle is the raw JSON, read here directly:
its runtime calls are hip*, and its gpu_memcpy events carry no bytes argument."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from profkit.analysis.kernels import summaries
from profkit.readers import open_trace
from profkit.report import write_report
from tests.conftest import DATA, nsys_fixture

ROCM = DATA / "hta_rocm" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
CUDA_KINETO = DATA / "kineto" / "mlp_plain.json.gz"


def _raw_events(cat: str) -> list[dict]:
    with gzip.open(ROCM, "rt") as fh:
        return [e for e in json.load(fh)["traceEvents"] if e.get("cat") == cat and e.get("ph") == "X"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    paths = write_report(ROCM, tmp_path_factory.mktemp("rocm"))
    return {"json": json.loads(paths.json.read_text()), "md": paths.md.read_text(), "html": paths.html.read_text()}


def test_the_fixture_is_a_hip_trace_without_copy_sizes():
    calls = _raw_events("cuda_runtime")
    assert calls and all(e["name"].startswith("hip") for e in calls)
    copies = _raw_events("gpu_memcpy")
    assert len(copies) == 2 and all("bytes" not in e["args"] for e in copies)


def test_platform_is_read_from_the_trace():
    with open_trace(ROCM) as t:
        assert t.meta.gpu_platform == "HIP"
    with open_trace(CUDA_KINETO) as t:
        assert t.meta.gpu_platform == "CUDA"
    with open_trace(nsys_fixture("nsys2023_vector_add")) as t:
        assert t.meta.gpu_platform == "CUDA"


def test_report_names_hip_in_headings_and_labels(report):
    sections = report["json"]["sections"]
    assert sections["kernels"]["title"] == "HIP kernels" and sections["api"]["title"] == "HIP API"
    assert "## HIP kernels" in report["md"] and "## HIP API" in report["md"]
    assert "HIP: hipLaunchKernel" in report["md"]
    # no heading or label calls the trace CUDA; kernel names (at::native::CUDAFunctor_add) keep theirs
    assert not re.search(r"CUDA (kernels|API|stream|call)|CUDA: hip|\[CUDA mem", report["md"] + report["html"])


def test_copy_sizes_are_unknown_not_minus_one(report):
    rows = summaries.memory_summary(open_trace(ROCM))
    (row,) = rows
    assert row["name"] == "[HIP memcpy Host-to-Device]" and row["instances"] == len(_raw_events("gpu_memcpy"))
    assert all(row[k] is None for k in ("total_bytes", "avg_bytes", "med_bytes", "min_bytes", "max_bytes"))
    (json_row,) = report["json"]["sections"]["memory"]["tables"]["memory"]["rows"]
    assert json_row["total_bytes"] is None and json_row["min_bytes"] is None
    assert "2 operations, size unknown" in report["md"]
    assert "| Host-to-Device | 2 | unknown |" in report["md"]
    assert not re.search(r"-\d+ B\b", report["md"] + report["html"])
    assert not re.search(r'"[a-z_]*bytes": -\d', json.dumps(report["json"]))


def test_export_writes_an_unknown_size_as_null(tmp_path):
    from click.testing import CliRunner

    from profkit.cli import cli

    out = tmp_path / "rocm.json"
    result = CliRunner().invoke(cli, ["export", str(ROCM), "-o", str(out)])
    assert result.exit_code == 0, result.output
    copies = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert len(copies) == 2 and all(e["args"]["bytes"] is None for e in copies)


def test_top_n_keeps_an_unknown_size_unknown():
    rows = [{"name": n, "total_ns": t, "instances": 1, "total_bytes": b, "min_bytes": b}
            for n, t, b in (("a", 30, 100), ("b", 20, None), ("c", 10, 50))]
    (_, other) = summaries.top_n(rows, 1)
    assert other["total_ns"] == 30 and other["total_bytes"] is None and other["min_bytes"] is None
    (_, known) = summaries.top_n([rows[0], rows[2], dict(rows[2], name="d")], 1)
    assert known["total_bytes"] == 100 and known["min_bytes"] == 50


def test_kernels_and_api_tables_name_hip():
    from click.testing import CliRunner

    from profkit.cli import cli

    for command, title in (("kernels", "HIP kernels"), ("api", "HIP API")):
        first = CliRunner().invoke(cli, [command, str(ROCM), "--top", "2"]).output.splitlines()[0]
        assert title in first and "CUDA" not in first, first
    # a CUDA trace keeps its name
    first = CliRunner().invoke(cli, ["kernels", str(CUDA_KINETO), "--top", "1"]).output.splitlines()[0]
    assert "CUDA kernels" in first, first


def test_hip_synchronizing_calls_are_found():
    """HIP's calls mirror CUDA's: hipDeviceSynchronize synchronizes, hipMemcpyWithStream (from
    host memory) blocks; the raw trace holds one of the first and two of the second.  The later
    copy is followed on its thread by launches, then the sync 8.6 ms on: two acts, not one
    ``.item()``-like pair (it was read as "hipMemcpyWithStream + hipDeviceSynchronize")."""
    import json as json_module

    from click.testing import CliRunner

    from profkit.cli import cli

    calls = sorted(_raw_events("cuda_runtime"), key=lambda e: e["ts"])
    syncs = [e for e in calls if e["name"] == "hipDeviceSynchronize"]
    copies = [e for e in calls if e["name"] == "hipMemcpyWithStream"]
    assert len(syncs) == 1 and len(copies) == 2
    last_copy = copies[-1]
    between = [e["name"] for e in calls
               if e["tid"] == last_copy["tid"] and last_copy["ts"] < e["ts"] < syncs[0]["ts"]]
    assert sum("Launch" in name for name in between) >= 2 and "hipMemcpyWithStream" not in between
    out = CliRunner().invoke(cli, ["stalls", str(ROCM), "--format", "json"]).output
    rows = json_module.loads(out)["rows"]
    assert sorted(r["api"] for r in rows) == ["hipDeviceSynchronize", "hipMemcpyWithStream"]
    counts = {r["api"]: r["count"] for r in rows}
    assert counts == {"hipDeviceSynchronize": 1, "hipMemcpyWithStream": 2}
    assert next(r["copy"] for r in rows if r["api"] == "hipMemcpyWithStream") == "Host-to-Device"


def test_breakdown_idle_stretches_name_hip_calls():
    from click.testing import CliRunner

    from profkit.cli import cli

    out = CliRunner(env={"COLUMNS": "200"}).invoke(cli, ["breakdown", str(ROCM)]).output
    assert "HIP: hipLaunchKernel" in out and "CUDA: hip" not in out
