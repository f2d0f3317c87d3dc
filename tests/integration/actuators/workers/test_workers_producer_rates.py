"""Two producers on one topic, one floods: their reports on the broker say which one."""

from __future__ import annotations

import time

from confluent_kafka import Consumer

from actuators.workers import RateProducer
from schemas import decode, validate

from .workers_broker import create_topics


def test_reports_name_the_flooding_client_and_its_rate(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic, rates_topic = f"{unique_name}.docs", f"{unique_name}.producers"
    create_topics(kafka_bootstrap, (topic, 2), (rates_topic, 1))
    base = {"bootstrap.servers": kafka_bootstrap, "linger.ms": 5}
    calm = RateProducer({**base, "client.id": f"{unique_name}-calm"}, rates_topic=rates_topic)
    flood = RateProducer({**base, "client.id": f"{unique_name}-flood"}, rates_topic=rates_topic)
    start = time.monotonic()
    while time.monotonic() - start < 3.2:  # calm: ~20 rec/s; flood: ~20x that, 1 KiB each
        calm.produce(topic, value=b"c" * 100, key=b"c")
        for _ in range(20):
            flood.produce(topic, value=b"f" * 1024, key=b"f")
        calm.poll(0)
        flood.poll(0)
        time.sleep(0.05)
    calm.close()
    flood.close()

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([rates_topic])
    events: list[dict] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(events) < 6:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        event = decode(msg.value())
        validate(event)
        assert msg.key() == f"{event['client_id']}|{event['topic']}".encode()
        events.append(event)
    consumer.close()

    by_client: dict[str, list[dict]] = {}
    for e in events:
        assert e["topic"] == topic
        by_client.setdefault(e["client_id"], []).append(e)
    assert set(by_client) == {f"{unique_name}-calm", f"{unique_name}-flood"}
    # full one-second windows (the first and the closing ones may be partial)
    calm_rate = max(e["records_per_s"] for e in by_client[f"{unique_name}-calm"])
    flood_rate = max(e["records_per_s"] for e in by_client[f"{unique_name}-flood"])
    assert 5 < calm_rate < 40, calm_rate
    assert flood_rate > 10 * calm_rate, (flood_rate, calm_rate)
    flood_bytes = max(e["bytes_per_s"] for e in by_client[f"{unique_name}-flood"])
    assert flood_bytes > 1024 * flood_rate * 0.9
