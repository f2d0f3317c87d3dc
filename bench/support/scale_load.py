"""The scale benchmark's load: real ``__consumer_offsets`` records (OffsetCommit, key type
1, value v3) written at a scheduled rate by a generator process, and a trickle into every
partition that keeps the high watermarks moving. Touches no pipeline."""

from __future__ import annotations

import struct
import time
from typing import Any

from confluent_kafka import Producer

OFFSETS_PARTITIONS = 50  # Kafka's __consumer_offsets default
#: each partition gets a trickle message this often: enough to keep its high watermark
#: moving. A one-message partition batch costs the harness dearly on a shared 2-core host:
#: spread evenly at one every 2 s (1,250 single-partition sends a second over 2,500
#: partitions), the generator and the broker spent ~0.3 core each on the trickle alone.
#: Every 5 s, sent in bursts on a 250 ms grid (one produce request for a twentieth of
#: the partitions), they spent ~0.1 and ~0.07 core on it (measured on this host)
TRICKLE_EVERY_S = 5.0
TRICKLE_BURST_S = 0.25

# value v3 with empty metadata: version, offset, leader_epoch, len(metadata)=0, commit_ts
_V3 = struct.Struct(">hqihq")


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack(">h", len(b)) + b


def commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey (record type 1): group, topic, partition."""
    return struct.pack(">h", 1) + _s(group) + _s(topic) + struct.pack(">i", partition)


def commit_value(offset: int, commit_ts_ms: int) -> bytes:
    """OffsetCommitValue v3: offset, leader_epoch -1, empty metadata, commit timestamp."""
    return _V3.pack(3, offset, -1, 0, commit_ts_ms)


# --------------------------------------------------------------------------- generator


def generate(
    bootstrap: str,
    offsets_topic: str,
    data_topics: list[str],
    partitions: int,
    groups: int,
    group_prefix: str,
    rate: Any,
    sent: Any,
    ready: Any,
    stop: Any,
) -> None:
    """The generator process: a trickle into every partition (one message every
    ``TRICKLE_EVERY_S``, in bursts), and commits at
    ``rate.value`` per second cycling over every (group, partition), each group's records
    in the offsets partition ``group % 50``. Offsets never pass what the broker has
    acknowledged for the partition (so they stay below its high watermark) and never go
    back; every group commits the acknowledged end: a consumer that keeps up. (Trailing it
    by a message or two, with a trickle of a message a second, is a consumer a second or two
    behind, which WARN's 1.5 usual intervals rightly catches once the ladder's steps make
    the groups commit every 2.5 s or faster, and at 5 s whenever the generator ran late.)"""
    common = {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "compression.type": "lz4",
        "enable.idempotence": True,  # a retried batch must not count twice
    }
    data = Producer({**common, "batch.num.messages": 1000})
    commits = Producer(
        {
            **common,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    tps = [(t, p) for t in data_topics for p in range(partitions)]
    index = {tp: i for i, tp in enumerate(tps)}
    acked = [0] * len(tps)

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[index[(msg.topic(), msg.partition())]] = msg.offset() + 1

    for t, p in tps:  # one message each first: every partition has a high watermark
        data.produce(t, b"x" * 100, partition=p, on_delivery=delivered)
    data.flush(30)
    keys = [[commit_key(f"{group_prefix}{g}", t, p) for t, p in tps] for g in range(groups)]
    committed = [[0] * len(tps) for _ in range(groups)]
    pack = _V3.pack
    produce = commits.produce
    n_tps, n_pairs = len(tps), groups * len(tps)
    ready.set()

    cursor, trickle_cursor, count = 0, 0, 0
    cur_rate, rate_t0, rate_base = -1.0, 0.0, 0
    trickle_t0 = next_burst = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if rate.value != cur_rate:
            cur_rate, rate_t0, rate_base = rate.value, now, count
        # the trickle: every partition once every TRICKLE_EVERY_S, the ones due sent
        # together every TRICKLE_BURST_S (one request, not one per partition)
        if now >= next_burst:
            next_burst = now + TRICKLE_BURST_S
            due_trickle = int((now - trickle_t0) * n_tps / TRICKLE_EVERY_S) - trickle_cursor
            for _ in range(min(due_trickle, n_tps)):
                t, p = tps[trickle_cursor % n_tps]
                data.produce(t, b"x" * 100, partition=p, on_delivery=delivered)
                trickle_cursor += 1
            if due_trickle > n_tps:
                trickle_cursor += due_trickle - n_tps
        data.poll(0)
        due = rate_base + int((now - rate_t0) * cur_rate) - count
        ts_ms = int(time.time() * 1000)
        for _ in range(min(due, 20_000)):
            g, i = divmod(cursor, n_tps)
            off = acked[i]
            row = committed[g]
            if off < row[i]:
                off = row[i]
            row[i] = off
            try:
                produce(offsets_topic, pack(3, off, -1, 0, ts_ms), keys[g][i], g % 50)
            except BufferError:
                commits.poll(0.05)
                continue
            cursor = (cursor + 1) % n_pairs
            count += 1
        sent.value = count
        commits.poll(0)
        time.sleep(0.005)
    commits.flush(30)
    data.flush(30)
