"""``KinetoSource``: one Kineto trace file as a ``TraceSource`` of the model.

A JSON trace has no index to read one column from, so the whole file is
read once, at open, straight into columns (``parse`` + ``events``); ``load``
then hands out the asked columns.  Tables are finished lazily (devices and
python_sites are built the first time they are asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from profkit.errors import ProfkitError
from profkit.model import schema
from profkit.model.trace import CUDA, HIP, KINETO, Coded, Trace, TraceMeta, empty_arrays
from profkit.model.unread import describe_unread
from profkit.readers.kineto.events import TraceBuilder, copy_kinds, range_kind, short_kernel_name
from profkit.readers.kineto.parse import RECORD_SHAPES, read_events
from profkit.readers.kineto.source_lines import SourceLines
from profkit.readers.kineto.stacks import python_frames, python_sites

# deviceProperties key -> devices column (Kineto's CudaDeviceProperties.cpp and
# torch's Python exporter; the latter writes fewer keys, the rest stay -1).
DEVICE_KEYS = {
    "id": "device", "name": "name", "numSms": "sm_count", "computeMajor": "cc_major", "computeMinor": "cc_minor",
    "totalGlobalMem": "memory_total_bytes", "maxThreadsPerMultiprocessor": "max_threads_per_sm",
    "regsPerMultiprocessor": "max_registers_per_sm", "sharedMemPerMultiprocessor": "max_shared_memory_per_sm",
    "sharedMemPerBlockOptin": "max_shared_memory_per_block", "warpSize": "warp_size",
    "maxThreadsPerBlock": "max_threads_per_block", "regsPerBlock": "max_registers_per_block",
    "sharedMemPerBlock": "default_shared_memory_per_block",
}
# Columns that are functions of the event name, computed once per distinct name.
DERIVED_FROM_NAME = {
    ("kernels", "short_name"): lambda name: short_kernel_name(name) if isinstance(name, str) else "",
    ("memcpy", "copy_kind"): lambda name: copy_kinds(name)[0],
    ("memcpy", "src_kind"): lambda name: copy_kinds(name)[1],
    ("memcpy", "dst_kind"): lambda name: copy_kinds(name)[2],
    ("memset", "dst_kind"): lambda name: copy_kinds(name)[2],
}
# Tables whose process is the trace's own: Kineto puts GPU events on a
# "process" per device, but one trace file is one profiled process.
LAUNCHED_BY_TRACE_PROCESS = ("kernels", "memcpy", "memset", "ranges", "syncs")


class KinetoSource:
    """Every table of one trace, read at open."""

    def __init__(self, path: Path) -> None:
        header, builder = read_events(path, TraceBuilder)
        if builder.events == 0:
            raise ProfkitError(f"{path.name} holds no trace events: not a PyTorch profiler trace, or an empty one")
        self.path = path
        self.header = header
        self.builder = builder
        self.tables = builder.tables
        builder.comm_ops.fill(self.tables["kernels"])
        self.main_pid = self._main_pid()
        self._finished: dict[str, dict[str, Any]] = {}
        self._sources: SourceLines | None = None
        self.meta = self._meta()

    def _main_pid(self) -> int:
        """The profiled process: the pid of most CUDA API calls, else of CPU ops, ranges."""
        for name in ("api", "cpu_ops", "ranges"):
            table = self.tables[name]
            if table.rows:
                pids = table.column("pid")
                pids = pids[pids >= 0]
                if len(pids):
                    values, counts = np.unique(pids, return_counts=True)
                    return int(values[np.argmax(counts)])
        return schema.MISSING_INT

    def _meta(self) -> TraceMeta:
        header = self.header
        dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
        capture = self.builder.capture
        traced = tuple(name for name in ("kernels", "memcpy", "memset", "api", "ranges", "cpu_ops", "syncs", "memory")
                       if self.tables[name].rows) + (("python_stacks",) if self.builder.frames.rows else ()) \
            + (("shapes",) if header.get(RECORD_SHAPES) else ())
        extra: dict[str, Any] = {
            "events": self.builder.events,
            "skipped_events": dict(self.builder.skipped),
            "unread_device_events": dict(self.builder.unread_device),
            "base_time_ns": _int_or_none(header.get("baseTimeNanoseconds")),
            "pid": self.main_pid,
        }
        if dist:
            extra["distributed_backend"] = dist.get("backend")
        for key, name in (("cuda_runtime_version", "cuda_runtime_version"),
                          ("cuda_driver_version", "cuda_driver_api_version")):
            version = _int_or_none(header.get(key))
            if version is not None:  # CUDA encodes 13.0 as 13000
                extra[name] = f"{version // 1000}.{version % 1000 // 10}"
        return TraceMeta(
            source=KINETO,
            path=self.path,
            tool_version=_first_str(header, ("pytorch_version", "torch_version", "pytorchVersion")),
            schema_version=None if header.get("schemaVersion") is None else str(header.get("schemaVersion")),
            rank=_int_or_none(dist.get("rank")),
            world_size=_int_or_none(dist.get("world_size")),
            rounding_mode="decimal-half-up",
            capture_start_ns=capture[0] if capture else None,
            capture_end_ns=capture[1] if capture else None,
            traced=traced,
            extra=extra,
            gpu_platform=self._gpu_platform(),
        )

    def _gpu_platform(self) -> str:
        """HIP where most distinct runtime calls are HIP's (ROCm's Kineto files hipLaunchKernel,
        hipMemcpyWithStream ... under ``cuda_runtime``), or, without calls, where a device is
        AMD's; else CUDA."""
        names = [n for n in self.tables["api"].codes["name"].index if isinstance(n, str)]
        if names:
            return HIP if 2 * sum(n.startswith("hip") for n in names) > len(names) else CUDA
        props = self.header.get("deviceProperties")
        devices = [p.get("name") for p in props if isinstance(p, dict)] if isinstance(props, list) else []
        return HIP if any(isinstance(n, str) and n.startswith("AMD") for n in devices) else CUDA

    def _source_lines(self) -> SourceLines:
        """The program's source files, where at hand, read once for both Python tables."""
        if self._sources is None:
            self._sources = SourceLines.for_trace(self.path)
        return self._sources

    # -- TraceSource ---------------------------------------------------------------
    def has(self, table: str) -> bool:
        if table == "devices":
            return bool(len(self._devices()["device"]))
        if table == "python_sites":
            return bool(self.builder.frames.rows) and bool(self.tables["api"].rows)
        if table == "python_frames":
            return bool(self.builder.frames.rows)
        # a table Kineto never records (OS runtime calls) is absent, not an error
        return table in self.tables and bool(self.tables[table].rows)

    def require(self, table: str, what: str) -> None:
        """The one-line error for a table this trace did not record."""
        if self.has(table):
            return
        how = {"kernels": "record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU",
               "api": "record with ProfilerActivity.CUDA on a GPU",
               "ranges": "annotate code with torch.profiler.record_function(...) or use a schedule and prof.step()",
               "python_sites": "record with with_stack=True",
               "python_frames": "record with torch.profiler.profile(with_stack=True), as profkit trace "
                                "--backend torch does"}.get(table)
        unread = self.builder.unread_device
        if unread and table in ("kernels", "api", "memcpy", "memset"):
            raise ProfkitError(f"{self.path.name} has no {what}: it records {describe_unread(unread, unread)}, "
                               "which profkit does not read",
                               hint="profkit reads CUDA and ROCm GPU work traced with ProfilerActivity.CUDA")
        raise ProfkitError(f"{self.path.name} has no {what}: the PyTorch profiler trace holds none", hint=how)

    def load(self, table: str, columns: Sequence[str]) -> Any:
        """The columns as a pandas DataFrame (Categoricals for text)."""
        import pandas as pd

        data = self.load_arrays(table, columns)
        return pd.DataFrame({c: pd.Categorical.from_codes(v.codes, v.categories, validate=False)
                             if isinstance(v, Coded) else v for c, v in data.items()}, copy=False)

    def load_arrays(self, table: str, columns: Sequence[str]) -> dict[str, Any]:
        """The columns as numpy arrays, text columns as ``Coded``: no pandas."""
        columns = list(columns)
        if table == "devices":
            return {c: self._devices()[c] for c in columns}
        if table == "python_sites":
            if "python_sites" not in self._finished:
                self._finished["python_sites"] = python_sites(self.builder.frames, self.tables["api"],
                                                              self._source_lines())
            return {c: self._finished["python_sites"][c] for c in columns}
        if table == "python_frames":
            if "python_frames" not in self._finished:
                self._finished["python_frames"] = python_frames(self.builder.frames, self._source_lines())
            return {c: self._finished["python_frames"][c] for c in columns}
        source = self.tables[table]
        derived: dict[str, Any] = {}
        if table in LAUNCHED_BY_TRACE_PROCESS and "pid" in columns:
            derived["pid"] = np.full(source.rows, self.main_pid, dtype=np.int64)
        for column in columns:
            if (table, column) in DERIVED_FROM_NAME:
                derived[column] = source.codes["name"].coded(source.column("name"), DERIVED_FROM_NAME[table, column])
        if table == "ranges" and "kind" in columns:
            derived["kind"] = self._range_kinds()
        if table == "ranges" and "end_tid" in columns:
            derived["end_tid"] = source.column("tid")  # a complete ('X') event ends on its own thread
        if table == "syncs" and "tid" in columns:
            derived["tid"] = self._sync_threads()
        return source.arrays(columns, derived)

    def _range_kinds(self) -> Coded:
        """kind is a function of (domain, name): computed once per distinct pair."""
        ranges = self.tables["ranges"]
        names, domains = ranges.column("name"), ranges.column("domain")
        if not len(names):
            return Coded(names, [])
        width = len(ranges.codes["name"].index) + 1
        pairs, inverse = np.unique(domains * width + names, return_inverse=True)
        name_of = list(ranges.codes["name"].index)
        domain_of = list(ranges.codes["domain"].index)
        labels = [range_kind(name_of[p % width], domain_of[p // width]) for p in pairs.tolist()]
        unique = sorted(set(labels))
        codes = np.array([unique.index(label) for label in labels], dtype=np.int64)
        return Coded(codes[inverse.reshape(-1)], unique)

    def _sync_threads(self) -> np.ndarray:
        """A cuda_sync event sits on the GPU's row; its CPU thread is that of
        the API call with the same correlation id (-1 when there is none)."""
        correlation = self.tables["syncs"].column("correlation")
        api = self.tables["api"]
        tid = np.full(len(correlation), schema.MISSING_INT, dtype=np.int64)
        if api.rows and len(correlation):
            api_corr, api_tid = api.column("correlation"), api.column("tid")
            order = np.argsort(api_corr, kind="stable")
            at = np.searchsorted(api_corr[order], correlation)
            inside = at < len(order)
            hit = inside.copy()
            hit[inside] = api_corr[order[at[inside]]] == correlation[inside]
            hit &= correlation >= 0
            tid[hit] = api_tid[order[at[hit]]]
        return tid

    def close(self) -> None:
        self._finished.clear()

    # -- devices -------------------------------------------------------------------
    def _devices(self) -> dict[str, Any]:
        if "devices" not in self._finished:
            props = self.header.get("deviceProperties")
            rows = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
            columns: dict[str, Any] = empty_arrays("devices")
            if rows:
                for column in columns:
                    if column != "name":
                        columns[column] = np.full(len(rows), schema.MISSING_INT, dtype=np.int64)
                names = []
                for i, p in enumerate(rows):
                    names.append(p.get("name") if isinstance(p.get("name"), str) else "")
                    for key, column in DEVICE_KEYS.items():
                        value = p.get(key)
                        if column != "name" and isinstance(value, (int, float)) and not isinstance(value, bool):
                            columns[column][i] = int(value)
                unique = list(dict.fromkeys(names))
                columns["name"] = Coded(np.array([unique.index(n) for n in names], dtype=np.int64), unique)
            self._finished["devices"] = columns
        return self._finished["devices"]


def open_kineto_file(path: Path) -> Trace:
    source = KinetoSource(path)
    return Trace(source, native=source)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_str(header: dict[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        if isinstance(header.get(key), str):
            return header[key]
    return None


__all__ = ["KinetoSource", "open_kineto_file"]
