"""Across ranks: one row per rank, the straggler, collective skew, kernels that differ.

Input: the per-rank summaries of ``profkit.ranks.per_rank`` (plain dicts);
output: plain data for ``profkit ranks`` and the cross-rank report.

The straggler -- the rank the others wait for -- and what makes it late:
``culprit.straggler`` (also ``profkit.analysis.ranks.straggler``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from profkit.analysis.ranks.collectives import across_ranks
from profkit.analysis.ranks.culprit import STRAGGLER_MIN_EXCESS, STRAGGLER_MIN_WAIT, job_plan, steady_means, straggler
from profkit.analysis.compare.same_program import check_same_program
from profkit.errors import ProfkitError

__all__ = ["STRAGGLER_MIN_EXCESS", "STRAGGLER_MIN_WAIT", "cross_rank", "rank_rows", "straggler"]
# Kernels whose total time differs across ranks by more than this share.
KERNEL_SKEW_MIN = 0.10
# Two ranks ran the same program when they share at least half their kernel names
# (``profkit.analysis.compare.same_program``, the check every comparison shares; measured: the
# slowed DDP rank shares all but one of ~30 names, the GELU and MLP samples a few).

RANK_KEYS = ("rank", "rank_source", "file", "steps", "step_median_ns", "kernel_ns", "compute_kernel_ns",
             "comm_kernel_ns", "memory_ns", "idle_ns", "comm_comp_overlap_pct")


def rank_rows(summaries: Sequence[dict[str, Any]], slow: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ``profkit ranks`` table: one row per readable rank, by rank.  Per-step figures are means
    over the job's steady steps; ``straggler`` marks the rank the others wait for (``slow``, from
    ``straggler``), ``wait_per_step_ns`` how long each other rank waits for it."""
    plan = job_plan(summaries)
    waits = {w["rank"]: w["wait_per_step_ns"] for w in (slow or {}).get("waits") or []}
    rows = [{k: s.get(k) for k in RANK_KEYS} | steady_means(s, plan)
            | {"straggler": slow is not None and s.get("rank") == slow["rank"] and s.get("file") == slow["file"],
               "wait_per_step_ns": waits.get(s.get("rank"), 0.0 if slow is not None else None)}
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


def aligned_steps(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step durations side by side, by step index: ``{"index", "phase", "rank<R>": ns, ...}``; the phase
    is the job's (``job_phases``: one for every rank)."""
    plan = job_plan(summaries)
    by_index: dict[int, dict[str, Any]] = {}
    for s in summaries:
        if "error" in s:
            continue
        for step in s.get("step_table") or []:
            row = by_index.setdefault(int(step["index"]), {"index": int(step["index"])})
            row[f"rank{s['rank']}"] = int(step["duration_ns"])
            row.setdefault("phase", plan[int(step["index"])])
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
    slow = straggler(summaries)
    return {
        "ranks": rank_rows(summaries, slow),
        "failed": failed_ranks(summaries),
        "partial": any("error" in s for s in summaries),
        "straggler": slow,
        "steps": aligned_steps(summaries),
        "collectives": collectives(summaries),
        "kernel_skew": kernel_skew(summaries),
    }
