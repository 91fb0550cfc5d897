"""``nsys profile --cuda-memory-usage=true``: CUDA_GPU_MEMORY_USAGE_EVENTS as the model's
``memory`` table.

nsys records memory one level below PyTorch's caching allocator: each row is a device allocation
the process made from the driver (``cudaMalloc``, ``cuMemCreate``, a loaded module's ``__device__``
globals) or gave back.  So the running total is what the process *held* on the device, the
model's ``total_reserved``; which of those bytes were handed out to tensors (``total_allocated``)
is not recorded (-1).  A caching allocator's segments and the allocations libraries make for
themselves (cuBLAS handles, NCCL buffers, CUDA graphs' pools) are all in it: a snapshot of the same
run tells them apart by address (``profkit.analysis.memory.driver``).

Kept: device memory (memory kinds Device, Array and Device Static).  Pinned and pageable host
memory is not the GPU's; managed memory migrates, so its bytes are no device's.  A free of an
address the capture never saw allocated (made before the capture began) is dropped, so the totals
count what was allocated while recording, never below zero.

Each row's thread and ``stack`` are its CUDA call's (``correlationId`` -> CUPTI_ACTIVITY_KIND_RUNTIME:
'cudaMalloc', 'cuMemCreate'); a module's globals, loaded with the module, have no call (thread -1,
stack ``MODULE_GLOBALS``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profkit.model import schema
from profkit.model.cuda_labels import MODULE_GLOBALS, normalize_api_name
from profkit.model.trace import Coded
from profkit.readers.nsys.reader import GLOBAL_TID_ID_MASK, GLOBAL_TID_PID_SHIFT, NsysExport

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
HOW = "nsys profile --cuda-memory-usage=true (profkit trace --nsys-args '--cuda-memory-usage=true')"
DEVICE_KINDS = ("Device", "Array", "Device Static")
# The enum's ids where an export lacks ENUM_CUDA_MEM_KIND / ENUM_CUDA_DEV_MEM_EVENT_OPER (both 2023.4
# and 2025.3 write them with these values)
DEVICE_KIND_IDS = (2, 3, 5)
ALLOCATION, DEALLOCATION = 0, 1
BATCH = 50_000
MAX_BYTES = 1 << 50  # 1 PiB
UNKNOWN_CALL = "a CUDA call the export does not name"


def has_memory_usage(export: NsysExport) -> bool:
    return export.has_table(TABLE)


def _labelled_ids(export: NsysExport, table: str, labels: tuple[str, ...], default: tuple[int, ...]) -> tuple[int, ...]:
    if not export.has_table(table):
        return default
    found = tuple(int(i) for i, label in export.rows(f'SELECT id, label FROM "{table}"') if label in labels)
    return found or default


def _operation_ids(export: NsysExport) -> tuple[int, int]:
    table = "ENUM_CUDA_DEV_MEM_EVENT_OPER"
    if not export.has_table(table):
        return ALLOCATION, DEALLOCATION
    labels = {str(label): int(i) for i, label in export.rows(f'SELECT id, label FROM "{table}"')}
    return labels.get("Allocation", ALLOCATION), labels.get("Deallocation", DEALLOCATION)


def memory_rows(export: NsysExport) -> tuple[dict[str, Any], int]:
    """The ``memory`` table's columns (every one of the schema's), in time order, and how many
    frees were dropped because their allocation came before the capture."""
    kinds = _labelled_ids(export, "ENUM_CUDA_MEM_KIND", DEVICE_KINDS, DEVICE_KIND_IDS)
    alloc_op, free_op = _operation_ids(export)
    correlation = '"correlationId"' if export.has_column(TABLE, "correlationId") else "NULL"
    marks = ",".join(str(k) for k in kinds)
    static = ",".join(str(k) for k in _labelled_ids(export, "ENUM_CUDA_MEM_KIND", ("Device Static",), (5,)))
    sql = (f'SELECT start, deviceId, address, bytes, memoryOperationType, {correlation}, memKind IN ({static}) '
           f'FROM "{TABLE}" '
           f"WHERE memKind IN ({marks}) AND memoryOperationType IN ({alloc_op}, {free_op}) "
           "ORDER BY start, rowid")
    parts = []
    batch: list[tuple] = []
    for row in export.iter_rows(sql, batch=BATCH):
        batch.append(row)
        if len(batch) == BATCH:
            parts.append(_ints(batch))
            batch = []
    if batch:
        parts.append(_ints(batch))
    raw = np.concatenate(parts) if parts else np.empty((0, 7), dtype=np.int64)
    start, device, addr, size, op, corr, static = (raw[:, i] for i in range(7))
    change, dropped = _signed_sizes(device, addr, size, op == free_op)
    keep = change != 0
    start, device, addr, change, corr, static = (v[keep] for v in (start, device, addr, change, corr, static))
    reserved = np.empty(len(change), dtype=np.int64)
    for d in np.unique(device):  # each device's running total of what the process holds
        mine = device == d
        reserved[mine] = np.cumsum(change[mine])
    pid, tid, calls = _calls(export, corr)
    n = len(change)
    empty = Coded(np.zeros(n, dtype=np.int64), [""])
    names = ["", MODULE_GLOBALS, UNKNOWN_CALL] + sorted(set(calls.values()))
    code = {name: i for i, name in enumerate(names)}
    stack = np.where(static == 1, code[MODULE_GLOBALS], code[UNKNOWN_CALL]).astype(np.int64)
    for i in np.flatnonzero((static != 1) & (corr > 0)):
        if int(corr[i]) in calls:
            stack[i] = code[calls[int(corr[i])]]
    return {"start": start, "pid": pid, "tid": tid, "device": device, "addr": addr, "bytes": change,
            "total_allocated": np.full(n, schema.MISSING_INT, dtype=np.int64), "total_reserved": reserved,
            "function": empty, "file": empty, "line": np.full(n, schema.MISSING_INT, dtype=np.int64),
            "stack": Coded(stack, names)}, dropped


def _ints(rows: list[tuple]) -> np.ndarray:
    return np.array([[schema.MISSING_INT if v is None else int(v) for v in r] for r in rows], dtype=np.int64)


def _signed_sizes(device: np.ndarray, addr: np.ndarray, size: np.ndarray, is_free: np.ndarray) -> tuple[np.ndarray, int]:
    """+bytes per allocation, -bytes of its allocation per free (0: a free of nothing the capture saw)."""
    # a size past any real GPU's memory (a damaged or crafted export) is no allocation: summed, it
    # would wrap the running total around
    change = np.where(is_free | (size >= MAX_BYTES), 0, np.maximum(size, 0))
    live: dict[tuple[int, int], int] = {}
    dropped = 0
    for i in range(len(addr)):  # few rows: a caching allocator asks the driver rarely
        key = (int(device[i]), int(addr[i]))
        if is_free[i]:
            held = live.pop(key, None)
            if held is None:
                dropped += 1
            else:
                change[i] = -held
        elif change[i] > 0:
            live[key] = int(change[i])
    return change, dropped


def _calls(export: NsysExport, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """The pid and tid of each row's CUDA call (-1 where it has none), and each correlation id's
    call name ('cudaMalloc')."""
    pid = np.full(len(corr), schema.MISSING_INT, dtype=np.int64)
    tid = pid.copy()
    wanted = np.unique(corr[corr > 0])
    runtime = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not len(wanted) or not export.has_table(runtime):
        return pid, tid, {}
    found: dict[int, tuple[int, int]] = {}
    ids = wanted.tolist()
    for lo in range(0, len(ids), 500):  # allocations are few: each chunk is one scan of the calls
        chunk = ids[lo:lo + 500]
        for c, g, name_id in export.rows(f"SELECT correlationId, globalTid, nameId FROM {runtime} "
                                         f"WHERE correlationId IN ({','.join('?' * len(chunk))})", chunk):
            found[int(c)] = (g, name_id)
    strings = export.strings([n for _, n in found.values() if n is not None])
    calls = {c: normalize_api_name(strings[n]) for c, (_, n) in found.items() if n in strings}
    for i in np.flatnonzero(corr > 0):
        g = found.get(int(corr[i]), (None, None))[0]
        if g is not None:
            pid[i] = (int(g) >> GLOBAL_TID_PID_SHIFT) & GLOBAL_TID_ID_MASK
            tid[i] = int(g) & GLOBAL_TID_ID_MASK
    return pid, tid, calls
