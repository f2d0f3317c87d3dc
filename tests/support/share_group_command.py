"""Kafka's own ``ShareGroupCommand`` (kafka-share-groups.sh), run and read: the independent
witness the share-group reader is checked against.

``--describe --group G`` (or ``--all-groups``) prints, per group, a blank line and a table
whose header is ``GROUP TOPIC PARTITION START-OFFSET LAG``, one row per share-partition,
columns padded with spaces; ``-`` stands for a share-partition not initialized yet (no start
offset) and for a lag the broker did not answer. A group without any share-partition state
prints ``Share group 'G' has no offset information.`` instead of a table.
tests/support/fixtures/share_group_describe_all_4.4.0.txt is that output from a real run
(Apache Kafka 4.4.0's tools against the local 4.4.0 broker, ``--describe --all-groups``,
one consumer stalled with 7 records left on partition 1).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
COLUMNS = ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG")


@dataclass(frozen=True, slots=True)
class DescribedPartition:
    group: str
    topic: str
    partition: int
    start_offset: int | None  # None: "-" (not initialized)
    lag: int | None  # None: "-"


def _number(cell: str) -> int | None:
    return None if cell == "-" else int(cell)


def parse_describe(text: str) -> list[DescribedPartition]:
    """Every row of every table in ``text``; a header naming other columns is an error
    (the tool changed its output: the witness must say so, not guess)."""
    out: list[DescribedPartition] = []
    columns: list[str] | None = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            columns = None  # a blank line ends a table
            continue
        if cells[0] == "GROUP":
            if tuple(cells) != COLUMNS:
                raise ValueError(f"unexpected ShareGroupCommand header: {line!r}")
            columns = cells
            continue
        if columns is None:
            continue  # "Share group 'G' has no offset information." and the like
        if len(cells) != len(columns):
            raise ValueError(f"a row with {len(cells)} cells under {columns}: {line!r}")
        row = dict(zip(columns, cells, strict=True))
        start, lag = _number(row["START-OFFSET"]), _number(row["LAG"])
        out.append(
            DescribedPartition(row["GROUP"], row["TOPIC"], int(row["PARTITION"]), start, lag)
        )
    return out


def describe(bootstrap: str, group: str, timeout_s: float = 60.0) -> list[DescribedPartition]:
    """``ShareGroupCommand --describe --group G`` through ``kafka.sh tool``, parsed."""
    proc = subprocess.run(
        [str(KAFKA_SH), "tool", SHARE_GROUP_COMMAND, "--bootstrap-server", bootstrap,
         "--describe", "--group", group],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"ShareGroupCommand --describe failed: {proc.stderr}")
    return parse_describe(proc.stdout)


def delete(bootstrap: str, group: str, timeout_s: float = 60.0) -> str:
    """``ShareGroupCommand --delete --group G``: the group must have no members."""
    proc = subprocess.run(
        [str(KAFKA_SH), "tool", SHARE_GROUP_COMMAND, "--bootstrap-server", bootstrap,
         "--delete", "--group", group],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"ShareGroupCommand --delete failed: {proc.stdout}{proc.stderr}")
    return proc.stdout
