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

from profkit.model.keys import rows_by_thread
from profkit.model.trace import Coded, empty_arrays
from profkit.readers.kineto.columns import Table
from profkit.readers.kineto.source_lines import SourceLines

FRAME_NAME = re.compile(r"(?P<file>.+)\((?P<line>\d+)\): (?P<function>.*)")
MAX_LINE_DIGITS = 18  # int64
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


def python_sites(frames: Table, api: Table, source: SourceLines | None = None) -> dict[str, Any]:
    """One row per API call enclosed by a user frame (model table ``python_sites``):
    its columns, text as ``Coded``.  With ``source`` (the program's files at hand), a site is the
    line of the user frame's call that led to the API call, where the file shows that call on one
    line (``source_lines``); else the frame's recorded line."""
    if frames.rows == 0 or api.rows == 0:
        return empty_arrays("python_sites")
    codes = frames.codes["name"]
    parsed = [_frame_parts(n) for n in codes.index]
    is_user = np.array([_label(n)[0] != "" for n in codes.index], dtype=bool)
    if source is not None and not any(source.has_file(p[1]) for p, user in zip(parsed, is_user) if user):
        source = None
    name = frames.column("name")
    # without source lines only the user frames matter; with them, every frame: the one a user
    # frame called is what its call line is looked up by
    keep = is_user[name] if source is None else np.ones(frames.rows, dtype=bool)
    f_pid, f_tid = frames.column("pid")[keep], frames.column("tid")[keep]
    f_start, f_end, f_name = frames.column("start")[keep], frames.column("end")[keep], name[keep]
    a_pid, a_tid, a_start = api.column("pid"), api.column("tid"), api.column("start")
    a_corr = api.column("correlation")

    found_api: list[np.ndarray] = []
    found_frame: list[np.ndarray] = []
    found_callee: list[np.ndarray] = []
    api_of = rows_by_thread(a_pid, a_tid)
    for (pid, tid), on_thread in rows_by_thread(f_pid, f_tid).items():
        calls = api_of.get((pid, tid))
        if calls is None:
            continue
        order = on_thread[np.lexsort((-f_end[on_thread], f_start[on_thread]))]  # outer before inner at equal starts
        starts, ends = f_start[order], f_end[order]
        parent = _enclosing(starts, ends)
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
        if source is None:  # every kept frame is a user frame
            found_api.append(calls[open_])
            found_frame.append(order[at[open_]])
            continue
        user_of, called = _user_ancestors(parent, is_user[f_name[order]])
        at = at[open_]
        user = user_of[at]
        mine = user >= 0
        found_api.append(calls[open_][mine])
        found_frame.append(order[user[mine]])
        below, t_call = called[at[mine]], t[open_][mine]
        # a frame that starts as its sibling ends reads as that sibling's child: a callee is only the
        # frame the call ran in, open at the call's time
        below_ok = below >= 0
        below_ok[below_ok] &= (starts[below[below_ok]] <= t_call[below_ok]) & (ends[below[below_ok]] >= t_call[below_ok])
        found_callee.append(np.where(below_ok, f_name[order[np.maximum(below, 0)]], -1))
    if not found_api:
        return empty_arrays("python_sites")
    calls = np.concatenate(found_api)
    frame_rows = np.concatenate(found_frame)
    order = np.argsort(calls, kind="stable")  # api row order
    calls, frame_rows = calls[order], frame_rows[order]
    frame_code = f_name[frame_rows]
    if source is None:
        site = codes.coded(frame_code, lambda n: _label(n)[0])
    else:
        callee_code = np.concatenate(found_callee)[order]
        site = _call_sites(frame_code, callee_code, list(codes.index), parsed, source)
    return {
        "pid": a_pid[calls], "tid": a_tid[calls], "correlation": a_corr[calls], "start": a_start[calls],
        "site": site,
        "function": codes.coded(frame_code, lambda n: _label(n)[1]),
    }


def _user_ancestors(parent: np.ndarray, is_user: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each frame (sorted by start, ``parent`` from ``_enclosing``): its nearest user frame (itself
    if it is one; -1 for none), and the frame that user frame called on the way to it (-1 for
    itself)."""
    user_of = np.full(len(parent), -1, dtype=np.int64)
    called = np.full(len(parent), -1, dtype=np.int64)
    user = is_user.tolist()
    for k, up in enumerate(parent.tolist()):  # parents come first in start order
        if user[k]:
            user_of[k] = k
        elif up >= 0:
            user_of[k] = user_of[up]
            called[k] = k if user[up] else called[up]
    return user_of, called


def _call_sites(frame_code: np.ndarray, callee_code: np.ndarray, names: list[object],
                parsed: list[tuple[str, str, int] | None], source: SourceLines) -> Coded:
    """Each site as ``file:line`` of the call the source shows for its (frame, called frame) pair,
    else the frame's recorded ``file:line``; looked up once per distinct pair."""
    pairs, inverse = np.unique(np.stack([frame_code, callee_code]), axis=1, return_inverse=True)
    position: dict[str, int] = {}
    pair_label = []
    for frame, callee in pairs.T.tolist():
        function, file, line = parsed[frame]
        called = callee_name(names[callee]) if callee >= 0 else None
        found = source.call_line(file, function, line, called) if called else None
        pair_label.append(position.setdefault(f"{file}:{found if found is not None else line}", len(position)))
    return Coded(np.asarray(pair_label, dtype=np.int64)[np.asarray(inverse).reshape(-1)], list(position))


def callee_name(name: object) -> str | None:
    """The bare name a call to this frame has in source: ``item`` for the built-in method
    ``Tensor.item``, ``synchronize`` for ``torch/cuda/__init__.py(1162): synchronize``."""
    builtin = builtin_name(name)
    if builtin is not None:
        return builtin.rsplit(".", 1)[-1]
    parts = _frame_parts(name)
    return parts[0] if parts is not None else None


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


def python_frames(frames: Table, source: SourceLines | None = None) -> dict[str, Any]:
    """The model's python_frames (``schema.PYTHON_FRAMES``): every ``python_function`` event that
    is a Python frame ("file.py(25): function") or a built-in called from one, with its nesting
    depth among those frames on its thread.

    A built-in ("<built-in function sleep>", "<built-in method item of Tensor object at 0x...>")
    is named with its caller, the innermost Python frame around it: function "sleep (built-in)
    called from train_step", the caller's file and line.  Kineto's frame line is the frame's first
    line, not the line of the call, so the call's name is what tells where the time went."""
    if frames.rows == 0:
        return empty_arrays("python_frames")
    codes = frames.codes["name"]
    parsed = [_frame_parts(n) for n in codes.index]
    builtin_names = [builtin_name(n) for n in codes.index]
    is_frame = np.array([p is not None for p in parsed], dtype=bool)
    is_builtin = np.array([b is not None for b in builtin_names], dtype=bool)
    name = frames.column("name")
    keep = np.flatnonzero((is_frame | is_builtin)[name]) if len(is_frame) else np.empty(0, dtype=np.int64)
    pid, tid = frames.column("pid")[keep], frames.column("tid")[keep]
    start, end = frames.column("start")[keep], frames.column("end")[keep]
    kept_name = name[keep]
    builtin_row = is_builtin[kept_name] if len(keep) else np.zeros(0, dtype=bool)
    depth = np.zeros(len(keep), dtype=np.int64)
    caller = np.arange(len(keep), dtype=np.int64)  # the Python frame each row stands for (-1: none)
    for on_thread in rows_by_thread(pid, tid).values():
        order = on_thread[np.lexsort((-end[on_thread], start[on_thread]))]  # outer before inner at equal starts
        parent = _enclosing(start[order], end[order])
        d = np.zeros(len(order), dtype=np.int64)
        c = order.copy()
        builtin_here = builtin_row[order].tolist()
        for k, up in enumerate(parent.tolist()):  # parents come first in start order
            d[k] = d[up] + 1 if up >= 0 else 0
            if builtin_here[k]:
                c[k] = c[up] if up >= 0 else -1
        depth[order] = d
        caller[order] = c
    if not builtin_row.any():
        return {
            "start": start, "end": end, "pid": pid, "tid": tid, "depth": depth,
            "function": codes.coded(kept_name, lambda n: _parts_or_blank(n)[0]),
            "file": codes.coded(kept_name, lambda n: _parts_or_blank(n)[1]),
            "line": _lines(parsed, kept_name), "call_line": np.zeros(len(keep), dtype=np.int64),
        }
    per_code = [(_parts_or_blank(n)) for n in codes.index]
    bare = [callee_name(n) if b is not None else None for n, b in zip(codes.index, builtin_names)]
    functions, files, lines = [], [], np.empty(len(keep), dtype=np.int64)
    call_line = np.zeros(len(keep), dtype=np.int64)
    for k, (code, by) in enumerate(zip(kept_name.tolist(), caller.tolist())):
        own = per_code[code]
        if builtin_row[k]:
            up = per_code[kept_name[by]] if by >= 0 else ("", "", -1)
            called = f" called from {up[0]}" if by >= 0 else ""
            functions.append(f"{builtin_names[code]} (built-in){called}")
            files.append(up[1])
            found = source.call_line(up[1], up[0], up[2], bare[code]) if source is not None and by >= 0 else None
            lines[k] = up[2] if found is None else found
            call_line[k] = found is not None
        else:
            functions.append(own[0])
            files.append(own[1])
            lines[k] = own[2]
    return {"start": start, "end": end, "pid": pid, "tid": tid, "depth": depth,
            "function": _coded(functions), "file": _coded(files), "line": lines, "call_line": call_line}


BUILTIN_NAME = re.compile(r"<built-in (?:function (?P<function>[^>\s]+)|"
                          r"method (?P<method>\S+) of (?P<owner>.+?) object(?: at 0x[0-9a-fA-F]+)?)>")


def builtin_name(name: object) -> str | None:
    """'sleep' for "<built-in function sleep>", 'Tensor.item' for "<built-in method item of Tensor object
    at 0x...>", 'cat' for "<built-in method cat of type object ...>"; None for anything else."""
    m = BUILTIN_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        return None
    if m.group("function"):
        return m.group("function")
    owner = m.group("owner").rsplit(".", 1)[-1]
    return m.group("method") if owner in ("type", "module", "builtin_function_or_method") else \
        f"{owner}.{m.group('method')}"


def _coded(values: list[str]) -> Coded:
    position: dict[str, int] = {}
    codes = np.fromiter((position.setdefault(v, len(position)) for v in values), dtype=np.int64, count=len(values))
    return Coded(codes, list(position))


def _frame_parts(name: object) -> tuple[str, str, int] | None:
    """(function, file, first line) of a Python frame's event name; None for built-ins."""
    m = FRAME_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        return None
    line = m.group("line")
    # a line of thousands of digits is no line (and int() refuses past 4,300 digits): unknown
    return m.group("function"), m.group("file"), int(line) if len(line) <= MAX_LINE_DIGITS else -1


def _parts_or_blank(name: object) -> tuple[str, str, int]:
    return _frame_parts(name) or ("", "", -1)


def _lines(parsed: list[tuple[str, str, int] | None], codes: np.ndarray) -> np.ndarray:
    per_code = np.array([p[2] if p is not None else -1 for p in parsed], dtype=np.int64)
    return per_code[codes] if len(per_code) else np.empty(0, dtype=np.int64)
