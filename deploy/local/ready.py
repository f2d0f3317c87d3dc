"""Readiness probe for the local broker: metadata, then a produce/consume round trip.

A listening port is not a serving broker: KRaft may still be electing a controller and
`__consumer_offsets` may not exist yet. This probe returns 0 only once the cluster shows
the expected number of brokers, a topic can be created, and a message produced to it is
read back through a consumer group that commits (which creates `__consumer_offsets`).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def probe(bootstrap: str, brokers: int, deadline: float, login: str = "") -> None:
    conf: dict[str, str] = {"bootstrap.servers": bootstrap}
    if login:  # a broker started with LAGPILOT_BROKER_SASL_USERS: log in as its super user
        user, _, password = login.partition(":")
        conf |= {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                 "sasl.username": user, "sasl.password": password}  # fmt: skip
    admin = AdminClient(conf)
    while True:
        try:
            md = admin.list_topics(timeout=2)
            if len(md.brokers) >= brokers:
                break
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"metadata never showed {brokers} broker(s)")
        time.sleep(0.2)
    topic = "__lagpilot_ready"
    if topic not in admin.list_topics(timeout=5).topics:
        fut = admin.create_topics([NewTopic(topic, 1, min(brokers, 3))])[topic]
        try:
            fut.result(timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    token = uuid.uuid4().hex.encode()
    producer = Producer({**conf, "acks": "all"})
    producer.produce(topic, token)
    if producer.flush(max(1.0, deadline - time.monotonic())) != 0:
        raise TimeoutError("produce was not acknowledged")
    consumer = Consumer(
        {
            **conf,
            "group.id": "__lagpilot_ready",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            if msg.value() == token:
                consumer.commit(msg, asynchronous=False)
                return
        raise TimeoutError("the produced message was never consumed")
    finally:
        consumer.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--sasl-plain", default="", metavar="USER:PASSWORD", help="SASL/PLAIN login")
    args = ap.parse_args()
    try:
        probe(args.bootstrap, args.brokers, time.monotonic() + args.timeout, args.sasl_plain)
    except Exception as exc:  # a probe reports, it does not crash with a traceback
        print(f"ready.py: broker at {args.bootstrap} not ready: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
