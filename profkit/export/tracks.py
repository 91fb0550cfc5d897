"""Which track each event of an export goes on, and the tables cut to a window.

Track layout (Chrome trace-event ``pid``/``tid``):
- a GPU is ``pid`` = its device id (as Kineto writes it), or ``GPU_PID_BASE +
  device`` when that would collide with a real process id; its streams are
  ``tid`` = stream id;
- a CPU thread is its real ``pid``/``tid``.  Its CUDA calls are on it;
  its ranges (NVTX, record_function, CPU ops) go on companion tracks
  ``tid + PSEUDO_TID * slot`` named "<thread> ranges", one per nesting lane
  (``lanes.nesting_lanes``), because ranges (start/end ones above all) need
  not nest with each other or with the calls.  Linux thread ids stay below
  2**22 (PID_MAX_LIMIT), so these never meet a real one;
- the steps are a process of their own, ``STEPS_PID``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import orjson
import pandas as pd

from profkit.analysis.timeline.launch_calls import KeyIndex
from profkit.errors import ProfkitError
from profkit.export import chrome_events as ev
from profkit.export.lanes import MAX_LANES, nesting_lanes
from profkit.model import Trace, schema
from profkit.model.sync_sites import decode_site

PSEUDO_TID = 1 << 22            # above every Linux pid/tid (PID_MAX_LIMIT)
API_LANE_SLOT = MAX_LANES + 1   # slots of API calls that do not nest (rare), after the range lanes
GPU_PID_BASE = 1 << 22
STEPS_PID = (1 << 22) - 1 + (1 << 23)

COLUMNS = {
    "kernels": ["start", "end", "device", "stream", "pid", "correlation", "name", "grid_x", "grid_y", "grid_z",
                "block_x", "block_y", "block_z", "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes"],
    "memcpy": ["start", "end", "device", "stream", "pid", "correlation", "bytes", "copy_kind", "src_kind",
               "dst_kind"],
    "memset": ["start", "end", "device", "stream", "pid", "correlation", "bytes", "dst_kind"],
    "graphs": ["start", "end", "device", "stream", "pid", "correlation", "name", "graph_id"],
    "api": ["start", "end", "pid", "tid", "correlation", "name", "layer"],
    "ranges": ["start", "end", "pid", "tid", "device", "stream", "name", "domain", "kind"],
    "cpu_ops": ["start", "end", "pid", "tid", "name", "external_id"],
}
GPU_TABLES = schema.GPU_WORK_TABLES


def trace_span(trace: Trace) -> tuple[int, int] | None:
    """(first start, last end) over every exported table; None when there is nothing."""
    lo, hi = None, None
    for table in COLUMNS:
        frame = trace.table(table, ["start", "end"])
        if frame.empty:
            continue
        start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
        lo = int(start.min()) if lo is None else min(lo, int(start.min()))
        top = int(max(end.max(), start.max()))
        hi = top if hi is None else max(hi, top)
    return None if lo is None else (lo, hi)


def time_base(span: tuple[int, int]) -> int:
    """0, or a whole second at or before the first event when the clock runs past 2**52 ns
    (an epoch clock): times from it keep their nanoseconds through a double."""
    return 0 if span[1] < (1 << 52) else (span[0] // 1_000_000_000) * 1_000_000_000


def shifted(tables: dict[str, pd.DataFrame], shift: int) -> dict[str, pd.DataFrame]:
    return {name: frame.assign(start=frame["start"].to_numpy() - shift, end=frame["end"].to_numpy() - shift)
            for name, frame in tables.items()}


def load_tables(trace: Trace, lo: int, hi: int, whole: bool) -> dict[str, pd.DataFrame]:
    """Every exported table, cut to the events overlapping ``[lo, hi)`` unless ``whole``.

    A range never closed (end -1) is closed at ``hi``."""
    tables = {}
    for name, columns in COLUMNS.items():
        frame = trace.table(name, columns)
        if name == "ranges" and len(frame):
            end = frame["end"].to_numpy()
            if (end < 0).any():
                frame = frame.assign(end=np.where(end < 0, hi, end))
        if not whole and len(frame):
            start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
            frame = frame[(start < hi) & (end >= lo)].reset_index(drop=True)
        tables[name] = frame
    return tables


def _distinct(values: np.ndarray) -> set[int]:
    return set(pd.unique(np.asarray(values)).tolist())  # a hash, not a sort: cheap on millions of rows


def gpu_pid_base(tables: dict[str, pd.DataFrame]) -> int:
    """0 (GPU pid = device, as Kineto) unless a device id equals a CPU process id."""
    devices: set[int] = set()
    for name in GPU_TABLES:
        devices |= _distinct(tables[name]["device"])
    ranges = tables["ranges"]
    devices |= _distinct(ranges["device"][ranges["device"] >= 0])
    cpu: set[int] = set()
    for name in ("api", "ranges", "cpu_ops"):
        cpu |= _distinct(tables[name]["pid"])
    return GPU_PID_BASE if devices & cpu else 0


def device_properties(trace: Trace) -> list[dict]:
    """Kineto's ``deviceProperties`` entries from the devices table (known values only)."""
    keys = {"name": "name", "memory_total_bytes": "totalGlobalMem", "cc_major": "computeMajor",
            "cc_minor": "computeMinor", "max_threads_per_sm": "maxThreadsPerMultiprocessor",
            "max_registers_per_sm": "regsPerMultiprocessor", "warp_size": "warpSize",
            "max_shared_memory_per_sm": "sharedMemPerMultiprocessor", "sm_count": "numSms",
            "max_shared_memory_per_block": "sharedMemPerBlockOptin", "max_blocks_per_sm": "maxBlocksPerMultiprocessor"}
    devices = trace.table("devices", ["device", *keys])
    out = []
    for row in devices.to_dict("records"):
        entry: dict = {"id": int(row["device"])}
        for column, key in keys.items():
            value = row[column]
            if column == "name":
                if ev.clean_text(value):
                    entry[key] = ev.clean_text(value)
            elif value is not None and int(value) >= 0:
                entry[key] = int(value)
        out.append(entry)
    return out


def metadata_events(trace: Trace, tables: dict[str, pd.DataFrame], base: int) -> list[str]:
    """Names (and order) of the processes and threads: GPUs after the CPU processes."""
    lines = []
    names = {int(r["pid"]): ev.clean_text(r["name"]) for r in trace.table("processes").to_dict("records")}
    cpu_pids: set[int] = set()
    for name in ("api", "ranges", "cpu_ops"):
        frame = tables[name]
        cpu_pids |= _distinct(frame["pid"][frame["tid"] >= 0] if name == "ranges" else frame["pid"])
    for pid in sorted(cpu_pids):
        lines.append(ev.metadata_event("process_name", pid, None, names.get(pid) or f"process {pid}"))
    for r in trace.table("threads").to_dict("records"):
        if int(r["pid"]) in cpu_pids and ev.clean_text(r["name"]):
            lines.append(ev.metadata_event("thread_name", int(r["pid"]), int(r["tid"]), r["name"]))
    gpu_names = {int(r["device"]): ev.clean_text(r["name"]) for r in trace.table("devices", ["device", "name"])
                 .to_dict("records")}
    streams: set[tuple[int, int]] = set()
    for name in GPU_TABLES:
        pairs = tables[name][["device", "stream"]].drop_duplicates()
        streams |= set(zip(pairs["device"].tolist(), pairs["stream"].tolist()))
    for device in sorted({d for d, _ in streams}):
        label = f"GPU {device}" + (f": {gpu_names[device]}" if gpu_names.get(device) else "")
        lines.append(ev.metadata_event("process_name", device + base, None, label))
        lines.append(ev.metadata_event("process_sort_index", device + base, None, 0x1000 + device))
    for device, stream in sorted(streams):
        lines.append(ev.metadata_event("thread_name", device + base, stream, f"stream {stream}"))
        lines.append(ev.metadata_event("thread_sort_index", device + base, stream, stream))
    return lines


def _lane_tids(pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting lane of each slice within its (pid, tid) track."""
    lanes = np.zeros(len(pid), dtype=np.int64)
    if not len(pid):
        return lanes
    order = np.lexsort((tid, pid))
    p, t = pid[order], tid[order]
    cut = np.flatnonzero((np.diff(p) != 0) | (np.diff(t) != 0)) + 1
    for group in np.split(order, cut):
        lanes[group] = nesting_lanes(start[group], end[group])
    return lanes


def api_tids(api: pd.DataFrame) -> np.ndarray:
    """The track of each CUDA call: its thread, or an overflow lane where calls cross."""
    tid = api["tid"].to_numpy()
    lanes = _lane_tids(api["pid"].to_numpy(), tid, api["start"].to_numpy(), api["end"].to_numpy())
    return np.where(lanes > 0, tid + PSEUDO_TID * (API_LANE_SLOT + lanes), tid)


RANGE_CATEGORIES = {"gpu_user_annotation": "gpu_user_annotation"}  # every other kind: user_annotation


def _range_args(ranges: pd.DataFrame) -> tuple[np.ndarray, list[str], list[str]]:
    """(combination per row, args JSON per combination, cat JSON per combination) of (kind, domain)."""
    kind, domain = pd.Categorical(ranges["kind"]), pd.Categorical(ranges["domain"])
    codes = np.stack([np.asarray(kind.codes, np.int64), np.asarray(domain.codes, np.int64)], axis=1)
    combos, which = np.unique(codes.reshape(-1, 2), axis=0, return_inverse=True)
    args_table, cat_table = [], []
    for k, d in combos.tolist():
        kind_text = ev.clean_text(kind.categories[k]) if k >= 0 else ""
        args = {"kind": kind_text}
        if d >= 0 and ev.clean_text(domain.categories[d]):
            args["domain"] = ev.clean_text(domain.categories[d])
        args_table.append(orjson.dumps(args).decode())
        cat_table.append(ev.json_text(RANGE_CATEGORIES.get(kind_text, "user_annotation")))
    return np.asarray(which, dtype=np.int64).reshape(-1), args_table, cat_table


def range_events(ranges: pd.DataFrame, cpu_ops: pd.DataFrame, base: int) -> tuple[Iterator[list[str]], list[str]]:
    """(event chunks, track-name metadata) of the ranges and CPU ops.

    CPU ranges and ops of a thread share its companion tracks; GPU-side
    annotations go on companion tracks of their stream."""
    on_gpu = np.concatenate([(ranges["device"].to_numpy() >= 0) & (ranges["tid"].to_numpy() < 0),
                             np.zeros(len(cpu_ops), dtype=bool)])
    if not len(on_gpu):
        return iter(()), []
    which, args_table, cat_table = _range_args(ranges)
    frame = pd.DataFrame({
        "pid": np.concatenate([ranges["pid"].to_numpy(), cpu_ops["pid"].to_numpy()]),
        "tid": np.concatenate([ranges["tid"].to_numpy(), cpu_ops["tid"].to_numpy()]),
        "start": np.concatenate([ranges["start"].to_numpy(), cpu_ops["start"].to_numpy()]),
        "end": np.concatenate([ranges["end"].to_numpy(), cpu_ops["end"].to_numpy()]),
    })
    gpu_rows = on_gpu[: len(ranges)]
    frame.loc[on_gpu, "pid"] = ranges["device"].to_numpy()[gpu_rows] + base
    frame.loc[on_gpu, "tid"] = ranges["stream"].to_numpy()[gpu_rows]
    real_tid = np.maximum(frame["tid"].to_numpy(), 0)
    lanes = _lane_tids(frame["pid"].to_numpy(), real_tid, frame["start"].to_numpy(), frame["end"].to_numpy())
    frame["tid"] = real_tid + PSEUDO_TID * (lanes + 1)
    cats = [*cat_table, '"cpu_op"']
    cat = np.concatenate([which, np.full(len(cpu_ops), len(cats) - 1, dtype=np.int64)])
    names = ev.json_names(pd.Categorical(np.concatenate([np.asarray(ranges["name"], dtype=object),
                                                         np.asarray(cpu_ops["name"], dtype=object)])))
    external = np.concatenate([np.full(len(ranges), -1, dtype=np.int64), cpu_ops["external_id"].to_numpy()])
    ranges_args = np.asarray(args_table + [""], dtype=object)[np.concatenate(
        [which, np.full(len(cpu_ops), len(args_table), dtype=np.int64)])]

    def args(rows: slice) -> list[str]:
        # ranges: their (kind, domain) args; CPU ops: Kineto's "External id"
        return [a if a else f'{{"External id":{x}}}'
                for a, x in zip(ranges_args[rows].tolist(), external[rows].tolist())]

    chunks = ev.slice_events(frame, cat, cats, names, args)  # a generator: a chunk at a time
    meta = []
    tracks = np.unique(np.stack([frame["pid"].to_numpy(), real_tid, lanes, on_gpu.astype(np.int64)], axis=1), axis=0)
    for pid, tid, lane, gpu in tracks.tolist():
        label = f"{'stream' if gpu else 'thread'} {tid} ranges" + (f" ({lane + 1})" if lane else "")
        meta.append(ev.metadata_event("thread_name", pid, tid + PSEUDO_TID * (lane + 1), label))
    return chunks, meta


def sync_site_events(ranges: pd.DataFrame) -> list[str]:
    """An instant event, named by its Python line, where each sync site began, on the thread
    that synchronized (profkit's sync hook ranges, kind 'sync_site')."""
    sites = ranges[np.asarray(ranges["kind"] == "sync_site")]
    lines = []
    for r in sites.to_dict("records"):
        text = ev.clean_text(r["name"])
        decoded = decode_site(text)
        kind, where, code = decoded if decoded else ("", text, "")
        args = {"python_line": where, "code": code, "call": kind}
        lines.append(ev.instant_event(f"sync {where}", "sync_site", int(r["pid"]), int(max(r["tid"], 0)),
                                      int(r["start"]), args))
    return lines


def flow_pairs(tables: dict[str, pd.DataFrame], base: int, api_tid: np.ndarray) -> tuple[np.ndarray, ...]:
    """(id, launch pid, tid, ts, GPU pid, stream, ts) of every launch whose GPU operation is
    exported too, joined on (process, correlation id).  The id is the correlation id where
    those are unique in the export (as Kineto writes them), else a running number."""
    gpu = {c: np.concatenate([tables[t][c].to_numpy() for t in GPU_TABLES])
           for c in ("pid", "correlation", "device", "stream", "start")}
    api = tables["api"]
    # the first call of a (process, correlation) wins; a GPU row without a correlation id has no launch
    call = KeyIndex(api["pid"].to_numpy(), api["correlation"].to_numpy()).match(gpu["pid"], gpu["correlation"]).call
    found = (gpu["correlation"] >= 0) & (call >= 0)
    launch = call[found].astype(np.int64)
    corr = gpu["correlation"][found]
    ids = corr if len(pd.unique(corr)) == len(corr) else np.arange(1, len(corr) + 1, dtype=np.int64)
    return (ids, api["pid"].to_numpy()[launch], api_tid[launch], api["start"].to_numpy()[launch],
            gpu["device"][found] + base, gpu["stream"][found], gpu["start"][found])


def step_table(trace: Trace) -> pd.DataFrame | None:
    """The steps ``profkit.analysis.steps.find_steps`` finds, as a frame with columns
    index, start_ns, end_ns, phase; None where no steps are found."""
    from profkit.analysis.steps import find_steps  # only when steps are wanted: it is the heaviest import

    try:
        found = find_steps(trace)
    except ProfkitError:
        return None  # a trace whose steps cannot be told still exports
    if not found.found:
        return None
    return found.steps[["index", "start_ns", "end_ns", "phase"]].reset_index(drop=True)


def step_events(steps: pd.DataFrame, lo: int, hi: int) -> list[str]:
    """The steps overlapping ``[lo, hi)`` as slices of a "Steps" process at the top."""
    inside = steps[(steps["start_ns"] < hi) & (steps["end_ns"] >= lo)]
    if inside.empty:
        return []
    lines = [ev.metadata_event("process_name", STEPS_PID, None, "Steps"),
             ev.metadata_event("process_sort_index", STEPS_PID, None, -1),
             ev.metadata_event("thread_name", STEPS_PID, 1, "steps")]
    for r in inside.to_dict("records"):
        start, end = int(r["start_ns"]), int(r["end_ns"])
        a, b = divmod(start, 1000)
        d, e = divmod(max(end - start, 0), 1000)
        args = orjson.dumps({"step": int(r["index"]), "phase": ev.clean_text(r["phase"]),
                             "duration_ns": end - start}).decode()
        name = ev.json_text(f"step {int(r['index'])}")
        lines.append(f'{{"ph":"X","cat":"step","name":{name},'
                     f'"pid":{STEPS_PID},"tid":1,"ts":{a}.{b:03d},"dur":{d}.{e:03d},"args":{args}}}')
    return lines


def steps_window(steps: pd.DataFrame | None, first: int, last: int) -> tuple[int, int]:
    """[start of step ``first``, end of step ``last``] (step indices, both included)."""
    if steps is None or steps.empty:
        raise ProfkitError("no steps found in this trace, so --steps cannot cut it", hint="use --window START:END")
    chosen = steps[(steps["index"] >= first) & (steps["index"] <= last)]
    if chosen.empty:
        raise ProfkitError(f"no steps {first} to {last}: the trace has steps {int(steps['index'].min())} "
                           f"to {int(steps['index'].max())}")
    return int(chosen["start_ns"].min()), int(chosen["end_ns"].max())
