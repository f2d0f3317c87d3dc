"""deploy/local/kafka.sh's LAGPILOT_BROKER_EXTRA_LISTENERS: more listeners, each advertised at
another port (the cutting proxy of bench/faults/rows.py row 3 listens there). ``kafka.sh config``
prints the server.properties ``up`` writes, without Java, so this runs in milliseconds; the
fault benchmark's row 3 runs a broker with it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"


def config(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "LAGPILOT_BROKER_EXTRA_LISTENERS"}
    full |= {"LAGPILOT_BROKER_PORT": "27092", **env}
    return subprocess.run([str(KAFKA_SH), "config", *args], env=full, capture_output=True,
                          text=True, timeout=30)  # fmt: skip


def props(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )


def test_by_default_one_plaintext_listener_advertised_as_itself() -> None:
    r = config()
    assert r.returncode == 0, r.stderr
    p = props(r.stdout)
    assert p["listeners"] == "PLAINTEXT://127.0.0.1:27092,CONTROLLER://127.0.0.1:27093"
    assert p["advertised.listeners"] == "PLAINTEXT://127.0.0.1:27092"


def test_extra_listeners_are_bound_and_advertised_at_their_proxy_ports() -> None:
    r = config(LAGPILOT_BROKER_EXTRA_LISTENERS="PIPELINE:27094:27192, WORKERS:27096:27194")
    assert r.returncode == 0, r.stderr
    p = props(r.stdout)
    assert p["listeners"].split(",")[2:] == [
        "PIPELINE://127.0.0.1:27094",
        "WORKERS://127.0.0.1:27096",
    ]
    assert p["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:27092,PIPELINE://127.0.0.1:27192,WORKERS://127.0.0.1:27194"
    )
    assert p["listener.security.protocol.map"].endswith(",PIPELINE:PLAINTEXT,WORKERS:PLAINTEXT")
    assert p["inter.broker.listener.name"] == "PLAINTEXT"  # the broker's own path is direct


def test_a_bad_entry_is_named_with_the_fix() -> None:
    for bad in ("pipeline:27094:27192", "PIPELINE:27094", "CONTROLLER:1:2", "X:a:1"):
        r = config(LAGPILOT_BROKER_EXTRA_LISTENERS=bad)
        assert r.returncode != 0 and r.stdout == ""
        assert f"bad entry '{bad}'" in r.stderr and "NAME:PORT:ADVERTISED_PORT" in r.stderr


def test_extra_listeners_are_refused_for_a_cluster() -> None:
    r = config("--brokers", "3", LAGPILOT_BROKER_EXTRA_LISTENERS="PIPELINE:27094:27192")
    assert r.returncode != 0
    assert "one broker only" in r.stderr and "LAGPILOT_BROKER_EXTRA_LISTENERS" in r.stderr


def test_share_group_state_fits_the_brokers_started() -> None:
    """One broker holds the share-group state topic itself: Kafka's defaults (RF 3, min ISR 2)
    leave it uncreated, and a share consumer then never gets a record."""
    for brokers, rf in (("1", "1"), ("3", "3")):
        r = config("--brokers", brokers)
        assert r.returncode == 0, r.stderr
        p = props(r.stdout)
        assert p["share.coordinator.state.topic.replication.factor"] == rf
        assert p["share.coordinator.state.topic.min.isr"] == "1"
