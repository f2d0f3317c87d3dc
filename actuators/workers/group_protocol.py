"""The consumer group protocol a ``Worker`` joins its group with, and the group settings that
go with each one (pure: checked before anything connects).

``classic``: JoinGroup/SyncGroup, the assignor in the client. The SDK asks for
cooperative-sticky assignment and a 500 ms heartbeat (``HEARTBEAT_INTERVAL_MS``).

``consumer`` (KIP-848): the broker assigns and each member heartbeats on its own. The
broker owns the session timeout, the heartbeat interval and the assignor
(``group.consumer.session.timeout.ms``, ``group.consumer.heartbeat.interval.ms``,
``group.consumer.assignors``, or a group's own ``consumer.*`` config), so librdkafka refuses
to build a consumer that sets ``session.timeout.ms``, ``heartbeat.interval.ms``,
``partition.assignment.strategy`` or ``group.protocol.type``: ``check_group_config``
refuses them first, naming the broker setting to use instead. What librdkafka 2.12 does
under it, on Kafka 4.4 (tests/integration/actuators/workers/test_workers_group_protocol_broker.py
holds the callbacks and static membership to the broker, the unit tests the refusals):

* the rebalance callbacks are incremental, as under cooperative-sticky: a member losing
  some partitions gets ``on_revoke`` with just those, then ``on_assign`` with none; a new
  member gets ``on_assign`` with its share once its owner revoked it. ``incremental_assign``
  is the call, as the worker already makes it;
* static membership works: a static member that closes keeps its partitions (nobody else
  gets them) until the group's session timeout, and a restart under the same
  ``group.instance.id`` gets them back at its first heartbeat. A second live process with
  the same id is refused (a fatal ``UNRELEASED_INSTANCE_ID`` in the newcomer), where the
  classic protocol fences the older one; so is a restart after a crash (no leave sent)
  until the dead member's session expired, where the classic protocol lets the restart
  take its place at once;
* every step of a hand-over waits for a member's next heartbeat, at the broker's interval
  (5 s by default, and at least ``group.consumer.min.heartbeat.interval.ms``, 5 s by
  default): a client cannot ask for a shorter one;
* ``consumer_config`` also goes to the worker's group-less consumers (the control reader,
  the hand-off peek), which librdkafka builds as classic ones: there it refuses a
  ``max.poll.interval.ms`` below ``session.timeout.ms`` (45 s unless set), and under
  ``consumer`` that cannot be set, so ``check_group_config`` refuses a lower one first (the
  worker's poll loop never blocks on a handler: the 300 s default is fine);
* ``group.remote.assignor`` names one of the broker's ``group.consumer.assignors``; an
  unknown name is accepted by the client and fails at the first heartbeat (fatal), so it
  is best left unset (the broker's first assignor, ``uniform``, is sticky).
"""

from __future__ import annotations

import os
from typing import Any

from schemas import ConfigError

#: the protocol when the ``group_protocol`` keyword is not given
GROUP_PROTOCOL_ENV = "LAGPILOT_WORKER_GROUP_PROTOCOL"
CLASSIC = "classic"
CONSUMER = "consumer"
GROUP_PROTOCOLS = (CLASSIC, CONSUMER)
#: classic: every broker and Redpanda release serves it, and its hand-overs follow the
#: client's heartbeat (docs/workers.md, "Group protocol", says why it is the default)
DEFAULT_GROUP_PROTOCOL = CLASSIC
#: the classic group heartbeat's interval (``heartbeat.interval.ms``; ``consumer_config``
#: overrides it). Each round of a cooperative rebalance waits for every member's next
#: heartbeat, so a partition moving to a new member has no owner for up to two intervals: a
#: short interval (librdkafka's default is 3 s) shortens that gap. Two small requests a
#: second per member cost a broker little.
HEARTBEAT_INTERVAL_MS = 500
#: client settings the broker owns under ``consumer``, and where to set them instead
BROKER_OWNED = {
    "session.timeout.ms": "the broker's group.consumer.session.timeout.ms, or the group's "
    "consumer.session.timeout.ms",
    "heartbeat.interval.ms": "the broker's group.consumer.heartbeat.interval.ms, or the "
    "group's consumer.heartbeat.interval.ms",
    "partition.assignment.strategy": "consumer_config['group.remote.assignor'] (one of the "
    "broker's group.consumer.assignors), or leave it to the broker",
    "group.protocol.type": "nothing: the consumer protocol has no protocol type",
}
#: client settings that only the consumer protocol reads
CONSUMER_ONLY = ("group.remote.assignor",)
#: librdkafka refuses a classic consumer whose ``max.poll.interval.ms`` is below its
#: ``session.timeout.ms`` (45 s unless set); the worker's group-less consumers are classic
#: and take ``consumer_config``, where ``consumer`` forbids setting the session
MIN_MAX_POLL_INTERVAL_MS = 45_000


def resolve_group_protocol(value: str | None) -> str:
    """The argument, else ``$LAGPILOT_WORKER_GROUP_PROTOCOL``, else ``classic``; anything
    else is refused naming where it came from and the values it may take."""
    source = "group_protocol"
    if value is None:
        env = os.environ.get(GROUP_PROTOCOL_ENV, "").strip()
        if not env:
            return DEFAULT_GROUP_PROTOCOL
        value, source = env, GROUP_PROTOCOL_ENV
    if value not in GROUP_PROTOCOLS:
        raise ConfigError(
            f"{source}={value!r}: set it to 'classic' (every Kafka and Redpanda broker) or "
            "'consumer' (KIP-848: a broker that serves it, e.g. Apache Kafka 4.0+); unset, "
            f"{DEFAULT_GROUP_PROTOCOL!r}"
        )
    return value


def check_group_config(protocol: str, extra: dict[str, Any]) -> None:
    """Refuse ``consumer_config`` keys the protocol does not take, naming the fix."""
    if "group.protocol" in extra:
        raise ConfigError(
            "consumer_config['group.protocol'] is the worker's group_protocol setting: remove "
            f"it and pass group_protocol='{extra['group.protocol']}' (or set "
            f"{GROUP_PROTOCOL_ENV})"
        )
    if protocol == CONSUMER:
        for key, instead in BROKER_OWNED.items():
            if key in extra:
                raise ConfigError(
                    f"consumer_config[{key!r}] is set by the broker under "
                    f"group_protocol='consumer' (librdkafka refuses it): remove it and use "
                    f"{instead}; or keep it with group_protocol='classic'"
                )
        poll = extra.get("max.poll.interval.ms")
        if poll is not None and int(poll) < MIN_MAX_POLL_INTERVAL_MS:
            raise ConfigError(
                f"consumer_config['max.poll.interval.ms']={poll!r}: under "
                f"group_protocol='consumer' it must be at least {MIN_MAX_POLL_INTERVAL_MS} "
                "(the worker's control reader takes it too, and librdkafka wants it above "
                "that consumer's session.timeout.ms, 45 s, which cannot be set here); remove "
                f"it (the worker never blocks its poll loop) or set {MIN_MAX_POLL_INTERVAL_MS} "
                "or more"
            )
    else:
        for key in CONSUMER_ONLY:
            if key in extra:
                raise ConfigError(
                    f"consumer_config[{key!r}] applies only under group_protocol='consumer' "
                    "(the broker assigns): remove it, or pass group_protocol='consumer'"
                )


def group_settings(protocol: str) -> dict[str, Any]:
    """The protocol's part of a group member's consumer config (``consumer_config`` may
    override the classic defaults)."""
    if protocol == CONSUMER:
        return {"group.protocol": CONSUMER}
    return {
        "group.protocol": CLASSIC,
        "partition.assignment.strategy": "cooperative-sticky",
        # each of a cooperative rebalance's two rounds waits for every member's next
        # heartbeat: see HEARTBEAT_INTERVAL_MS
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    }
