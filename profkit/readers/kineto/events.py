"""Kineto events -> the model's tables, one batch of events at a time.

Which events go where (``cat`` is the event's category, times are
``round(ts * 1000)`` and ``round(dur * 1000)`` ns, ``end = start + dur``):

- ``kernel`` -> kernels (args: device, stream, correlation, grid, block,
  'registers per thread', 'shared memory' = static + dynamic per block);
- ``gpu_memcpy`` / ``gpu_memset`` -> memcpy / memset (kinds from the name,
  'Memcpy HtoD (Pageable -> Device)', 'Memset (Device)'; args bytes);
- ``cuda_runtime`` / ``cuda_driver`` -> api (layer 'runtime' / 'driver');
- ``user_annotation`` (record_function) -> ranges, kind 'user_annotation',
  or 'profiler_step' for ``ProfilerStep#N``, or 'sync_site' (domain
  'profkit.sync', as on nsys) for the ranges of profkit's sync hook (text
  ``profkit.sync|kind|file:line|code``, as on nsys); ``gpu_user_annotation`` -> ranges of kind 'gpu_user_annotation' on
  the GPU; a ``cpu_op`` named ``ProfilerStep#N`` (older torch) -> a
  'profiler_step' range, every other ``cpu_op`` -> cpu_ops;
- ``cuda_sync`` -> syncs; ``python_function`` -> Python frames, for the
  python_sites table (``profkit.readers.kineto.stacks``);
- ``cpu_instant_event`` named ``[memory]`` (``profile_memory=True``) -> memory: the allocator's
  block handed out or taken back (args Bytes, Addr, Total Allocated, Total Reserved, Device Type
  and Id: type 1 is CUDA, also on ROCm builds; 0 the host, device -1 in the model);
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

from profkit.model import schema
# A sync-site range gets the hook's NVTX domain, so it is labelled alike from nsys and Kineto traces.
from profkit.model.sync_sites import DOMAIN as SYNC_SITE_DOMAIN
from profkit.model.sync_sites import PREFIX as SYNC_SITE_PREFIX
from profkit.model.unread import UNTIMED_DEVICE_WORK
from profkit.readers.kineto import comms
from profkit.readers.kineto.parse import Args, Event
from profkit.limits import current as current_limits
from profkit.readers.kineto import columns
from profkit.readers.kineto.columns import Codes, Table, floats, ints, nanoseconds, triples

PROFILER_STEP = re.compile(r"ProfilerStep#\d+")
# "Memcpy HtoD (Pageable -> Device)": the two sides are split without a pattern, since
# two lazy groups backtrack quadratically on a long name with many " -> ".
MEMCPY_PREFIX = re.compile(r"Memcpy (\w+) \(")
MEMSET_NAME = re.compile(r"Memset \(([^)]*)\)")
# CUPTI's memcpy kinds as Kineto prints them -> nsys's labels (ENUM_CUDA_MEMCPY_OPER).
COPY_KINDS = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "HtoA": "Host-to-Array",
              "AtoH": "Array-to-Host", "AtoA": "Array-to-Array", "AtoD": "Array-to-Device",
              "DtoA": "Device-to-Array", "DtoD": "Device-to-Device",
              "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}
# Kineto's syncTypeString -> the labels of nsys's ENUM_CUPTI_SYNC_TYPE (profkit.readers.nsys.sync).
SYNC_TYPES = {"Event Sync": "Event sync", "Stream Wait Event": "Stream wait sync", "Stream Sync": "Stream sync",
              "Context Sync": "Context sync", "Unknown Sync": "Unknown"}

# "cuda_graph": a graph replay whose kernels were not traced, as `profkit export` writes an nsys
# graph-level export's replays (torch.profiler itself records graph kernels one by one)
GPU_TABLES = {"kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_graph": "graphs"}
CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_graph", "cuda_runtime", "cuda_driver", "user_annotation",
              "gpu_user_annotation", "cpu_op", "cuda_sync", "python_function", "cpu_instant_event", "Trace")
# the categories of Kineto before PyTorch 1.10 (HTA's trace_file_list holds such traces)
LEGACY_CATEGORIES = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
                     "Operator": "cpu_op"}
# categories of other accelerators' work and runtime calls (mtia_ccp_events, mtia_runtime, xpu_...)
OTHER_ACCELERATORS = ("mtia", "xpu", "hpu", "npu", "privateuse1", "mps")
MEMORY_EVENT = "[memory]"
# c10::DeviceType of an allocator event: CUDA (HIP builds report their GPUs as CUDA too)
CUDA_DEVICE_TYPE = 1
MAX_MEMORY_BYTES = float(1 << 50)  # a size or total past a PiB is no real allocator's
MAX_TS_US = float(1 << 52)  # a time whose ns (x 1000) still fits int64 exactly
MAX_DEVICES = 1 << 12
NO_ARGS = Args()


# Python frames (cat python_function) are no model table: stacks.py turns them into python_sites.
FRAME_COLUMNS = {"start": schema.INT, "end": schema.INT, "pid": schema.INT, "tid": schema.INT,
                 "name": schema.CATEGORY}


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
        m = MEMCPY_PREFIX.match(name)
        if m:
            source, arrow, rest = name[m.end():].partition(" -> ")
            close = rest.find(")")
            if arrow and close >= 0:
                return COPY_KINDS.get(m.group(1), m.group(1)), source, rest[:close]
        m = MEMSET_NAME.match(name)
        if m:
            return "", "", m.group(1)
    return "", "", ""


def _not_text(value: Any) -> bool:
    return not isinstance(value, str)


def _is_sync_site(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(SYNC_SITE_PREFIX)


def _is_profiler_step(value: Any) -> bool:
    return isinstance(value, str) and PROFILER_STEP.fullmatch(value) is not None


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
                       ("kernels", "memcpy", "memset", "graphs", "api", "ranges", "cpu_ops", "syncs", "memory",
                        "processes", "threads")}
        for name in ("memcpy", "memset"):  # the event name, kept to derive the copy kinds from
            self.tables[name] = Table(name, {**self.tables[name].kinds, "name": schema.CATEGORY})
        # NCCL kernels' External ids, to find their record_param_comms op (comms.py)
        self.tables["kernels"] = Table("kernels", {**self.tables["kernels"].kinds, comms.EXTERNAL_ID: schema.INT})
        self.comm_ops = comms.CommOps()
        self.frames = Table("python_frames", FRAME_COLUMNS)
        self.skipped: Counter[str] = Counter()
        # device work profkit does not read (MTIA, XPU, ...; kernels under CUPTI's range profiler):
        # counted per category, so that such a trace is never taken for a CPU-only one
        self.unread_device: Counter[str] = Counter()
        self.capture: tuple[int, int] | None = None
        self.events = 0
        columns.MAX_STRING[0] = current_limits().max_string

    # -- one batch -------------------------------------------------------------
    def add(self, events: list[Any]) -> None:
        self.events += len(events)
        buckets: dict[Any, list[Event]] = {c: [] for c in CATEGORIES}
        metadata: list[Event] = []
        for e in events:
            bucket = buckets.get(e.cat)
            if bucket is None and e.cat in LEGACY_CATEGORIES:
                bucket = buckets[LEGACY_CATEGORIES[e.cat]]
            if bucket is not None:
                bucket.append(e)
            elif e.ph == "M":
                metadata.append(e)
            elif e.ph == "X" and isinstance(e.cat, str) and (e.cat.lower().startswith(OTHER_ACCELERATORS)
                                                              or e.cat in UNTIMED_DEVICE_WORK):
                self.unread_device[e.cat] += 1
        events.clear()  # the caller's list: its events go as soon as their bucket does
        for cat in GPU_TABLES:
            if buckets[cat]:
                self._gpu(cat, buckets.pop(cat))
        for cat in ("cuda_runtime", "cuda_driver"):
            if buckets[cat]:
                self._api(cat, buckets.pop(cat))
        for cat in ("user_annotation", "gpu_user_annotation"):
            if buckets[cat]:
                self._ranges(cat, buckets.pop(cat))
        if buckets["cpu_op"]:
            self._cpu_ops(buckets.pop("cpu_op"))
        if buckets["cuda_sync"]:
            self._syncs(buckets.pop("cuda_sync"))
        if buckets["python_function"]:
            self._frames(buckets.pop("python_function"))
        if buckets["cpu_instant_event"]:
            self._memory(buckets.pop("cpu_instant_event"))
        for e in buckets["Trace"]:
            self._capture(e)
        if metadata:
            self._metadata(metadata)

    # -- shared pieces ---------------------------------------------------------
    def _core(self, cat: str, evs: list[Event], table: Table) -> tuple[np.ndarray, ...]:
        """(name codes, start ns, end ns, keep).  Rows without a text name or a
        numeric ts and dur are dropped (``keep`` False) and counted."""
        # A table without a name column (syncs: their name is the sync kind)
        # still needs the names encoded to find events whose name is not text.
        codes = table.codes["name"] if "name" in table.codes else Codes()
        names = codes.encode([e.name for e in evs])
        ts = floats([e.ts for e in evs])
        dur = floats([e.dur for e in evs])
        keep = np.isfinite(ts) & np.isfinite(dur)
        not_text = codes.codes_where(_not_text)
        if not_text:
            keep &= ~np.isin(names, not_text)
        dropped = len(evs) - int(np.count_nonzero(keep))
        if dropped:
            self.skipped[cat] += dropped
            ts, dur = np.where(keep, ts, 0.0), np.where(keep, dur, 0.0)
        start = nanoseconds(ts)
        return names, start, start + nanoseconds(dur), keep

    @staticmethod
    def _thread_ids(evs: list[Event]) -> tuple[np.ndarray, np.ndarray]:
        return ints([e.pid for e in evs]), ints([e.tid for e in evs])

    # -- tables ----------------------------------------------------------------
    # short_name, the memcpy/memset kinds and the range kind are functions of
    # the name: source.py derives them from the distinct names when read.
    def _gpu(self, cat: str, evs: list[Event]) -> None:
        table = self.tables[GPU_TABLES[cat]]
        names, start, end, keep = self._core(cat, evs, table)
        args = [e.args or NO_ARGS for e in evs]
        columns: dict[str, Any] = {
            "start": start, "end": end, "name": names,
            "device": ints([a.device if a.device is not None else a.in_device for a in args]),  # Memcpy2 (peer copies): inDevice
            "stream": ints([a.stream for a in args]),
            "correlation": ints([a.correlation for a in args]),
        }
        if cat == "kernel":
            grid, block = triples([a.grid for a in args]), triples([a.block for a in args])
            smem = ints([a.shared_memory for a in args])
            columns.update({
                "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
                "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
                "registers_per_thread": ints([a.registers for a in args]),
                # Kineto writes only static + dynamic; the sum goes to static (see schema).
                "static_smem_bytes": smem,
                "dynamic_smem_bytes": np.where(smem >= 0, 0, -1),
                **comms.kernel_columns(table, names, args),
            })
        elif cat == "cuda_graph":
            columns["graph_id"] = ints([a.graph_id for a in args])
        else:
            columns["bytes"] = ints([a.bytes for a in args])
        table.append(len(evs), columns, keep)

    def _api(self, cat: str, evs: list[Event]) -> None:
        table = self.tables["api"]
        names, start, end, keep = self._core(cat, evs, table)
        pid, tid = self._thread_ids(evs)
        correlation = ints([(e.args or NO_ARGS).correlation for e in evs])
        table.append(len(evs), {"start": start, "end": end, "pid": pid, "tid": tid, "correlation": correlation,
                                "name": names, "layer": "runtime" if cat == "cuda_runtime" else "driver"}, keep)

    def _ranges(self, cat: str, evs: list[Event]) -> None:
        table = self.tables["ranges"]
        names, start, end, keep = self._core(cat, evs, table)
        pid, tid = self._thread_ids(evs)
        domain_codes = table.codes["domain"].encode([cat, SYNC_SITE_DOMAIN])
        sync_sites = table.codes["name"].codes_where(_is_sync_site)
        domain = np.where(np.isin(names, sync_sites), domain_codes[1], domain_codes[0]) if sync_sites \
            else np.full(len(names), domain_codes[0])
        columns: dict[str, Any] = {"start": start, "end": end, "name": names, "domain": domain, "style": "PushPop"}
        if cat == "gpu_user_annotation":
            # on the GPU's row of the timeline: pid is the device, tid the stream
            args = [e.args or NO_ARGS for e in evs]
            device = ints([a.device for a in args])
            stream = ints([a.stream for a in args])
            columns.update(device=np.where(device >= 0, device, pid), stream=np.where(stream >= 0, stream, tid))
        else:
            columns.update(pid=pid, tid=tid)
        table.append(len(evs), columns, keep)

    def _cpu_ops(self, evs: list[Event]) -> None:
        table = self.tables["cpu_ops"]
        names, start, end, keep = self._core("cpu_op", evs, table)
        steps = table.codes["name"].codes_where(_is_profiler_step)
        if steps:  # older torch records ProfilerStep#N as a cpu_op: it is a step range
            is_step = np.isin(names, steps)
            if is_step.any():
                self._ranges("cpu_op", [e for e, step in zip(evs, is_step.tolist()) if step])
                keep &= ~is_step
        pid, tid = self._thread_ids(evs)
        args = [e.args or NO_ARGS for e in evs]
        external = ints([a.external_id for a in args])
        self.comm_ops.add(names, table.codes["name"], args)
        table.append(len(evs), {"start": start, "end": end, "pid": pid, "tid": tid,
                                "name": names, "external_id": external}, keep)

    def _syncs(self, evs: list[Event]) -> None:
        table = self.tables["syncs"]
        names, start, end, keep = self._core("cuda_sync", evs, table)
        args = [e.args or NO_ARGS for e in evs]
        kinds = [a.sync_kind if a.sync_kind is not None else e.name for a, e in zip(args, evs)]
        table.append(len(evs), {
            "start": start, "end": end, "correlation": ints([a.correlation for a in args]),
            "device": ints([a.device for a in args]), "stream": ints([a.stream for a in args]),
            "sync_type": [SYNC_TYPES.get(k, k) if isinstance(k, str) else None for k in kinds]}, keep)

    def _frames(self, evs: list[Event]) -> None:
        names, start, end, keep = self._core("python_function", evs, self.frames)
        pid, tid = self._thread_ids(evs)
        self.frames.append(len(evs), {"start": start, "end": end, "pid": pid, "tid": tid, "name": names}, keep)

    def _memory(self, evs: list[Event]) -> None:
        """Allocator events; an event without a numeric time or size is skipped and counted."""
        evs = [e for e in evs if e.name == MEMORY_EVENT]
        if not evs:
            return
        args = [e.args or NO_ARGS for e in evs]
        ts, size = floats([e.ts for e in evs]), floats([a.mem_bytes for a in args])
        allocated, reserved = floats([a.total_allocated for a in args]), floats([a.total_reserved for a in args])
        # sizes within a PiB, totals known and within it: anything else (a damaged or crafted event)
        # is skipped, never wrapped into a negative total
        keep = (np.isfinite(ts) & (np.abs(ts) < MAX_TS_US) & np.isfinite(size) & (np.abs(size) < MAX_MEMORY_BYTES)
                & (size != 0) & (allocated >= 0) & (allocated < MAX_MEMORY_BYTES))
        dropped = len(evs) - int(np.count_nonzero(keep))
        if dropped:
            self.skipped["[memory]"] += dropped
            ts, size, allocated = (np.where(keep, v, 0.0) for v in (ts, size, allocated))
        reserved = np.where((reserved >= 0) & (reserved < MAX_MEMORY_BYTES), reserved, schema.MISSING_INT)
        pid, tid = self._thread_ids(evs)
        on_gpu = ints([a.device_type for a in args]) == CUDA_DEVICE_TYPE
        device = np.where(on_gpu, ints([a.device_id for a in args]), schema.MISSING_INT)
        odd_device = on_gpu & ((device < 0) | (device >= MAX_DEVICES)) & keep
        if odd_device.any():
            self.skipped["[memory]"] += int(np.count_nonzero(odd_device))
            keep &= ~odd_device
        self.tables["memory"].append(len(evs), {
            "start": nanoseconds(ts), "pid": pid, "tid": tid, "device": device, "addr": ints([a.addr for a in args]),
            "bytes": size.astype(np.int64), "total_allocated": allocated.astype(np.int64),
            "total_reserved": reserved.astype(np.int64)}, keep)

    def _capture(self, e: Event) -> None:
        ts, dur = floats([e.ts, e.dur])
        if np.isfinite(ts) and np.isfinite(dur):
            start = int(nanoseconds(np.array([ts]))[0])
            end = start + int(nanoseconds(np.array([dur]))[0])
            self.capture = (start, end) if self.capture is None else (min(self.capture[0], start),
                                                                       max(self.capture[1], end))

    def _metadata(self, evs: list[Event]) -> None:
        for kind, table in (("process_name", "processes"), ("thread_name", "threads")):
            rows = [e for e in evs if e.name == kind]
            if not rows:
                continue
            pid, tid = self._thread_ids(rows)
            labels = [(e.args or NO_ARGS).name for e in rows]
            columns: dict[str, Any] = {"pid": pid, "name": [v if isinstance(v, str) else None for v in labels]}
            if table == "threads":
                columns["tid"] = tid
            self.tables[table].append(len(rows), columns)

