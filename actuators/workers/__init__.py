"""lagpilot's worker SDK: a consumer for agent workers that survives heavy payloads.

Handlers run on lanes off the poll loop (no rebalances from slow handlers), per-key order
holds, only processed prefixes are committed, side effects happen once (dedupe stores), and
the worker obeys lagpilot's control topic: halt/resume, spread/restore, hand-off to a pool,
and reports its processed positions every sampling tick (``ProgressReporter``) so lagpilot
sees a stall within half a second whatever the commit cadence.
``RateProducer`` is the producer side: it reports who writes a topic and how fast.
Start with ``Worker`` and docs/workers.md.
"""

from actuators.workers.control import Command, read_command
from actuators.workers.dedupe import (
    IDEMPOTENCY_HEADER,
    Claim,
    DedupeStore,
    EffectGuard,
    InDoubtError,
    MemoryDedupeStore,
    SQLiteDedupeStore,
    idempotency_key,
)
from actuators.workers.dedupe_pg import PostgresDedupeStore
from actuators.workers.lanes import lane_for
from actuators.workers.metrics import WorkerMetrics, serve_metrics
from actuators.workers.pool import PoolWorker
from actuators.workers.processes import WorkerProcessError
from actuators.workers.producer import RateCounter, RateProducer
from actuators.workers.progress import PartitionProgress, ProgressReporter, progress_event
from actuators.workers.tracker import OffsetTracker
from actuators.workers.worker import Worker

__all__ = [
    "IDEMPOTENCY_HEADER",
    "Claim",
    "Command",
    "DedupeStore",
    "EffectGuard",
    "InDoubtError",
    "MemoryDedupeStore",
    "OffsetTracker",
    "PartitionProgress",
    "PoolWorker",
    "PostgresDedupeStore",
    "ProgressReporter",
    "RateCounter",
    "RateProducer",
    "SQLiteDedupeStore",
    "Worker",
    "WorkerMetrics",
    "WorkerProcessError",
    "idempotency_key",
    "lane_for",
    "progress_event",
    "read_command",
    "serve_metrics",
]
