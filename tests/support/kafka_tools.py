"""Kafka's own commands, the reference lagpilot's lag is checked against, and their tables read.

Each command runs through ``deploy/local/kafka.sh tool`` (kafka-tools of the release
``KAFKA_VERSION`` names, fetched from Maven Central once, like the broker's jars: ``make
test`` fetches them before it starts pytest, ``ensure_tools`` for a run without make) against
a bootstrap given by the caller (``KAFKA_BOOTSTRAP`` in the tests), on a SASL-free listener.

The parsers read what the commands print for ``--describe --group G`` (one table) and
``--describe --all-groups`` (one table per group): every table starts at a header line
(``GROUP  TOPIC  PARTITION ...``) and its columns are where the header's words begin, since
Kafka pads each column to its widest value (a group id with a space in it stays one cell). A
cell Kafka prints as ``-`` (a partition with no committed offset, a member-less row) reads as
None. ``Consumer group 'x' has no active members.`` (stderr, or glued to a table where the two
streams were joined) is taken out and reported in ``inactive``.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

__all__ = [
    "CONSOLE_SHARE_CONSUMER",
    "CONSUMER_GROUP_COMMAND",
    "SHARE_GROUP_COMMAND",
    "ConsumerGroupRow",
    "Described",
    "ShareGroupRow",
    "ToolError",
    "describe_consumer_groups",
    "describe_share_groups",
    "ensure_tools",
    "parse_consumer_groups",
    "parse_share_groups",
    "parse_tables",
    "run_tool",
    "tool_command",
]

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"

CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"

Key = tuple[str, str, int]  # (group, topic, partition)

#: what the group commands print for a group with no members (to stderr)
_INACTIVE = re.compile(r"(?:Consumer|Share) group '(.+?)' has no active members\.")
#: how the commands report a failure: on stderr, and still with exit status 0
_ERROR = re.compile(r"^Error: .*", re.MULTILINE)
#: a table's header: GROUP first, then words of capitals and hyphens
_HEADER = re.compile(r"^GROUP(?: +[A-Z][A-Z#()-]*(?: \(ID\))?)+ *$")


class ToolError(AssertionError):
    """One of Kafka's commands failed (its output says why); raised as an assertion, since
    a reference that cannot answer fails the test that asked it."""


@dataclass(frozen=True)
class ConsumerGroupRow:
    """A row of ``ConsumerGroupCommand --describe``: one partition of a consumer group."""

    group: str
    topic: str
    partition: int
    current_offset: int | None  # the committed offset (None: "-", none committed)
    log_end_offset: int | None  # the high watermark Kafka listed
    lag: int | None  # log end - current (None where either is "-")
    consumer_id: str | None
    host: str | None
    client_id: str | None


@dataclass(frozen=True)
class ShareGroupRow:
    """A row of ``ShareGroupCommand --describe``: one partition of a share group."""

    group: str
    topic: str
    partition: int
    start_offset: int | None  # the share-partition start offset (SPSO)
    lag: int | None  # records not yet delivered and acknowledged (KIP-1226)
    leader_epoch: int | None = None  # with --verbose only


Row = TypeVar("Row", "ConsumerGroupRow", "ShareGroupRow")


@dataclass
class Described(Generic[Row]):
    """What a ``--describe`` printed: its rows by (group, topic, partition), the groups it
    said have no active members, and its text as printed (for an assertion's message)."""

    rows: dict[Key, Row] = field(default_factory=dict)
    inactive: set[str] = field(default_factory=set)
    text: str = ""

    def lags(self, group: str) -> dict[tuple[str, int], int | None]:
        """{(topic, partition): LAG} of one group, as the command printed it."""
        return {(t, p): r.lag for (g, t, p), r in self.rows.items() if g == group}


# -- the tables ----------------------------------------------------------------------------


def _cell(text: str) -> str | None:
    text = text.strip()
    return None if text in ("", "-") else text


def _int(text: str | None, row: dict[str, str | None]) -> int | None:
    if text is None:
        return None
    if not re.fullmatch(r"-?\d+", text):
        raise ValueError(f"a row does not fit the columns: {text!r} is no number in {row}")
    return int(text)


def _split(line: str, starts: list[int], names: list[str]) -> list[str]:
    """The cells of ``line`` at the header's column starts; where a value ran into the next
    column (no space before a start), the line's words, if there are as many as columns."""
    aligned = all(s == 0 or s >= len(line) or line[s - 1] == " " for s in starts)
    if aligned:
        ends = [*starts[1:], None]
        return [line[s:e] for s, e in zip(starts, ends, strict=True)]
    words = line.split()
    if len(words) == len(starts):
        return words
    raise ValueError(f"a row does not fit the columns {names}: {line!r}")


def parse_tables(text: str) -> tuple[list[dict[str, str | None]], set[str]]:
    """Every row of every table in ``text`` (header word -> cell, "-" as None), and the
    groups named as having no active members."""
    inactive = set(_INACTIVE.findall(text))
    text = _INACTIVE.sub("\n", text)
    rows: list[dict[str, str | None]] = []
    names: list[str] = []
    starts: list[int] = []
    for line in text.splitlines():
        if not line.strip():
            names = []  # a table ends at a blank line
            continue
        if _HEADER.match(line):
            found = list(re.finditer(r"\S+(?: \(ID\))?", line))
            names = [m.group() for m in found]
            starts = [m.start() for m in found]
            continue
        if not names:
            continue  # a warning, or a line of --state's or --members' own
        cells = _split(line.rstrip(), starts, names)
        rows.append({n: _cell(c) for n, c in zip(names, cells, strict=True)})
    return rows, inactive


def parse_consumer_groups(text: str) -> Described[ConsumerGroupRow]:
    """``ConsumerGroupCommand --describe --group G`` (or ``--all-groups``), as printed."""
    rows, inactive = parse_tables(text)
    out: Described[ConsumerGroupRow] = Described(inactive=inactive, text=text)
    for r in rows:
        if "CURRENT-OFFSET" not in r:
            raise ValueError(f"not an offsets table (ConsumerGroupCommand --describe): {r}")
        group, topic, partition = r["GROUP"], r["TOPIC"], r["PARTITION"]
        if group is None or topic is None or partition is None:
            continue  # a member with nothing assigned: "-" for topic and partition
        number = int(partition)
        out.rows[(group, topic, number)] = ConsumerGroupRow(
            group=group,
            topic=topic,
            partition=number,
            current_offset=_int(r["CURRENT-OFFSET"], r),
            log_end_offset=_int(r["LOG-END-OFFSET"], r),
            lag=_int(r["LAG"], r),
            consumer_id=r.get("CONSUMER-ID"),
            host=r.get("HOST"),
            client_id=r.get("CLIENT-ID"),
        )
    return out


def parse_share_groups(text: str) -> Described[ShareGroupRow]:
    """``ShareGroupCommand --describe --group G`` (or ``--all-groups``; ``--verbose`` adds
    LEADER-EPOCH), as printed."""
    rows, inactive = parse_tables(text)
    out: Described[ShareGroupRow] = Described(inactive=inactive, text=text)
    for r in rows:
        if "START-OFFSET" not in r:
            raise ValueError(f"not an offsets table (ShareGroupCommand --describe): {r}")
        group, topic, partition = r["GROUP"], r["TOPIC"], r["PARTITION"]
        if group is None or topic is None or partition is None:
            continue
        number = int(partition)
        out.rows[(group, topic, number)] = ShareGroupRow(
            group=group,
            topic=topic,
            partition=number,
            start_offset=_int(r["START-OFFSET"], r),
            lag=_int(r.get("LAG"), r),
            leader_epoch=_int(r.get("LEADER-EPOCH"), r),
        )
    return out


# -- running the commands ------------------------------------------------------------------


def tool_command(cls: str, *args: str) -> list[str]:
    """The command line that runs one of Kafka's tools (``kafka.sh tool CLASS ARGS...``)."""
    return [str(KAFKA_SH), "tool", cls, *args]


def ensure_tools(timeout_s: float = 600) -> None:
    """Fetch Kafka's tools unless present (``kafka.sh tools``: once, locked; quick after)."""
    proc = subprocess.run(
        [str(KAFKA_SH), "tools"], capture_output=True, text=True, timeout=timeout_s
    )
    if proc.returncode != 0:
        raise ToolError(f"could not fetch Kafka's tools (kafka.sh tools):\n{proc.stderr}")


def run_tool(cls: str, *args: str, timeout_s: float = 120) -> tuple[str, str]:
    """(stdout, stderr) of one of Kafka's tools; raises ``ToolError`` where it failed (a
    non-zero exit, or the ``Error: ...`` the group commands print while exiting 0)."""
    proc = subprocess.run(
        tool_command(cls, *args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ},
    )
    failed = _ERROR.search(proc.stderr) or _ERROR.search(proc.stdout)
    if proc.returncode != 0 or failed:
        raise ToolError(
            f"{' '.join(tool_command(cls, *args))} failed (exit {proc.returncode}):\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout, proc.stderr


def describe_consumer_groups(bootstrap: str, *groups: str) -> Described[ConsumerGroupRow]:
    """``ConsumerGroupCommand --describe`` of ``groups`` (all of them with none given), run
    once: one JVM start for every group asked."""
    which = [a for g in groups for a in ("--group", g)] or ["--all-groups"]
    out, err = run_tool(
        CONSUMER_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--describe", *which
    )
    return parse_consumer_groups(err + "\n" + out)


def describe_share_groups(bootstrap: str, *groups: str) -> Described[ShareGroupRow]:
    """``ShareGroupCommand --describe`` of ``groups`` (all of them with none given)."""
    which = [a for g in groups for a in ("--group", g)] or ["--all-groups"]
    out, err = run_tool(SHARE_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--describe", *which)
    return parse_share_groups(err + "\n" + out)


def delete_share_group(bootstrap: str, group: str) -> str:
    """``ShareGroupCommand --delete --group G`` (the group must have no members): what it
    printed."""
    out, _ = run_tool(SHARE_GROUP_COMMAND, "--bootstrap-server", bootstrap, "--delete",
                      "--group", group)  # fmt: skip
    return out
