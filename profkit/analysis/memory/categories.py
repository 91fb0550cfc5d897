"""What a block alive at the peak *is*: parameters, optimizer state, gradients, activations,
temporaries, a library's workspace, or the program's own data.

Two facts decide it, both recorded by the trace, never guessed from sizes:

1. **Where it was allocated** (its *origin*), from the allocation's own stack where the source
   records one (a snapshot's Python and C++ frames), else from what the profiler saw open around
   it on its thread (torch.profiler's ``Optimizer.step#`` ranges, autograd's backward operators,
   ``nn.Module:`` forwards, the Python frames of ``with_stack``):

   ===================  ===========================================================
   workspace            a library's scratch memory handed out by PyTorch (cuBLAS:
                        ``setWorkspaceForHandle``; cuDNN / cuBLASLt ``workspace``)
   parameter            ``nn.Module._apply`` (``.to()``, ``.cuda()``, ``.half()``),
                        ``to_empty``, a module's ``__init__`` / ``reset_parameters``
   optimizer init       ``torch.optim`` ... ``_init_group`` (Adam's ``exp_avg``, ...)
   optimizer            any other frame of ``torch.optim``
   backward             autograd's engine (its C++ thread, ``torch.autograd``)
   forward              a module's forward (``nn.Module.__call__``)
   other                the program's own code: inputs, data copies, its lists
   ===================  ===========================================================

2. **Whether it outlived the run of allocations it was made in** (the forward, the backward, the
   optimizer step: the allocations up to the next one of another origin), and whether it was
   ever freed while recorded.  A forward block that outlives the forward is an activation kept for
   the backward, one freed within it a temporary; a backward block that outlives the backward is a
   gradient; an optimizer block that outlives the step is its state (SGD's momentum buffers are
   made in the step itself, not in ``_init_group``).  A forward block never freed while recorded
   is no activation (the backward frees those): it is held to the end (a cache, a workspace
   torch.profiler cannot tell, a leak).

The categories follow ``torch.profiler``'s memory timeline (parameter, optimizer state, gradient,
activation, temporary) where they can be told from these records.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

PARAMETERS = "parameters"
OPTIMIZER_STATE = "optimizer state"
GRADIENTS = "gradients"
ACTIVATIONS = "activations"
TEMPORARIES = "temporaries"
WORKSPACES = "library workspaces (cuBLAS, cuDNN)"
HELD_TO_END = "held to the end of the record (caches, workspaces, leaks)"
PROGRAM = "the program's own tensors (inputs, data, its lists)"
CATEGORIES = (PARAMETERS, OPTIMIZER_STATE, GRADIENTS, ACTIVATIONS, TEMPORARIES, WORKSPACES, HELD_TO_END, PROGRAM)

WORKSPACE, PARAMETER, OPTIMIZER_INIT, OPTIMIZER, BACKWARD, FORWARD, OTHER = (
    "workspace", "parameter", "optimizer init", "optimizer", "backward", "forward", "other")

_PARAMETER_FUNCTIONS = {"_apply", "to_empty", "reset_parameters", "_load_from_state_dict"}
# C++ frames of PyTorch handing a library its scratch memory (cuBLAS / cuBLASLt / cuDNN workspaces)
_WORKSPACE_MARKS = ("setWorkspaceForHandle", "BlasLtWorkspace", "Workspace")
_BACKWARD_MARKS = ("torch::autograd::Engine", "PythonEngine::thread_init", "torch::autograd::Node",
                   "torch::autograd::generated::")


_PYTHON_FRAME = re.compile(r"^(\S+) (.+\.py):(\d+)$")


def stack_origin(stack: str) -> str:
    """The origin (module docstring) of an allocation with this ``memory.stack`` text."""
    if not stack:
        return OTHER
    python: list[tuple[str, str]] = []
    native: list[str] = []
    for frame in stack.split("\n"):
        match = _PYTHON_FRAME.match(frame)
        if match:
            python.append((match.group(1), match.group(2).replace("\\", "/")))
        else:
            native.append(frame)
    if any(mark in name for name in native for mark in _WORKSPACE_MARKS):
        return WORKSPACE
    if any("torch/optim/" in file for _, file in python):
        return OPTIMIZER_INIT if any(_is_optimizer_init_frame(fn, file) for fn, file in python) else OPTIMIZER
    if any(mark in name for name in native for mark in _BACKWARD_MARKS) or \
            any("torch/autograd/" in file for _, file in python):
        return BACKWARD
    if any(_is_parameter_frame(fn, file) for fn, file in python):
        return PARAMETER
    if any(fn in ("_call_impl", "_wrapped_call_impl") and "torch/nn/modules/module.py" in file for fn, file in python):
        return FORWARD
    return OTHER


def _is_optimizer_init_frame(function: str, file: str) -> bool:
    return function == "_init_group" and "torch/optim/" in file


def _is_parameter_frame(function: str, file: str) -> bool:
    if "torch/nn/" not in file:
        return False
    return function in _PARAMETER_FUNCTIONS or "torch/nn/parameter.py" in file or "torch/nn/init.py" in file or \
        (function == "__init__" and "torch/nn/modules/" in file)


def context_origins(t: np.ndarray, tid: np.ndarray, ranges: pd.DataFrame | None, ops: pd.DataFrame | None,
                    frames: pd.DataFrame | None) -> np.ndarray:
    """The origin of allocations made at times ``t`` on threads ``tid`` that recorded no stack
    (torch.profiler), from what was open around them: an ``Optimizer.step#`` range (any thread),
    and on their own thread autograd's backward operators, ``nn.Module:`` / ``aten::`` operators,
    and ``with_stack``'s Python frames (``_init_group``, ``_apply``)."""
    out = np.full(len(t), OTHER, dtype=object)
    if not len(t):
        return out
    # lowest priority first: a later kind overrides an earlier one
    if ops is not None and not ops.empty:
        names = ops["name"].astype(str)
        module_ops = names.str.startswith("nn.Module:")
        forward = module_ops if module_ops.any() else names.str.startswith("aten::")
        _mark(out, FORWARD, t, tid, ops[forward.to_numpy()])
    if frames is not None and not frames.empty:
        _mark(out, PARAMETER, t, tid, frames[_frames_where(frames, _is_parameter_frame)])
    if ops is not None and not ops.empty:
        names = ops["name"].astype(str)
        backward = names.str.contains("Backward", regex=False) | names.str.startswith("autograd::")
        _mark(out, BACKWARD, t, tid, ops[backward.to_numpy()])
    optimizer = []
    for table in (ranges, ops):
        if table is not None and not table.empty:
            optimizer.append(table[table["name"].astype(str).str.startswith("Optimizer.step").to_numpy()])
    for rows in optimizer:
        _mark(out, OPTIMIZER, t, None, rows)
    if frames is not None and not frames.empty:
        _mark(out, OPTIMIZER_INIT, t, tid, frames[_frames_where(frames, _is_optimizer_init_frame)])
    return out


def _frames_where(frames: pd.DataFrame, rule: Callable[[str, str], bool]) -> np.ndarray:
    """Which Python frames ``rule(function, file)`` holds for, asked once per distinct pair (a
    with_stack trace holds millions of frames of a few thousand functions)."""
    ids = frames.groupby(["function", "file"], observed=True, sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(ids, return_index=True)[1]  # each pair's first row (ids run 0 .. pairs - 1)
    functions, files = frames["function"].to_numpy()[first], frames["file"].to_numpy()[first]
    holds = np.array([rule(str(fn), str(file).replace("\\", "/")) for fn, file in zip(functions, files)], dtype=bool)
    return holds[ids]


def _mark(out: np.ndarray, origin: str, t: np.ndarray, tid: np.ndarray | None, rows: pd.DataFrame) -> None:
    """Set ``origin`` where a time falls inside one of ``rows``' intervals (on its own thread
    unless ``tid`` is None)."""
    if rows.empty:
        return
    if tid is None:
        out[_inside(rows["start"].to_numpy(), rows["end"].to_numpy(), t)] = origin
        return
    for thread, mine in rows.groupby("tid", sort=False):
        at = np.flatnonzero(tid == thread)
        if len(at):
            hit = _inside(mine["start"].to_numpy(), mine["end"].to_numpy(), t[at])
            out[at[hit]] = origin


def _inside(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Whether each time lies in the union of the intervals [start, end)."""
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    at = np.searchsorted(start, t, side="right") - 1
    return (at >= 0) & (t < end[np.maximum(at, 0)])


def free_positions(addr: np.ndarray, size: np.ndarray) -> np.ndarray:
    """For each allocation event, the index of the event that frees its block (``len`` when none
    does while recorded); -1 for frees.  An address is reused: a block's free is the next event
    of its address, when that event is a free."""
    n = len(addr)
    out = np.full(n, -1, dtype=np.int64)
    alloc = size > 0
    out[alloc] = n
    order = np.lexsort((np.arange(n), addr))
    same_next = np.zeros(n, dtype=bool)
    same_next[:-1] = addr[order[1:]] == addr[order[:-1]]
    freed = same_next.copy()
    freed[:-1] &= size[order[1:]] < 0
    freed &= alloc[order]
    where = np.flatnonzero(freed)
    out[order[where]] = order[where + 1]
    return out


def block_categories(origins: np.ndarray, size: np.ndarray, freed_at: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The category of each allocation in ``blocks`` (event indices), from every event's origin
    (``''`` for frees) and each allocation's free position (``free_positions``)."""
    n = len(origins)
    alloc = np.flatnonzero(size > 0)
    run_end = np.full(n, n, dtype=np.int64)
    if len(alloc):
        o = origins[alloc]
        starts = np.flatnonzero(o[1:] != o[:-1]) + 1  # where a new run of one origin begins
        nxt = np.searchsorted(starts, np.arange(len(alloc)), side="right")
        ahead = starts[np.minimum(nxt, len(starts) - 1)] if len(starts) else np.zeros(len(alloc), dtype=np.int64)
        run_end[alloc] = np.where(nxt < len(starts), alloc[ahead], n)
    out = np.empty(len(blocks), dtype=object)
    for k, i in enumerate(blocks):
        origin, outlives, kept = origins[i], freed_at[i] > run_end[i], freed_at[i] >= n
        out[k] = _category(origin, bool(outlives), bool(kept))
    return out


def _category(origin: str, outlives: bool, never_freed: bool) -> str:
    if origin == WORKSPACE:
        return WORKSPACES
    if origin == PARAMETER:
        return PARAMETERS
    if origin == OPTIMIZER_INIT:
        return OPTIMIZER_STATE
    if origin == OPTIMIZER:
        return OPTIMIZER_STATE if outlives else TEMPORARIES
    if origin == BACKWARD:
        return GRADIENTS if outlives else TEMPORARIES
    if origin == FORWARD:
        return (HELD_TO_END if never_freed else ACTIVATIONS) if outlives else TEMPORARIES
    return PROGRAM


__all__ = ["ACTIVATIONS", "CATEGORIES", "GRADIENTS", "OPTIMIZER_STATE", "PARAMETERS", "TEMPORARIES", "WORKSPACES",
           "block_categories", "free_positions", "stack_origin"]
