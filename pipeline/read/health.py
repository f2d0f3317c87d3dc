"""What the commits reader needs of group health, as a protocol (no model import).

Group health folds the coordinator's membership records and commits into each group's
status; the model stage implements it (``pipeline/model/group_health.py``). It runs in
the reader's process because every record of a group lands on one ``__consumer_offsets``
partition, which the reader already reads. The flow runs read -> model -> decide, so the
reader names only this protocol, and the composition root (``pipeline/app.py``) hands it a
picklable factory (the source is pickled into a spawned process).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol


class HealthFold(Protocol):
    """Group health as the reader feeds it and publishes it."""

    @property
    def groups(self) -> Collection[str]:
        """The groups it tracks (those with membership records): a live view, so the
        commits buffer hands their fast-path commits on as groups come and go."""
        ...

    def apply(self, record: object, ts_ms: int, offset: int = -1, partition: int = -1) -> None:
        """One decoded record read at ``offset`` of offsets ``partition`` (-1: unordered)."""
        ...

    def commit(self, group: str, topic: str, partition: int, offset: int, at: int) -> None:
        """One commit taken by the fast path (no record object), ``at`` its commit time."""
        ...

    def forget_order(self) -> None:
        """The start-up membership scans are over: stop ordering records by offset."""
        ...

    def forget_partitions(self, partitions: set[int]) -> None:
        """Drop the groups of offsets partitions this reader gave up."""
        ...

    def learn_topic_ids(self, names: dict[str, str]) -> None:
        """Topic id -> name, as the metadata lookups answer."""
        ...

    def topics_to_resolve(self) -> set[str]:
        """Topic names whose ids to look up."""
        ...

    def due(self, now_ms: int) -> list[dict[str, Any]]:
        """The ``group_health`` events to publish now."""
        ...

    def drain_owner_changes(self) -> set[str]:
        """Topics whose partition owners changed since the last call."""
        ...

    def owned_topics(self) -> list[str]:
        """Every topic with a known owner."""
        ...

    def owners(self, topic: str) -> list[list[Any]]:
        """``[[group, partition, member_id, client_id, client_host], ...]`` of ``topic``."""
        ...


#: makes the reader's group health in its own process (e.g. ``partial(GroupHealth, cfg)``)
HealthFactory = Callable[[], HealthFold]
