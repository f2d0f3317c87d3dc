"""The broker the demo and every benchmark use: one source for its address.

In order: ``KAFKA_BOOTSTRAP`` (any running Kafka or Redpanda), else the address that
``deploy/local/kafka.sh up`` recorded for the local broker it started (``kafka.sh status``
prints it). Nothing here parses what a start printed: ``kafka.sh up`` writes only the address
on stdout, but the record is what every reader (the Makefile, the test fixtures, this module)
takes, so a stray line from Maven or Java can never become an address.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
HOW_TO_START = (
    "no broker: start the local one with `make broker-up`, or set KAFKA_BOOTSTRAP=host:port "
    "to a running Kafka or Redpanda"
)


def recorded() -> str | None:
    """The address of the running local broker, as ``kafka.sh up`` recorded it, or None."""
    status = subprocess.run([str(KAFKA_SH), "status"], capture_output=True, text=True)
    address = status.stdout.strip()
    return address if status.returncode == 0 and address else None


def bootstrap(explicit: str | None = None) -> str:
    """``explicit`` (a --bootstrap flag), else ``KAFKA_BOOTSTRAP``, else the local broker's
    recorded address; exits with what to do when there is none."""
    address = explicit or os.environ.get("KAFKA_BOOTSTRAP") or recorded()
    if not address:
        raise SystemExit(f"error: {HOW_TO_START}")
    return address


def start_local() -> str:
    """Start the local broker (its progress and Maven's output go to our stderr) and return
    the address it recorded. Raises RuntimeError when it could not start."""
    up = subprocess.run([str(KAFKA_SH), "up"], stdout=subprocess.DEVNULL)
    address = recorded()
    if up.returncode != 0 or address is None:
        raise RuntimeError(f"`{KAFKA_SH} up` failed (exit {up.returncode}): see its output above")
    return address


def stop_local() -> None:
    subprocess.run([str(KAFKA_SH), "down"], capture_output=True)
