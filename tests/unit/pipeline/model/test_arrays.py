"""The state store's array encoding (``pipeline.model.arrays``): exact round trips."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from pipeline.model.arrays import decode, encode


@given(st.lists(st.lists(st.integers(-(2**40), 2**40), min_size=3, max_size=3), max_size=6))
def test_state_arrays_round_trip_exactly(rows):
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    for arr in (a, a[None], np.arange(5, dtype=np.int64), a.astype(np.float64)):
        back = decode(orjson.loads(orjson.dumps(encode(arr))))
        assert back.dtype == arr.dtype and back.shape == arr.shape
        assert np.array_equal(back, arr)


@given(
    st.integers(2, 45),
    st.integers(1, 7),
    st.integers(1, 9),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(-(2**40), 2**40)), max_size=12),
)
def test_a_window_of_few_moves_is_stored_sparse_and_round_trips(rows, groups, parts, moves):
    """A rate window: committed offsets (-1: none yet) that change at a group's commits only:
    stored as its nonzero differences, read back exactly."""
    window = np.full((groups, rows, parts), -1, np.int64)
    for at, value in moves:
        g, r, p = at % groups, at % rows, at % parts
        window[g, r:, p] = value  # from that row on
    enc = orjson.loads(orjson.dumps(encode(window)))
    nonzero = np.count_nonzero(np.diff(window, axis=1, prepend=0))
    assert enc["z"] == ("sparse" if nonzero <= 0.25 * window.size else "diff")
    back = decode(enc)
    assert back.dtype == window.dtype and np.array_equal(back, window)


def test_a_dense_table_is_stored_as_deflated_differences_and_old_state_still_reads():
    hw = np.cumsum(np.arange(1, 41 * 6 + 1).reshape(41, 6), axis=0)  # every HWM moves
    enc = encode(hw)
    assert enc["z"] == "diff"
    assert np.array_equal(decode(enc), hw)
    window = np.repeat(np.arange(4, dtype=np.int64)[None, None, :], 40, axis=1)
    assert encode(window)["z"] == "sparse"
    # state written before "sparse" existed (a window stored as "diff") reads the same
    import base64
    import zlib

    body = np.diff(window, axis=-2, prepend=np.zeros_like(window[..., :1, :]))
    old = {"d": "int64", "s": list(window.shape), "z": "diff",
           "b": base64.b64encode(zlib.compress(body.tobytes(), 1)).decode()}  # fmt: skip
    assert np.array_equal(decode(old), window)
