"""An nsys SQLite export as a trace model source (``profkit.model.Trace``).

``open_nsys_trace(path)`` wraps ``open_export``; the ``NsysExport`` stays the
trace's ``native`` handle.  ``NsysSource.load(table, columns)`` reads only the
asked columns, each as an SQL expression over one nsys table:

- integer columns leave SQLite through ``stats.collect_columns`` (chunked
  ``group_concat`` scans parsed by numpy, several connections at once on big
  tables), in rowid order, so columns loaded at different times line up;
- text columns stored as StringIds keys (kernel, API and thread names) are
  scanned as integers, encoded densely (``model.keys.encode_keys``) and only the
  distinct keys are looked up in StringIds: a million kernels of 300 names
  cost 300 string lookups;
- enum columns (copy kind, memory kind, sync type) are mapped through the
  export's ENUM_* label tables, as ``profkit.readers.nsys.sync`` labels them.

Which nsys table fills which model table (both schema 3.7 / nsys 2023.4 and
3.20 / nsys 2025.3):

==========  =====================================================
devices     TARGET_INFO_GPU (limits via ``launches.gpu_info``)
kernels     CUPTI_ACTIVITY_KIND_KERNEL
memcpy      CUPTI_ACTIVITY_KIND_MEMCPY (+ ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND)
memset      CUPTI_ACTIVITY_KIND_MEMSET (+ ENUM_CUDA_MEM_KIND)
graphs      CUPTI_ACTIVITY_KIND_GRAPH_TRACE (``--cuda-graph-trace=graph``: one row
            per replay; nsys 2023.4 writes no such table)
api         CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver: eventClass 0 / 1)
ranges      NVTX_EVENTS push/pop and start/end ranges (+ domain-create events)
syncs       CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (+ ENUM_CUPTI_SYNC_TYPE)
osrt        OSRT_API calls (eventClass 27, as osrt_sum counts them)
python_frames  NVTX_EVENTS eventType 34 with their payload blobs (``python_samples``)
python_sites   each API call's user frame, from a Python sample taken while it ran
memory      CUDA_GPU_MEMORY_USAGE_EVENTS (``--cuda-memory-usage=true``: the driver's
            device allocations, ``memory_usage``)
processes   PROCESSES
threads     ThreadNames
==========  =====================================================

Never read: TARGET_INFO_SYSTEM_ENV and the environment rows of
META_DATA_CAPTURE (the profiled process's environment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profkit.errors import ProfkitError
from profkit.model import schema
from profkit.model.cuda_labels import DRIVER_MEMORY_LEVEL, normalize_api_name
from profkit.model.keys import FIRST, NULL_INT, encode_keys, encode_rows
from profkit.model.sync_sites import PREFIX as SYNC_SITE_PREFIX
from profkit.model.trace import DURATION, NSYS, Coded, Trace, TraceMeta, narrowed
from profkit.readers.nsys import launches, memory_usage, nccl_messages, nccl_payload, python_samples, queries, sync
from profkit.readers.nsys.details import capture_details
from profkit.readers.nsys.reader import (
    GLOBAL_TID_ID_MASK,
    GLOBAL_TID_PID_SHIFT,
    NsysExport,
    open_export,
    pid_sql,
    tid_sql,
)
from profkit.readers.nsys.stats import ColumnsQuery, collect_columns

# -- column specs ----------------------------------------------------------------
# An integer column: an SQL expression (NULL -> -1).
INT = "int"
# A text column stored as a StringIds key: the key's expression.
STRING_ID = "string_id"
# A text column stored as an enum: the expression of the enum value; labels from a function of the export.
ENUM = "enum"
# A text column stored inline (few rows only: it leaves SQLite row by row).
TEXT = "text"


@dataclass(frozen=True)
class Spec:
    kind: str
    sql: str | None          # None: the source lacks it (filled with the missing value)
    labels: Callable[[NsysExport], dict[int, str]] | None = None
    rename: Callable[[str], str] | None = None  # applied to each distinct string (API names)
    # pid and tid packed in one globalTid: (the column's SQL, shift).  The column is read
    # once and both are cut out of it in numpy: a 2.5M-row column read costs ~0.2 s.
    packed: tuple[str, int] | None = None


@dataclass
class TableSpec:
    table: str                # the nsys table scanned
    where: str = "1"
    columns: dict[str, Spec] = field(default_factory=dict)


def _col(export: NsysExport, table: str, column: str, sql: str | None = None) -> str | None:
    """``sql`` (default: the quoted column) when ``table`` has ``column``, else None."""
    return (sql or f'"{column}"') if export.has_column(table, column) else None


def _int(export: NsysExport, table: str, column: str, sql: str | None = None) -> Spec:
    return Spec(INT, _col(export, table, column, sql))


def _pid(export: NsysExport, table: str, column: str) -> Spec:
    return Spec(INT, _col(export, table, column, pid_sql(column)), packed=(f'"{column}"', GLOBAL_TID_PID_SHIFT))


def _tid(export: NsysExport, table: str, column: str) -> Spec:
    return Spec(INT, _col(export, table, column, tid_sql(column)), packed=(f'"{column}"', 0))


def _activity(export: NsysExport, table: str) -> dict[str, Spec]:
    """The columns every GPU activity table shares."""
    return {
        "start": _int(export, table, "start"), "end": _int(export, table, "end"),
        "device": _int(export, table, "deviceId"), "stream": _int(export, table, "streamId"),
        "pid": _pid(export, table, "globalPid"), "correlation": _int(export, table, "correlationId"),
    }


def _kernels(export: NsysExport) -> TableSpec:
    t = queries.KERNELS.table
    cols = _activity(export, t)
    cols.update({
        # cuda_gpu_kern_sum groups by demangledName; shortName is the base name.
        "name": Spec(STRING_ID, _col(export, t, "demangledName")),
        "short_name": Spec(STRING_ID, _col(export, t, "shortName") or _col(export, t, "demangledName")),
        "grid_x": _int(export, t, "gridX"), "grid_y": _int(export, t, "gridY"), "grid_z": _int(export, t, "gridZ"),
        "block_x": _int(export, t, "blockX"), "block_y": _int(export, t, "blockY"),
        "block_z": _int(export, t, "blockZ"),
        "registers_per_thread": _int(export, t, "registersPerThread"),
        "static_smem_bytes": _int(export, t, "staticSharedMemory"),
        "dynamic_smem_bytes": _int(export, t, "dynamicSharedMemory"),
        "smem_config_bytes": _int(export, t, "sharedMemoryExecuted"),
        "local_memory_per_thread": _int(export, t, "localMemoryPerThread"),
        "graph_node_id": _int(export, t, "graphNodeId"),
    })
    # Not columns of the export (schema.KERNELS says why): unknown, not 0; collective, msg_bytes
    # and group_size are then filled from NCCL's NVTX payloads where exported (NsysSource._nccl).
    cols.update({c: Spec(INT, None) for c in ("msg_in_nelems", "msg_out_nelems", "msg_bytes", "group_size")})
    cols.update({c: Spec(STRING_ID, None) for c in ("collective", "msg_dtype", "process_group")})
    return TableSpec(t, columns=cols)


def _memcpy(export: NsysExport) -> TableSpec:
    t = queries.MEMCPY.table
    cols = _activity(export, t)
    cols.update({
        "bytes": _int(export, t, "bytes"),
        "copy_kind": Spec(ENUM, _col(export, t, "copyKind"), sync.copy_kind_labels),
        "src_kind": Spec(ENUM, _col(export, t, "srcKind"), sync.mem_kind_labels),
        "dst_kind": Spec(ENUM, _col(export, t, "dstKind"), sync.mem_kind_labels),
    })
    return TableSpec(t, columns=cols)


def _memset(export: NsysExport) -> TableSpec:
    t = queries.MEMSET.table
    cols = _activity(export, t)
    cols.update({
        "bytes": _int(export, t, "bytes"),
        "dst_kind": Spec(ENUM, _col(export, t, "memKind"), sync.mem_kind_labels),
    })
    return TableSpec(t, columns=cols)


GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"


def _graphs(export: NsysExport) -> TableSpec:
    t = GRAPH_TRACE
    cols = _activity(export, t)
    cols.update({
        "graph_id": _int(export, t, "graphId"), "graph_exec_id": _int(export, t, "graphExecId"),
        # a label that reads like a kernel name: "CUDA graph 4"
        "name": Spec(ENUM, _col(export, t, "graphId"), _graph_labels),
    })
    return TableSpec(t, columns=cols)


def _graph_labels(export: NsysExport) -> dict[int, str]:
    ids = export.rows(f'SELECT DISTINCT graphId FROM "{GRAPH_TRACE}"')
    return {int(v): f"CUDA graph {int(v)}" for (v,) in ids if v is not None}


# ENUM_NSYS_EVENT_CLASS: 0 "CUDA runtime", 1 "CUDA driver" (same ids in 3.7 and 3.20).
_LAYERS = {0: "runtime", 1: "driver"}


def _api(export: NsysExport) -> TableSpec:
    t = queries.RUNTIME.table
    layer = (Spec(ENUM, _col(export, t, "eventClass"), lambda _: dict(_LAYERS)) if
             export.has_column(t, "eventClass") else
             # No eventClass: driver calls are the cu* names that are not cuda*.
             Spec(STRING_ID, _col(export, t, "nameId"),
                  rename=lambda n: "driver" if n.startswith("cu") and not n.startswith("cuda") else "runtime"))
    return TableSpec(t, columns={
        "start": _int(export, t, "start"), "end": _int(export, t, "end"),
        "pid": _pid(export, t, "globalTid"), "tid": _tid(export, t, "globalTid"),
        "correlation": _int(export, t, "correlationId"),
        # Suffix stripped as cuda_api_sum prints it (cudaLaunchKernel_v7000 -> cudaLaunchKernel).
        "name": Spec(STRING_ID, _col(export, t, "nameId"), rename=normalize_api_name),
        "layer": layer,
    })


def _ranges(export: NsysExport) -> TableSpec:
    t = queries.NVTX.table
    types = ", ".join(map(str, queries.NVTX_RANGE_TYPES))
    push_pop = (queries.NVTX_PUSHPOP_RANGE, queries.NVTXT_PUSHPOP_RANGE)
    start_end = (queries.NVTX_STARTEND_RANGE, queries.NVTXT_STARTEND_RANGE)
    styles = {**{v: "PushPop" for v in push_pop}, **{v: "StartEnd" for v in start_end}}
    return TableSpec(t, where=f"eventType IN ({types})", columns={
        "start": _int(export, t, "start"), "end": _int(export, t, "end"),
        "pid": _pid(export, t, "globalTid"), "tid": _tid(export, t, "globalTid"),
        "end_tid": _tid(export, t, "endGlobalTid"),
        "device": Spec(INT, None), "stream": Spec(INT, None),
        # name, domain and kind are built by _range_text (text may be inline or a StringIds key).
        "style": Spec(ENUM, _col(export, t, "eventType"), lambda _: dict(styles)),
    })


def _syncs(export: NsysExport) -> TableSpec:
    t = sync.SYNC
    cols = _activity(export, t)
    cols["tid"] = Spec(INT, None)
    cols["sync_type"] = Spec(ENUM, _col(export, t, "syncType"), _sync_labels)
    return TableSpec(t, columns=cols)


def _sync_labels(export: NsysExport) -> dict[int, str]:
    # As readers/nsys/sync.py labels them: schema 3.20 records syncType values
    # its own ENUM table mislabels, so those stay "CUPTI sync type <n>".
    labels = sync._sync_type_labels(export)
    if labels is not None:
        return labels
    values = export.rows(f'SELECT DISTINCT syncType FROM "{sync.SYNC}"')
    return {int(v): f"CUPTI sync type {int(v)}" for (v,) in values if v is not None}


def _osrt(export: NsysExport) -> TableSpec:
    t = queries.OSRT.table
    calls = f"eventClass = {queries.OSRT_CALL_EVENT_CLASS}" if export.has_column(t, "eventClass") else "1"
    return TableSpec(t, where=calls, columns={
        "start": _int(export, t, "start"), "end": _int(export, t, "end"),
        "pid": _pid(export, t, "globalTid"), "tid": _tid(export, t, "globalTid"),
        "name": Spec(STRING_ID, _col(export, t, "nameId")),
    })


PROFILER_OVERHEAD = "PROFILER_OVERHEAD"


def _profiler_overhead(export: NsysExport) -> TableSpec:
    t = PROFILER_OVERHEAD
    return TableSpec(t, columns={
        "start": _int(export, t, "start"), "end": _int(export, t, "end"),
        "pid": _pid(export, t, "globalTid"), "tid": _tid(export, t, "globalTid"),
        "name": Spec(STRING_ID, _col(export, t, "nameId")),
    })


def _processes(export: NsysExport) -> TableSpec:
    t = "PROCESSES"
    pid = _int(export, t, "pid") if export.has_column(t, "pid") else _pid(export, t, "globalPid")
    return TableSpec(t, columns={"pid": pid, "name": Spec(TEXT, _col(export, t, "name"))})


def _threads(export: NsysExport) -> TableSpec:
    t = "ThreadNames"
    return TableSpec(t, columns={"pid": _pid(export, t, "globalTid"), "tid": _tid(export, t, "globalTid"),
                                 "name": Spec(STRING_ID, _col(export, t, "nameId"))})


_SPECS: dict[str, Callable[[NsysExport], TableSpec]] = {
    "kernels": _kernels, "memcpy": _memcpy, "memset": _memset, "graphs": _graphs, "api": _api, "ranges": _ranges,
    "syncs": _syncs, "osrt": _osrt, "processes": _processes, "threads": _threads,
    "profiler_overhead": _profiler_overhead,
}
_NSYS_TABLES = {
    "devices": "TARGET_INFO_GPU", "kernels": queries.KERNELS.table, "memcpy": queries.MEMCPY.table,
    "memset": queries.MEMSET.table, "graphs": GRAPH_TRACE, "api": queries.RUNTIME.table, "ranges": queries.NVTX.table,
    "syncs": sync.SYNC, "osrt": queries.OSRT.table, "processes": "PROCESSES", "threads": "ThreadNames",
    "profiler_overhead": PROFILER_OVERHEAD,
}
_RANGE_TEXT_COLUMNS = ("name", "domain", "kind")
# kernels columns filled from NCCL's NVTX payloads after the scan (nccl_messages)
_NCCL_COLUMNS = {"collective", "msg_bytes", "group_size"}


# model table -> what the nsys table holds and the ``nsys profile -t`` option recording it
_REQUIREMENTS = {"kernels": queries.KERNELS, "api": queries.RUNTIME, "ranges": queries.NVTX,
                 "memcpy": queries.MEMCPY, "memset": queries.MEMSET, "osrt": queries.OSRT}


class NsysSource:
    """``TraceSource`` over an open ``NsysExport`` (see the module docstring)."""

    # "duration" is computed in SQL ("end" - start): one narrow integer column
    # leaves SQLite instead of two wide ones (the summaries need only it).
    computes_duration = True

    def __init__(self, export: NsysExport) -> None:
        self.export = export
        self.meta = _meta(export)
        self._specs: dict[str, TableSpec] = {}
        self._labels: dict[int, dict[int, str]] = {}
        self._frames: dict[str, Any] | None = None
        self._memory: dict[str, Any] | None = None
        self._messages: dict[int, nccl_messages.NcclMessage] | None = None
        self._nccl_ranks: list[nccl_payload.NcclRank] | None = None  # one scan of the NVTX payloads

    def background_source(self) -> NsysSource:
        """The same export on its own connection (``Trace.prefetch`` loads through it on
        another thread: a connection is never shared between threads here)."""
        export = open_export(self.export.path)
        export.scan_mmap_bytes = self.export.scan_mmap_bytes
        return NsysSource(export)

    def has(self, table: str) -> bool:
        if table in ("python_frames", "python_sites"):
            return python_samples.has_python_sampling(self.export) and self.has("api")
        if table == "memory":
            return memory_usage.has_memory_usage(self.export)
        nsys_table = _NSYS_TABLES.get(table)
        return nsys_table is not None and self.export.has_table(nsys_table)

    def close(self) -> None:
        self.export.close()

    def details(self) -> dict[str, Any]:
        """Driver and runtime versions, capture settings, launched commands (``details.capture_details``):
        ``profkit.analysis.timeline.capture`` asks the source for them, so it never imports this reader."""
        return capture_details(self.export)

    def nccl_ranks(self) -> list[nccl_payload.NcclRank]:
        """Each process's NCCL rank, where NCCL's NVTX payloads were exported (``nccl_payload``);
        ``profkit.model.rank_view`` splits a whole-job export by them, ``nccl_messages`` sizes groups."""
        if self._nccl_ranks is None:
            self._nccl_ranks = nccl_payload.nccl_ranks(self.export)
        return self._nccl_ranks

    def require(self, table: str, what: str) -> None:
        if table == "python_frames" and not self.has(table):
            raise ProfkitError(f"{self.export.path.name} has no {what}", hint=python_samples.HOW)
        if table == "memory" and not self.has(table):
            raise ProfkitError(f"{self.export.path.name} has no {what}", hint=memory_usage.HOW)
        req = _REQUIREMENTS.get(table)
        if req is not None:
            self.export.require(req.table, req.what, req.trace_flag)
        self.export.require(_NSYS_TABLES.get(table, table), what)

    def spec(self, table: str) -> TableSpec:
        if table not in self._specs:
            spec = _SPECS[table](self.export)
            start, end = spec.columns.get("start"), spec.columns.get("end")
            if start is not None and end is not None and start.sql and end.sql:
                spec.columns[DURATION] = Spec(INT, f"({end.sql}) - ({start.sql})")
            self._specs[table] = spec
        return self._specs[table]

    def load(self, table: str, columns: Sequence[str]) -> Any:
        """The columns as a pandas DataFrame (``Trace`` itself uses ``load_arrays``)."""
        import pandas as pd

        arrays = self.load_arrays(table, columns)
        return pd.DataFrame({c: pd.Categorical.from_codes(v.codes, v.categories, validate=False)
                             if isinstance(v, Coded) else v for c, v in arrays.items()}, copy=False)

    def load_arrays(self, table: str, columns: Sequence[str]) -> dict[str, Any]:
        """The columns as numpy arrays, text columns as ``Coded``; never imports pandas."""
        if table == "devices":
            devices = _devices(self.export)
            return {c: devices[c] for c in columns}
        if table == "python_frames":  # decoded from payload blobs, once: not a column scan
            if self._frames is None:
                self._frames = python_samples.python_frames(self.export)
            return {c: self._frames[c] for c in columns}
        if table == "memory":  # the driver's allocations, with running totals: not a column scan
            if self._memory is None:
                self._memory, dropped = memory_usage.memory_rows(self.export)
                if dropped:
                    self.meta.extra.setdefault("skipped_events", {})["memory frees before the capture"] = dropped
            return {c: self._memory[c] for c in columns}
        if table == "python_sites":  # each API call's user frame, from a sample taken while it ran
            frames = self.load_arrays("python_frames", ["start", "end", "pid", "tid", "depth", "function", "file",
                                                          "line"])
            api = self.load_arrays("api", ["start", "end", "pid", "tid", "correlation"])
            sites = python_samples.python_sites(frames, api)
            return {c: sites[c] for c in columns}
        spec = self.spec(table)
        wanted = list(columns)
        text_columns = [c for c in wanted if c in _RANGE_TEXT_COLUMNS] if table == "ranges" else []
        plain = [c for c in wanted if c not in text_columns]
        scanned = [c for c in plain if spec.columns[c].sql is not None and spec.columns[c].kind != TEXT]
        texts = [c for c in plain if spec.columns[c].sql is not None and spec.columns[c].kind == TEXT]
        extra_ints, extra_texts = _range_text_sql(self.export) if text_columns else ((), ())
        # Each distinct SQL expression is scanned once (pid and tid share their globalTid).
        expressions = list(dict.fromkeys(_scanned_sql(spec.columns[c]) for c in scanned))
        query = ColumnsQuery(spec.table, f'"{spec.table}"', tuple(expressions) + extra_ints,
                             tuple(spec.columns[c].sql for c in texts) + extra_texts,  # type: ignore[misc]
                             where=spec.where)
        # Only columns the export lacks: nothing to scan, just the row count.
        ints, text_values = collect_columns(self.export, query) if query.int_columns or query.text_columns \
            else ([], [])
        n = len(ints[0]) if ints else len(text_values[0]) if text_values else self._count(spec)
        data: dict[str, Any] = {}
        raw = dict(zip(expressions, ints))
        users = {e: sum(_scanned_sql(spec.columns[c]) == e for c in scanned) for e in expressions}
        for name in scanned:
            column = spec.columns[name]
            values = raw[_scanned_sql(column)]
            if column.packed is not None:
                values = _unpack(values, column.packed[1])
            elif users[_scanned_sql(column)] > 1:
                values = values.copy()  # two columns never share one array
            data[name] = self._column(column, values)
            if schema.is_narrow(table, name):  # now, not after every column is read: one int64 copy at a time
                data[name] = narrowed(data[name])
        del raw
        for name, values in zip(texts, text_values):
            data[name] = _coded_strings(["" if v is None else str(v) for v in values])
        if text_columns:
            data.update(self._range_texts(ints[len(expressions):], text_values[len(texts):], text_columns))
        for name in plain:
            if name not in data:  # the export lacks it
                data[name] = _missing(table, name, n)
        if table == "ranges" and "end" in data:
            self._note_nvtx_end(data["end"])
        if table == "kernels" and _NCCL_COLUMNS & set(wanted):
            self._nccl(data, spec, n)
        return {c: data[c] for c in wanted}

    def _nccl(self, data: dict[str, Any], spec: TableSpec, n: int) -> None:
        """collective, msg_bytes and group_size of the NCCL kernels, from NCCL's NVTX payloads
        (``nccl_messages``): decoded once per source, left unknown where the export has none."""
        if self._messages is None:
            self._messages = nccl_messages.nccl_messages(self.export, self.nccl_ranks)
        if not self._messages:
            return
        # the scanned columns are in rowid order (collect_columns): each kernel's row is its rowid's rank
        rowids = collect_columns(self.export, ColumnsQuery(spec.table, f'"{spec.table}"', ("rowid",), (),
                                                           where=spec.where))[0][0]
        keys = np.fromiter(self._messages, dtype=np.int64, count=len(self._messages))
        at = np.searchsorted(rowids, keys)
        hit = (at < len(rowids)) & (rowids[np.minimum(at, len(rowids) - 1)] == keys) if len(rowids) else \
            np.zeros(len(keys), dtype=bool)
        rows, found = at[hit], [self._messages[int(k)] for k in keys[hit]]
        if "msg_bytes" in data:
            data["msg_bytes"] = np.full(n, schema.MISSING_INT, dtype=np.int64)
            data["msg_bytes"][rows] = [m.bytes for m in found]
        if "group_size" in data:
            data["group_size"] = np.full(n, schema.MISSING_INT, dtype=np.int64)
            data["group_size"][rows] = [m.group_size for m in found]
        if "collective" in data:
            names = [""] + sorted({m.collective for m in found})
            codes = np.zeros(n, dtype=np.int32)
            codes[rows] = [names.index(m.collective) for m in found]
            data["collective"] = Coded(codes, names)

    # -- helpers -------------------------------------------------------------
    def _count(self, spec: TableSpec) -> int:
        return int(self.export.scalar(f'SELECT count(*) FROM "{spec.table}" WHERE {spec.where}') or 0)

    def _column(self, spec: Spec, values: np.ndarray) -> Any:
        if spec.kind == INT:
            values[values == NULL_INT] = schema.MISSING_INT
            return values
        if spec.kind == STRING_ID:
            return _categorical(values, self.export.strings, spec.rename)
        key = id(spec.labels)
        if key not in self._labels:
            self._labels[key] = spec.labels(self.export)  # type: ignore[misc]
        labels = self._labels[key]
        return _categorical(values, lambda ids: {i: labels.get(i, f"<{i}>") for i in ids}, spec.rename)

    def _range_texts(self, ints: list[np.ndarray], texts: list[list[Any]], wanted: list[str]) -> dict[str, Any]:
        """name, domain and kind of each NVTX range.

        The text is StringIds[textId], else the inline ``text`` (nvtx_sum.py's
        rule); the domain comes from the domain-create events of the same
        process (the first creation wins, as in nvtx_sum.py)."""
        text_id, global_tid, domain_id = ints
        names = _categorical(text_id, self.export.strings)
        if texts and any(v is not None for v in texts[0]):
            inline = np.array(["" if v is None else str(v) for v in texts[0]], dtype=object)
            by_id = np.asarray(names.categories + [""], dtype=object)[names.codes]
            names = _coded_strings(list(np.where(text_id == NULL_INT, inline, by_id)))
        out: dict[str, Any] = {}
        if "name" in wanted:
            out["name"] = names
        if "kind" in wanted:
            is_site = np.array([c.startswith(SYNC_SITE_PREFIX) for c in names.categories], dtype=bool)
            site = is_site[names.codes] if len(is_site) else np.zeros(len(names.codes), dtype=bool)
            out["kind"] = Coded(site.astype(np.int64), ["nvtx", "sync_site"])
        if "domain" in wanted:
            domains = sync.nvtx_domains(self.export)
            gpid = np.where(global_tid == NULL_INT, 0, global_tid & np.int64(sync.GLOBAL_PID_MASK - (1 << 64)))
            key_codes, keys = encode_rows([gpid, domain_id], FIRST)
            labels = [domains.get((int(g), int(d)), "") if d != NULL_INT else "" for g, d in keys]
            out["domain"] = _categorical_from_labels(key_codes, labels)
        return out

    def _note_nvtx_end(self, end: np.ndarray) -> None:
        # nvtx_sum ends a never-closed range at the last timestamp of any NVTX
        # event (marks and domain creations too), which the ranges alone do not hold.
        if len(end) and (end == schema.MISSING_INT).any() and "nvtx_last_timestamp_ns" not in self.meta.extra:
            self.meta.extra["nvtx_last_timestamp_ns"] = self.export.scalar(
                'SELECT max(max(start), max("end")) FROM NVTX_EVENTS')


def _scanned_sql(spec: Spec) -> str:
    """The SQL expression scanned for a column (a packed pid/tid: its whole globalTid)."""
    return spec.packed[0] if spec.packed is not None else spec.sql  # type: ignore[return-value]


def _unpack(global_tid: np.ndarray, shift: int) -> np.ndarray:
    """pid (shift 24) or tid (0) out of globalTid values, as ``pid_sql``/``tid_sql`` compute them; NULL stays NULL."""
    out = np.right_shift(global_tid, shift)
    np.bitwise_and(out, GLOBAL_TID_ID_MASK, out=out)  # in place: one array of 2.5M, not two
    out[global_tid == NULL_INT] = NULL_INT
    return out


def _range_text_sql(export: NsysExport) -> tuple[tuple[str, ...], tuple[str, ...]]:
    t = queries.NVTX.table
    ints = (_col(export, t, "textId") or "NULL", _col(export, t, "globalTid") or "NULL",
            _col(export, t, "domainId") or "NULL")
    # Inline text only where there is no textId (nvtx_sum prefers the StringIds value).
    text = ("CASE WHEN textId IS NULL THEN text END" if export.has_column(t, "textId") else "text") \
        if export.has_column(t, "text") else None
    return ints, ((text,) if text else ())


def _categorical(ids: np.ndarray, lookup: Callable[[list[int]], dict[int, str]],
                 rename: Callable[[str], str] | None = None) -> Coded:
    """Text of integer keys as ``Coded``: one lookup of the distinct keys, NULL -> ''."""
    codes, keys = encode_keys([ids])
    distinct = [k[0] for k in keys]
    found = lookup([k for k in distinct if k is not None and k != NULL_INT])
    labels = [found.get(k, "") if k is not None else "" for k in distinct]
    if rename is not None:
        labels = [rename(label) for label in labels]
    return _categorical_from_labels(codes, labels)


def _categorical_from_labels(codes: np.ndarray, labels: list[str]) -> Coded:
    """Codes into ``labels`` (which may repeat a string) as codes into distinct strings."""
    categories: dict[str, int] = {}
    # int32 codes: 4 bytes a row instead of 8 (a 2.5M-row name column is 10 MB, not 20)
    remap = np.array([categories.setdefault(label, len(categories)) for label in labels], dtype=np.int32)
    new_codes = remap[codes] if len(codes) else np.zeros(0, dtype=np.int32)
    return Coded(new_codes, list(categories))


def _coded_strings(values: list[str]) -> Coded:
    distinct: dict[str, int] = {}
    codes = np.fromiter((distinct.setdefault(v, len(distinct)) for v in values), dtype=np.int64, count=len(values))
    return Coded(codes, list(distinct))


def _missing(table: str, column: str, n: int) -> Any:
    kind = schema.INT if column == DURATION else schema.column_kind(table, column)
    if kind == schema.INT:
        return np.full(n, schema.MISSING_INT, dtype=np.int64)
    if kind == schema.FLOAT:
        return np.full(n, np.nan)
    return Coded(np.zeros(n, dtype=np.int64), [""])


# -- devices -------------------------------------------------------------------------
def _devices(export: NsysExport) -> dict[str, Any]:
    limits = launches.gpu_info(export)
    described = {g.get("id"): g for g in queries.gpus(export)}
    rows: dict[str, list[Any]] = {c: [] for c in schema.column_names("devices")}
    for device, info in sorted(limits.items()):
        info = dict(info)
        if not info.get("max_threads_per_sm") and info.get("max_warps_per_sm"):
            info["max_threads_per_sm"] = info["max_warps_per_sm"] * (info.get("warp_size") or 32)
        gpu = described.get(device, {})
        rows["device"].append(device)
        rows["memory_bandwidth_bps"].append(gpu.get("memory_bandwidth"))
        rows["memory_total_bytes"].append(gpu.get("total_memory"))
        for column, key in schema.DEVICE_LIMIT_KEYS.items():
            value = info.get(key)
            rows[column].append(("" if value is None else str(value)) if column == "name" else value)
    data: dict[str, Any] = {}
    for column, values in rows.items():
        if schema.column_kind("devices", column) == schema.CATEGORY:
            data[column] = _coded_strings(values)
        else:
            data[column] = np.array([_int_or_missing(v) for v in values], dtype=np.int64)
    return data


def _int_or_missing(value: Any) -> int:
    """A device limit as an integer; a damaged export's text or NULL is unknown (-1)."""
    try:
        return schema.MISSING_INT if value is None else int(value)
    except (TypeError, ValueError):
        return schema.MISSING_INT


# -- meta ------------------------------------------------------------------------------
# META_DATA_CAPTURE CAPTURE_EVENT_TYPE values -> the model's names.
_TRACED = {"Cuda": "cuda", "NvtxEvents": "nvtx", "OSRuntime": "osrt", "CuBlas": "cublas", "CuDnn": "cudnn",
           "OpenGL": "opengl", "OpenAcc": "openacc", "OpenMP": "openmp", "Vulkan": "vulkan", "MPI": "mpi"}


def _meta(export: NsysExport) -> TraceMeta:
    window = queries.analysis_window(export)
    traced = [str(value) for name, value in queries.capture_settings(export)
              if name == "CAPTURE_EVENT_TYPE" and value is not None]  # NULL in a damaged file
    return TraceMeta(
        source=NSYS, path=export.path, tool_version=export.nsys_version, schema_version=export.schema_version,
        rounding_mode=export.rounding_mode, nvtx_default_domain_prefix=export.nvtx_default_domain_prefix,
        session_start_utc=queries.session_start_utc(export),
        capture_start_ns=int(window[0]) if window else None, capture_end_ns=int(window[1]) if window else None,
        traced=tuple(dict.fromkeys(_TRACED.get(t, t.lower()) for t in traced)),
        extra={"memory_level": DRIVER_MEMORY_LEVEL} if memory_usage.has_memory_usage(export) else {},
    )


def open_nsys_trace(path: str | Path) -> Trace:
    """An nsys SQLite export as a ``Trace`` (read-only; bad files raise ProfkitError)."""
    export = open_export(path)
    try:
        trace = Trace(NsysSource(export), native=export)
        # analyses that still take the export (stalls) reach this same Trace, and share
        # what it has loaded and found (find_steps is cached per Trace)
        export._model_trace = trace  # type: ignore[attr-defined]
        return trace
    except BaseException:
        export.close()
        raise


def trace_of_export(export: NsysExport) -> Trace:
    """The ``Trace`` over an already open export, made once and kept on it.

    For callers that still hold an ``NsysExport``; the meta follows the
    export's current ``match_nsys_stats`` choice."""
    trace = getattr(export, "_model_trace", None)
    if trace is None:
        trace = Trace(NsysSource(export), native=export)
        export._model_trace = trace  # type: ignore[attr-defined]
    trace.meta.rounding_mode = export.rounding_mode
    trace.meta.nvtx_default_domain_prefix = export.nvtx_default_domain_prefix
    return trace
