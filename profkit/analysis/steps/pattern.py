"""Steps from the repeating pattern of the launch sequence (no annotation needed).

A training loop issues the same kernels in the same order every iteration.
On the sequence of launched names (integers, see ``activity``):

1. **Candidate periods.**  For each name, the gaps (in launches) between its
   consecutive occurrences.  A name launched once per iteration has one gap
   value most of the time: the period.  Every gap value that is the most
   common gap of some name for at least half of that name's gaps is a
   candidate (more than half: twice-per-step names alternate two gaps).  (Per-name gaps instead of an autocorrelation: O(n log n), and a
   warm-up that differs only moves a few gaps.)
2. **Which candidate is the step.**  Split the sequence at a name that
   repeats with that period; the most common segment (by content) is the
   candidate's unit.  The step's unit contains (nearly) every name the loop
   launches; a layer's unit does not (the backward pass and the optimizer
   are missing).  What counts is **GPU time**, not launches: the copies of the
   candidate's unit must hold at least 90% of the GPU time that the best
   candidate's copies hold.  (Autotuning repeats a 2-operation benchmark
   hundreds of times, so by count it beats a step of two CUDA graph replays
   that hold 88% of the GPU time.)  A period that also covers everything but
   is a multiple of the step (a supercycle, e.g. an eval pass every ten
   steps) is longer: among those, the shortest unit wins.
3. **Where a step begins.**  Within the unit, at the launch preceded by the
   longest wait (GPU idle before it plus CPU time since the previous
   launch), the median over the unit's repetitions: that is where the loop
   goes back to Python (print, data loading, logging).  The boundaries are
   the occurrences of the launch sequence starting there (up to 16 names).
4. **Steps.**  A segment between boundaries is a step when it launches at
   least 90% of the unit's once-per-step names.  Other segments (an eval
   pass: a forward without backward or optimizer) belong to the step before;
   before the first step they are start-up, after the last one teardown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profkit.analysis.steps.activity import Activity

MAX_CANDIDATES = 16
MAX_BOUNDARY_GRAM = 16
UNIT_COVERAGE_TOLERANCE = 0.9
ANCHOR_PRESENCE = 0.9
ROTATIONS_BY_WAIT = 4

_RNG_SEED = 0x5EED


@dataclass
class PatternSteps:
    """Steps as half-open ranges of the activity sequence, and the period found."""

    first: np.ndarray        # index of each step's first launch
    last: np.ndarray         # one past each step's last launch
    period: int              # launches per steady-state step (the unit's length)
    signature: np.ndarray    # per step: a hash of its name sequence (equal content, equal hash)


def token_hashes(n_tokens: int, seed: int = _RNG_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Two random 64-bit values per name, for order-sensitive segment hashes."""
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 2**63, size=n_tokens, dtype=np.int64).astype(np.uint64) | np.uint64(1),
            rng.integers(1, 2**63, size=n_tokens, dtype=np.int64).astype(np.uint64))


_prefix_memo: list = [None, None]  # [tokens, prefix sums]: one sequence is split many times


def _prefix_sums(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if _prefix_memo[0] is tokens:
        return _prefix_memo[1]
    r1, r2 = token_hashes(int(tokens.max()) + 1)
    with np.errstate(over="ignore"):
        b = r2[tokens]
        sums = (_prefix(r1[tokens]), _prefix(b), _prefix(np.multiply(b, np.arange(len(tokens), dtype=np.uint64),
                                                                      out=b)))
    _prefix_memo[:] = [tokens, sums]
    return sums


def _prefix(values: np.ndarray) -> np.ndarray:
    """0, then the running (wrapping) sum of ``values``: written in place, no concatenated copy."""
    out = np.empty(len(values) + 1, dtype=np.uint64)
    out[0] = 0
    np.cumsum(values, dtype=np.uint64, out=out[1:])
    return out


def forget_prefix_sums() -> None:
    """Drop the memo (three uint64 arrays the length of the launch sequence) once the steps are found."""
    _prefix_memo[:] = [None, None]


def segment_signatures(tokens: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """A hash of each segment ``tokens[first:last]`` that depends on the names and their order.

    Computed from prefix sums (wrapping uint64 arithmetic), so any number of
    segments costs O(n) once and O(1) each: h = sum r1[t_j] + sum r2[t_j] * (j - first),
    plus the length."""
    if len(tokens) == 0 or len(first) == 0:
        return np.zeros(len(first), dtype=np.uint64)
    pa, pb, pbi = _prefix_sums(tokens)
    with np.errstate(over="ignore"):
        f, l_ = first.astype(np.int64), last.astype(np.int64)
        sum_a = pa[l_] - pa[f]
        weighted = (pbi[l_] - pbi[f]) - (pb[l_] - pb[f]) * f.astype(np.uint64)
        length = (l_ - f).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        return sum_a ^ (weighted * np.uint64(0xBF58476D1CE4E5B9)) ^ length


def candidate_periods(tokens: np.ndarray) -> dict[int, list[int]]:
    """period -> the names (tokens) whose most common gap is that period (for at least half their gaps)."""
    n = len(tokens)
    order = np.argsort(tokens, kind="stable")
    tok = tokens[order]
    same = tok[1:] == tok[:-1]
    gaps = (order[1:] - order[:-1])[same]
    gap_tok = tok[1:][same]
    if len(gaps) == 0:
        return {}
    packed = gap_tok * (n + 1) + gaps
    pairs, counts = np.unique(packed, return_counts=True)
    pair_tok, pair_gap = pairs // (n + 1), pairs % (n + 1)
    gaps_per_tok = np.bincount(gap_tok, minlength=int(tokens.max()) + 1)
    # the most common gap of each token: sort by (token, count) and take the last of each token
    o = np.lexsort((counts, pair_tok))
    last_of_tok = np.ones(len(o), dtype=bool)
    last_of_tok[:-1] = pair_tok[o][1:] != pair_tok[o][:-1]
    best = o[last_of_tok]
    out: dict[int, list[int]] = {}
    support: dict[int, int] = {}
    for t, g, c in zip(pair_tok[best], pair_gap[best], counts[best]):
        if c > 0.5 * gaps_per_tok[t]:  # strictly: a name launched twice per step alternates two gaps
            out.setdefault(int(g), []).append(int(t))
            support[int(g)] = support.get(int(g), 0) + int(c)
    keep = sorted(out, key=lambda g: -support[g])[:MAX_CANDIDATES]
    return {g: out[g] for g in keep}


@dataclass
class _Split:
    period: int
    boundaries: np.ndarray   # segment starts (the split token's occurrences)
    unit_start: int          # where one copy of the most common segment starts
    unit_len: int
    unit_count: int
    coverage: float          # share of all launches whose name is in the unit
    explained: float         # share of launches inside copies of the unit
    distinct: int            # names in the unit
    explained_time: float    # share of the GPU time inside copies of the unit


def _split(tokens: np.ndarray, period: int, anchors: list[int], time: np.ndarray) -> _Split | None:
    """The candidate ``period`` split at its most frequent anchor; ``time``: running GPU time
    (0, then the cumulative sum of each operation's duration, in launch order)."""
    counts = np.bincount(tokens, minlength=int(tokens.max()) + 1)
    anchor = max(anchors, key=lambda t: (counts[t], -int(np.argmax(tokens == t))))
    boundaries = np.flatnonzero(tokens == anchor)
    if len(boundaries) < 2:
        return None
    first, last = boundaries[:-1], boundaries[1:]
    sig = segment_signatures(tokens, first, last)
    values, inverse, freq = np.unique(sig, return_inverse=True, return_counts=True)
    mode = int(np.argmax(freq))
    where = np.flatnonzero(inverse == mode)
    start, length = int(first[where[0]]), int(last[where[0]] - first[where[0]])
    in_unit = np.zeros(len(counts), dtype=bool)
    in_unit[np.unique(tokens[start:start + length])] = True
    coverage = float(counts[in_unit].sum()) / len(tokens)
    explained = float(freq[mode] * length) / len(tokens)
    copies = first[where]
    explained_time = float((time[copies + length] - time[copies]).sum()) / time[-1] if time[-1] > 0 else explained
    return _Split(period, boundaries, start, length, int(freq[mode]), coverage, explained, int(in_unit.sum()),
                  explained_time)


def _choose(tokens: np.ndarray, durations: np.ndarray) -> _Split | None:
    time = np.zeros(len(tokens) + 1, dtype=np.float64)
    np.cumsum(np.maximum(durations, 0), out=time[1:])
    # A unit of one name (a kernel launched over and over) is a stream of launches, not a loop body.
    splits = [s for p, anchors in candidate_periods(tokens).items()
              if (s := _split(tokens, p, anchors, time)) is not None and s.unit_count >= 2 and s.distinct >= 2]
    if not splits:
        return None
    # the loop is the pattern that holds the GPU's time, not the one repeated most often
    best_time = max(s.explained_time for s in splits)
    good = [s for s in splits if s.explained_time >= UNIT_COVERAGE_TOLERANCE * best_time]
    return min(good, key=lambda s: (s.unit_len, -s.explained_time))


def _wait_before(act: Activity) -> np.ndarray:
    """Per launch: GPU idle before it (since everything launched earlier ended) plus CPU time since the previous launch."""
    n = len(act)
    reach = np.maximum.accumulate(act.end)
    gpu_idle = np.zeros(n, dtype=np.int64)
    cpu_gap = np.zeros(n, dtype=np.int64)
    if n > 1:
        gpu_idle[1:] = np.maximum(act.start[1:] - reach[:-1], 0)
        cpu_gap[1:] = np.maximum(act.launch[1:] - act.launch[:-1], 0)
    return gpu_idle + cpu_gap


def _gram_hashes(tokens: np.ndarray, k: int) -> np.ndarray:
    """Hash of tokens[i:i+k] for every i <= n - k."""
    r1, _ = token_hashes(int(tokens.max()) + 1, seed=_RNG_SEED + 1)
    n = len(tokens) - k + 1
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for m in range(k):
            h = h * np.uint64(0x100000001B3) + r1[tokens[m:m + n]]
    return h


def find_pattern_steps(act: Activity) -> tuple[PatternSteps | None, str]:
    """Steps of the repeating launch pattern, or None and a sentence saying why not."""
    tokens = act.token
    if len(tokens) < 4:
        return None, f"only {len(tokens)} GPU operations: too few to find a repeating pattern"
    split = _choose(tokens, act.end - act.start)
    if split is None:
        return None, (f"no repeating pattern in the {len(tokens):,} GPU operations "
                      f"({len(act.names)} distinct names): nothing repeats with a fixed period")
    unit = tokens[split.unit_start:split.unit_start + split.unit_len]
    # where the loop returns to Python: a long median wait before the launch ...
    copies = _unit_copies(tokens, split)
    offsets = np.arange(split.unit_len)
    matrix = _wait_before(act)[np.minimum(copies[:, None] + offsets[None, :], len(tokens) - 1)]
    wait = np.median(matrix, axis=0)
    rotations = set(np.argsort(-wait, kind="stable")[:ROTATIONS_BY_WAIT].tolist())
    # ... and, first, the rotation that makes the most whole steps (then covers the most launches): the one where the
    # repetitions before the first copy of the unit begin (a wrong rotation loses the
    # first or the last step to a partial one)
    rotations.add(_earliest_rotation(tokens, unit, int(copies[0])))
    best: tuple[tuple[int, int, float], PatternSteps] | None = None
    for r in sorted(rotations):
        steps = _steps_for_rotation(tokens, unit, int(copies[0]), r)
        if steps is None:
            continue
        score = (len(steps.first), int((steps.last - steps.first).sum()), float(wait[r]))
        if best is None or score > best[0]:
            best = (score, steps)
    if best is None:
        return None, f"no repeating pattern in the {len(tokens):,} GPU operations: the repeats are not whole steps"
    return best[1], ""


def _earliest_rotation(tokens: np.ndarray, unit: np.ndarray, copy: int) -> int:
    """The rotation at which the run of repetitions ending at ``copy`` begins: how much of
    the unit's tail the launches just before the copy repeat."""
    p = len(unit)
    back = min(copy, p)
    if back == 0:
        return 0
    before = tokens[copy - back:copy][::-1]
    mismatch = np.flatnonzero(before != unit[::-1][:back])
    matched = int(mismatch[0]) if len(mismatch) else back
    return (p - matched) % p


def _steps_for_rotation(tokens: np.ndarray, unit: np.ndarray, copy: int, offset: int) -> PatternSteps | None:
    """Steps split at every occurrence of the shortest run of launches from ``offset`` in the
    unit (copied at ``copy``) that occurs once per unit: short, so that a first step with
    extra launches inside it still matches."""
    p = len(unit)
    begin = copy + offset
    cyclic = np.concatenate((unit, unit))
    k = 1
    while k < min(MAX_BOUNDARY_GRAM, p, len(tokens) - begin):
        gram = cyclic[offset:offset + k]
        windows = np.lib.stride_tricks.sliding_window_view(cyclic[:p + k - 1], k)
        if int((windows == gram).all(axis=1).sum()) == 1:
            break
        k *= 2
    k = min(k, MAX_BOUNDARY_GRAM, p, len(tokens) - begin)
    grams = _gram_hashes(tokens, k)
    marks = np.flatnonzero(grams == grams[begin])
    return _steps_from_marks(tokens, marks, unit, p)


def _unit_copies(tokens: np.ndarray, split: _Split) -> np.ndarray:
    first, last = split.boundaries[:-1], split.boundaries[1:]
    sig = segment_signatures(tokens, first, last)
    ref = segment_signatures(tokens, np.array([split.unit_start]), np.array([split.unit_start + split.unit_len]))[0]
    return first[sig == ref]


def _steps_from_marks(tokens: np.ndarray, marks: np.ndarray, unit: np.ndarray, unit_len: int) -> PatternSteps | None:
    n = len(tokens)
    counts = np.bincount(unit, minlength=int(tokens.max()) + 1)
    anchors = np.flatnonzero(counts == 1)
    first = marks
    last = np.append(marks[1:], n)
    # the last segment runs to the end of the trace: keep one unit's worth, the rest is teardown
    last[-1] = min(n, first[-1] + unit_len)
    anchor_column = np.full(len(counts), -1, dtype=np.int64)
    anchor_column[anchors] = np.arange(len(anchors))
    pos = np.flatnonzero(anchor_column[tokens] >= 0)
    seg = np.searchsorted(first, pos, side="right") - 1
    ok = (seg >= 0) & (pos < last[np.maximum(seg, 0)])
    # which once-per-step names each segment launched: a segments x anchors table of flags
    # (tens of thousands of steps x tens of names; a hash of pairs costs ten times more)
    if len(first) * max(len(anchors), 1) <= 64_000_000:
        seen = np.zeros((len(first), max(len(anchors), 1)), dtype=bool)
        seen[seg[ok], anchor_column[tokens[pos[ok]]]] = True
        present = seen.sum(axis=1)
    else:
        pairs = np.unique(seg[ok] * (len(counts) + 1) + tokens[pos[ok]])
        present = np.bincount(pairs // (len(counts) + 1), minlength=len(first))
    is_step = present >= ANCHOR_PRESENCE * max(len(anchors), 1)
    if not is_step.any():
        return None
    # non-step segments after a step join it (an eval pass); leading and trailing ones are start-up/teardown
    idx = np.flatnonzero(is_step)
    step_first = first[idx]
    step_last = np.empty(len(idx), dtype=np.int64)
    step_last[:-1] = first[idx[1:]]
    step_last[-1] = last[idx[-1]]
    sig = segment_signatures(tokens, step_first, step_last)
    return PatternSteps(step_first, step_last, unit_len, sig)
