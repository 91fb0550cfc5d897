"""Summaries of a trace that equal ``nsys stats`` to the nanosecond on nsys exports.

Each function takes a ``Trace`` (``profkit.readers.open_trace``), computes
from its columns and returns plain rows (a list of dicts); none prints:

- ``kernel_summary``  = ``nsys stats --report cuda_gpu_kern_sum``
- ``api_summary``     = ``cuda_api_sum``
- ``nvtx_summary``    = ``nvtx_sum`` (on Kineto traces: the record_function /
  user_annotation ranges)
- ``memory_summary``  = ``cuda_gpu_mem_time_sum`` + ``cuda_gpu_mem_size_sum``
- ``nvtx_kernel_summary`` = ``nvtx_kern_sum`` (kernels per enclosing range)

Rows of the first three have the keys of ``SUMMARY_KEYS`` (NVTX rows add
``style``), in nsys's order: total time descending.  Times are integer ns;
``avg_ns``, ``med_ns`` and ``stddev_ns`` are rounded to 0.1 ns the way the
trace's nsys release rounds them (``TraceMeta.rounding_mode``), ``time_pct``
to 0.1 %.  The statistics are ``profkit.analysis.kernels.grouped_stats``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from profkit.analysis.kernels.grouped_stats import GroupStats, round_like_nsys, stats_from_columns
from profkit.model.keys import encode_rows
from profkit.model import Coded, Trace

SUMMARY_KEYS = ("name", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns")

Row = dict[str, Any]


def kernel_summary(trace: Trace) -> list[Row]:
    """One row per kernel name (demangled), like cuda_gpu_kern_sum."""
    trace.require("kernels", "CUDA kernel data")
    rows = _named_rows(trace, trace.codes("kernels", "name"), trace.array("kernels", "duration"))
    # cuda_gpu_kern_sum: ORDER BY total DESC, instances, name.
    rows.sort(key=lambda r: (-r["total_ns"], r["instances"], r["name"]))
    return rows


def api_summary(trace: Trace) -> list[Row]:
    """One row per CUDA runtime/driver API function, like cuda_api_sum.

    Names come without their version suffix (cudaLaunchKernel_v7000 ->
    cudaLaunchKernel), as nsys prints them; nsys groups before stripping, so
    a trace holding both spellings of one call gets two nsys rows and one here."""
    trace.require("api", "CUDA API trace data")
    rows = _named_rows(trace, trace.codes("api", "name"), trace.array("api", "duration"))
    # cuda_api_sum orders by total only; instances and name make ties stable.
    rows.sort(key=lambda r: (-r["total_ns"], r["instances"], r["name"]))
    return rows


def nvtx_summary(trace: Trace) -> list[Row]:
    """One row per range name and style (PushPop / StartEnd), like nvtx_sum.

    Names and the end of a never-closed range follow nvtx_sum
    (``profkit.analysis.timeline.ranges``): "domain:text" in a named NVTX domain,
    ":text" or "text" in the default one as the trace's nsys release
    prints it; Kineto's record_function / user_annotation ranges by their
    name.  GPU-side copies of annotations are left out."""
    from profkit.analysis.timeline.ranges import cpu_ranges

    trace.require("ranges", "NVTX data")
    r = cpu_ranges(trace, ["style"], open_end="nvtx_sum")
    labels, styles = r["label"].array, r["style"].array
    codes, keys = encode_rows([np.asarray(labels.codes, dtype=np.int64), np.asarray(styles.codes, dtype=np.int64)])
    durations = r["end"].to_numpy() - r["start"].to_numpy()
    groups = stats_from_columns([codes], durations, trace.meta.rounding_mode)

    def name_and_style(g: GroupStats) -> Row:
        label, style = keys[g.key[0]]
        return {"name": str(labels.categories[label]) if label >= 0 else None,
                "style": str(styles.categories[style]) if style >= 0 else None}

    rows = _summary_rows(trace, groups, name_and_style)
    rows.sort(key=lambda r: (-r["total_ns"], r["instances"], str(r["name"]), r["style"]))
    return rows


def memory_summary(trace: Trace) -> list[Row]:
    """memcpy/memset totals per operation ("[CUDA memcpy Host-to-Device]", "[CUDA memset]";
    "[HIP memcpy ...]" on a ROCm trace: ``TraceMeta.gpu_platform``).

    Time columns equal cuda_gpu_mem_time_sum; byte columns (total_bytes,
    avg_bytes, med_bytes, min_bytes, max_bytes, stddev_bytes) equal
    cuda_gpu_mem_size_sum, which does not round them.  They are None for an
    operation with a copy of unknown size (-1 in the model: ROCm's Kineto
    writes no ``bytes``), never a sum of -1s.  ``direction`` is the copy kind
    ("Host-to-Device", ...) or "memset".  Empty when the trace has no memory
    operations.
    """
    platform = trace.meta.gpu_platform
    by_time: list[GroupStats] = []
    by_size: dict[str, GroupStats | None] = {}
    for table, kind_column in (("memcpy", "copy_kind"), ("memset", None)):
        if not trace.has(table):
            continue
        durations, sizes = trace.array(table, "duration"), trace.array(table, "bytes")
        if kind_column:
            kinds = trace.codes(table, kind_column)
            codes = np.asarray(kinds.codes, dtype=np.int64)
            names = [f"[{platform} memcpy {k}]" for k in kinds.categories]
        else:
            codes, names = np.zeros(len(durations), dtype=np.int64), [f"[{platform} memset]"]
        for g in stats_from_columns([codes], durations, trace.meta.rounding_mode):
            by_time.append(GroupStats((names[g.key[0]],), g.count, g.total, g.avg, g.med, g.min, g.max, g.stddev))
        unknown = set(np.unique(codes[sizes < 0]).tolist())
        for g in stats_from_columns([codes], sizes, None):
            by_size[names[g.key[0]]] = None if g.key[0] in unknown else g
    rows = _summary_rows(trace, by_time, lambda g: {"name": g.key[0], "direction": _direction(g.key[0])})
    for row in rows:
        size = by_size[row["name"]]
        if size is None:
            row.update(dict.fromkeys(("total_bytes", "avg_bytes", "med_bytes", "min_bytes", "max_bytes",
                                      "stddev_bytes")))
        else:
            row.update(total_bytes=size.total, avg_bytes=size.avg, med_bytes=size.med, min_bytes=size.min,
                       max_bytes=size.max, stddev_bytes=size.stddev)
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    return rows


def _direction(operation: str) -> str:
    # "[CUDA memcpy Host-to-Device]" -> "Host-to-Device"; "[HIP memset]" -> "memset"
    rest = operation.strip("[]").partition(" ")[2]
    return rest[len("memcpy "):] if rest.startswith("memcpy ") else rest


def _named_rows(trace: Trace, names: Coded, values: np.ndarray) -> list[Row]:
    """Summary rows of ``values`` grouped by a text column."""
    groups = stats_from_columns([np.asarray(names.codes, dtype=np.int64)], values, trace.meta.rounding_mode)
    categories = names.categories
    return _summary_rows(trace, groups, lambda g: {"name": categories[g.key[0]]})


def _summary_rows(trace: Trace, groups: Sequence[GroupStats], label: Callable[[GroupStats], Row]) -> list[Row]:
    grand_total = sum(g.total for g in groups)
    # nsys: round(total * 100.0 / grand_total, 1), rounded by its SQLite.
    pcts = round_like_nsys([g.total * 100.0 / grand_total if grand_total else 0.0 for g in groups], 1,
                           trace.meta.rounding_mode)
    rows = []
    for g, pct in zip(groups, pcts):
        row: Row = label(g)
        row.update(time_pct=pct, total_ns=g.total, instances=g.count, avg_ns=g.avg, med_ns=g.med,
                   min_ns=g.min, max_ns=g.max, stddev_ns=g.stddev)
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
        if not values or (key.endswith("_bytes") and len(values) < len(rest)):
            continue  # a part of unknown size (None) leaves the sum, min and max unknown too
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


# -- kernels per NVTX range ---------------------------------------------------------
NVTX_KERNEL_KEYS = ("range", "style", "pid", "tid", "nvtx_instances", "instances", "total_ns", "avg_ns",
                    "med_ns", "min_ns", "max_ns", "stddev_ns", "name")


def nvtx_kernel_summary(trace: Trace) -> list[Row]:
    """Kernels grouped by the NVTX range enclosing their launch, like nvtx_kern_sum.

    One row per (range label, style, pid, tid, kernel name).  A kernel counts
    in every range that encloses its launch (nested ranges included);
    kernels launched outside any range have ``range = None``.
    ``nvtx_instances`` counts range instances, ``instances`` kernel
    instances; the time figures are over the kernels of the row.  Ordered as
    nsys orders it: range, pid, tid, total time descending.
    """
    from profkit.analysis.timeline.nvtx_projection import kernel_range_pairs

    pairs = kernel_range_pairs(trace)
    if len(pairs.duration) == 0:
        return []
    group, group_keys = encode_rows([pairs.range_label, pairs.pid, pairs.tid, pairs.kernel_name])
    stats = stats_from_columns([group], pairs.duration, trace.meta.rounding_mode)
    nvtx_instances = _distinct_per_group(group, pairs.range_row, ignore=-1)
    kernel_instances = _distinct_per_group(group, pairs.kernel_row)
    rows = []
    for s in stats:
        code = s.key[0]
        label, p, t, name = group_keys[code]
        text, style = pairs.range_labels[label] if label >= 0 else (None, None)
        rows.append({
            "range": text, "style": style, "pid": p if p >= 0 else None, "tid": t if t >= 0 else None,
            "nvtx_instances": int(nvtx_instances[code]), "instances": int(kernel_instances[code]),
            "total_ns": s.total, "avg_ns": s.avg, "med_ns": s.med, "min_ns": s.min, "max_ns": s.max,
            "stddev_ns": s.stddev, "name": pairs.kernel_names[name],
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


def _distinct_per_group(group: np.ndarray, ids: np.ndarray, ignore: int | None = None) -> np.ndarray:
    """Number of distinct ``ids`` per group code (``ignore`` not counted, like SQL's NULL)."""
    n_groups = int(group.max()) + 1 if len(group) else 0
    if ignore is not None:
        keep = ids != ignore
        group, ids = group[keep], ids[keep]
    if not len(ids):
        return np.zeros(n_groups, dtype=np.int64)
    # ids are row numbers: (group, id) packs into one int64 as is, no code per distinct id;
    # sorted in place, a new pair is one that differs from the one before it
    low = int(ids.min())
    span = int(ids.max()) - low + 1
    pairs = group.astype(np.int64) * span
    pairs += ids
    pairs -= low
    pairs.sort()
    new = np.ones(len(pairs), dtype=bool)
    np.not_equal(pairs[1:], pairs[:-1], out=new[1:])
    pairs //= span
    return np.bincount(pairs, weights=new, minlength=n_groups).astype(np.int64)

