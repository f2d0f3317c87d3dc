"""Array helpers of the topic model: compact JSON-able encoding of its state, widening."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

_DTYPE_NAMES: dict[np.dtype[Any], str] = {}  # str(dtype) is Python code in numpy: slow


def _name(dtype: np.dtype[Any]) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


#: an integer table whose differences down the rows are at most this share nonzero is
#: stored as the nonzero differences alone ("sparse"): a rate window of committed offsets
#: moves only where a group commits, so most of its differences are zero, and deflating
#: them all would cost the model's tick more than listing the few that are not
SPARSE_SHARE = 0.25


def encode(a: np.ndarray) -> dict[str, Any]:
    """An array as JSON-able text. Integer tables (offsets, times) are stored as their
    differences down the rows and deflated: most offsets move little from row to row, so
    the text is a small fraction of the raw table, which matters when it is written every
    second.
    Where few differences are nonzero, only those are kept (their gaps and values)."""
    if a.ndim >= 2 and a.dtype.kind == "i" and a.shape[-2] > 1:
        # where the differences down the rows are nonzero, found without materialising
        # them (a bool mask an eighth of the table's size; ``a`` may be a strided view)
        moved = np.empty(a.shape, bool)
        np.not_equal(a[..., :1, :], 0, out=moved[..., :1, :])
        np.not_equal(a[..., 1:, :], a[..., :-1, :], out=moved[..., 1:, :])
        where = np.flatnonzero(moved)
        if len(where) <= SPARSE_SHARE * a.size and a.size < 2**31:
            at = np.unravel_index(where, a.shape)
            row = at[-2]
            before = (*at[:-2], np.maximum(row - 1, 0), at[-1])
            values = a[at] - np.where(row > 0, a[before], 0)
            gaps = np.diff(where, prepend=-1).astype(np.int32)
            raw = zlib.compress(gaps.tobytes() + values.astype(a.dtype).tobytes(), 1)
            z = "sparse"
        else:
            body = np.diff(a, axis=-2, prepend=np.zeros_like(a[..., :1, :]))
            raw = zlib.compress(np.ascontiguousarray(body).tobytes(), 1)
            z = "diff"
        return {
            "d": _name(a.dtype),
            "s": list(a.shape),
            "z": z,
            "b": base64.b64encode(raw).decode(),
        }
    return {"d": _name(a.dtype), "s": list(a.shape), "b": base64.b64encode(a.tobytes()).decode()}


def decode(d: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(d["b"])
    dtype, shape = np.dtype(d["d"]), d["s"]
    if d.get("z") == "diff":
        body = np.frombuffer(zlib.decompress(raw), dtype=dtype).reshape(shape)
        return np.cumsum(body, axis=-2, dtype=body.dtype)
    if d.get("z") == "sparse":
        data = zlib.decompress(raw)
        n = len(data) // (4 + dtype.itemsize)
        where = np.cumsum(np.frombuffer(data[: 4 * n], np.int32), dtype=np.int64) - 1
        flat = np.zeros(int(np.prod(shape)), dtype)
        flat[where] = np.frombuffer(data[4 * n :], dtype)
        return np.cumsum(flat.reshape(shape), axis=-2, dtype=dtype)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def widen(a: np.ndarray, width: int, fill: float | int) -> np.ndarray:
    """``a`` with its last axis padded to ``width`` columns of ``fill``."""
    if a.shape[-1] >= width:
        return a
    pad = [(0, 0)] * (a.ndim - 1) + [(0, width - a.shape[-1])]
    return np.pad(a, pad, constant_values=fill)
