"""When a group's backlog was gone, from its side effects (pure): the ``slow_group``
scenario's time to drain.

A record is part of the backlog while it waits longer than ``late_s``: from ``produced +
late_s`` until it is processed (never processed: until the end). The backlog is gone at the
end of the first stretch, from ``start_ms`` on, during which some record was late, once no
record is late for ``settled_s`` after it (a gap shorter than that, between two late
records, is the same backlog). No late record at all: gone at ``start_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable


def backlog_gone_ms(
    records: Iterable[tuple[int, int | None]],
    start_ms: int,
    *,
    late_s: float,
    settled_s: float,
) -> int | None:
    """The epoch ms at which the backlog was gone (see the module), or None if it never was
    (a record never processed). ``records``: (produced ms, processed ms or None), of the
    records produced from ``start_ms`` on."""
    late_ms, settled_ms = int(late_s * 1000), int(settled_s * 1000)
    spans = sorted(
        (produced + late_ms, done)
        for produced, done in records
        if produced >= start_ms and (done is None or done - produced > late_ms)
    )
    if not spans:
        return start_ms
    end: int | None = spans[0][1]
    for begin, done in spans[1:]:
        if end is not None and begin > end + settled_ms:
            break  # settled: no record was late for settled_s
        end = None if end is None or done is None else max(end, done)
    return end
