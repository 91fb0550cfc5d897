"""profkit.analysis.timeline.intervals, the one interval algebra, against a boolean mask per
nanosecond (property tests on small random interval lists, and the edge cases by name)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profkit.analysis.timeline.intervals import (
    clip,
    complement,
    covered_until,
    covered_within,
    difference,
    gaps,
    intersection,
    longest,
    overlap_by_mask,
    union,
    union_length,
)

SIZE = 300
# (start, length): lengths of 0 included, overlaps and touching intervals likely
pairs = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40)


def columns(spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([p[0] for p in spans], dtype=np.int64)
    return s, s + np.array([p[1] for p in spans], dtype=np.int64)


def mask(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The oracle: one boolean per nanosecond."""
    out = np.zeros(SIZE, dtype=bool)
    for a, b in zip(s.tolist(), e.tolist()):
        out[a:b] = True
    return out


def runs(m: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of True: the canonical form of a union (touching intervals merged)."""
    edges = np.diff(np.concatenate(([0], m.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def canonical(s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
    return [(a, b) for a, b in zip(s.tolist(), e.tolist()) if b > a]


@given(pairs)
@settings(max_examples=200, deadline=None)
def test_union_is_the_runs_of_the_mask(spans) -> None:  # noqa: ANN001
    s, e = columns(spans)
    ms, me = union(s, e)
    assert canonical(ms, me) == runs(mask(s, e))
    assert ms.dtype == me.dtype == np.int64
    assert union_length(s, e) == int(mask(s, e).sum())


def test_union_merges_touching_intervals_and_counts_a_reversed_one_as_empty() -> None:
    ms, me = union(np.array([0, 10, 30]), np.array([10, 20, 25]))
    assert (ms.tolist(), me.tolist()) == ([0, 30], [20, 30])
    assert union_length(np.array([30]), np.array([25])) == 0


@given(pairs, st.lists(st.integers(-10, 290), min_size=1, max_size=20))
@settings(max_examples=200, deadline=None)
def test_covered_until_and_within_count_each_nanosecond_once(spans, times) -> None:  # noqa: ANN001
    s, e = columns(spans)
    ms, me = union(s, e)
    m = mask(s, e)
    assert covered_until(ms, me, np.array(times)).tolist() == [int(m[:max(t, 0)].sum()) for t in times]
    lo = np.array(sorted(times))
    hi = lo + 17
    assert covered_within(ms, me, lo, hi).tolist() == [int(m[max(a, 0):max(b, 0)].sum()) for a, b in zip(lo, hi)]


@given(pairs, pairs)
@settings(max_examples=200, deadline=None)
def test_intersection_and_difference_of_two_unions(a, b) -> None:  # noqa: ANN001
    a_s, a_e = union(*columns(a))
    b_s, b_e = union(*columns(b))
    ma, mb = mask(a_s, a_e), mask(b_s, b_e)
    assert canonical(*intersection(a_s, a_e, b_s, b_e)) == runs(ma & mb)
    assert canonical(*difference(a_s, a_e, b_s, b_e)) == runs(ma & ~mb)


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)), max_size=40),
       st.lists(st.tuples(st.integers(0, 250), st.integers(0, 50)), max_size=8))
@settings(max_examples=200, deadline=None)
def test_complement_within_each_window(spans, windows) -> None:  # noqa: ANN001
    """(A zero-length interval is a point of the union: a hole may end or start there.)"""
    ms, me = union(*columns(spans))
    busy = mask(ms, me)
    lo, hi = columns(sorted(windows))
    expected = []
    for a, b in zip(lo.tolist(), hi.tolist()):  # window by window: holes of touching windows stay apart
        inside = np.zeros(SIZE, dtype=bool)
        inside[a:b] = True
        expected += runs(inside & ~busy)
    gs, ge = complement(ms, me, lo, hi)
    assert list(zip(gs.tolist(), ge.tolist())) == expected


def test_complement_keeps_the_holes_of_touching_windows_apart() -> None:
    gs, ge = complement(np.array([5]), np.array([6]), np.array([0, 10]), np.array([10, 20]))
    assert list(zip(gs.tolist(), ge.tolist())) == [(0, 5), (6, 10), (10, 20)]


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)), max_size=40))
@settings(max_examples=100, deadline=None)
def test_gaps_are_the_holes_inside_the_span(spans) -> None:  # noqa: ANN001
    """(A zero-length interval is a point of the union: a gap may end or start there.)"""
    s, e = columns(spans)
    gs, ge = gaps(s, e)
    m = mask(s, e)
    filled = runs(m)
    if filled:
        inside = np.zeros(SIZE, dtype=bool)
        inside[filled[0][0]:filled[-1][1]] = True
        assert canonical(gs, ge) == runs(inside & ~m)


def test_clip_overlap_and_longest() -> None:
    s, e = np.array([0, 10, 40]), np.array([20, 30, 50])
    cs, ce, keep = clip(s, e, 15, 45)
    assert (cs.tolist(), ce.tolist(), keep.tolist()) == ([15, 15, 40], [20, 30, 45], [True, True, True])
    # set 0: [0, 20) and [40, 50); set 1: [10, 30): both run in [10, 20)
    assert overlap_by_mask([(s[[0, 2]], e[[0, 2]]), (s[[1]], e[[1]])]) == {1: 20, 3: 10, 2: 10}
    assert longest(np.array([0, 10, 40]), np.array([5, 30, 45]), 2) == [(10, 30), (0, 5)]


def test_keep_reversed_is_htas_merge() -> None:
    """HTA's merge_kernel_intervals keeps an end before its start (a sub-µs kernel after HTA's
    rounding): a group ends at its own latest end, and opens where a start passes every end so far."""
    s, e = np.array([0, 10, 12, 15]), np.array([8, 5, 20, 18])
    ms, me = union(s, e, keep_reversed=True)
    assert (ms.tolist(), me.tolist()) == ([0, 10, 12], [8, 5, 20])
    assert union_length(s, e, keep_reversed=True) == 8 - 5 + 8
    ms, me = union(s, e)  # without: [10, 5) is empty, and [12, 20) the rest
    assert (ms.tolist(), me.tolist()) == ([0, 10, 12], [8, 10, 20])
    assert union_length(s, e) == 16
