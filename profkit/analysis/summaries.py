"""Summaries of an nsys export that equal ``nsys stats`` to the nanosecond.

Each function returns plain rows (a list of dicts) and never prints:

- ``kernel_summary``  = ``nsys stats --report cuda_gpu_kern_sum``
- ``api_summary``     = ``cuda_api_sum``
- ``nvtx_summary``    = ``nvtx_sum``
- ``memory_summary``  = ``cuda_gpu_mem_time_sum`` + ``cuda_gpu_mem_size_sum``
- ``nvtx_kernel_summary`` = ``nvtx_kern_sum`` (kernels per enclosing NVTX range)
- ``capture_info``    = the capture: versions, GPU, span, GPU busy %

Rows of the first three have the keys of ``SUMMARY_KEYS`` (NVTX rows add
``style``), in nsys's order: total time descending.  Times are integer ns;
``avg_ns``, ``med_ns`` and ``stddev_ns`` are rounded to 0.1 ns the way nsys
rounds them, ``time_pct`` to 0.1 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from profkit.nsys import queries
from profkit.nsys.reader import NsysExport, normalize_api_name
from profkit.nsys.stats import GroupStats, grouped_stats, round_like_nsys

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

    Time columns equal cuda_gpu_mem_time_sum, byte columns
    cuda_gpu_mem_size_sum.  Empty when the export has no memory operations.
    """
    by_time: list[GroupStats] = []
    by_size: dict[tuple, GroupStats] = {}
    for time_query, size_query in queries.memory_ops(export):
        by_time += grouped_stats(export, time_query)
        by_size.update((g.key, g) for g in grouped_stats(export, size_query))
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


def _summary_rows(export: NsysExport, groups: Sequence[GroupStats], label) -> list[Row]:  # noqa: ANN001
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
