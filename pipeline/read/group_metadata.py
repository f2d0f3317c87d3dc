"""GroupMetadataValue (record type 2) and the consumer assignments inside it (pure).

Called by :mod:`pipeline.read.offsets`, which dispatches on the record type and turns the
:class:`~pipeline.coordinator.wire.Malformed` raised here into a ``Skipped`` record. Kafka writes
v0..v4 (v4 flexible); Redpanda prefixes each member entry with its own int16 version.
"""

from __future__ import annotations

import struct

from pipeline.coordinator.wire import Malformed, Reader
from schemas.offsets import GroupMember, GroupMetadata, TopicAssignment

__all__ = ["FLEXIBLE_FROM", "decode_assignment", "decode_group_metadata"]

FLEXIBLE_FROM = 4  # the first flexible (compact strings, tagged fields) value version


def decode_group_metadata(group: str, value: bytes, version: int) -> GroupMetadata:
    """A type 2 value (after its int16 ``version``): Kafka's layout first; if it does not
    fit exactly, Redpanda's (a version per member). Raises Kafka's :class:`Malformed`
    when neither fits.

    With no members the two layouts are the same bytes, and a Kafka member id is never two
    bytes long, so the Redpanda reading is only tried when Kafka's has failed.
    """
    try:
        return _group_metadata_layout(group, Reader(value, 2), version, per_member_version=False)
    except Malformed as kafka_exc:
        if version >= FLEXIBLE_FROM:
            raise
        try:
            return _group_metadata_layout(group, Reader(value, 2), version, per_member_version=True)
        except Malformed:
            raise kafka_exc from None


def _group_metadata_layout(
    group: str, r: Reader, version: int, *, per_member_version: bool
) -> GroupMetadata:
    flexible = version >= FLEXIBLE_FROM
    protocol_type = r.string("value.protocol_type", flexible)
    generation = r.int32("value.generation")
    protocol = r.nullable_string("value.protocol", flexible)
    leader = r.nullable_string("value.leader", flexible)
    state_ts = r.int64("value.current_state_timestamp") if version >= 2 else -1
    members: list[GroupMember] = []
    for i in range(r.array_len("value.members", flexible)):
        f = f"value.members[{i}]"
        mv = version
        if per_member_version:
            mv = r.int16(f"{f}.version")
            if mv not in range(FLEXIBLE_FROM):
                raise Malformed(f"{f}.version", f"member version {mv} is not 0..3")
        member_id = r.string(f"{f}.member_id", flexible)
        instance = r.nullable_string(f"{f}.group_instance_id", flexible) if mv >= 3 else None
        client_id = r.string(f"{f}.client_id", flexible)
        client_host = r.string(f"{f}.client_host", flexible)
        rebalance_ms = r.int32(f"{f}.rebalance_timeout") if mv >= 1 else -1
        session_ms = r.int32(f"{f}.session_timeout")
        r.nullable_bytes(f"{f}.subscription", flexible)
        raw_assignment = r.nullable_bytes(f"{f}.assignment", flexible)
        if flexible:
            r.skip_tagged_fields(f"{f}.tagged_fields")
        assignment = decode_assignment(raw_assignment) if protocol_type == "consumer" else ()
        members.append(
            GroupMember(
                member_id=member_id,
                client_id=client_id,
                client_host=client_host,
                group_instance_id=instance,
                rebalance_timeout_ms=rebalance_ms,
                session_timeout_ms=session_ms,
                assignment=assignment,
            )
        )
    last = "value.members"
    if flexible:
        r.skip_tagged_fields("value.tagged_fields")
        last = "value.tagged_fields"
    r.end(last)
    return GroupMetadata(
        group=group,
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_ts_ms=state_ts,
        members=tuple(members),
    )


def decode_assignment(raw: bytes | None) -> tuple[TopicAssignment, ...]:
    """The partitions in a ConsumerProtocolAssignment (any version); ``()`` if unreadable.

    Best effort by design: the assignment is client-written bytes (a custom assignor may
    put anything there), and a member we cannot read is still a member. Versions 1..3 only
    append fields after ``assigned_partitions``, so every version is read as v0's prefix.
    """
    if not raw or len(raw) < 2:
        return ()
    r = Reader(bytes(raw), 2)  # skip the assignment's int16 version
    try:
        out = []
        for _ in range(r.array_len("assigned_partitions", compact=False)):
            topic = r.string("topic", compact=False)
            n = r.array_len("partitions", compact=False)
            parts = struct.unpack_from(f">{n}i", r._take(4 * n, "partitions"))
            out.append(TopicAssignment(topic, tuple(parts)))
        return tuple(out)
    except (Malformed, struct.error):
        return ()
