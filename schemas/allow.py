"""One allow-list rule, for the policy that proposes and the actuator that applies.

``[allow]`` of the policy file holds fnmatch globs; an empty list allows nothing. The
pipeline asks before it proposes an action, the actuator again before it applies one:
both ask these two functions, so the two answers cannot drift apart.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass


def topic_allowed(topic: str, globs: Iterable[str]) -> bool:
    """A topic may get partitions when a glob matches it."""
    return any(fnmatch.fnmatchcase(topic, g) for g in globs)


def throttle_allowed(entity: str, name: str, globs: Iterable[str]) -> bool:
    """A client-id must match a glob; a client-id-prefix must be *covered* by one.

    A prefix throttles every client whose id starts with it, so it is allowed only by a
    glob ending in ``*`` that matches the prefix itself: then every id that starts with
    the prefix matches the glob too ("agent-" is covered by "agent-*", not by "agent-?").
    """
    if entity == "client-id":
        return any(fnmatch.fnmatchcase(name, g) for g in globs)
    return any(g.endswith("*") and fnmatch.fnmatchcase(name, g) for g in globs)


@dataclass(frozen=True)
class AllowList:
    """`[allow]` of the policy file: fnmatch globs. Empty lists allow nothing."""

    partition_topics: tuple[str, ...] = ()
    throttle_client_ids: tuple[str, ...] = ()

    def allows_partitions(self, topic: str) -> bool:
        return topic_allowed(topic, self.partition_topics)

    def allows_throttle(self, entity: str, name: str) -> bool:
        return throttle_allowed(entity, name, self.throttle_client_ids)
