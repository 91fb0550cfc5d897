"""Collective calls: what each NCCL kernel moved, and the bandwidth it achieved.

Message size.  A call moves ``max(in, out) elements x element size`` bytes:
that is nccl-tests' size S (doc/PERFORMANCE.md), "the size in bytes of the
total array" -- the whole output of an all-gather (its input is one rank's
share), the whole input of a reduce-scatter, the buffer of an all-reduce,
broadcast or reduce.  torch records the element type by its ScalarType name
('Float', 'BFloat16', ...), so the sizes of ``DTYPE_BYTES`` are c10's.

Bandwidth, as nccl-tests defines it (https://github.com/NVIDIA/nccl-tests,
doc/PERFORMANCE.md): ``algbw = S / t``, and ``busbw = algbw x factor`` with
the factor of the collective over n ranks -- all-reduce 2(n-1)/n; all-gather,
reduce-scatter and all-to-all (n-1)/n; broadcast, reduce, send/recv 1 -- so
that busbw compares with the hardware's link bandwidth whatever n is.  GB/s
are 1e9 bytes per second, as nccl-tests prints them (bytes per ns).

nsys records bytes only (NCCL's NVTX payload, ``schema.KERNELS`` msg_bytes),
which are taken as they are.  Where the sizes are not recorded (nsys exports
without blobs) every size is -1 and nothing here turns that into 0.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from profkit.model import Trace, schema

# c10::ScalarType names (c10/core/ScalarType.h, as toString() prints them) -> bytes per element.
DTYPE_BYTES = {
    "Byte": 1, "Char": 1, "Short": 2, "Int": 4, "Long": 8, "Half": 2, "Float": 4, "Double": 8,
    "ComplexHalf": 4, "ComplexFloat": 8, "ComplexDouble": 16, "Bool": 1, "BFloat16": 2,
    "QInt8": 1, "QUInt8": 1, "QInt32": 4, "QUInt4x2": 1, "QUInt2x4": 1,
    "Bits1x8": 1, "Bits2x4": 1, "Bits4x2": 1, "Bits8": 1, "Bits16": 2,
    "Float8_e5m2": 1, "Float8_e4m3fn": 1, "Float8_e5m2fnuz": 1, "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1,
    "Float4_e2m1fn_x2": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8,
}

# ncclDevKernel_AllReduce_Sum_f32_RING_LL(...), ncclKernel_AllGather_RING_LL_Sum_int8_t(...),
# ncclDevKernel_SendRecv(...): the collective is the word after the prefix.
_NCCL_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")

# nccl-tests' busbw factor per collective, by a name with '_' and case dropped (both
# torch's 'allreduce' / 'reduce_scatter' / '_allgather_base' and NCCL's 'AllReduce' fit).
_ALL_REDUCE, _SHARE, _ONE = "2(n-1)/n", "(n-1)/n", "1"
_FACTORS = (("allreduce", _ALL_REDUCE), ("allgather", _SHARE), ("reducescatter", _SHARE),
            ("alltoall", _SHARE), ("broadcast", _ONE), ("reduce", _ONE), ("sendrecv", _ONE),
            ("send", _ONE), ("recv", _ONE))

CALL_COLUMNS = ["name", "start", "end", "collective", "msg_in_nelems", "msg_out_nelems", "msg_dtype",
                "msg_bytes", "group_size"]


def collective_type(kernel_name: str) -> str:
    """'AllReduce' from an NCCL kernel's name ('other NCCL' when it names none)."""
    m = _NCCL_COLLECTIVE.search(kernel_name)
    return m.group(1) if m else "other NCCL"


def busbw_factor(collective: str, ranks: int | None) -> float | None:
    """nccl-tests' busbw / algbw for this collective over ``ranks`` ranks; None when unknown."""
    if not ranks or ranks < 1:
        return None
    key = collective.lower().replace("_", "")
    key = key[:-4] if key.endswith("base") else key  # torch's _allgather_base, _reduce_scatter_base
    key = key.replace("coalesced", "").replace("intotensor", "").replace("tensor", "")
    for prefix, factor in _FACTORS:
        if key.startswith(prefix):
            return {_ALL_REDUCE: 2 * (ranks - 1) / ranks, _SHARE: (ranks - 1) / ranks, _ONE: 1.0}[factor]
    return None


def message_bytes(in_nelems: np.ndarray, out_nelems: np.ndarray, dtypes: Any,
                  recorded: np.ndarray | None = None) -> np.ndarray:
    """Bytes each call moved (nccl-tests' S), -1 where the trace does not say.  ``recorded``
    (the kernels' msg_bytes) wins where known: nsys records bytes without elements or dtype."""
    elements = np.maximum(np.asarray(in_nelems, dtype=np.int64), np.asarray(out_nelems, dtype=np.int64))
    size = np.array([DTYPE_BYTES.get(str(d), -1) for d in dtypes], dtype=np.int64)
    computed = np.where((elements >= 0) & (size > 0), elements * size, schema.MISSING_INT)
    if recorded is None:
        return computed
    recorded = np.asarray(recorded, dtype=np.int64)
    return np.where(recorded >= 0, recorded, computed)


def rank_calls(trace: Trace, comm: np.ndarray) -> dict[str, Any]:
    """The NCCL kernels of a trace (``comm``: mask over its kernels), in start order:
    type (from the kernel name), torch's call name, duration ns, bytes (-1 unknown), group size."""
    kernels = trace.table("kernels", CALL_COLUMNS)[comm]
    kernels = kernels.iloc[np.argsort(kernels["start"].to_numpy(), kind="stable")]
    names = kernels["name"].astype(str).to_numpy()
    return {
        "type": np.array([collective_type(n) for n in names], dtype=object),
        "call": kernels["collective"].astype(str).to_numpy(),
        "ns": (kernels["end"] - kernels["start"]).to_numpy(np.int64),
        "bytes": message_bytes(kernels["msg_in_nelems"].to_numpy(), kernels["msg_out_nelems"].to_numpy(),
                               kernels["msg_dtype"].astype(str).to_numpy(), kernels["msg_bytes"].to_numpy()),
        "group_size": kernels["group_size"].to_numpy(np.int64),
    }


def size_stats(sizes: np.ndarray) -> dict[str, Any]:
    """min / median / max / total of the known sizes (None each when none is known)."""
    known = sizes[sizes >= 0]
    if not known.size:
        return {"sized": 0, "msg_bytes_min": None, "msg_bytes_median": None, "msg_bytes_max": None,
                "bytes_total": None}
    return {"sized": int(known.size), "msg_bytes_min": int(known.min()), "msg_bytes_median": float(np.median(known)),
            "msg_bytes_max": int(known.max()), "bytes_total": int(known.sum())}


def bandwidth(total_bytes: float | None, ns: float | None, collective: str,
              ranks: int | None) -> dict[str, float | None]:
    """algbw and busbw (GB/s) of ``total_bytes`` moved in ``ns``."""
    if not total_bytes or not ns or ns <= 0:
        return {"algbw_gbps": None, "busbw_gbps": None}
    algbw = total_bytes / ns  # bytes per ns = GB/s
    factor = busbw_factor(collective, ranks)
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * factor if factor is not None else None}



# Ranks' profiling windows may start or end a few calls apart (a kernel in
# flight when the profiler starts has no record_param_comms op in the window,
# so no size either): ranks' call sequences are paired at offsets up to their
# difference in length plus this.
MAX_EXTRA_OFFSET = 4


def call_offset(ref: np.ndarray, other: np.ndarray) -> int | None:
    """How ``other``'s calls pair with ``ref``'s (its j-th call is ref's j+offset-th),
    by their recorded sizes: the offset where the most known sizes agree and none
    disagrees (ties: the longer overlap).  Without sizes to compare, calls pair in
    order when both ranks ran as many; else None."""
    best: tuple[tuple[int, int], int] | None = None
    reach = abs(len(ref) - len(other)) + MAX_EXTRA_OFFSET
    for d in range(-reach, reach + 1):
        i0 = max(d, 0)
        j0 = i0 - d
        n = min(len(ref) - i0, len(other) - j0)
        if n <= 0:
            continue
        x, y = ref[i0:i0 + n], other[j0:j0 + n]
        both = (x >= 0) & (y >= 0)
        if (x[both] != y[both]).any():
            continue
        key = (int(both.sum()), n)
        if key[0] and (best is None or key > best[0]):
            best = (key, d)
    if best is not None:
        return best[1]
    return 0 if len(ref) == len(other) else None


def paired_calls(entries: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(time, bytes) of each call that every rank ran: the shortest of its kernels over
    the ranks, and its size as any rank recorded it (-1 unknown); None when the
    ranks' calls cannot be paired."""
    ref = max(entries, key=lambda c: (c.get("sized", 0), len(c.get("calls_ns") or [])))
    ref_bytes = np.asarray(ref["calls_bytes"], dtype=np.int64)
    ns = np.asarray(ref["calls_ns"], dtype=np.int64).copy()
    sizes = ref_bytes.copy()
    everywhere = np.ones(len(ns), dtype=bool)
    for c in entries:
        if c is ref:
            continue
        other_ns, other_bytes = (np.asarray(c[k], dtype=np.int64) for k in ("calls_ns", "calls_bytes"))
        d = call_offset(ref_bytes, other_bytes)
        if d is None:
            return None
        at = np.arange(len(other_ns)) + d  # ref's index of each of this rank's calls
        ok = (at >= 0) & (at < len(ns))
        seen = np.zeros(len(ns), dtype=bool)
        seen[at[ok]] = True
        everywhere &= seen
        ns[at[ok]] = np.minimum(ns[at[ok]], other_ns[ok])
        sizes[at[ok]] = np.maximum(sizes[at[ok]], other_bytes[ok])
    return ns[everywhere], sizes[everywhere]


def across_ranks(by_rank: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """Message sizes and bandwidth of one collective type, from each rank's
    ``per_rank`` entry for it (rank -> entry).

    A collective's kernel ends on every rank together, when the last rank has
    arrived and the data has moved, so a rank that arrived early counts its
    wait in its kernel time.  So for each call that every rank ran, its time
    is the shortest of its kernels over the ranks -- the rank that waited least --
    and its size the one recorded on any rank (a mixed nsys + Kineto job
    takes it from the Kineto ranks).  Calls are paired by order and recorded
    sizes (``call_offset``); when they cannot be, the figures are those of
    the rank with the highest bandwidth."""
    entries = list(by_rank.items())
    sizes = np.concatenate([np.asarray(c.get("calls_bytes") or [], dtype=np.int64) for _, c in entries])
    stats = size_stats(sizes)
    sized_ranks = [r for r, c in entries if c.get("sized")]
    names = sorted({n for _, c in entries for n in c.get("calls") or []})
    groups = [c["group_size"] for _, c in entries if c.get("group_size")]
    group_size = max(set(groups), key=groups.count) if groups else None
    op = names[0] if len(names) == 1 else entries[0][1]["collective"]
    out: dict[str, Any] = {
        "msg_bytes_min": stats["msg_bytes_min"], "msg_bytes_median": stats["msg_bytes_median"],
        "msg_bytes_max": stats["msg_bytes_max"],
        "bytes_per_rank": max((by_rank[r]["bytes_total"] for r in sized_ranks), default=None),
        "sized_ranks": sized_ranks, "unsized_ranks": [r for r, c in entries if not c.get("sized")],
        "group_size": group_size, "algbw_gbps": None, "busbw_gbps": None, "bandwidth_basis": None,
        "bandwidth_paired": None, "by_size": [],
    }
    if not sized_ranks:
        return out
    paired = paired_calls([c for _, c in entries])
    if paired is not None and (paired[1] >= 0).any():
        ns, sizes = paired
        known = sizes >= 0
        out.update(bandwidth(int(sizes[known].sum()), int(ns[known].sum()), op, group_size))
        out["bandwidth_basis"] = f"{int(known.sum())} calls run by every rank: each call's shortest kernel"
        out["bandwidth_paired"] = True
    else:
        best = max(sized_ranks, key=lambda r: by_rank[r].get("algbw_gbps") or 0.0)
        out.update({k: by_rank[best].get(k) for k in ("algbw_gbps", "busbw_gbps")})
        # a lower bound: that rank's kernel time holds its waits for the others
        out["bandwidth_basis"] = f"rank {best}'s kernel time, its waits included (calls not paired across ranks)"
        out["bandwidth_paired"] = False
        ns, sizes = (np.asarray(by_rank[best][k], dtype=np.int64) for k in ("calls_ns", "calls_bytes"))
    out["by_size"] = by_size(ns, sizes, op, group_size)
    return out


# More distinct sizes than this are grouped into power-of-two ranges.
MAX_EXACT_SIZES = 12


def by_size(ns: np.ndarray, sizes: np.ndarray, collective: str, ranks: int | None) -> list[dict[str, Any]]:
    """Calls of one size together: count, median time, bandwidth.  Small messages
    are latency-bound, so one bandwidth over all sizes hides what each achieves.
    Sizes: exact when at most ``MAX_EXACT_SIZES`` differ, else [2^k, 2^(k+1)) ranges."""
    known = sizes >= 0
    ns, sizes = ns[known], sizes[known]
    if not sizes.size:
        return []
    exact = len(np.unique(sizes)) <= MAX_EXACT_SIZES
    keys = sizes if exact else np.floor(np.log2(np.maximum(sizes, 1))).astype(np.int64)
    rows = []
    for key in np.unique(keys).tolist():
        mine = keys == key
        low, high = (key, key) if exact else (2 ** key, 2 ** (key + 1))
        rows.append({"msg_bytes_min": int(low), "msg_bytes_max": int(high), "exact": exact, "count": int(mine.sum()),
                     "median_ns": float(np.median(ns[mine])),
                     **bandwidth(int(sizes[mine].sum()), int(ns[mine].sum()), collective, ranks)})
    return rows
