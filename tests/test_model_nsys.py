"""The nsys reader fills the trace model: every table, both export schemas.

Oracles: the export itself read with plain SQL (row counts, sums, the
distinct strings), never the reader's own queries.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from profkit.model import schema
from profkit.readers import open_trace
from profkit.readers.nsys import NsysExport
from tests.conftest import nsys_fixture, nsys_fixture_names

FIXTURES = nsys_fixture_names()
RANGE_TYPES = "59, 60, 70, 71"
# model table -> (nsys table, WHERE) whose rows it holds one for one
ROWS = {
    "kernels": ("CUPTI_ACTIVITY_KIND_KERNEL", "1"),
    "memcpy": ("CUPTI_ACTIVITY_KIND_MEMCPY", "1"),
    "memset": ("CUPTI_ACTIVITY_KIND_MEMSET", "1"),
    "api": ("CUPTI_ACTIVITY_KIND_RUNTIME", "1"),
    "ranges": ("NVTX_EVENTS", f"eventType IN ({RANGE_TYPES})"),
    "syncs": ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "1"),
    "osrt": ("OSRT_API", "eventClass = 27"),  # the calls osrt_sum counts
    "processes": ("PROCESSES", "1"),
    "threads": ("ThreadNames", "1"),
    "devices": ("TARGET_INFO_GPU", "1"),
}


def sql(name: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{nsys_fixture(name)}?mode=ro&immutable=1", uri=True)


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.fixture(scope="module", params=FIXTURES)
def loaded(request):
    trace = open_trace(nsys_fixture(request.param))
    yield request.param, trace
    trace.close()


def test_native_handle_and_meta(loaded):
    name, trace = loaded
    assert isinstance(trace.native, NsysExport)
    meta = trace.meta
    assert meta.source == "nsys"
    with sql(name) as conn:
        export_meta = dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT"))
        start, stop = conn.execute("SELECT startTime, stopTime FROM ANALYSIS_DETAILS").fetchone()
        utc = conn.execute("SELECT utcTime FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    assert meta.tool_version == export_meta["EXPORT_PRODUCT_VERSION"]
    assert meta.schema_version == export_meta["EXPORT_SCHEMA_VERSION"]
    assert (meta.capture_start_ns, meta.capture_end_ns) == (start, stop)
    assert meta.session_start_utc == utc
    assert set(meta.traced) == {"cuda", "nvtx", "osrt"}
    new = name.startswith("nsys2025")
    assert meta.rounding_mode == ("decimal-half-up" if new else "sqlite-legacy")
    assert meta.nvtx_default_domain_prefix is new


def test_every_table_has_the_export_rows_and_the_model_kinds(loaded):
    name, trace = loaded
    with sql(name) as conn:
        present = tables(conn)
        for table, (nsys_table, where) in ROWS.items():
            frame = trace.table(table)
            assert list(frame.columns) == list(schema.column_names(table))
            expected = conn.execute(f"SELECT count(*) FROM {nsys_table} WHERE {where}").fetchone()[0] \
                if nsys_table in present else 0
            assert len(frame) == expected, (table, nsys_table)
            assert trace.has(table) is (nsys_table in present)
            for column in schema.TABLES[table]:
                dtype = frame[column.name].dtype
                if column.kind == schema.INT:
                    # int32 where the schema narrows it (every value of a real export fits)
                    want = np.int32 if schema.is_narrow(table, column.name) else np.int64
                    assert dtype == want, (table, column.name, dtype)
                elif column.kind == schema.CATEGORY:
                    assert isinstance(dtype, pd.CategoricalDtype), (table, column.name, dtype)
                    assert not frame[column.name].isna().any(), (table, column.name)
    assert not trace.has("cpu_ops") and len(trace.table("cpu_ops")) == 0


def test_kernel_columns_equal_the_export(loaded):
    name, trace = loaded
    k = trace.table("kernels")
    with sql(name) as conn:
        rows = conn.execute("""SELECT k.start, k."end", k.deviceId, k.streamId, k.correlationId,
                (k.globalPid >> 24) & 16777215, d.value, s.value, k.gridX, k.blockX, k.registersPerThread,
                k.staticSharedMemory, k.dynamicSharedMemory, k.sharedMemoryExecuted, k.localMemoryPerThread
            FROM CUPTI_ACTIVITY_KIND_KERNEL AS k JOIN StringIds AS d ON d.id = k.demangledName
            JOIN StringIds AS s ON s.id = k.shortName ORDER BY k.rowid""").fetchall()
    got = list(zip(k.start, k["end"], k.device, k.stream, k.correlation, k.pid, k.name, k.short_name, k.grid_x,
                   k.block_x, k.registers_per_thread, k.static_smem_bytes, k.dynamic_smem_bytes,
                   k.smem_config_bytes, k.local_memory_per_thread))
    assert [tuple(r) for r in got] == [tuple(r) for r in rows]


def test_api_names_layers_and_threads(loaded):
    name, trace = loaded
    api = trace.table("api")
    with sql(name) as conn:
        rows = conn.execute("""SELECT r.start, r.correlationId, r.globalTid & 16777215, s.value, r.eventClass
            FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s ON s.id = r.nameId
            ORDER BY r.rowid""").fetchall()
    assert list(api.start) == [r[0] for r in rows]
    assert list(api.correlation) == [r[1] for r in rows]
    assert list(api.tid) == [r[2] for r in rows]
    # cuda_api_sum's rule: a "_v" + 4 characters suffix is dropped.
    assert list(api.name) == [r[3][:-6] if r[3][-6:-4] == "_v" else r[3] for r in rows]
    assert list(api.layer) == [{0: "runtime", 1: "driver"}[r[4]] for r in rows]


def test_memory_labels(loaded):
    name, trace = loaded
    m = trace.table("memcpy")
    with sql(name) as conn:
        if "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables(conn):
            pytest.skip("no memcpy")
        rows = conn.execute("""SELECT m.bytes, o.label, sk.label, dk.label FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m
            JOIN ENUM_CUDA_MEMCPY_OPER AS o ON o.id = m.copyKind
            JOIN ENUM_CUDA_MEM_KIND AS sk ON sk.id = m.srcKind JOIN ENUM_CUDA_MEM_KIND AS dk ON dk.id = m.dstKind
            ORDER BY m.rowid""").fetchall()
    assert [tuple(r) for r in zip(m.bytes, m.copy_kind, m.src_kind, m.dst_kind)] == [tuple(r) for r in rows]


def test_ranges_text_domain_style_and_sync_sites(loaded):
    name, trace = loaded
    r = trace.table("ranges")
    with sql(name) as conn:
        if "NVTX_EVENTS" not in tables(conn):
            assert len(r) == 0  # an unannotated program: no ranges
            return
        rows = conn.execute(f"""SELECT coalesce((SELECT value FROM StringIds WHERE id = ne.textId), ne.text, ''),
                coalesce((SELECT coalesce((SELECT value FROM StringIds WHERE id = dc.textId), dc.text)
                          FROM NVTX_EVENTS AS dc WHERE dc.eventType = 75 AND dc.domainId = ne.domainId
                          AND (dc.globalTid >> 24) = (ne.globalTid >> 24) ORDER BY dc.start LIMIT 1), ''),
                CASE WHEN ne.eventType IN (59, 70) THEN 'PushPop' ELSE 'StartEnd' END, coalesce(ne."end", -1)
            FROM NVTX_EVENTS AS ne WHERE ne.eventType IN ({RANGE_TYPES}) ORDER BY ne.rowid""").fetchall()
    assert [tuple(x) for x in zip(r.name, r.domain, r["style"], r["end"])] == [tuple(x) for x in rows]
    sites = [n.startswith("profkit.sync|") for n in r.name]
    assert list(r.kind) == ["sync_site" if s else "nvtx" for s in sites]
    assert (r.device == -1).all() and (r.stream == -1).all()


def test_sync_sites_of_the_hook_fixtures():
    # The print run: one `.item()` site per step (20) at train_mlp.py:59, and
    # torch.cuda.synchronize() at lines 50 and 63.
    with open_trace(nsys_fixture("nsys2025_train_print")) as trace:
        r = trace.table("ranges", ["name", "kind", "domain"])
        sites = r[r.kind == "sync_site"]
        assert set(sites.domain) == {"profkit.sync"}
        assert sum(":59|" in n for n in sites.name) == 20
        assert len(sites) == 22


def test_syncs_and_devices(loaded):
    name, trace = loaded
    s = trace.table("syncs")
    with sql(name) as conn:
        rows = conn.execute("""SELECT start, correlationId, deviceId, streamId, syncType
            FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ORDER BY rowid""").fetchall()
        gpu = conn.execute("SELECT id, name, smCount, computeMajor, memoryBandwidth, maxShmemPerBlockOptin "
                           "FROM TARGET_INFO_GPU").fetchall()
    assert [tuple(x) for x in zip(s.start, s.correlation, s.device, s.stream)] == [r[:4] for r in rows]
    # schema 3.20 syncType values do not fit its own ENUM table's labels (readers/nsys/sync.py)
    labels = ({1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync"}
              if name.startswith("nsys2023") else {})
    assert list(s.sync_type) == [labels.get(r[4], f"CUPTI sync type {r[4]}") for r in rows]
    d = trace.devices
    assert [tuple(x) for x in zip(d.device, d.name, d.sm_count, d.cc_major, d.memory_bandwidth_bps,
                                  d.max_shared_memory_per_block)] == [tuple(g) for g in gpu]


def test_columns_load_separately_and_line_up():
    with open_trace(nsys_fixture("nsys2025_gelu")) as trace:
        names = trace.table("kernels", ["name"])
        times = trace.table("kernels", ["start", "end"])
        both = trace.table("kernels", ["name", "start"])
        assert list(both.name) == list(names.name) and list(both.start) == list(times.start)
        assert trace.count("kernels") == len(names) == 792


def test_prefetched_columns_equal_the_export():
    """Trace.prefetch loads on a background thread through its own connection; the
    columns it leaves equal the export's rows, while the foreground reads other tables."""
    name = "nsys2025_train_print"
    with open_trace(nsys_fixture(name)) as trace:
        assert trace.prefetch("api", ["start", "end", "pid", "tid", "correlation", "name"])
        kernels = trace.table("kernels", ["start", "correlation"])  # meanwhile, on the reader's connection
        api = trace.table("api", ["start", "tid", "correlation", "name", "duration"])
        with sql(name) as conn:
            rows = conn.execute("""SELECT r.start, r."end", r.globalTid & 16777215, r.correlationId, s.value
                FROM CUPTI_ACTIVITY_KIND_RUNTIME AS r JOIN StringIds AS s ON s.id = r.nameId
                ORDER BY r.rowid""").fetchall()
            kernel_rows = conn.execute("SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                       "ORDER BY rowid").fetchall()
    assert list(api.start) == [r[0] for r in rows]
    assert list(api.duration) == [r[1] - r[0] for r in rows]
    assert list(api.tid) == [r[2] for r in rows]
    assert list(api.correlation) == [r[3] for r in rows]
    assert list(api.name) == [r[4][:-6] if r[4][-6:-4] == "_v" else r[4] for r in rows]
    assert list(zip(kernels.start, kernels.correlation)) == kernel_rows


def test_prefetch_in_order_loads_each_table_once_and_skips_loads_under_way():
    """The report's loading: kernels then API calls on one background thread.  Reads of
    either wait for that table's own load; a second prefetch of a table being loaded is
    no second load; the columns equal a foreground load's."""
    name = "nsys2025_train_print"
    kernel_columns, api_columns = ["start", "end", "correlation", "name"], ["start", "tid", "correlation"]
    with open_trace(nsys_fixture(name)) as expected:
        want_kernels = expected.table("kernels", kernel_columns)
        want_api = expected.table("api", api_columns)
    with open_trace(nsys_fixture(name)) as trace:
        assert trace.prefetch_in_order([("kernels", kernel_columns), ("api", api_columns)])
        assert not trace.prefetch("api", api_columns)  # under way, or done: never loaded twice
        pd.testing.assert_frame_equal(trace.table("kernels", kernel_columns), want_kernels)
        pd.testing.assert_frame_equal(trace.table("api", api_columns), want_api)
        assert not trace.prefetch_in_order([("kernels", kernel_columns)])  # all cached


def test_prefetch_whose_second_handle_fails_leaves_the_foreground_to_read():
    """A background handle that cannot be opened costs nothing: the locks are released and
    the foreground reads the tables itself."""
    name = "nsys2025_train_print"
    with open_trace(nsys_fixture(name)) as trace:
        def broken() -> None:
            raise OSError("no second handle")

        trace.source.background_source = broken  # type: ignore[attr-defined]
        assert trace.prefetch_in_order([("kernels", ["start"]), ("api", ["start"])])
        assert trace.count("kernels") == len(trace.table("kernels", ["start"])) > 0
        assert len(trace.table("api", ["start"])) > 0
