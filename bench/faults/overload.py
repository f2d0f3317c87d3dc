"""Row 8 of ``python -m bench.faults``: one replica fed several times what it holds, for a
minute.

The scale benchmark's generator (``bench.support.scale_load``) writes real
``OffsetCommit`` records into a run-unique offsets topic that one ``python -m pipeline``
replica (policy off, the shipped defaults, its whole process tree held to ``CAP_CORES`` of
CPU where a cgroup allows it, so the host's cores do not make it fast enough to keep up)
reads as its ``LAGPILOT_OFFSETS_TOPIC``. A steady phase at ``STEADY_RATE`` gives the RSS a
replica has when it holds its load; then ``OVERLOAD_S`` at ``OVERLOAD_RATE``; then the
steady rate again until the replica is caught up.

Measured: the tree's RSS every second (peak, and its growth over the steady phase's
median, against ``LAGPILOT_MAX_BUFFERED_BYTES``); the reader's group membership (its
member id read from the broker every few seconds, and the pipeline's log for a lost
member: ``UNKNOWN_MEMBER_ID``, fenced, heartbeat or poll-interval expiry); what the replica
said (``lagpilot_input_behind_seconds``, ``_backlog_records``, ``_paused``); the overload
factor (commits offered over commits the reader took per second in the overload); and
recovery, from the end of the overload until the reader is caught up (behind 0) and
samples are modelled again (last sample age under 2 s).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import re
import statistics
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.support.scale_load import OFFSETS_PARTITIONS, generate
from bench.support.scale_probes import process_tree, rss_bytes
from bench.support.scale_replicas import CGROUP_CPU, Pipeline, wait_modelling
from pipeline.read.backlog import DEFAULT_MAX_BUFFERED_BYTES

TOPICS, PARTITIONS, GROUPS = 10, 50, 20  # 500 partitions x 20 groups
STEADY_RATE = 5_000
OVERLOAD_RATE = 90_000
STEADY_S = 30.0
OVERLOAD_S = 60.0
RECOVERY_WAIT_S = 300.0
CAP_CORES = 0.15
#: the overload must be at least this many times what the replica's reader took
MIN_FACTOR = 2.0
#: log lines of a reader that lost its group
LOST_GROUP = re.compile(
    r"UNKNOWN_MEMBER_ID|FENCED_INSTANCE_ID|[Hh]eartbeat.*(expir|fail)|max\.poll\.interval|"
    r"session timed out|member.*(removed|evicted)"
)
_GAUGES = (
    "lagpilot_input_behind_seconds",
    "lagpilot_input_backlog_records",
    "lagpilot_input_paused",
    "lagpilot_input_pauses_total",
    "lagpilot_last_sample_age_seconds",
    "lagpilot_coordinator_records_total",
)
_LINE = re.compile(r"^([a-z_]+)(?:\{([^}]*)\})? ([-0-9.e+Inf]+)$")


def can_cap() -> bool:
    """Whether a replica's CPU can be capped here (a writable cgroup v1 cpu controller)."""
    import os

    return (CGROUP_CPU / "cpu.cfs_quota_us").exists() and os.access(CGROUP_CPU, os.W_OK)


def gauges(port: int) -> dict[str, float]:
    """The reader's gauges and the commits decoded (``..._records_total{kind="commit"}``)."""
    query = "&".join(f"name[]={n}" for n in _GAUGES)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        name, labels = m.group(1), m.group(2) or ""
        if name == "lagpilot_coordinator_records_total":
            if 'kind="commit"' in labels:
                out["decoded"] = float(m.group(3))
        else:
            out[name.removeprefix("lagpilot_")] = float(m.group(3))
    return out


def _role(pid: int) -> str:
    """A process of the replica's tree named by its title or command line."""
    with contextlib.suppress(OSError):
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[-60:]
        return f"{pid}:{comm}:{cmd}"
    return str(pid)


def member_id(admin: AdminClient, group: str) -> str | None:
    """The reader's member id as the broker holds it (None: no member, or no answer)."""
    try:
        d = admin.describe_consumer_groups([group])[group].result(timeout=5)
    except Exception:  # the coordinator is busy: asked again on the next round
        return None
    return d.members[0].member_id if len(d.members) == 1 else None


class Watch:
    """Samples the replica every second in a thread: RSS of its tree, its gauges, and the
    reader's member id (every ``member_every_s``)."""

    def __init__(self, pipe: Pipeline, admin: AdminClient, group: str) -> None:
        self.pipe, self.admin, self.group = pipe, admin, group
        self.rows: list[dict[str, Any]] = []
        self.members: list[tuple[float, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        next_member = 0.0
        while not self._stop.wait(1.0):
            now = time.monotonic()
            tree = process_tree(self.pipe.proc.pid)
            by = {_role(pid): rss_bytes([pid]) for pid in tree}
            row: dict[str, Any] = {"t": now, "rss": sum(by.values()), "by_process": by}
            with contextlib.suppress(OSError, ValueError):
                row |= gauges(self.pipe.port)
            self.rows.append(row)
            if now >= next_member:
                next_member = now + 5.0
                self.members.append((now, member_id(self.admin, self.group)))

    def between(self, t0: float, t1: float) -> list[dict[str, Any]]:
        return [r for r in self.rows if t0 <= r["t"] < t1]


def overloaded_replica(
    bootstrap: str,
    tmp: Path,
    *,
    steady_s: float = STEADY_S,
    overload_s: float = OVERLOAD_S,
    overload_rate: int = OVERLOAD_RATE,
    shape: tuple[int, int, int] = (TOPICS, PARTITIONS, GROUPS),
    cap_cores: float | None = CAP_CORES,
) -> dict[str, Any]:
    """The row's figures (see the module's docstring)."""
    topics, partitions, groups = shape
    run = f"overload-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    offsets_topic = f"{run}.offsets"
    data_topics = [f"{run}-t{i}" for i in range(topics)]
    made = admin.create_topics(
        [NewTopic(offsets_topic, OFFSETS_PARTITIONS, 1, config={"cleanup.policy": "compact"})]
        + [NewTopic(t, partitions, 1) for t in data_topics]
    )
    for f in made.values():
        f.result(timeout=30)
    ctx = mp.get_context("spawn")
    rate, sent = ctx.Value("d", float(STEADY_RATE), lock=False), ctx.Value("q", 0, lock=False)
    ready, stop = ctx.Event(), ctx.Event()
    gen = ctx.Process(
        target=generate,
        args=(
            bootstrap,
            offsets_topic,
            data_topics,
            partitions,
            groups,
            f"{run}-g",
            rate,
            sent,
            ready,
            stop,
        ),
        daemon=True,
    )
    gen.start()
    cap = cap_cores if cap_cores and can_cap() else None
    pipe: Pipeline | None = None
    watch: Watch | None = None
    try:
        if not ready.wait(60):
            raise RuntimeError("the generator did not start in 60 s")
        name = f"{run}-p"
        pipe = Pipeline(bootstrap, run, name, offsets_topic, 0, cpu_cores=cap)
        wait_modelling([pipe], 180, bootstrap, name, offsets_topic)
        watch = Watch(pipe, admin, f"{name}.offsets").start()
        time.sleep(steady_s)
        t_over = time.monotonic()
        sent_before = sent.value
        rate.value = float(overload_rate)
        time.sleep(overload_s)
        rate.value = float(STEADY_RATE)
        t_end = time.monotonic()
        offered = (sent.value - sent_before) / (t_end - t_over)
        if not gen.is_alive():
            raise RuntimeError("the generator died during the overload (see its stderr)")
        recovered_at = None
        while time.monotonic() < t_end + RECOVERY_WAIT_S:
            time.sleep(1.0)
            last = watch.rows[-1] if watch.rows else {}
            if (
                last.get("t", 0) > t_end + 2
                and last.get("input_behind_seconds", 1) == 0
                and 0 <= last.get("last_sample_age_seconds", -1) < 2
            ):
                recovered_at = last["t"]
                break
        time.sleep(2)
        watch.stop()
        steady = watch.between(t_over - steady_s, t_over)
        over = watch.between(t_over, t_end)
        after = watch.between(t_end, time.monotonic())
        log_text = pipe.log.read_text(errors="replace") if pipe.log.exists() else ""
        lost_lines = [ln[:300] for ln in log_text.splitlines() if LOST_GROUP.search(ln)]
        ids = [m for _, m in watch.members if m]
        base_rss = statistics.median(r["rss"] for r in steady) if steady else 0
        peak = max(over + after, key=lambda r: r["rss"], default={"rss": 0, "by_process": {}})
        peak_rss = peak["rss"]
        read_rate = _rate(over, "decoded")
        return {
            "shape": {"topics": topics, "partitions": partitions, "groups": groups},
            "cpu_cap_cores": cap,
            "max_buffered_bytes": DEFAULT_MAX_BUFFERED_BYTES,
            "steady_rate": STEADY_RATE,
            "overload_rate": overload_rate,
            "overload_s": overload_s,
            "offered_per_s": round(offered),
            "read_per_s_during_overload": round(read_rate) if read_rate else None,
            "overload_factor": round(offered / read_rate, 2) if read_rate else None,
            "steady_rss_bytes": int(base_rss),
            "peak_rss_bytes": int(peak_rss),
            "peak_rss_by_process": peak["by_process"],
            "steady_rss_by_process": steady[-1]["by_process"] if steady else {},
            "rss_growth_bytes": int(max(0, peak_rss - base_rss)),
            "within_bound": peak_rss - base_rss <= DEFAULT_MAX_BUFFERED_BYTES,
            "max_behind_s": max(
                (r.get("input_behind_seconds", 0) for r in over + after), default=0
            ),
            "max_backlog_records": int(
                max((r.get("input_backlog_records", 0) for r in over + after), default=0)
            ),
            "paused_samples": sum(1 for r in over + after if r.get("input_paused")),
            "pauses": int(max((r.get("input_pauses_total", 0) for r in watch.rows), default=0)),
            "behind_reported": any(r.get("input_behind_seconds", 0) > 1 for r in over + after),
            "member_ids": sorted(set(ids)),
            "member_id_checks": len(watch.members),
            "lost_group_log_lines": lost_lines[:10],
            "group_kept": len(set(ids)) == 1 and not lost_lines,
            "recover_s": round(recovered_at - t_end, 1) if recovered_at else None,
            # what reading the overload's backlog takes at the reader's own pace, less the
            # steady rate it keeps reading meanwhile: no reader catches up sooner
            "catch_up_floor_s": (
                round((offered - read_rate) * overload_s / (read_rate - STEADY_RATE), 1)
                if read_rate and read_rate > STEADY_RATE
                else None
            ),
            "alive_at_end": pipe.proc.poll() is None,
            "rss_series": [
                {
                    "t_s": round(r["t"] - t_over, 1),
                    "rss_mib": round(r["rss"] / 2**20, 1),
                    "behind_s": r.get("input_behind_seconds"),
                    "backlog": r.get("input_backlog_records"),
                    "paused": r.get("input_paused"),
                }
                for r in watch.rows
            ],
        }
    finally:
        if watch is not None:
            watch.stop()
        stop.set()
        gen.join(30)
        if gen.is_alive():
            gen.kill()
        if pipe is not None:
            pipe.stop()
        with contextlib.suppress(Exception):
            mine = [t for t in admin.list_topics(timeout=10).topics if run in t]
            admin.delete_topics(sorted(mine))


def _rate(rows: list[dict[str, Any]], key: str) -> float | None:
    have = [r for r in rows if key in r]
    if len(have) < 2 or have[-1]["t"] <= have[0]["t"]:
        return None
    return float((have[-1][key] - have[0][key]) / (have[-1]["t"] - have[0]["t"]))
