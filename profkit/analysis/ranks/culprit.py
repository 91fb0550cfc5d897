"""The straggler of a job and what makes it late, named to the kernel or the line.

Entry: ``straggler(summaries)`` over the per-rank summaries of
``profkit.ranks.per_rank`` (plain dicts; ``rank_costs`` is the part of each that
is computed here, on the worker that reads the rank).

Who.  A collective's kernel ends on every rank together, when the last rank
has arrived, so the rank the others wait for spends the least time in NCCL
kernels per step, and each other rank's wait is its NCCL time per step minus
the straggler's.  Per step: means over the job's steady steps (one phase plan
for every rank, ``profkit.analysis.steps.job_phases``), so every rank's figure is
over the same step indices.

Why.  The straggler's own costs per steady step are set against the others':
- GPU: each compute kernel's time per step (a kernel only it runs, or one it
  runs longer);
- host: each Python function's self time per step (``profkit.analysis.host``; a
  built-in such as ``time.sleep`` is named with its caller), a function in
  ``torch/utils/data`` being data loading;
- sync: each sync site's CPU-blocked time per step (``profkit.analysis.sync``);
- OS: each OS runtime call's time on the thread that runs the steps (nsys
  ``-t osrt``: a ``time.sleep`` is ``clock_nanosleep`` where no Python stack
  names it).
The cost it has most in excess of the others' median is the cause, when that
excess is at least ``MIN_SHARE_OF_WAIT`` of the longest wait.  Otherwise only
the side is named: "GPU compute" when its compute per step is the longest and
``STRAGGLER_MIN_EXCESS`` above the ranks' median, else "host".
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from profkit.analysis.kernels.names import function_name
from profkit.analysis.steps.job_phases import phase_plan
from profkit.analysis.steps.result import STEADY
from profkit.errors import ProfkitError
from profkit.model import Trace

# A rank is the straggler when the others wait for it in collectives for at
# least this share of a step (below it: the jitter of any all-reduce).
STRAGGLER_MIN_WAIT = 0.05
# Its GPU compute is the cause when its compute per step exceeds the ranks'
# median by at least this much; otherwise the delay is on its host side.
STRAGGLER_MIN_EXCESS = 0.03
# A named cost is the cause when the straggler spends at least this share of the
# longest wait more on it per step than the other ranks do.
MIN_SHARE_OF_WAIT = 0.25
# Per rank, the costs kept of each kind (the largest); a cost another rank lacks counts
# as that rank's smallest kept one when its list was cut (it may hold it below that).
COST_LIMIT = 60
DATA_LOADING_FILES = ("torch/utils/data/",)

GPU, HOST, SYNC, DATA, OS = "kernel", "host function", "sync", "data loading", "OS call"
PARTS = {"kernels": GPU, "host": HOST, "sync": SYNC, "os": OS}


def rank_costs(trace: Trace, kernel_keys: np.ndarray, kernel_names: dict[str, str], durations: np.ndarray,
               compute: np.ndarray, kernel_step: np.ndarray, steady_positions: np.ndarray) -> dict[str, Any]:
    """What the rank spends per steady step (its own steady steps) on each compute kernel, Python function,
    sync site and OS call: ``{"kernels" | "host" | "sync" | "os": {"rows": [{"key", "name", "ns_per_step",
    ...}], "cut": bool} or None where the trace does not record it}``.  ``kernel_step``: each kernel's step
    position (-1 none)."""
    return {"kernels": _kernel_costs(kernel_keys, kernel_names, durations, compute, kernel_step, steady_positions),
            "host": _host_costs(trace), "sync": _sync_costs(trace), "os": _os_costs(trace)}


def _kept(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rows = sorted((r for r in rows if r["ns_per_step"] > 0), key=lambda r: -r["ns_per_step"])
    return {"rows": rows[:COST_LIMIT], "cut": len(rows) > COST_LIMIT}


def _kernel_costs(keys: np.ndarray, names: dict[str, str], durations: np.ndarray, compute: np.ndarray,
                  step: np.ndarray, steady: np.ndarray) -> dict[str, Any] | None:
    if not len(steady):
        return None
    import pandas as pd

    inside = compute & np.isin(step, steady)
    grouped = pd.Series(durations[inside]).groupby(keys[inside]).agg(["sum", "count"])
    n = len(steady)
    return _kept([{"key": k, "name": function_name(names.get(k, k)), "full_name": names.get(k, k),
                   "ns_per_step": float(t) / n, "count_per_step": int(c) / n} for k, (t, c) in grouped.iterrows()])


def _host_costs(trace: Trace) -> dict[str, Any] | None:
    from profkit.analysis.host import host_time

    if not trace.has("python_frames"):
        return None
    try:
        result = host_time(trace)
    except ProfkitError:  # no stacks recorded, or no steady steps: nothing to name
        return None
    rows = []
    for f in result.functions:
        data = any(d in f["file"] for d in DATA_LOADING_FILES)
        rows.append({"key": f"{f['function']}|{f['file']}", "name": f"{f['function']} ({_base(f['file'])}:{f['line']})",
                     "kind": DATA if data else HOST, "ns_per_step": f["self_ns_per_step"]})
    return _kept(rows)


def _sync_costs(trace: Trace) -> dict[str, Any] | None:
    from profkit.analysis.sync.stalls import analyze_stalls

    if not trace.has("api"):
        return None
    try:
        sites = analyze_stalls(trace).sites
    except ProfkitError:
        return None
    rows = []
    for s in sites:
        per_step = s.get("per_step") or {}
        where = f"at {_base(s['file'])}:{s['line']}" if s.get("file") else f"in {s['nvtx']}"
        rows.append({"key": f"{s['source'] or ''}|{s['api']}|{s['nvtx']}", "name": f"{s['api']} {where}",
                     "ns_per_step": float(per_step.get("cpu_blocked_ns") or 0.0)})
    return _kept(rows)


def _os_costs(trace: Trace) -> dict[str, Any] | None:
    """Each OS runtime call's time per steady step on the thread that runs the steps (the step
    ranges' thread; for steps found from the launch pattern, every thread of their process)."""
    from profkit.analysis.steps import find_steps
    from profkit.analysis.timeline.intervals import covered_within, union

    if not trace.has("osrt") or not trace.count("osrt"):
        return None
    steps = find_steps(trace)
    steady = steps.steady
    if steady.empty or steps.pid is None:
        return None
    calls = trace.table("osrt", ["start", "end", "pid", "tid", "name"])
    mine = calls["pid"].to_numpy() == steps.pid
    if steps.tid is not None:
        mine &= calls["tid"].to_numpy() == steps.tid
    calls = calls[mine]
    lo, hi = steady["start_ns"].to_numpy(np.int64), steady["end_ns"].to_numpy(np.int64)
    rows = []
    for name, group in calls.groupby("name", observed=True):
        start, end = union(group["start"].to_numpy(np.int64), group["end"].to_numpy(np.int64))
        rows.append({"key": str(name), "name": str(name),
                     "ns_per_step": float(covered_within(lo, hi, start, end).sum()) / len(steady)})
    return _kept(rows)


def _base(file: str) -> str:
    return file.replace("\\", "/").rsplit("/", 1)[-1]


# -- the reduction over the ranks (on the client) ------------------------------------------

def job_plan(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """The job's phase of each step index (``job_phases.phase_plan``) from the ranks' step tables."""
    phases = [[str(s["phase"]) for s in sorted(r.get("step_table") or [], key=lambda s: int(s["index"]))]
              for r in summaries if "error" not in r]
    return phase_plan([p for p in phases if p])


def steady_means(summary: dict[str, Any], plan: Sequence[str]) -> dict[str, float | None]:
    """The rank's compute and communication kernel time per step: means over the job's steady steps."""
    rows = [s for s in summary.get("step_table") or []
            if int(s["index"]) < len(plan) and plan[int(s["index"])] == STEADY]
    if not rows:
        return {"compute_per_step_ns": None, "comm_per_step_ns": None}
    return {"compute_per_step_ns": float(np.mean([r["compute_ns"] for r in rows])),
            "comm_per_step_ns": float(np.mean([r["comm_ns"] for r in rows]))}


def straggler(summaries: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank the others wait for (``rank``, ``file``), the ``waits`` it causes (ns per steady step,
    rank by rank), ``evidence`` ("collective wait" or, without collectives, "compute"), ``cause``
    ("GPU compute" or "host") and the ``culprit`` (``find_culprit``; None when no single cost explains
    it); None when no rank waits for another for ``STRAGGLER_MIN_WAIT`` of a step."""
    plan = job_plan(summaries)
    ok = [{**s, **steady_means(s, plan)} for s in summaries if "error" not in s]
    ok = [s for s in ok if s["compute_per_step_ns"] is not None]
    if len(ok) < 2:
        return None
    median_compute = statistics.median(s["compute_per_step_ns"] for s in ok)
    if all(s["comm_per_step_ns"] for s in ok):
        slow = min(ok, key=lambda s: s["comm_per_step_ns"])  # arrives last, so waits least
        waits = [{"rank": s["rank"], "file": s["file"],
                  "wait_per_step_ns": s["comm_per_step_ns"] - slow["comm_per_step_ns"]} for s in ok if s is not slow]
        steps = [s["step_median_ns"] for s in ok if s.get("step_median_ns")]
        if not steps or max(w["wait_per_step_ns"] for w in waits) < STRAGGLER_MIN_WAIT * statistics.median(steps):
            return None
        evidence = "collective wait"
    else:  # no collectives: nobody waits, so the rank with the most compute is the one to look at
        slow = max(ok, key=lambda s: s["compute_per_step_ns"])
        if median_compute and (slow["compute_per_step_ns"] - median_compute) / median_compute < STRAGGLER_MIN_EXCESS:
            return None
        waits, evidence = [], "compute"
    excess = (slow["compute_per_step_ns"] - median_compute) / median_compute if median_compute else 0.0
    longest_compute = slow["compute_per_step_ns"] >= max(s["compute_per_step_ns"] for s in ok)
    # how much a single cost must explain: the longest wait, or without waits the compute's excess
    bar = max((w["wait_per_step_ns"] for w in waits), default=slow["compute_per_step_ns"] - median_compute)
    culprit = find_culprit(slow, [s for s in ok if s is not slow], bar)
    if culprit is not None:
        cause = "GPU compute" if culprit["kind"] == GPU else "host"
    else:
        cause = "GPU compute" if longest_compute and excess >= STRAGGLER_MIN_EXCESS else "host"
    return {"rank": slow["rank"], "file": slow["file"], "evidence": evidence, "cause": cause, "culprit": culprit,
            "compute_per_step_ns": slow["compute_per_step_ns"], "median_compute_per_step_ns": median_compute,
            "comm_per_step_ns": slow["comm_per_step_ns"], "excess_pct": 100 * excess, "waits": waits,
            "steady_steps": sum(p == STEADY for p in plan)}


def find_culprit(slow: dict[str, Any], others: Sequence[dict[str, Any]], bar: float) -> dict[str, Any] | None:
    """The straggler's cost most in excess of the other ranks' median, over its kernels, Python
    functions, sync sites and OS calls: ``kind``, ``name``, ``ns_per_step`` (the straggler's), ``others_ns_per_step``,
    ``excess_ns_per_step``, ``only_straggler`` (no other rank has it); None when none reaches
    ``MIN_SHARE_OF_WAIT`` of ``bar`` (the longest wait, or without waits its compute's excess)."""
    costs = slow.get("costs") or {}
    candidates = []
    for part, kind in PARTS.items():
        mine = costs.get(part)
        theirs = [(o.get("costs") or {}).get(part) for o in others]
        if not mine or any(t is None for t in theirs) or not others:
            continue
        by_key = [{r["key"]: r["ns_per_step"] for r in t["rows"]} for t in theirs]
        floors = [min(b.values()) if t["cut"] and b else 0.0 for b, t in zip(by_key, theirs)]
        for row in mine["rows"]:
            values = [b.get(row["key"], floor) for b, floor in zip(by_key, floors)]
            others_ns = statistics.median(values)
            candidates.append({"kind": row.get("kind", kind), "name": row["name"],
                               "full_name": row.get("full_name", row["name"]), "ns_per_step": row["ns_per_step"],
                               "others_ns_per_step": others_ns, "excess_ns_per_step": row["ns_per_step"] - others_ns,
                               "only_straggler": all(row["key"] not in b for b in by_key)})
    if not candidates:
        return None
    best = max(candidates, key=lambda c: c["excess_ns_per_step"])
    if best["excess_ns_per_step"] <= 0 or best["excess_ns_per_step"] < MIN_SHARE_OF_WAIT * bar:
        return None
    return best
