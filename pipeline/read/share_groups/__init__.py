"""Share groups (KIP-932): each group's state and its share-partitions' start offsets and
lag, read with lagpilot's raw Kafka-protocol client (confluent-kafka has no share-group
admin API). :class:`ShareGroupsReader` is the entry point; the codec is pure."""

from pipeline.read.share_groups.reader import (
    ShareGroupsDenied,
    ShareGroupsError,
    ShareGroupsReader,
    ShareGroupsUnavailable,
)
from pipeline.read.share_groups.state import ShareGroupState, SharePartitionOffsets

__all__ = [
    "ShareGroupState",
    "ShareGroupsDenied",
    "ShareGroupsError",
    "ShareGroupsReader",
    "ShareGroupsUnavailable",
    "SharePartitionOffsets",
]
