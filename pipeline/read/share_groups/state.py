"""What the share-group reader hands on: each share group's state and its share-partitions'
start offsets and lag (KIP-932 share groups; the lag is KIP-1226's, where the broker has it).

A share group has no committed offset: its progress per partition is the *share-partition
start offset* (SPSO), the earliest offset still being delivered to its consumers (records
after it may be done already), and, from Kafka 4.2 (DescribeShareGroupOffsets v1), the
broker's own lag: the records not yet delivered for good (acknowledged or archived).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SharePartitionOffsets:
    group: str
    topic: str
    partition: int
    start_offset: int  # the share-partition start offset; -1 while not initialized
    leader_epoch: int
    lag: int | None  # the broker's lag (DescribeShareGroupOffsets v1+); None where not answered


@dataclass(frozen=True, slots=True)
class ShareGroupState:
    group: str
    state: str  # as ShareGroupDescribe answers (e.g. "Empty", "Stable")
    members: int
    partitions: tuple[SharePartitionOffsets, ...]
