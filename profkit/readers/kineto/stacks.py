"""python_sites: the user's Python frame around each CUDA API call.

A ``with_stack=True`` trace records every Python call as a ``python_function``
event named ``"file.py(25): train_step"`` (a function's first line) or
``"<built-in method item of Tensor object at 0x...>"``.  For a
cudaStreamSynchronize made by ``loss.item()`` the enclosing frames on its
thread are, innermost first: the built-in ``item``, then the user's
function.  The site is the innermost frame that is not a built-in and not in
torch or profkit: the frame that called into torch, the one profkit's sync
hook picks too.

Only those "user" frames are kept; on one thread they nest, so the innermost
one around a time ``t`` is the last one started at or before ``t``, or,
when that one has already ended, the nearest of its enclosing frames that
has not.  The enclosing frame of each is found once with a stack, and the
API calls of a thread are then resolved together with numpy.
"""

from __future__ import annotations

import re

from typing import Any

import numpy as np

from profkit.model.trace import empty_arrays
from profkit.readers.kineto.columns import Table

FRAME_NAME = re.compile(r"(?P<file>.+)\((?P<line>\d+)\): (?P<function>.*)")
# Frames of these are never the user's site (paths as torch's tracer prints them).
LIBRARY_PREFIXES = ("torch/", "torch\\", "profkit/", "profkit\\", "<")


def user_frame(name: str) -> tuple[str, str] | None:
    """('file.py:25', 'train_step') for a user frame, None for built-ins and library frames."""
    m = FRAME_NAME.fullmatch(name)
    if m is None:
        return None
    file = m.group("file")
    if file.startswith(LIBRARY_PREFIXES) or "/site-packages/torch/" in file:
        return None
    return f"{file}:{m.group('line')}", m.group("function")


def python_sites(frames: Table, api: Table) -> dict[str, Any]:
    """One row per API call enclosed by a user frame (model table ``python_sites``):
    its columns, text as ``Coded``."""
    if frames.rows == 0 or api.rows == 0:
        return empty_arrays("python_sites")
    codes = frames.codes["name"]
    is_user = np.array([_label(n)[0] != "" for n in codes.index], dtype=bool)
    name = frames.column("name")
    keep = is_user[name]
    f_pid, f_tid = frames.column("pid")[keep], frames.column("tid")[keep]
    f_start, f_end, f_name = frames.column("start")[keep], frames.column("end")[keep], name[keep]
    a_pid, a_tid, a_start = api.column("pid"), api.column("tid"), api.column("start")
    a_corr = api.column("correlation")

    found_api: list[np.ndarray] = []
    found_frame: list[np.ndarray] = []
    threads = set(zip(f_pid.tolist(), f_tid.tolist()))
    for pid, tid in threads:
        on_thread = np.flatnonzero((f_pid == pid) & (f_tid == tid))
        order = on_thread[np.lexsort((-f_end[on_thread], f_start[on_thread]))]  # outer before inner at equal starts
        starts, ends = f_start[order], f_end[order]
        parent = _enclosing(starts, ends)
        calls = np.flatnonzero((a_pid == pid) & (a_tid == tid))
        if not len(calls):
            continue
        t = a_start[calls]
        at = np.searchsorted(starts, t, side="right") - 1
        # climb to the nearest frame still open at t; depth bounds the loop
        open_ = at >= 0
        while True:
            closed = open_ & (ends[np.maximum(at, 0)] < t)
            if not closed.any():
                break
            at[closed] = parent[at[closed]]
            open_ &= at >= 0
        found_api.append(calls[open_])
        found_frame.append(order[at[open_]])
    if not found_api:
        return empty_arrays("python_sites")
    calls = np.concatenate(found_api)
    frame_rows = np.concatenate(found_frame)
    order = np.argsort(calls, kind="stable")  # api row order
    calls, frame_rows = calls[order], frame_rows[order]
    frame_code = f_name[frame_rows]
    return {
        "pid": a_pid[calls], "tid": a_tid[calls], "correlation": a_corr[calls], "start": a_start[calls],
        "site": codes.coded(frame_code, lambda n: _label(n)[0]),
        "function": codes.coded(frame_code, lambda n: _label(n)[1]),
    }


def _label(name: object) -> tuple[str, str]:
    return (user_frame(name) if isinstance(name, str) else None) or ("", "")


def _enclosing(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of each frame's innermost enclosing frame (-1 for none); frames sorted by start."""
    parent = np.full(len(starts), -1, dtype=np.int64)
    stack: list[int] = []
    end_list = ends.tolist()
    for k, s in enumerate(starts.tolist()):
        while stack and end_list[stack[-1]] < s:
            stack.pop()
        if stack:
            parent[k] = stack[-1]
        stack.append(k)
    return parent


def python_frames(frames: Table) -> dict[str, Any]:
    """The model's python_frames (``schema.PYTHON_FRAMES``): every ``python_function`` event that
    is a Python frame ("file.py(25): function"; built-ins left out), with its nesting depth
    among those frames on its thread."""
    if frames.rows == 0:
        return empty_arrays("python_frames")
    codes = frames.codes["name"]
    parsed = [_frame_parts(n) for n in codes.index]
    is_frame = np.array([p is not None for p in parsed], dtype=bool)
    name = frames.column("name")
    keep = np.flatnonzero(is_frame[name]) if len(is_frame) else np.empty(0, dtype=np.int64)
    pid, tid = frames.column("pid")[keep], frames.column("tid")[keep]
    start, end = frames.column("start")[keep], frames.column("end")[keep]
    depth = np.zeros(len(keep), dtype=np.int64)
    for p, t in set(zip(pid.tolist(), tid.tolist())):
        on_thread = np.flatnonzero((pid == p) & (tid == t))
        order = on_thread[np.lexsort((-end[on_thread], start[on_thread]))]  # outer before inner at equal starts
        parent = _enclosing(start[order], end[order])
        d = np.zeros(len(order), dtype=np.int64)
        for k, up in enumerate(parent.tolist()):  # parents come first in start order
            d[k] = d[up] + 1 if up >= 0 else 0
        depth[order] = d
    kept_name = name[keep]
    return {
        "start": start, "end": end, "pid": pid, "tid": tid, "depth": depth,
        "function": codes.coded(kept_name, lambda n: _parts_or_blank(n)[0]),
        "file": codes.coded(kept_name, lambda n: _parts_or_blank(n)[1]),
        "line": _lines(parsed, kept_name),
    }


def _frame_parts(name: object) -> tuple[str, str, int] | None:
    """(function, file, first line) of a Python frame's event name; None for built-ins."""
    m = FRAME_NAME.fullmatch(name) if isinstance(name, str) else None
    return None if m is None else (m.group("function"), m.group("file"), int(m.group("line")))


def _parts_or_blank(name: object) -> tuple[str, str, int]:
    return _frame_parts(name) or ("", "", -1)


def _lines(parsed: list[tuple[str, str, int] | None], codes: np.ndarray) -> np.ndarray:
    per_code = np.array([p[2] if p is not None else -1 for p in parsed], dtype=np.int64)
    return per_code[codes] if len(per_code) else np.empty(0, dtype=np.int64)
