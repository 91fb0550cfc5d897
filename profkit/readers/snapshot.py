"""PyTorch memory snapshots (``torch.cuda.memory._dump_snapshot``) as a trace of the model: the
caching allocator's history (``device_traces``) becomes the ``memory`` table, with each event's own
Python frame, and its state at the dump (``segments``) the snapshot facts.

A snapshot is a pickle, and ``pickle.load`` runs whatever code a file names.  A snapshot holds only
dicts, lists, tuples, strings, numbers, booleans and None, so it is read by an unpickler that builds
those and refuses every class or function a file names (``find_class``) before anything runs: a
pickle that tries to run code gets one error line.

History entries (torch/cuda/memory.py, ``_record_memory_history``): ``action`` is 'alloc',
'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'segment_map',
'segment_unmap', 'snapshot' or 'oom'; ``addr``, ``size``, ``stream``, ``time_us``, ``frames``
(innermost first: ``filename``, ``line``, ``name``; C++ frames have line 0).  A block's bytes count
as allocated from its 'alloc' to its 'free_completed' (a free that waits for its stream's work
is still allocated until then); reserved bytes are the segments' (segment_alloc/map - free/unmap).
The history is a ring (``max_entries``): its oldest events may be gone, so the totals start from
the state the dump reports, walked back over the recorded events.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from profkit.errors import ProfkitError
from profkit.model import schema
from profkit.model.trace import CUDA, Coded, Trace, TraceMeta, empty_arrays

PICKLE_MAGIC = b"\x80"
SNAPSHOT = "snapshot"
MAX_SNAPSHOT_BYTES = 4 << 30
ALLOC, FREE, SEGMENT_ALLOC, SEGMENT_FREE, OOM = "alloc", "free_completed", "segment_alloc", "segment_free", "oom"
# a block waiting for its stream's work before its free completes is still allocated
ALLOCATED_STATES = ("active_allocated", "active_pending_free")
SEGMENT_GROWS = {SEGMENT_ALLOC: 1, "segment_map": 1, SEGMENT_FREE: -1, "segment_unmap": -1}


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain containers and scalars only: every global a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, and a memory snapshot names no class or "
                                     "function (refused: unpickling it could run code)")


def load_snapshot(path: Path) -> dict[str, Any]:
    """The snapshot's dict, read without running anything it names."""
    try:
        size = os.stat(path).st_size
        if size > MAX_SNAPSHOT_BYTES:
            raise ProfkitError(f"{path.name} holds {size:,} bytes: more than a memory snapshot profkit reads "
                               f"({MAX_SNAPSHOT_BYTES:,})")
        with path.open("rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ProfkitError(f"{path}: no such file") from None
    except OSError as exc:
        raise ProfkitError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        value = _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, UnicodeDecodeError, RecursionError, MemoryError, OverflowError) as exc:
        raise ProfkitError(f"{path.name} is not a PyTorch memory snapshot: {exc}") from None
    if not isinstance(value, dict) or not isinstance(value.get("segments"), list):
        raise ProfkitError(f"{path.name} is a pickle but not a PyTorch memory snapshot (no 'segments' list)",
                           hint="write one with torch.cuda.memory._dump_snapshot(path)")
    return value


# A block's size and a time are taken only within these bounds: a real GPU holds under a PiB, and a
# time in microseconds times 1000 must fit the model's int64 nanoseconds.  Outside them (a crafted
# or damaged file) the event is skipped, never wrapped around into a negative total.
MAX_BYTES = 1 << 50
MAX_TIME_US = (1 << 62) // 1000


def _size(value: Any) -> int | None:
    size = _int(value, -1)
    return size if 0 <= size < MAX_BYTES else None


def _time_us(value: Any) -> int | None:
    t = _int(value, -1)
    return t if 0 <= t < MAX_TIME_US else None


def _int(value: Any, default: int = schema.MISSING_INT) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63 else default


INSTALLED = ("site-packages/", "dist-packages/")


# A C++ frame's name is cut to this many characters in a stack (template signatures run to kilobytes)
MAX_FRAME_NAME = 160


def stack_text(frames: Any) -> str:
    """The frames, innermost first, one per line: 'function file:line' for Python, the function's
    name for C++ (the schema's ``memory.stack``); '' where the event recorded none."""
    lines = []
    for frame in frames if isinstance(frames, list) else ():
        if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
            continue
        file, line = frame.get("filename"), _int(frame.get("line"), 0)
        if isinstance(file, str) and file.endswith(".py") and line > 0:
            lines.append(f"{frame['name']} {file}:{line}")
        else:
            lines.append(frame["name"][:MAX_FRAME_NAME])
    return "\n".join(lines)


def user_frame(frames: Any) -> tuple[str, str, int]:
    """(function, file, line) of the innermost Python frame of a stack that is not an installed
    package's (torch's own ``_conv_forward`` is not where the user allocated), else the innermost
    Python frame; C++ frames (line 0, no ``.py`` file) are skipped.  ('', '', -1) where there is none."""
    python = []
    if isinstance(frames, list):
        for frame in frames:
            if not isinstance(frame, dict):
                continue
            file, line, name = frame.get("filename"), _int(frame.get("line"), 0), frame.get("name")
            if isinstance(file, str) and file.endswith(".py") and line > 0:
                python.append((name if isinstance(name, str) else "", file, line))
    for frame in python:
        if not any(folder in frame[1] for folder in INSTALLED):
            return frame
    return python[0] if python else ("", "", -1)


class SnapshotSource:
    """A memory snapshot as a ``TraceSource``: the ``memory`` table and the devices it names."""

    def __init__(self, path: Path) -> None:
        self.path = path
        snapshot = load_snapshot(path)
        self.segments = [s for s in snapshot["segments"] if isinstance(s, dict)]
        traces = snapshot.get("device_traces")
        self.device_traces = traces if isinstance(traces, list) else []
        self.skipped = 0  # history entries without a usable size or time
        self.memory = self._memory()
        self.ranges = self._annotations(snapshot.get("external_annotations"))
        self.meta = TraceMeta(source=SNAPSHOT, path=path, tool_version=None, schema_version=None, rank=None,
                              world_size=None, rounding_mode="decimal-half-up", capture_start_ns=None,
                              capture_end_ns=None, traced=("memory",) if len(self.memory["start"]) else (),
                              extra={"oom": self.ooms, "segments": self.segment_facts(),
                                     "segment_ranges": self.segment_ranges(),
                                     "skipped_events": {"history": self.skipped} if self.skipped else {}},
                              gpu_platform=CUDA)

    def _memory(self) -> dict[str, Any]:
        rows: list[tuple[int, int, int, int, int, int, str, str, int, str]] = []
        self.ooms: list[dict[str, Any]] = []
        for device, history in enumerate(self.device_traces):
            if not isinstance(history, list):
                continue
            rows_of_device = self._device_rows(device, history)
            rows.extend(rows_of_device)
        columns = empty_arrays("memory")
        if not rows:
            return columns
        rows.sort(key=lambda r: r[0])
        ints = np.array([r[:6] for r in rows], dtype=np.int64)
        for i, name in enumerate(("start", "device", "addr", "bytes", "total_allocated", "total_reserved")):
            columns[name] = ints[:, i]
        columns["pid"] = np.full(len(rows), schema.MISSING_INT, dtype=np.int64)
        columns["tid"] = np.full(len(rows), schema.MISSING_INT, dtype=np.int64)
        for i, name in ((6, "function"), (7, "file"), (9, "stack")):
            values = [r[i] for r in rows]
            distinct = list(dict.fromkeys(values))
            index = {v: k for k, v in enumerate(distinct)}
            columns[name] = Coded(np.array([index[v] for v in values], dtype=np.int64), distinct)
        columns["line"] = np.array([r[8] for r in rows], dtype=np.int64)
        return columns

    @staticmethod
    def _annotations(values: Any) -> dict[str, Any]:
        """torch.profiler's ranges the history recorded beside it (``external_annotations``: a START
        and an END per range, e.g. 'Optimizer.step#AdamW.step'), paired in order per name."""
        columns = empty_arrays("ranges")
        open_at: dict[str, list[int]] = {}
        pairs: list[tuple[int, int, str]] = []
        for a in values if isinstance(values, list) else []:
            if not isinstance(a, dict) or not isinstance(a.get("name"), str):
                continue
            t = _time_us(a.get("time_us"))
            if t is None:
                continue
            if a.get("stage") == "START":
                open_at.setdefault(a["name"], []).append(t * 1000)
            elif a.get("stage") == "END" and open_at.get(a["name"]):
                pairs.append((open_at[a["name"]].pop(0), t * 1000, a["name"]))
        if not pairs:
            return columns
        pairs.sort()
        n = len(pairs)
        names = list(dict.fromkeys(p[2] for p in pairs))
        columns.update({
            "start": np.array([p[0] for p in pairs], dtype=np.int64),
            "end": np.array([p[1] for p in pairs], dtype=np.int64),
            "name": Coded(np.array([names.index(p[2]) for p in pairs], dtype=np.int64), names),
            "domain": Coded(np.zeros(n, dtype=np.int64), ["external_annotation"]),
            "style": Coded(np.zeros(n, dtype=np.int64), ["StartEnd"]),
            "kind": Coded(np.zeros(n, dtype=np.int64), ["user_annotation"])})
        for c in ("pid", "tid", "end_tid", "device", "stream"):
            columns[c] = np.full(n, schema.MISSING_INT, dtype=np.int64)
        return columns

    def _device_rows(self, device: int, history: list[Any]) -> list[tuple]:
        """One device's alloc/free events with the totals after each, ending at the dump's state."""
        # an event without a size or a time within bounds is skipped (see MAX_BYTES)
        events = [e for e in history if isinstance(e, dict) and isinstance(e.get("action"), str)
                  and _size(e.get("size")) is not None and _time_us(e.get("time_us")) is not None]
        self.skipped += sum(1 for e in history if isinstance(e, dict)) - len(events)
        allocated_now = sum(_size(b.get("size")) or 0 for s in self.segments if _int(s.get("device"), 0) == device
                            for b in (s.get("blocks") or []) if isinstance(b, dict) and b.get("state") in ALLOCATED_STATES)
        reserved_now = sum(_size(s.get("total_size")) or 0 for s in self.segments
                           if _int(s.get("device"), 0) == device)
        change_alloc = [(_size(e["size"]) if e["action"] == ALLOC else
                         -_size(e["size"]) if e["action"] == FREE else 0) for e in events]
        change_res = [SEGMENT_GROWS.get(e["action"], 0) * _size(e["size"]) for e in events]
        # walk back from the dump's state: the totals before the first recorded event (never below
        # zero: where the segments and the history disagree, the history counts from nothing)
        allocated = max(allocated_now - sum(change_alloc), 0)
        reserved = max(reserved_now - sum(change_res), 0)
        rows = []
        for e, d_alloc, d_res in zip(events, change_alloc, change_res):
            allocated += d_alloc
            reserved += d_res
            t = _time_us(e["time_us"]) * 1000
            if e["action"] == OOM:
                function, file, line = user_frame(e.get("frames"))
                self.ooms.append({"device": device, "time_ns": t, "requested_bytes": _size(e["size"]),
                                  "device_free_bytes": _int(e.get("device_free"), -1),
                                  "allocated_bytes": allocated, "reserved_bytes": reserved,
                                  "function": function, "file": file, "line": line,
                                  "stack": stack_text(e.get("frames"))})
            if not d_alloc:
                continue
            function, file, line = user_frame(e.get("frames"))
            # a free's frames are the freeing call's: only an allocation's stack says what the block is
            stack = stack_text(e.get("frames")) if d_alloc > 0 else ""
            rows.append((t, device, _int(e.get("addr")), d_alloc, allocated, reserved, function, file, line, stack))
        return rows

    def segment_facts(self) -> list[dict[str, Any]]:
        """Per device at the dump: reserved, allocated, and the largest block the allocator holds free."""
        out: dict[int, dict[str, int]] = {}
        for s in self.segments:
            device = _int(s.get("device"), 0)
            facts = out.setdefault(device, {"device": device, "reserved_bytes": 0, "allocated_bytes": 0,
                                            "largest_free_block_bytes": 0, "segments": 0})
            facts["segments"] += 1
            facts["reserved_bytes"] += _size(s.get("total_size")) or 0
            for b in s.get("blocks") or []:
                if not isinstance(b, dict):
                    continue
                size = _size(b.get("size")) or 0
                if b.get("state") in ALLOCATED_STATES:
                    facts["allocated_bytes"] += size
                elif b.get("state") == "inactive":
                    facts["largest_free_block_bytes"] = max(facts["largest_free_block_bytes"], size)
        return [out[d] for d in sorted(out)]

    def segment_ranges(self) -> list[tuple[int, int, int]]:
        """(device, address, bytes) of every segment the allocator held from the driver, at the dump
        or in the history (an nsys --cuda-memory-usage capture's allocations are told apart by them)."""
        found = {(_int(s.get("device"), 0), _int(s.get("address"), -1), _size(s.get("total_size")) or 0)
                 for s in self.segments}
        for device, history in enumerate(self.device_traces):
            for e in history if isinstance(history, list) else ():
                if isinstance(e, dict) and SEGMENT_GROWS.get(e.get("action")) == 1:  # type: ignore[arg-type]
                    found.add((device, _int(e.get("addr"), -1), _size(e.get("size")) or 0))
        return sorted(r for r in found if r[1] >= 0 and r[2] > 0)

    # -- TraceSource ---------------------------------------------------------------
    def has(self, table: str) -> bool:
        return (table == "memory" and len(self.memory["start"]) > 0) or \
            (table == "ranges" and len(self.ranges["start"]) > 0)

    def load_arrays(self, table: str, columns: Sequence[str]) -> dict[str, Any]:
        if table in ("memory", "ranges"):
            held = self.memory if table == "memory" else self.ranges
            return {c: held[c] for c in columns}
        return empty_arrays(table, columns)

    def load(self, table: str, columns: Sequence[str]) -> Any:
        import pandas as pd

        data = self.load_arrays(table, columns)
        return pd.DataFrame({c: pd.Categorical.from_codes(v.codes, v.categories, validate=False)
                             if isinstance(v, Coded) else v for c, v in data.items()}, copy=False)

    def require(self, table: str, what: str) -> None:
        if not self.has(table):
            raise ProfkitError(f"{self.path.name} is a memory snapshot: it holds no {what}",
                               hint="profkit memory reads it; the other commands read traces")

    def close(self) -> None:
        pass


def open_snapshot(path: Path) -> Trace:
    return Trace(SnapshotSource(path))


# What `profkit trace --memory` names the snapshot it writes at exit (profkit.capture.launch.snapshot_name,
# which the launcher keeps free of profkit's readers)
AT_EXIT = "memory_snapshot"


def same_run_snapshot(trace_path: Path, rank: int | None) -> Path | None:
    """The snapshot ``profkit trace --memory`` wrote beside a trace at the program's exit: the
    rank's own (``memory_snapshot.rankN.pickle``) in a distributed job, else ``memory_snapshot.pickle``."""
    names = ([f"{AT_EXIT}.rank{rank}.pickle"] if rank is not None else []) + [f"{AT_EXIT}.pickle"]
    return next((trace_path.parent / n for n in names if (trace_path.parent / n).is_file()), None)


__all__ = ["PICKLE_MAGIC", "SNAPSHOT", "load_snapshot", "open_snapshot", "same_run_snapshot", "user_frame"]
