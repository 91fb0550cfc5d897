"""One phase per step index for every rank of a job.

Each rank's ``find_steps`` decides its own warm-up, so one rank may call step 0
warm-up while another calls it steady, and per-rank figures "over the steady
steps" would then average different steps.  A job has one plan:

- warm-up: every index before the end of the longest warm-up of any rank;
- any other non-steady phase a rank gives an index (a teardown, a step cut off
  at the end of the capture) is that index's phase on every rank;
- an index that some rank never reached is teardown: on that rank the time is
  after its last step;
- every other index is steady.

``phase_plan`` makes the plan from the ranks' phases; ``with_job_phases``
applies it to one rank's ``StepResult``; ``job_steps`` does both for the ranks of
one job (for ``steps --rank N`` and any per-rank figure that must agree with the
cross-rank report).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from profkit.analysis.steps.result import STEADY, WARMUP, StepResult, summarize

if TYPE_CHECKING:
    from profkit.model import Trace

TEARDOWN = "teardown"


def phase_plan(phases_by_rank: Sequence[Sequence[str]]) -> list[str]:
    """The job's phase of each step index, from each rank's phases in index order."""
    ranks = [list(p) for p in phases_by_rank]
    if not ranks:
        return []
    longest = max(len(p) for p in ranks)
    shortest = min(len(p) for p in ranks)
    warmup = max(_leading_warmup(p) for p in ranks)
    plan = []
    for i in range(longest):
        other = next((p[i] for p in ranks if i < len(p) and p[i] not in (STEADY, WARMUP)), None)
        if i < warmup:
            plan.append(WARMUP)
        elif other is not None:
            plan.append(other)
        elif i >= shortest:
            plan.append(TEARDOWN)
        else:
            plan.append(STEADY)
    return plan


def _leading_warmup(phases: list[str]) -> int:
    k = 0
    while k < len(phases) and phases[k] == WARMUP:
        k += 1
    return k


def with_job_phases(result: StepResult, plan: Sequence[str]) -> StepResult:
    """``result`` with its steps' phases from the job's ``plan`` (by step index) and its
    summary over the job's steady steps; the same result when its phases already agree."""
    if not result.found:
        return result
    steps = result.steps.copy()
    index = steps["index"].to_numpy()
    phases = [plan[i] if 0 <= i < len(plan) else TEARDOWN for i in index.tolist()]
    if phases == steps["phase"].tolist():
        return result
    steps["phase"] = phases
    span = (result.startup[0] if result.startup else int(steps["start_ns"].min()),
            result.teardown[1] if result.teardown else int(steps["end_ns"].max()))
    return replace(result, steps=steps, summary={**result.summary,
                                                 **summarize(steps, result.source, result.name, span)})


def job_steps(ranks: Sequence[Trace]) -> list[StepResult]:
    """Each rank's steps (``find_steps``, one trace per rank of one job) under the job's plan."""
    from profkit.analysis.steps import find_steps

    results = [find_steps(t) for t in ranks]
    plan = phase_plan([r.steps["phase"].tolist() for r in results if r.found])
    return [with_job_phases(r, plan) for r in results]
