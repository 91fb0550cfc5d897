"""open_export: schema detection on real exports of both nsys versions, read-only opening, helpers."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from profkit.analysis.kernels import summaries
from profkit.analysis.timeline.capture import capture_info
from profkit.analysis.timeline.intervals import union_length
from profkit.cli import cli
from profkit.errors import ProfkitError
from profkit.readers import open_trace
from profkit.readers.nsys import NsysExport, decode_global_tid, normalize_api_name, open_export
from profkit.readers.nsys.model_source import trace_of_export
from profkit.readers.nsys.reader import api_name_sql, pid_sql, tid_sql
from profkit.model.trace import DECIMAL_HALF_UP, SQLITE_LEGACY
from tests.conftest import default_run, nsys_fixture, nsys_fixture_names, recorded_gpu_name

FIXTURES = nsys_fixture_names()


@pytest.mark.parametrize(
    "name, nsys_year, schema, rounding",
    [("nsys2025_gelu", "2025.3", "3.20", DECIMAL_HALF_UP), ("nsys2023_vector_add", "2023.4", "3.7", SQLITE_LEGACY)],
)
def test_versions_are_detected(name: str, nsys_year: str, schema: str, rounding: str) -> None:
    with open_export(nsys_fixture(name)) as export:
        assert isinstance(export, NsysExport)
        assert export.nsys_version.startswith(nsys_year)
        assert export.schema_version.startswith(schema + ".")
        assert export.rounding_mode == rounding
        assert {"StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS"} <= export.tables
        assert export.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") and not export.has_table("NO_SUCH_TABLE")
        assert {"start", "end", "demangledName", "correlationId"} <= export.columns("CUPTI_ACTIVITY_KIND_KERNEL")
        assert export.columns("NO_SUCH_TABLE") == set()


@pytest.mark.parametrize("name", default_run(FIXTURES))
def test_reading_never_touches_the_file(tmp_path: Path, name: str) -> None:
    src = nsys_fixture(name)
    path = tmp_path / "run.sqlite"
    path.write_bytes(src.read_bytes())
    path.chmod(0o444)  # a read-only file must be enough
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    runner = CliRunner()
    with open_export(path) as export:
        has_nvtx = export.has_table("NVTX_EVENTS")
        if has_nvtx:
            summaries.nvtx_kernel_summary(trace_of_export(export))
        summaries.memory_summary(trace_of_export(export))
    for command in ("kernels", "api", "nvtx", "info"):
        result = runner.invoke(cli, [command, str(path), "--format", "json"])
        if command == "nvtx" and not has_nvtx:  # an unannotated program: one line saying so
            assert result.exit_code == 2 and "no NVTX data" in result.stderr, result.output
            continue
        assert result.exit_code == 0, result.output
        json.loads(result.stdout)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(os.listdir(tmp_path)) == ["run.sqlite"]  # no -journal, -wal or -shm


def test_connection_is_read_only() -> None:
    with open_export(nsys_fixture("nsys2025_sync")) as export:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            export.conn.execute("CREATE TABLE x(a)")
        export.execute("CREATE TEMP TABLE scratch(a)")  # temp tables are fine


def test_context_manager_closes() -> None:
    with open_export(nsys_fixture("nsys2025_sync")) as export:
        pass
    with pytest.raises(sqlite3.ProgrammingError):
        export.conn.execute("SELECT 1")


def test_require_names_the_missing_trace_option() -> None:
    with open_export(nsys_fixture("nsys2025_sync")) as export:
        export.require("CUPTI_ACTIVITY_KIND_KERNEL", "CUDA kernel data", "cuda")  # present: no error
        with pytest.raises(ProfkitError) as err:
            export.require("OSRT_API_MISSING", "OS runtime data", "osrt")
    line = err.value.one_line()
    assert "OS runtime data" in line and "OSRT_API_MISSING" in line and "-t osrt" in line
    assert "\n" not in line


@pytest.mark.parametrize("name", ["nsys2025_sync", "nsys2023_vector_add"])
def test_global_tid_layout_matches_processes_table(name: str) -> None:
    with open_export(nsys_fixture(name)) as export:
        for global_pid, pid in export.rows("SELECT globalPid, pid FROM PROCESSES"):
            assert decode_global_tid(global_pid) == (pid, 0)
        # The SQL and Python decodings agree on every launching thread, and the
        # thread of the main Python process is the process itself (tid == pid).
        rows = export.rows(
            f"SELECT DISTINCT globalTid, {pid_sql('globalTid')}, {tid_sql('globalTid')} FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        assert rows
        for global_tid, pid, tid in rows:
            assert decode_global_tid(global_tid) == (pid, tid)
        pids = {pid for _, pid, _ in rows}
        assert any((pid, pid) in {(p, t) for _, p, t in rows} for pid in pids)


def test_api_name_normalization_matches_nsys() -> None:
    assert normalize_api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert normalize_api_name("cudaMalloc_v3020") == "cudaMalloc"
    assert normalize_api_name("cuLibraryLoadData") == "cuLibraryLoadData"
    assert normalize_api_name("cudaFoo_v12") == "cudaFoo_v12"  # nsys strips exactly "_v" + 4 characters
    with open_export(nsys_fixture("nsys2025_gelu")) as export:
        raw = [r[0] for r in export.rows(
            "SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId")]
        assert "cudaLaunchKernel_v7000" in raw
        for value in raw:
            (in_sql,) = export.rows(f"SELECT {api_name_sql(':v')}", {"v": value})[0]
            assert in_sql == normalize_api_name(value)


@pytest.mark.parametrize("name", ["nsys2025_gelu", "nsys2023_sync"])
def test_nvtx_text_resolves_inline_text_and_string_ids(name: str) -> None:
    with open_export(nsys_fixture(name)) as export:
        text = export.nvtx_text_sql("ne")
        # Domain creations keep their text inline; 2025.3 ranges use textId.
        domains = {r[0] for r in export.rows(f"SELECT {text} FROM NVTX_EVENTS AS ne WHERE eventType = 75")}
        assert "samples" in domains
        if export.scalar("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59"):
            assert export.scalar("SELECT count(text) FROM NVTX_EVENTS WHERE eventType = 59") == 0
            ranges = {r[0] for r in export.rows(f"SELECT {text} FROM NVTX_EVENTS AS ne WHERE eventType = 59")}
            assert None not in ranges and ranges


def test_strings_resolves_ids_in_bulk() -> None:
    with open_export(nsys_fixture("nsys2025_gelu")) as export:
        ids = [r[0] for r in export.rows("SELECT id FROM StringIds LIMIT 1200")]
        resolved = export.strings(ids + [None])
        assert len(resolved) == len(set(ids))
        assert resolved[ids[0]] == export.scalar("SELECT " + export.string_sql("?"), (ids[0],))


@pytest.mark.parametrize("name", FIXTURES)
def test_capture_info_never_leaks_the_environment(name: str) -> None:
    with open_trace(nsys_fixture(name)) as trace:
        info = capture_info(trace)
    with open_export(nsys_fixture(name)) as export:
        secrets = {r[0] for r in export.rows("SELECT value FROM TARGET_INFO_SYSTEM_ENV")}
        secrets |= {r[0] for r in export.rows(
            "SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%ENVIRONMENT_VARIABLE%'")}
    dumped = json.dumps(info)
    leaked = [s for s in secrets if isinstance(s, str) and len(s) >= 12 and s in dumped]
    assert not leaked
    assert "ENVIRONMENT" not in dumped and "DeviceEnvironment" not in dumped
    assert info["gpu_name"] == recorded_gpu_name(name) and info["sm_count"] == 132
    assert info["compute_capability"] == "9.0"
    assert info["driver_version"] == "580.159.04"
    assert 0 < info["gpu_busy_pct"] <= 100
    assert info["counts"]["kernels"] == sum(r["instances"] for r in summaries.kernel_summary(open_trace(
        nsys_fixture(name))))


def test_gpu_busy_counts_overlap_once() -> None:
    import numpy as np

    starts = np.array([0, 5, 20, 22, 40], dtype=np.int64)
    ends = np.array([10, 8, 30, 25, 41], dtype=np.int64)
    assert union_length(starts, ends) == 10 + 10 + 1
    assert union_length(starts[::-1].copy(), ends[::-1].copy()) == 21


def test_global_pid_sql_keeps_the_process_bits() -> None:
    """The SQL mask must stay an integer: a decimal literal above 2**63 turns into a float."""
    from profkit.readers.nsys.reader import global_pid_sql

    with open_export(nsys_fixture("nsys2025_gelu")) as export:
        global_tid = export.scalar("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1")
    got = sqlite3.connect(":memory:").execute(f"SELECT {global_pid_sql('?')}", (global_tid,)).fetchone()[0]
    assert got == global_tid & 0xFFFFFFFFFF000000
    assert decode_global_tid(got) == (decode_global_tid(global_tid)[0], 0)
