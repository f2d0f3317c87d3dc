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
