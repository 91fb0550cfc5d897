"""Kineto events -> the model's tables, one batch of events at a time.

Which events go where (``cat`` is the event's category, times are
``round(ts * 1000)`` and ``round(dur * 1000)`` ns, ``end = start + dur``):

- ``kernel`` -> kernels (args: device, stream, correlation, grid, block,
  'registers per thread', 'shared memory' = static + dynamic per block);
- ``gpu_memcpy`` / ``gpu_memset`` -> memcpy / memset (kinds from the name,
  'Memcpy HtoD (Pageable -> Device)', 'Memset (Device)'; args bytes);
- ``cuda_runtime`` / ``cuda_driver`` -> api (layer 'runtime' / 'driver');
- ``user_annotation`` (record_function) -> ranges, kind 'user_annotation',
  or 'profiler_step' for ``ProfilerStep#N``, or 'sync_site' for the ranges
  of profkit's sync hook (text ``profkit.sync|kind|file:line|code``, as on
  nsys); ``gpu_user_annotation`` -> ranges of kind 'gpu_user_annotation' on
  the GPU; a ``cpu_op`` named ``ProfilerStep#N`` (older torch) -> a
  'profiler_step' range, every other ``cpu_op`` -> cpu_ops;
- ``cuda_sync`` -> syncs; ``python_function`` -> Python frames, for the
  python_sites table (``profkit.readers.kineto.stacks``);
- ``ph: M`` process_name / thread_name -> processes / threads;
- ``Trace`` (the profiler's own span) -> the capture window.

An event of these categories without a usable ``name``, ``ts`` or ``dur`` is
skipped and counted per category (``TraceMeta.extra['skipped_events']``);
any other missing field becomes the model's missing value (-1, '').  Every
other event (flows, instant events, counters) is ignored.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from profkit.readers.kineto.columns import Table, floats, ints, nanoseconds, triples

SYNC_SITE_PREFIX = "profkit.sync|"  # profkit.capture.sync_hook.PREFIX; the reader must not import torch's hook
PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
MEMCPY_NAME = re.compile(r"Memcpy (\w+) \((.*?) -> (.*?)\)")
MEMSET_NAME = re.compile(r"Memset \((.*?)\)")
# CUPTI's memcpy kinds as Kineto prints them -> nsys's labels (ENUM_CUDA_MEMCPY_OPER).
COPY_KINDS = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "HtoA": "Host-to-Array",
              "AtoH": "Array-to-Host", "AtoA": "Array-to-Array", "AtoD": "Array-to-Device",
              "DtoA": "Device-to-Array", "DtoD": "Device-to-Device",
              "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}
# Kineto's syncTypeString -> the labels of nsys's ENUM_CUPTI_SYNC_TYPE (profkit.readers.nsys.sync).
SYNC_TYPES = {"Event Sync": "Event sync", "Stream Wait Event": "Stream wait sync", "Stream Sync": "Stream sync",
              "Context Sync": "Context sync", "Unknown Sync": "Unknown"}

GPU_TABLES = {"kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "user_annotation",
              "gpu_user_annotation", "cpu_op", "cuda_sync", "python_function", "Trace")
EMPTY: dict[str, Any] = {}


# Python frames (cat python_function) are no model table: stacks.py turns them into python_sites.
FRAME_COLUMNS = {"start": "int", "end": "int", "pid": "int", "tid": "int", "name": "category"}


def short_kernel_name(name: str) -> str:
    """The base name nsys calls shortName: no return type, parameters,
    template arguments or namespaces.  'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)'
    -> 'vectorized_elementwise_kernel'."""
    text = name.strip()
    if text.endswith(")"):  # drop the parameter list: the last balanced (...)
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                text = text[:i]
                break
    out, depth = [], 0
    for ch in text:  # drop template arguments (they may hold '::' and spaces)
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip().split(" ")[-1]  # drop 'void' and other return types
    return base.rsplit("::", 1)[-1] or name


def copy_kinds(name: Any) -> tuple[str, str, str]:
    """(copy kind, source memory, destination memory) from 'Memcpy HtoD (Pageable -> Device)'
    or ('', '', memory) from 'Memset (Device)'; '' where the name says nothing."""
    if isinstance(name, str):
        m = MEMCPY_NAME.match(name)
        if m:
            return COPY_KINDS.get(m.group(1), m.group(1)), m.group(2), m.group(3)
        m = MEMSET_NAME.match(name)
        if m:
            return "", "", m.group(1)
    return "", "", ""


def range_kind(name: str, cat: str) -> str:
    if cat == "gpu_user_annotation":
        return "gpu_user_annotation"
    if isinstance(name, str):
        if name.startswith(SYNC_SITE_PREFIX):
            return "sync_site"
        if PROFILER_STEP.fullmatch(name):
            return "profiler_step"
    return "user_annotation"


class TraceBuilder:
    """The sink ``parse.read_events`` fills: every table grows per batch."""

    def __init__(self) -> None:
        self.tables = {name: Table(name) for name in
                       ("kernels", "memcpy", "memset", "api", "ranges", "cpu_ops", "syncs", "processes", "threads")}
        self.frames = Table("python_frames", FRAME_COLUMNS)
        self._short_names: dict[Any, str] = {}
        self._copy_kind_cache: dict[Any, tuple[str, str, str]] = {}
        self.skipped: Counter[str] = Counter()
        self.capture: tuple[int, int] | None = None
        self.events = 0

    # -- one batch -------------------------------------------------------------
    def add(self, events: list[Any]) -> None:
        self.events += len(events)
        buckets: dict[Any, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
        metadata: list[dict[str, Any]] = []
        for e in events:
            if type(e) is not dict:
                continue
            bucket = buckets.get(e.get("cat"))
            if bucket is not None:
                bucket.append(e)
            elif e.get("ph") == "M":
                metadata.append(e)
        events.clear()  # the caller's list: its dicts go as soon as their bucket does
        for cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            if buckets[cat]:
                self._gpu(cat, buckets.pop(cat))
        for cat in ("cuda_runtime", "cuda_driver"):
            if buckets[cat]:
                self._api(cat, buckets.pop(cat))
        steps = [e for e in buckets["cpu_op"] if PROFILER_STEP.fullmatch(str(e.get("name")))]
        if steps:
            buckets["cpu_op"] = [e for e in buckets["cpu_op"] if not PROFILER_STEP.fullmatch(str(e.get("name")))]
            self._ranges("cpu_op", steps)
        for cat in ("user_annotation", "gpu_user_annotation"):
            if buckets[cat]:
                self._ranges(cat, buckets.pop(cat))
        if buckets["cpu_op"]:
            self._cpu_ops(buckets.pop("cpu_op"))
        if buckets["cuda_sync"]:
            self._syncs(buckets.pop("cuda_sync"))
        if buckets["python_function"]:
            self._frames(buckets.pop("python_function"))
        for e in buckets["Trace"]:
            self._capture(e)
        if metadata:
            self._metadata(metadata)

    # -- shared pieces ---------------------------------------------------------
    def _times(self, cat: str, evs: list[dict[str, Any]], names: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start ns, end ns, keep): rows without a text name or numeric ts/dur are dropped and counted."""
        ts = floats([e.get("ts") for e in evs])
        dur = floats([e.get("dur") for e in evs])
        keep = np.isfinite(ts) & np.isfinite(dur)
        keep &= np.fromiter((isinstance(n, str) for n in names), dtype=bool, count=len(names))
        dropped = len(evs) - int(np.count_nonzero(keep))
        if dropped:
            self.skipped[cat] += dropped
            ts, dur = np.where(keep, ts, 0.0), np.where(keep, dur, 0.0)
        start = nanoseconds(ts)
        return start, start + nanoseconds(dur), keep

    @staticmethod
    def _thread_ids(evs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        return ints([e.get("pid") for e in evs]), ints([e.get("tid") for e in evs])

    # -- tables ----------------------------------------------------------------
    def _gpu(self, cat: str, evs: list[dict[str, Any]]) -> None:
        names = [e.get("name") for e in evs]
        start, end, keep = self._times(cat, evs, names)
        args = [e.get("args") or EMPTY for e in evs]
        device = ints([a.get("device", a.get("inDevice")) for a in args])  # Memcpy2 (peer copies): inDevice
        columns: dict[str, Any] = {
            "start": start, "end": end, "device": device,
            "stream": ints([a.get("stream") for a in args]),
            "correlation": ints([a.get("correlation") for a in args]),
            "name": names,
        }
        if cat == "kernel":
            columns["short_name"] = [self._short(n) for n in names]
            grid, block = triples([a.get("grid") for a in args]), triples([a.get("block") for a in args])
            smem = ints([a.get("shared memory") for a in args])
            columns.update({
                "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
                "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
                "registers_per_thread": ints([a.get("registers per thread") for a in args]),
                # Kineto writes only static + dynamic; the sum goes to static (see schema).
                "static_smem_bytes": smem,
                "dynamic_smem_bytes": np.where(smem >= 0, 0, -1),
            })
        else:
            columns["bytes"] = ints([a.get("bytes") for a in args])
            kinds = [self._copy_kinds(n) for n in names]
            if cat == "gpu_memcpy":
                columns.update(copy_kind=[k[0] for k in kinds], src_kind=[k[1] for k in kinds])
            columns["dst_kind"] = [k[2] for k in kinds]
        self.tables[GPU_TABLES[cat]].append(len(evs), columns, keep)

    def _short(self, name: Any) -> str:
        short = self._short_names.get(name)
        if short is None:
            short = self._short_names[name] = short_kernel_name(name) if isinstance(name, str) else ""
        return short

    def _copy_kinds(self, name: Any) -> tuple[str, str, str]:
        kinds = self._copy_kind_cache.get(name)
        if kinds is None:
            kinds = self._copy_kind_cache[name] = copy_kinds(name)
        return kinds

    def _api(self, cat: str, evs: list[dict[str, Any]]) -> None:
        names = [e.get("name") for e in evs]
        start, end, keep = self._times(cat, evs, names)
        pid, tid = self._thread_ids(evs)
        correlation = ints([(e.get("args") or EMPTY).get("correlation") for e in evs])
        self.tables["api"].append(len(evs), {
            "start": start, "end": end, "pid": pid, "tid": tid, "correlation": correlation,
            "name": names, "layer": "runtime" if cat == "cuda_runtime" else "driver"}, keep)

    def _ranges(self, cat: str, evs: list[dict[str, Any]]) -> None:
        names = [e.get("name") for e in evs]
        start, end, keep = self._times(cat, evs, names)
        pid, tid = self._thread_ids(evs)
        columns: dict[str, Any] = {"start": start, "end": end, "name": names, "domain": cat, "style": "PushPop",
                                   "kind": [range_kind(n, cat) for n in names]}
        if cat == "gpu_user_annotation":
            # on the GPU's row of the timeline: pid is the device, tid the stream
            args = [e.get("args") or EMPTY for e in evs]
            device = ints([a.get("device") for a in args])
            stream = ints([a.get("stream") for a in args])
            columns.update(device=np.where(device >= 0, device, pid), stream=np.where(stream >= 0, stream, tid))
        else:
            columns.update(pid=pid, tid=tid)
        self.tables["ranges"].append(len(evs), columns, keep)

    def _cpu_ops(self, evs: list[dict[str, Any]]) -> None:
        names = [e.get("name") for e in evs]
        start, end, keep = self._times("cpu_op", evs, names)
        pid, tid = self._thread_ids(evs)
        external = ints([(e.get("args") or EMPTY).get("External id") for e in evs])
        self.tables["cpu_ops"].append(len(evs), {"start": start, "end": end, "pid": pid, "tid": tid,
                                                 "name": names, "external_id": external}, keep)

    def _syncs(self, evs: list[dict[str, Any]]) -> None:
        names = [e.get("name") for e in evs]
        start, end, keep = self._times("cuda_sync", evs, names)
        args = [e.get("args") or EMPTY for e in evs]
        kinds = [SYNC_TYPES.get(a.get("cuda_sync_kind", n), a.get("cuda_sync_kind", n)) for a, n in zip(args, names)]
        self.tables["syncs"].append(len(evs), {
            "start": start, "end": end, "correlation": ints([a.get("correlation") for a in args]),
            "device": ints([a.get("device") for a in args]), "stream": ints([a.get("stream") for a in args]),
            "sync_type": kinds}, keep)

    def _frames(self, evs: list[dict[str, Any]]) -> None:
        names = [e.get("name") for e in evs]
        start, end, keep = self._times("python_function", evs, names)
        pid, tid = self._thread_ids(evs)
        self.frames.append(len(evs), {"start": start, "end": end, "pid": pid, "tid": tid, "name": names}, keep)

    def _capture(self, e: dict[str, Any]) -> None:
        ts, dur = floats([e.get("ts"), e.get("dur")])
        if np.isfinite(ts) and np.isfinite(dur):
            start = int(nanoseconds(np.array([ts]))[0])
            end = start + int(nanoseconds(np.array([dur]))[0])
            self.capture = (start, end) if self.capture is None else (min(self.capture[0], start),
                                                                       max(self.capture[1], end))

    def _metadata(self, evs: list[dict[str, Any]]) -> None:
        for kind, table in (("process_name", "processes"), ("thread_name", "threads")):
            rows = [e for e in evs if e.get("name") == kind]
            if not rows:
                continue
            pid, tid = self._thread_ids(rows)
            labels = [(e.get("args") or EMPTY).get("name") for e in rows]
            columns: dict[str, Any] = {"pid": pid, "name": [v if isinstance(v, str) else None for v in labels]}
            if table == "threads":
                columns["tid"] = tid
            self.tables[table].append(len(rows), columns)

