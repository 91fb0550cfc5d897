"""Is B slower than A, or is it noise?  One noise model for every comparison: `profkit diff`,
`history`, `report --baseline` and `stalls --compare` (``step_change``).

Step times of a training loop are not normal: most steps sit in a narrow band
and a few are slow (a GC pause, a sync that happened to wait, a clock change).
So the comparison is on medians, with a percentile bootstrap confidence
interval of the relative change of the median (resampling the steps of each
run independently), and a two-sided Mann-Whitney U test as a rank-based
second opinion that makes no assumption about the shape.

The verdict is "slower"/"faster" only when both
- the confidence interval of the change excludes 0, and
- the change is at least ``MIN_EFFECT_PCT``: below that, a real but tiny
  difference (a clock that drifted 0.3 % between runs) is not a regression
  anyone should act on.
Otherwise "no change"; "unknown" when either run has fewer than ``MIN_SAMPLES``
steps (no interval: a 4,000-fold change of two steps is not "no change").
The bootstrap uses a fixed seed, so the same inputs
always give the same interval and verdict (CI gates must not flap).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

MIN_EFFECT_PCT = 2.0
CONFIDENCE = 0.95
RESAMPLES = 4000
SEED = 20261123
MIN_SAMPLES = 3

SLOWER, FASTER, NO_CHANGE, UNKNOWN = "slower", "faster", "no change", "unknown"


@dataclass(frozen=True)
class Change:
    base_median: float
    new_median: float
    delta_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    base_n: int
    new_n: int
    verdict: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(base: Any, new: Any, *, min_effect_pct: float = MIN_EFFECT_PCT, confidence: float = CONFIDENCE,
            resamples: int = RESAMPLES, seed: int = SEED) -> Change:
    """Compare two samples (e.g. steady-state step durations) by their medians."""
    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(new, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("both samples need at least one value")
    ma, mb = float(np.median(a)), float(np.median(b))
    delta = _pct(mb, ma)

    def undecided(why: str) -> Change:  # no interval: the medians and why
        return Change(ma, mb, delta, None, None, None, int(a.size), int(b.size), UNKNOWN, why)

    if a.size < MIN_SAMPLES or b.size < MIN_SAMPLES:
        return undecided(f"too few samples for a confidence interval ({a.size} and {b.size}; need {MIN_SAMPLES})")
    if ma == 0:  # a share of nothing (a step median with no kernel time): no relative change to tell
        return undecided("BASE's median is 0: a change relative to it has no meaning")
    rng = np.random.default_rng(seed)
    boot_a = _bootstrap_medians(rng, a, resamples)
    boot_b = _bootstrap_medians(rng, b, resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = 100.0 * (boot_b / boot_a - 1.0)
    ratios = ratios[np.isfinite(ratios)]
    if not ratios.size:  # every resampled BASE median was 0
        return undecided("BASE's resampled medians are 0: no interval of the relative change")
    tail = (1.0 - confidence) / 2 * 100
    low, high = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    p = mann_whitney_p(a, b)
    level = f"{confidence:.0%}"
    if low > 0 and delta >= min_effect_pct:
        verdict, why = SLOWER, f"{level} interval {low:+.1f}%..{high:+.1f}% excludes 0"
    elif high < 0 and delta <= -min_effect_pct:
        verdict, why = FASTER, f"{level} interval {low:+.1f}%..{high:+.1f}% excludes 0"
    elif low > 0 or high < 0:
        verdict, why = NO_CHANGE, f"significant but below the {min_effect_pct:g}% that counts as a change"
    else:
        verdict, why = NO_CHANGE, f"{level} interval {low:+.1f}%..{high:+.1f}% includes 0"
    return Change(ma, mb, delta, low, high, p, int(a.size), int(b.size), verdict, why)


# Bootstrap memory.  A resample of every step of each run is a resamples x N array: 50,000 tiny
# steps took 3.4 GB.  So resamples are drawn CHUNK_VALUES at a time (the same draws, in the same
# order, as one array: equal results), and a run of more than MAX_DRAW steps is resampled MAX_DRAW
# at a time: the "m out of n" bootstrap (Bickel, Goetze & van Zwet 1997), consistent for the
# median when m grows with n and m/n -> 0, with each resampled median's distance from the whole
# run's median scaled by sqrt(m/n), as the median's spread shrinks with 1/sqrt(steps).  The
# interval stays one of the median of all N steps; runs of MAX_DRAW steps or fewer are unchanged.
MAX_DRAW = 10_000
CHUNK_VALUES = 4_000_000  # float64 values per chunk of resamples: 32 MB, and as much for the indexes


def _bootstrap_medians(rng: np.random.Generator, x: np.ndarray, resamples: int) -> np.ndarray:
    """``resamples`` bootstrap medians of ``x`` in bounded memory (see MAX_DRAW)."""
    draw = min(x.size, MAX_DRAW)
    out = np.empty(resamples)
    rows = max(1, CHUNK_VALUES // draw)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        out[start:stop] = np.median(rng.choice(x, size=(stop - start, draw), replace=True), axis=1)
    if draw < x.size:
        center = float(np.median(x))
        out = center + (out - center) * math.sqrt(draw / x.size)
    return out


def step_change(base: Any, new: Any, *, min_effect_pct: float = MIN_EFFECT_PCT) -> dict[str, Any]:
    """The step-time comparison every comparing command shows: ``compare`` of two runs'
    steady-state step durations (ns), as plain data (the "step" object of `profkit diff`'s JSON)."""
    change = compare(base, new, min_effect_pct=min_effect_pct)
    return {"base_median_ns": change.base_median, "new_median_ns": change.new_median,
            "delta_pct": change.delta_pct, "ci_low_pct": change.ci_low_pct, "ci_high_pct": change.ci_high_pct,
            "p_value": change.p_value, "base_steps": change.base_n, "new_steps": change.new_n,
            "verdict": change.verdict, "why": change.why}


def unknown_change(why: str) -> dict[str, Any]:
    """``step_change``'s answer where nothing could be compared (no steps in a run): no medians."""
    return {"base_median_ns": None, "new_median_ns": None, "delta_pct": None, "ci_low_pct": None,
            "ci_high_pct": None, "verdict": UNKNOWN, "why": why}


def change_words(step: dict[str, Any]) -> str:
    """``step_change``'s verdict in a few words: "slower (+12.3%, 95% interval +10.1%..+14.0%)";
    without an interval, why not: "no change (+4.0%: too few samples ...)"."""
    if step.get("ci_low_pct") is None:
        return f"{step['verdict']} ({step['delta_pct']:+.1f}%: {step['why']})"
    return (f"{step['verdict']} ({step['delta_pct']:+.1f}%, {CONFIDENCE:.0%} interval "
            f"{step['ci_low_pct']:+.1f}%..{step['ci_high_pct']:+.1f}%)")


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation with
    tie and continuity corrections, as scipy's ``method='asymptotic'``)."""
    n1, n2 = a.size, b.size
    both = np.concatenate([a, b])
    ranks = _average_ranks(both)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    mean = n1 * n2 / 2.0
    _, counts = np.unique(both, return_counts=True)
    n = n1 + n2
    counts = counts.astype(np.float64)  # a count cubed passes 2**63 past 2 million equal values
    tie_term = float((counts ** 3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    sd = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sd == 0:
        return 1.0
    z = (abs(u1 - mean) - 0.5) / sd
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0))))


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(values.size, dtype=np.float64)
    # first index of each run of equal values, and the run lengths
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    lengths = np.diff(np.r_[starts, values.size])
    average = starts + (lengths + 1) / 2.0  # 1-based average rank of each run
    ranks[order] = np.repeat(average, lengths)
    return ranks


def _pct(new: float, base: float) -> float:
    return 100.0 * (new / base - 1.0) if base else (0.0 if new == base else math.inf)
