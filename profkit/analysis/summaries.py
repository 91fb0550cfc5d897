"""Summaries of an nsys export that equal ``nsys stats`` to the nanosecond.

Each function returns plain rows (a list of dicts) and never prints:

- ``kernel_summary``  = ``nsys stats --report cuda_gpu_kern_sum``
- ``api_summary``     = ``cuda_api_sum``
- ``nvtx_summary``    = ``nvtx_sum``
- ``memory_summary``  = ``cuda_gpu_mem_time_sum`` + ``cuda_gpu_mem_size_sum``
- ``nvtx_kernel_summary`` = ``nvtx_kern_sum`` (kernels per enclosing NVTX range)
- ``capture_info``    = the capture: versions, GPU, span, GPU busy % (``profkit.analysis.capture``)

Rows of the first three have the keys of ``SUMMARY_KEYS`` (NVTX rows add
``style``), in nsys's order: total time descending.  Times are integer ns;
``avg_ns``, ``med_ns`` and ``stddev_ns`` are rounded to 0.1 ns the way nsys
rounds them, ``time_pct`` to 0.1 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from profkit.readers.nsys import queries
from profkit.readers.nsys.reader import NsysExport, normalize_api_name
from profkit.readers.nsys.stats import (
    NULL_INT,
    GroupStats,
    encode_keys,
    grouped_stats,
    round_like_nsys,
    stats_from_columns,
)

SUMMARY_KEYS = ("name", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns")

Row = dict[str, Any]


def kernel_summary(export: NsysExport) -> list[Row]:
    """One row per kernel name (demangled), like cuda_gpu_kern_sum."""
    groups = grouped_stats(export, queries.kernel_durations(export))
    names = export.strings([g.key[0] for g in groups])
    rows = _summary_rows(export, groups, lambda g: {"name": names.get(g.key[0], f"<string {g.key[0]}>")})
    # cuda_gpu_kern_sum: ORDER BY total DESC, instances, name.
    rows.sort(key=lambda r: (-r["total_ns"], r["instances"], r["name"]))
    return rows


def api_summary(export: NsysExport) -> list[Row]:
    """One row per CUDA runtime/driver API function, like cuda_api_sum."""
    groups = grouped_stats(export, queries.api_durations(export))
    names = export.strings([g.key[0] for g in groups])
    rows = _summary_rows(
        export, groups, lambda g: {"name": normalize_api_name(names.get(g.key[0], f"<string {g.key[0]}>"))}
    )
    # cuda_api_sum orders by total only; instances and name make ties stable.
    rows.sort(key=lambda r: (-r["total_ns"], r["instances"], r["name"]))
    return rows


def nvtx_summary(export: NsysExport) -> list[Row]:
    """One row per NVTX range text and style (PushPop / StartEnd), like nvtx_sum."""
    groups = grouped_stats(export, queries.nvtx_durations(export))
    rows = _summary_rows(export, groups, lambda g: {"name": g.key[0], "style": g.key[1]})
    rows.sort(key=lambda r: (-r["total_ns"], r["instances"], str(r["name"]), r["style"]))
    return rows


def memory_summary(export: NsysExport) -> list[Row]:
    """memcpy/memset totals per operation ("[CUDA memcpy Host-to-Device]", "[CUDA memset]").

    Time columns equal cuda_gpu_mem_time_sum; byte columns (total_bytes,
    avg_bytes, med_bytes, min_bytes, max_bytes, stddev_bytes) equal
    cuda_gpu_mem_size_sum, which does not round them.  ``direction`` is the
    copy kind ("Host-to-Device", ...) or "memset".  Empty when the export
    has no memory operations.
    """
    by_time: list[GroupStats] = []
    by_size: dict[tuple, GroupStats] = {}
    for time_query, size_query in queries.memory_ops(export):
        by_time += grouped_stats(export, time_query)
        by_size.update((g.key, g) for g in grouped_stats(export, size_query, rounded=False))
    rows = _summary_rows(export, by_time, lambda g: {"name": g.key[0], "direction": _direction(g.key[0])})
    for row in rows:
        size = by_size[(row["name"],)]
        row.update(
            total_bytes=size.total,
            avg_bytes=size.avg,
            med_bytes=size.med,
            min_bytes=size.min,
            max_bytes=size.max,
            stddev_bytes=size.stddev,
        )
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    return rows


def _direction(operation: str) -> str:
    # "[CUDA memcpy Host-to-Device]" -> "Host-to-Device"; "[CUDA memset]" -> "memset"
    inner = operation.strip("[]")
    return inner[len("CUDA memcpy "):] if inner.startswith("CUDA memcpy ") else inner.replace("CUDA ", "")


def _summary_rows(export: NsysExport, groups: Sequence[GroupStats], label) -> list[Row]:
    grand_total = sum(g.total for g in groups)
    # nsys: round(total * 100.0 / grand_total, 1), rounded by its SQLite.
    pcts = round_like_nsys([g.total * 100.0 / grand_total if grand_total else 0.0 for g in groups], 1,
                           export.rounding_mode)
    rows = []
    for g, pct in zip(groups, pcts):
        row: Row = label(g)
        row.update(
            time_pct=pct,
            total_ns=g.total,
            instances=g.count,
            avg_ns=g.avg,
            med_ns=g.med,
            min_ns=g.min,
            max_ns=g.max,
            stddev_ns=g.stddev,
        )
        rows.append(row)
    return rows


_SUMMED_KEYS = ("total_ns", "instances", "total_bytes", "nvtx_instances")


def top_n(rows: Sequence[Row], n: int, label_key: str = "name") -> list[Row]:
    """The first ``n`` rows, and the rest summed into one ``"(other K)"`` row.

    Rows must already be sorted (summaries come sorted by total time).  The
    summed row has exact totals, instance counts, min and max, the overall
    average and its share of the time; median and stddev are ``None`` (they
    cannot be derived from the parts), as are keys that do not add up
    (style, pid, ...).
    """
    rows = list(rows)
    if n < 0:
        raise ValueError("n must be >= 0")
    if len(rows) <= n + 1:  # replacing one row by "(other 1)" would hide it for nothing
        return rows
    head, rest = rows[:n], rows[n:]
    other: Row = {key: None for key in rows[0]}
    other[label_key] = f"(other {len(rest)})"
    for key in other:
        values = [r[key] for r in rest if r.get(key) is not None]
        if not values:
            continue
        if key in _SUMMED_KEYS:
            other[key] = sum(values)
        elif key.startswith("min_"):
            other[key] = min(values)
        elif key.startswith("max_"):
            other[key] = max(values)
    if other.get("instances") and other.get("total_ns") is not None and "avg_ns" in other:
        other["avg_ns"] = round(other["total_ns"] / other["instances"], 1)
    if "time_pct" in other and other.get("total_ns") is not None:
        grand_total = sum(r.get("total_ns") or 0 for r in rows)
        other["time_pct"] = round(other["total_ns"] * 100.0 / grand_total, 1) if grand_total else 0.0
    return [*head, other]


# -- the capture ---------------------------------------------------------------------
# The capture and the GPU busy time are analyses of their own (profkit.analysis.capture,
# profkit.analysis.timeline: one union of the GPU intervals serves the capture, the
# utilization figure and the findings); the names stay reachable here.
from profkit.analysis.capture import capture_info  # noqa: E402, F401
from profkit.analysis.timeline import gpu_busy, union_length  # noqa: E402, F401

# -- kernels per NVTX range ---------------------------------------------------------
NVTX_KERNEL_KEYS = ("range", "style", "pid", "tid", "nvtx_instances", "instances", "total_ns", "avg_ns",
                    "med_ns", "min_ns", "max_ns", "stddev_ns", "name")


def nvtx_kernel_summary(export: NsysExport) -> list[Row]:
    """Kernels grouped by the NVTX range enclosing their launch, like nvtx_kern_sum.

    One row per (range text, style, pid, tid, kernel name).  A kernel counts
    in every range that encloses its launch (nested ranges included);
    kernels launched outside any range have ``range = None``.
    ``nvtx_instances`` counts range instances, ``instances`` kernel
    instances; the time figures are over the kernels of the row.  Ordered as
    nsys orders it: range, pid, tid, total time descending.
    """
    from profkit.readers.nsys.nvtx_projection import (
        kernel_range_pairs,  # imports pandas: only here
    )

    pairs = kernel_range_pairs(export)
    if len(pairs.duration) == 0:
        return []
    pid = np.where(pairs.global_tid == NULL_INT, -1, (pairs.global_tid >> 24) & 0xFFFFFF)
    tid = np.where(pairs.global_tid == NULL_INT, -1, pairs.global_tid & 0xFFFFFF)
    group, group_keys = _group_codes([pairs.range_label, pid, tid, pairs.kernel_name_id])
    del pid, tid
    stats = stats_from_columns([group], pairs.duration, export.rounding_mode)
    nvtx_instances = _distinct_per_group(group, pairs.range_row, ignore=-1)
    kernel_instances = _distinct_per_group(group, pairs.kernel_row)
    names = export.strings(np.unique(pairs.kernel_name_id).tolist())
    rows = []
    for s in stats:
        code = s.key[0]
        label, p, t, name_id = group_keys[code]
        text, style = pairs.range_labels[label] if label >= 0 else (None, None)
        rows.append({
            "range": text, "style": style, "pid": p if p >= 0 else None, "tid": t if t >= 0 else None,
            "nvtx_instances": int(nvtx_instances[code]), "instances": int(kernel_instances[code]),
            "total_ns": s.total, "avg_ns": s.avg, "med_ns": s.med, "min_ns": s.min, "max_ns": s.max,
            "stddev_ns": s.stddev, "name": names.get(name_id, f"<string {name_id}>"),
        })
    rows.sort(key=lambda r: (r["range"] is not None, r["range"] or "", r["pid"] is not None, r["pid"] or 0,
                             r["tid"] or 0, -r["total_ns"]))
    return rows


def nvtx_range_gpu_time(rows: Sequence[Row], total_kernel_ns: int | None = None) -> list[Row]:
    """Kernel time per NVTX range: ``nvtx_kernel_summary`` rows summed over kernels and threads.

    Keys: range, style, instances (kernel instances), total_ns, kernels
    (distinct kernel names) and, when ``total_kernel_ns`` (all kernel time,
    e.g. the sum of ``kernel_summary`` totals) is given, time_pct.  Nested
    ranges contain the same kernels, so shares can add up to more than 100 %.
    Kernels launched outside any range form the row with ``range = None``.
    Sorted by total time, descending.
    """
    grouped: dict[tuple, Row] = {}
    names: dict[tuple, set] = {}
    for r in rows:
        key = (r["range"], r["style"])
        g = grouped.setdefault(key, {"range": r["range"], "style": r["style"], "instances": 0, "total_ns": 0})
        g["instances"] += r["instances"]
        g["total_ns"] += r["total_ns"]
        names.setdefault(key, set()).add(r["name"])
    out = []
    for key, g in grouped.items():
        g["kernels"] = len(names[key])
        if total_kernel_ns:
            g["time_pct"] = round(100.0 * g["total_ns"] / total_kernel_ns, 1)
        out.append(g)
    out.sort(key=lambda r: (-r["total_ns"], str(r["range"])))
    return out


def _group_codes(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Dense group codes for rows of several int64 columns, and each code's key tuple.

    Each column is encoded densely on its own, the codes are combined in a
    mixed radix (one int64), and that is encoded once more: three 1-D
    encodings instead of np.unique(axis=0), which is ~50x slower.
    """
    combined = np.zeros(len(columns[0]), dtype=np.int64)
    uniques = []
    radix = 1
    for column in columns:
        codes, values = encode_keys([column])
        uniques.append([v[0] for v in values])
        radix *= len(values)
        if radix >= 1 << 62:
            raise RuntimeError("too many distinct group keys to combine")  # not reachable in practice
        combined = combined * len(values) + codes
    group, group_values = encode_keys([combined])
    keys = []
    for (value,) in group_values:
        parts = []
        for column_values in reversed(uniques):
            value, index = divmod(value, len(column_values))
            parts.append(column_values[index])
        keys.append(tuple(reversed(parts)))
    return group, keys


def _distinct_per_group(group: np.ndarray, ids: np.ndarray, ignore: int | None = None) -> np.ndarray:
    """Number of distinct ``ids`` per group code (``ignore`` not counted, like SQL's NULL)."""
    n_groups = int(group.max()) + 1 if len(group) else 0
    keep = ids != ignore if ignore is not None else np.ones(len(ids), dtype=bool)
    id_codes, id_values = encode_keys([ids[keep]])
    unique_pairs = np.unique(group[keep] * len(id_values) + id_codes)
    return np.bincount(unique_pairs // len(id_values), minlength=n_groups)
