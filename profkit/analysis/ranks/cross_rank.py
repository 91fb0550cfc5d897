"""Across ranks: one row per rank, the straggler, collective skew, kernels that differ.

Input: the per-rank summaries of ``profkit.ranks.per_rank`` (plain dicts);
output: plain data for ``profkit ranks`` and the cross-rank report.

The straggler.  In data-parallel training every rank computes, then meets the
others in a collective (all-reduce).  A collective's kernel on each rank
starts when that rank launches it and ends only when every rank has arrived
and the data has moved, so the rank that arrives last spends the least time
in communication kernels, and every other rank's communication time is longer
by the time it waited.  So the straggler is the rank with the least
communication time per steady-state step, and the wait it causes on rank r is
r's communication time per step minus the straggler's.  Why it arrives late
is told apart: when its GPU compute per step is the longest (the case of a
rank slowed on purpose), the cause is "GPU compute"; otherwise its GPU did not
work longer and the delay is on its host (launches, data loading, Python).
The real 2-rank DDP fixtures show both: with rank 1 slowed, rank 1 computes
49% longer and rank 0 waits for it; in the plain run rank 0's host lags and
rank 1 waits for it although rank 1's kernels take longer.
Without collectives nobody waits; the rank with the most compute is named.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from profkit.analysis.ranks.collectives import across_ranks
from profkit.analysis.compare.same_program import check_same_program
from profkit.errors import ProfkitError

# A rank is the straggler when the others wait for it in collectives for at
# least this share of a step (below it: the jitter of any all-reduce).
STRAGGLER_MIN_WAIT = 0.05
# Its GPU compute is the cause when its compute per step exceeds the ranks'
# median by at least this much; otherwise the delay is on its host side.
STRAGGLER_MIN_EXCESS = 0.03
# Kernels whose total time differs across ranks by more than this share.
KERNEL_SKEW_MIN = 0.10
# Two ranks ran the same program when they share at least half their kernel names
# (``profkit.analysis.compare.same_program``, the check every comparison shares; measured: the
# slowed DDP rank shares all but one of ~30 names, the GELU and MLP samples a few).

RANK_KEYS = ("rank", "rank_source", "file", "steps", "step_median_ns", "kernel_ns", "compute_kernel_ns",
             "comm_kernel_ns", "memory_ns", "idle_ns", "comm_comp_overlap_pct")


def rank_rows(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``profkit ranks`` table: one row per readable rank, by rank."""
    rows = [{k: s.get(k) for k in RANK_KEYS} | {"compute_per_step_ns": s.get("compute_per_step_ns"),
                                               "comm_per_step_ns": s.get("comm_per_step_ns")}
            | _rank_collectives(s) for s in summaries if "error" not in s]
    return sorted(rows, key=lambda r: (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["file"]))


def _rank_collectives(summary: dict[str, Any]) -> dict[str, Any]:
    """``comm_bytes`` (message bytes of every collective call, None where the trace
    does not record sizes) and the rank's collectives without their per-call lists;
    the bandwidths here are from this rank's kernel time, waits included."""
    entries = [{k: v for k, v in c.items() if k not in ("calls_ns", "calls_bytes")}
               for c in summary.get("collectives") or []]
    sized = [c["bytes_total"] for c in entries if c.get("bytes_total") is not None]
    return {"comm_bytes": sum(sized) if sized else None, "collectives": entries}


def failed_ranks(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"file": s["file"], "rank": s.get("rank"), "error": s["error"]} for s in summaries if "error" in s]


def check_one_job(summaries: Sequence[dict[str, Any]]) -> None:
    """Raise when the traces are not the ranks of one program: the same rank
    twice, or kernel sets that have little in common."""
    ok = [s for s in summaries if "error" not in s]
    seen: dict[int, str] = {}
    for s in ok:
        if s.get("rank") is None:
            continue
        if s["rank"] in seen:
            raise ProfkitError(f"rank {s['rank']} appears twice: {seen[s['rank']]} and {s['file']} "
                               "(use --rank-from REGEX to say where the rank is in the file names)")
        seen[s["rank"]] = s["file"]
    if len(ok) < 2:
        return
    reference = max(ok, key=lambda s: len(s["kernels"]))
    ref_names = {k["key"] for k in reference["kernels"]}
    for s in ok:
        if s is not reference:
            check_same_program(s["file"], {k["key"] for k in s["kernels"]}, reference["file"], ref_names, hint=None)


def straggler(summaries: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank the others wait for, how long they wait per step, and whether its GPU compute is why."""
    ok = [s for s in summaries if "error" not in s and s.get("compute_per_step_ns") is not None]
    if len(ok) < 2:
        return None
    median_compute = statistics.median(s["compute_per_step_ns"] for s in ok)
    with_comm = [s for s in ok if s.get("comm_per_step_ns")]
    if len(with_comm) == len(ok):
        slow = min(ok, key=lambda s: s["comm_per_step_ns"])  # arrives last, so waits least
        waits = [{"rank": s["rank"], "file": s["file"],
                  "wait_per_step_ns": s["comm_per_step_ns"] - slow["comm_per_step_ns"]} for s in ok if s is not slow]
        step = statistics.median(s["step_median_ns"] for s in ok if s.get("step_median_ns")) \
            if any(s.get("step_median_ns") for s in ok) else None
        if not step or max(w["wait_per_step_ns"] for w in waits) < STRAGGLER_MIN_WAIT * step:
            return None
        evidence = "collective wait"
    else:  # no collectives: nobody waits, so the rank with the most compute is the one to look at
        slow = max(ok, key=lambda s: s["compute_per_step_ns"])
        if median_compute and (slow["compute_per_step_ns"] - median_compute) / median_compute < STRAGGLER_MIN_EXCESS:
            return None
        waits, evidence = [], "compute"
    excess = (slow["compute_per_step_ns"] - median_compute) / median_compute if median_compute else 0.0
    longest_compute = slow["compute_per_step_ns"] >= max(s["compute_per_step_ns"] for s in ok)
    cause = "GPU compute" if longest_compute and excess >= STRAGGLER_MIN_EXCESS else "host"
    return {"rank": slow["rank"], "file": slow["file"], "evidence": evidence, "cause": cause,
            "compute_per_step_ns": slow["compute_per_step_ns"], "median_compute_per_step_ns": median_compute,
            "excess_pct": 100 * excess, "waits": waits}


def aligned_steps(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step durations side by side, by step index: ``{"index", "rank<R>": ns, ...}``."""
    by_index: dict[int, dict[str, Any]] = {}
    for s in summaries:
        if "error" in s:
            continue
        for step in s.get("step_table") or []:
            row = by_index.setdefault(int(step["index"]), {"index": int(step["index"])})
            row[f"rank{s['rank']}"] = int(step["duration_ns"])
            row.setdefault("phase", step["phase"])
    return [by_index[i] for i in sorted(by_index)]


def collectives(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """NCCL kernels by collective type: count and time per rank, the skew, and
    message sizes and bandwidth where the traces record sizes
    (``profkit.analysis.ranks.collectives.across_ranks``)."""
    per_type: dict[str, dict[Any, dict[str, Any]]] = {}
    for s in summaries:
        if "error" in s:
            continue
        for c in s.get("collectives") or []:
            per_type.setdefault(c["collective"], {})[s["rank"]] = c
    rows = []
    for name, by_rank in sorted(per_type.items()):
        totals = [c["total_ns"] for c in by_rank.values()]
        rows.append({"collective": name, "ranks": len(by_rank),
                     "count": sum(c["count"] for c in by_rank.values()),
                     "total_ns": sum(totals), "min_rank_total_ns": min(totals),
                     "median_rank_total_ns": statistics.median(totals), "max_rank_total_ns": max(totals),
                     "skew_pct": 100 * (max(totals) - min(totals)) / max(totals) if max(totals) else 0.0,
                     **across_ranks(by_rank)})
    return rows


def kernel_skew(summaries: Sequence[dict[str, Any]], limit: int = 10) -> list[dict[str, Any]]:
    """Kernels that every rank ran, whose total time differs most across ranks."""
    ok = [s for s in summaries if "error" not in s]
    if len(ok) < 2:
        return []
    totals: dict[str, dict[Any, int]] = {}
    shown: dict[str, str] = {}
    for s in ok:
        for k in s["kernels"]:
            totals.setdefault(k["key"], {})[s["rank"]] = k["total_ns"]
            shown.setdefault(k["key"], k["name"])
    rows = []
    for key, by_rank in totals.items():
        if len(by_rank) < len(ok):
            continue
        low, high = min(by_rank.values()), max(by_rank.values())
        if high and (high - low) / high >= KERNEL_SKEW_MIN:
            rows.append({"name": shown[key], "min_ns": low, "max_ns": high, "spread_pct": 100 * (high - low) / high,
                         "slowest_rank": max(by_rank, key=by_rank.get), "fastest_rank": min(by_rank, key=by_rank.get)})
    rows.sort(key=lambda r: -(r["max_ns"] - r["min_ns"]))
    return rows[:limit]


def cross_rank(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Everything the cross-rank report shows."""
    check_one_job(summaries)
    return {
        "ranks": rank_rows(summaries),
        "failed": failed_ranks(summaries),
        "partial": any("error" in s for s in summaries),
        "straggler": straggler(summaries),
        "steps": aligned_steps(summaries),
        "collectives": collectives(summaries),
        "kernel_skew": kernel_skew(summaries),
    }
