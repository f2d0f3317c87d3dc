"""Topic ids as the KIP-848 records carry them, from confluent-kafka's ``Uuid``."""

from __future__ import annotations

from confluent_kafka import Uuid

from pipeline.coordinator.records import TopicIdPartitions
from pipeline.read.offsets import decode_record
from pipeline.read.topic_ids import topic_id_text


def test_a_uuid_reads_as_the_decoder_writes_it_even_where_librdkafka_prints_plus_or_slash() -> None:
    raw = bytes.fromhex(
        "fbff" + "ff" * 14
    )  # base64 of this has '+' and '/' in the standard alphabet
    uuid = Uuid(
        int.from_bytes(raw[:8], "big", signed=True), int.from_bytes(raw[8:], "big", signed=True)
    )
    assert "/" in str(uuid) or "+" in str(uuid)
    key = (7).to_bytes(2, "big") + b"\x00\x01g" + b"\x00\x01m"
    value = b"\x00\x00" + b"\x02" + raw + b"\x02" + (0).to_bytes(4, "big") + b"\x00" + b"\x00"
    record = decode_record(key, value)
    assert record.partitions == (TopicIdPartitions(topic_id_text(uuid), (0,)),)  # type: ignore[union-attr]
