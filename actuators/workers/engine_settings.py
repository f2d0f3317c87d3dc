"""A worker's settings, checked before anything connects (configure, then start): each error
names the setting and what to pass instead. Also the defaults that need a reason.
"""

from __future__ import annotations

import os
from typing import Any

from actuators.workers.dedupe import DedupeStore, open_store
from actuators.workers.group_protocol import check_group_config
from schemas import ConfigError

#: a file path: the SQLite dedupe store (the default: lagpilot-dedupe-<group>.sqlite)
DEDUPE_PATH_ENV = "LAGPILOT_DEDUPE_PATH"
#: a postgresql:// URL: the PostgreSQL dedupe store, shared by every host of the group
DEDUPE_URL_ENV = "LAGPILOT_DEDUPE_URL"
#: the default cap on handler threads: every lane of every partition may run at once, up to
#: this many (threads start only as lanes need them). Pass ``max_workers`` to cap lower.
MAX_WORKERS = 256
#: the default backpressure: a partition holds up to this many messages per lane, so its
#: lanes keep busy across a fetch; pausing purges librdkafka's prefetched messages, so a
#: small buffer pauses, drains and refetches in turn, leaving the lanes idle meanwhile
BUFFERED_PER_LANE = 128
#: settings the SDK owns: changing them would break the commit-what-is-done guarantee
_OWNED = ("enable.auto.commit", "enable.auto.offset.store", "group.id", "on_commit")


def check_settings(
    *,
    bootstrap: str,
    group: str,
    lanes: int,
    max_workers: int | None,
    max_buffered_per_partition: int | None,
    max_attempts: int,
    consumer_config: dict[str, Any] | None,
    control_replay_s: float,
    group_protocol: str,
) -> dict[str, Any]:
    """Raise ``ConfigError`` on the first bad setting; return the extra consumer config."""
    if not bootstrap:
        raise ConfigError("bootstrap is empty: pass the brokers, e.g. bootstrap='host:9092'")
    if not group:
        raise ConfigError("group is empty: pass the consumer group the workers share")
    for name, value, low in (
        ("lanes", lanes, 1),
        ("max_workers", max_workers, 1),
        ("max_buffered_per_partition", max_buffered_per_partition, 2),
        ("max_attempts", max_attempts, 1),
    ):
        if value is None and name in ("max_workers", "max_buffered_per_partition"):
            continue  # the default: see MAX_WORKERS and BUFFERED_PER_LANE
        if not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}={value!r}: must be an integer >= {low}")
    extra = dict(consumer_config or {})
    for key in _OWNED:
        if key in extra:
            raise ConfigError(
                f"consumer_config[{key!r}] is set by the worker SDK (it commits only "
                "processed offsets itself); remove it from consumer_config"
            )
    check_group_config(group_protocol, extra)
    if not isinstance(control_replay_s, int | float) or control_replay_s < 0:
        raise ConfigError(
            f"control_replay_s={control_replay_s!r}: must be >= 0 seconds (how far back a "
            "starting worker reads the control topic for unexpired commands; 0: none)"
        )
    return extra


def resolve_store(
    dedupe: DedupeStore | str | os.PathLike[str] | None, group: str
) -> tuple[DedupeStore, bool]:
    """The dedupe store, and whether the worker opened it (and so closes it): the argument,
    else ``$LAGPILOT_DEDUPE_URL``, else ``$LAGPILOT_DEDUPE_PATH``, else a SQLite file named
    after the group in the working folder."""
    if dedupe is None:
        dedupe = (os.environ.get(DEDUPE_URL_ENV) or os.environ.get(DEDUPE_PATH_ENV)
                  or f"lagpilot-dedupe-{group}.sqlite")  # fmt: skip
    if isinstance(dedupe, str | os.PathLike):
        return open_store(dedupe), True
    return dedupe, False
