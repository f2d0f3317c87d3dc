"""A worker's side effect in the incident scenarios' ledger: one row of its ``effects`` table
(``bench.support.swarm.Ledger``) per message id, written in the SDK's once-only transaction.

Shared by the ``storm`` and ``slow_group`` scenarios and their member processes
(``bench.incidents.storm_member``, ``bench.incidents.slow_member``); kept small, as a member
process imports it each time it starts.
"""

from __future__ import annotations

import time
from typing import Any


def record(ctx: Any, head: dict[str, Any], partition: int) -> None:
    """The side effect, once per message id (bench.support.swarm.Ledger's table)."""
    ctx.once_sql(lambda db: db.execute(
        "INSERT INTO effects VALUES (?, ?, ?, ?, ?)",
        (head["id"], partition, int(head["heavy"]), head["produced_ms"], int(time.time() * 1000)),
    ))  # fmt: skip
