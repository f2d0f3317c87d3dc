"""``lagpilot sample``: the high-watermark sampler on its own, in a Quix Application.

The sampler itself is ``pipeline.read.watermarks.HighWatermarkSource``; this is only its
command line (flags, environment, the Kafka client settings it passes on).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from pipeline.read.sampling import INTERNAL_TOPICS
from pipeline.read.watermarks import HighWatermarkSource
from runtime.cli import Parser, add_connection, connect, run, topic_creation_failed
from schemas import ConfigError, topics


def _key_values(pairs: Iterable[str]) -> dict[str, str]:
    config = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"-X {pair!r}: write client settings as key=value, e.g. -X security.protocol=SSL"
            )
        config[key] = value
    return config


EXAMPLE = """example:
  KAFKA_BOOTSTRAP=redpanda-0:9092 lagpilot sample --include 'orders.*' --sample-interval-ms 250
"""


def build_parser() -> Parser:
    p = Parser(
        prog="lagpilot sample",
        description="Sample the high watermarks of the watched topics and produce one "
        f"message per topic per tick to {topics.WATERMARKS}.",
        epilog=EXAMPLE,
    )
    add_connection(p)
    p.option(
        "--include",
        env="LAGPILOT_INCLUDE",
        default=".*",
        help="regex of topics to watch (whole name)",
    )
    p.option("--exclude", env="LAGPILOT_EXCLUDE", help="regex of topics not to watch")
    p.switch(
        "--include-internal",
        env="LAGPILOT_INCLUDE_INTERNAL",
        help=f"also watch internal topics ({INTERNAL_TOPICS})",
    )
    p.option(
        "--sample-interval-ms",
        env="LAGPILOT_SAMPLE_INTERVAL_MS",
        default=250,
        type=int,
        help="time between two samples",
    )
    p.option(
        "--metadata-refresh-ms",
        env="LAGPILOT_METADATA_REFRESH_MS",
        default=5000,
        type=int,
        help="time between two topic listings",
    )
    p.option(
        "--list-offsets-per-partition",
        dest="list_offsets_per_broker",
        env="LAGPILOT_LIST_OFFSETS_PER_BROKER",
        default=True,
        type=bool,
        action="store_false",
        help="ask with the AdminClient's future per partition, not one ListOffsets per "
        "leader broker (the variable: false)",
    )
    p.option(
        "--topic",
        env="LAGPILOT_WATERMARKS_TOPIC",
        default=topics.WATERMARKS,
        help="topic to produce to",
    )
    p.add_argument(
        "-X",
        dest="config_pairs",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Kafka client setting (security.protocol, sasl.*, ssl.*), repeatable "
        "[env LAGPILOT_KAFKA_<NAME>]",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """``lagpilot sample``: run only the sampler in a Quix Application; Ctrl-C stops it."""
    return run("lagpilot sample", build_parser(), _sample, argv)


def _sample(args: Any) -> int:
    from quixstreams import Application
    from quixstreams.models.topics.exceptions import CreateTopicFailure

    extra = {**args.kafka, **_key_values(args.config_pairs)}
    source = HighWatermarkSource(
        "lagpilot-watermarks",
        {"bootstrap.servers": args.bootstrap, **extra},
        include=args.include,
        exclude=args.exclude,
        exclude_internal=not args.include_internal,
        sample_interval_ms=args.sample_interval_ms,
        metadata_refresh_ms=args.metadata_refresh_ms,
        list_offsets_per_broker=args.list_offsets_per_broker,
    )
    connect(args.bootstrap, extra, args.connect_timeout_s, topic=args.topic)
    app = Application(
        broker_address=args.bootstrap,
        consumer_group="lagpilot-sampler",
        producer_extra_config=extra,
        consumer_extra_config=extra,
        loglevel=args.log_level.upper(),
    )
    topic = app.topic(
        args.topic,
        key_serializer="str",
        value_serializer="bytes",
        key_deserializer="str",
        value_deserializer="json",
    )
    app.add_source(source, topic=topic)
    try:
        app.run()
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 130
    except CreateTopicFailure as exc:
        raise topic_creation_failed(exc, args.topic, args.bootstrap) from exc
    return 0


if __name__ == "__main__":
    sys.exit(main())
