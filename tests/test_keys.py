"""profkit.model.keys.encode_rows, the one encoder of rows of small integers, against a dict of
Python tuples (property tests over narrow, wide, negative and NULL columns)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profkit.model.keys import FIRST, NULL_INT, SORTED, encode_keys, encode_row_codes, encode_rows, first_rows

# a column's values: narrow, spread, or the NULL marker and huge values
value = st.one_of(st.integers(-3, 5), st.integers(1000, 90_000), st.sampled_from([NULL_INT, 1 << 40, 7]))


def oracle(columns: list[np.ndarray], order: str) -> tuple[list[int], list[tuple[int, ...]]]:
    rows = list(zip(*(c.tolist() for c in columns)))
    keys = sorted(set(rows)) if order == SORTED else list(dict.fromkeys(rows))
    index = {k: i for i, k in enumerate(keys)}
    return [index[r] for r in rows], keys


@given(st.integers(1, 4).flatmap(lambda k: st.lists(st.tuples(*[value] * k), min_size=1, max_size=60)),
       st.sampled_from([SORTED, FIRST]))
@settings(max_examples=300, deadline=None)
def test_codes_and_keys_equal_a_dict_of_tuples(rows, order) -> None:  # noqa: ANN001
    columns = [np.array(c, dtype=np.int64) for c in zip(*rows)]
    codes, keys = encode_rows(columns, order)
    assert (codes.tolist(), keys) == oracle(columns, order)
    assert encode_row_codes(columns, order).tolist() == codes.tolist()
    if order == FIRST:
        assert first_rows(codes).tolist() == [codes.tolist().index(i) for i in range(len(keys))]


def test_a_key_too_wide_for_int64_is_encoded_in_steps() -> None:
    """Four columns of 2**20 distinct values each: the packed key would need 80 bits."""
    n = 1 << 20
    rng = np.random.default_rng(0)
    columns = [rng.permutation(n).astype(np.int64) * 3 for _ in range(4)]
    for order in (SORTED, FIRST):
        codes, keys = encode_rows([c[:5000] for c in columns], order)
        assert (codes.tolist(), keys) == oracle([c[:5000] for c in columns], order)


def test_encode_keys_names_null_none_and_takes_text() -> None:
    codes, keys = encode_keys([np.array([5, NULL_INT, 5])])
    assert codes.tolist() == [1, 0, 1] and keys == [(None,), (5,)]
    codes, keys = encode_keys([["b", "a", "b"], np.array([1, 2, 1])])
    assert codes.tolist() == [0, 1, 0] and keys == [("b", 1), ("a", 2)]
    codes, keys = encode_rows([np.zeros(0, dtype=np.int64)])
    assert len(codes) == 0 and keys == []
