"""The stateful operator that runs the lag model inside Quix Streams, one topic per key.

Messages arrive keyed by topic name: watermark samples (one per topic per tick) and
``commits`` batches (the latest commits and offset deletions of that topic, coalesced by
``pipeline.read.commits.CommitsSource`` from ``__consumer_offsets``, with the SDK workers'
latest progress reports from ``lagpilot.progress``). The ``TopicModel`` of each
key lives in memory between messages (numpy arrays are not re-read from the state store on
every message) and is written to the Quix state store (RocksDB + changelog), so a
restarted or rebalanced replica resumes the model:

- ``c:<group>`` (positions) on every commit batch: a commit must never be lost across a
  crash, because a group that commits once and goes idle would otherwise look lagging
  forever;
- ``hw`` (the HWM history since its last full write) at most every
  ``persist_interval_ms``, ``win`` (every group's rate window) at most every
  ``window_persist_interval_ms``, ``hwold`` (the whole HWM history) at most every 30 s:
  a lost row only thins the fit, and the samples since are replayed (at-least-once)
  anyway;
- ``gen`` on every write. The in-memory model is used only while ``gen`` in the store is
  the one this process last wrote; otherwise (the partition was elsewhere meanwhile) the
  model is reloaded from the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from pipeline.model.config import LagConfig
from pipeline.model.events import TopicObservation
from pipeline.model.lag import TopicModel

log = logging.getLogger(__name__)


class RecordTimes(Protocol):
    """Where time lags the history cannot answer get their truth (``pipeline.model.truth``):
    ``want`` sees every tick's observations, ``take`` returns the record timestamps read
    since for a topic, as ``[group, partition, offset, record_ms]`` rows."""

    def want(self, obs: TopicObservation) -> None: ...

    def take(self, topic: str) -> list[list[Any]]: ...


class LagOperator:
    """``sdf.apply(LagOperator(...), stateful=True, metadata=True, expand=True)``.

    Returns the events to publish on ``lagpilot.lag`` for this message: a ``group_lag`` per
    group every sample while the group is not OK (the policy counts its windows in them),
    else every ``ok_summary_interval_ms``; ``partition_lag`` snapshots per partition at most
    every ``snapshot_interval_ms`` per group, and at once when a partition's status changes.
    At 50 groups x 1,000 partitions that is thousands of messages a second instead of
    hundreds of thousands.
    """

    def __init__(
        self,
        cfg: LagConfig,
        *,
        snapshot_interval_ms: int = 30_000,
        alert_interval_ms: int = 1000,
        ok_summary_interval_ms: int = 1000,
        persist_interval_ms: int = 1000,
        window_persist_interval_ms: int = 5000,
        max_ok_summaries_per_s: float = 500.0,
        max_snapshots_per_s: float = 1000.0,
        on_observations: Callable[[TopicObservation], None] | None = None,
        on_topic_deleted: Callable[[str], None] | None = None,
        on_input: Callable[[str], None] | None = None,
        on_commits: Callable[[int], None] | None = None,
        on_events: Callable[[list[dict[str, Any]]], None] | None = None,
        on_group_health: Callable[[dict[str, Any]], None] | None = None,
        record_times: RecordTimes | None = None,
        watches: Callable[[str], bool] | None = None,
    ) -> None:
        self.cfg = cfg
        self.snapshot_interval_ms = snapshot_interval_ms
        self.alert_interval_ms = alert_interval_ms
        self.ok_summary_interval_ms = ok_summary_interval_ms
        self.persist_interval_ms = persist_interval_ms
        # the periodic events of healthy groups, bounded however large the estate: past
        # these rates the intervals stretch (status changes and alerts never wait)
        self.max_ok_summaries_per_s = max_ok_summaries_per_s
        self.max_snapshots_per_s = max_snapshots_per_s
        self._sizes: dict[str, tuple[int, int]] = {}  # topic -> (active groups, cells)
        self._group_topics = 0
        self._cells = 0
        self.window_persist_interval_ms = window_persist_interval_ms
        self._window_saved_ms: dict[str, int] = {}  # topic -> when its window was written
        self.on_observations = on_observations
        self.on_topic_deleted = on_topic_deleted
        self.on_input = on_input
        self.on_commits = on_commits
        self.on_events = on_events
        self.on_group_health = on_group_health
        # topic -> (group, partition) -> owner, from the source's ``owners`` messages (held
        # in memory only: the source re-sends them with the commits it knows)
        self._owners: dict[str, dict[tuple[str, int], dict[str, str]]] = {}
        self.record_times = record_times
        # the topics this deployment watches (its include/exclude): samples, commits and
        # owners of other topics on the shared input topic (written by another lagpilot
        # deployment on the same cluster) are not modelled here
        self.watches = watches
        self._models: dict[str, tuple[TopicModel, int, int]] = {}  # topic -> model, gen, saved_ms
        # topic -> the group list the store holds for it, as this process last read or wrote
        # it (valid while its model is the cached one: a commit batch need not read it back)
        self._stored_groups: dict[str, list[str]] = {}
        self._touched: dict[str, float] = {}
        self._next_sweep = 0.0
        self.evict_after_s = 60.0
        self._touched_now = 0.0

    @property
    def topics(self) -> int:
        return len(self._models)

    # -- cache + state ---------------------------------------------------------------------

    def _sweep(self) -> None:
        """Drop cached models of topics this replica stopped receiving (a rebalance moved
        them): memory stays bounded, and the store still holds them if they come back."""
        now = time.monotonic()
        self._touched_now = now
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.evict_after_s / 4
        for topic in [t for t, at in self._touched.items() if now - at > self.evict_after_s]:
            self._models.pop(topic, None)
            self._stored_groups.pop(topic, None)
            del self._touched[topic]
            self._forget_size(topic)

    def _model(self, topic: str, state: Any) -> TopicModel:
        self._sweep()
        self._touched[topic] = self._touched_now
        gen = state.get("gen", 0)
        cached = self._models.get(topic)
        if cached is not None and cached[1] == gen:
            return cached[0]
        model = TopicModel(topic, self.cfg)
        self._stored_groups[topic] = list(state.get("groups", []))
        hw = state.get("hw")
        if hw:
            model.load_hw_state(hw, state.get("hwold"))
        model.add_groups(list(state.get("groups", [])))  # their rows at once
        for name in state.get("groups", []):
            position = state.get(f"c:{name}")
            if position:
                model.load_position_state(name, position)
        window = state.get("win")
        if window:
            model.load_window_state(window)
        self._models[topic] = (model, gen, model.last_sample_ms)
        if gen:
            log.info("model of %s restored: %d group(s)", topic, len(model.groups))
        return model

    def _bump(self, topic: str, model: TopicModel, state: Any, saved_ms: int | None = None) -> None:
        _, gen, prev_saved = self._models[topic]
        gen += 1
        state.set("gen", gen)
        self._models[topic] = (model, gen, prev_saved if saved_ms is None else saved_ms)

    def _save_positions(self, topic: str, model: TopicModel, state: Any, groups: set[str]) -> None:
        """After commits: every touched group's positions (small), and the group list."""
        names = sorted(model.groups)
        if names != self._stored_groups.get(topic):
            state.set("groups", names)
            self._stored_groups[topic] = names
        for group in groups:
            if group in model:
                state.set(f"c:{group}", model.position_state(group))
            else:
                state.delete(f"c:{group}")
        self._bump(topic, model, state)

    def _persist(self, topic: str, model: TopicModel, state: Any, now_ms: int) -> None:
        for key, value in model.history_state(now_ms).items():
            state.set(key, value)
        if now_ms - self._window_saved_ms.get(topic, 0) >= self.window_persist_interval_ms:
            self._window_saved_ms[topic] = now_ms
            state.set("win", model.window_state())
        self._bump(topic, model, state, saved_ms=now_ms)

    def _drop(self, topic: str, model: TopicModel, state: Any) -> None:
        for name in model.groups:
            state.delete(f"c:{name}")
        for k in ("hw", "hwold", "win", "groups"):
            state.delete(k)
        self._models.pop(topic, None)
        self._stored_groups.pop(topic, None)
        self._touched.pop(topic, None)
        self._window_saved_ms.pop(topic, None)
        self._forget_size(topic)
        state.set("gen", state.get("gen", 0) + 1)
        if self.on_topic_deleted is not None:
            self.on_topic_deleted(topic)

    # -- the operator ----------------------------------------------------------------------

    def __call__(
        self, value: Any, key: Any, timestamp: int, headers: Any, state: Any
    ) -> list[dict[str, Any]]:
        if not isinstance(value, dict) or not isinstance(key, str):
            return []
        event = value.get("event")
        if self.on_input is not None:
            self.on_input(str(event))
        if event == "group_health":  # from group health in the source: published as is
            if self.on_group_health is not None:
                self.on_group_health(value)
            return [value]
        if event == "input_state":  # the reader's own state: published as is
            return [value]
        if self.watches is not None and not self.watches(key):
            return []  # another deployment's topic
        if event == "owners":
            self._owners[key] = {
                (g, p): {"member_id": m, "client_id": c, "client_host": h}
                for g, p, m, c, h in value.get("owners") or ()
            }
            return []
        topic = key
        model = self._model(topic, state)
        if event == "commits":  # a coalesced batch from CommitsSource
            return self._commits(topic, model, value, state)
        if event != "watermarks":
            return []
        # the commits read before this sample, riding it (the commits source attaches the
        # batch of the sample's topic it flushes as the sample is released): applied first,
        # as the batch it would have sent ahead of the sample would have been
        riding = value.get("commits")
        before = (
            self._commits(topic, model, riding, state, riding=True)
            if isinstance(riding, dict)
            else []
        )
        hwms = value.get("high_watermarks") or []
        if not hwms:  # the sampler's mark for a deleted topic: forget it all
            self._drop(topic, model, state)
            return before
        now_ms = int(value["sampled_at_ms"])
        if not model.add_sample(now_ms, hwms, value.get("leaders") or ()):
            return before  # a replayed or out-of-order sample
        if self.record_times is not None:
            for group, partition, offset, record_ms in self.record_times.take(topic):
                model.record_read(group, partition, offset, record_ms)
        observations = model.observe(now_ms)
        if self.record_times is not None:
            self.record_times.want(observations)
        if self.on_observations is not None:
            self.on_observations(observations)
        events = self._events(model, observations, now_ms)
        if now_ms - self._models[topic][2] >= self.persist_interval_ms:
            self._persist(topic, model, state, now_ms)  # with what was just published
        if self.on_events is not None and events:
            self.on_events(events)
        return before + events if before else events

    def _commits(
        self, topic: str, model: TopicModel, value: dict[str, Any], state: Any, riding: bool = False
    ) -> list[dict[str, Any]]:
        """A ``commits`` event: a batch of its own, or ``riding`` a sample."""
        if riding and self.on_input is not None:
            self.on_input("commits")
        rejected = model.rejected_commits
        if "commits" in value:  # v1 rows (a source of an earlier release, replayed)
            touched = model.commit_many(value["commits"])
            n_commits = len(value["commits"])
        else:  # v2: columns
            touched = model.commit_columns(
                value["groups"],
                value["group"],
                value["partition"],
                value["offset"],
                value["commit_ts_ms"],
            )
            n_commits = len(value["partition"])
        if self.on_input is not None and model.rejected_commits > rejected:
            for _ in range(model.rejected_commits - rejected):  # partitions it cannot have
                self.on_input("commit_rejected")
        for group, partition in value.get("deleted", ()):
            model.forget(group, partition)
            touched.add(group)
        shares = value.get("share_groups")
        if shares and not model.share_groups.issuperset(shares):
            model.share_groups = model.share_groups.union(shares)
        # SDK workers' progress reports: kept in memory only (replaced every tick)
        reported = model.progress.report_many(value.get("progress") or [])
        if self.on_commits is not None:
            self.on_commits(n_commits)
        if touched:
            self._save_positions(topic, model, state, touched)
        events = self._report_events(model, reported)
        if self.on_events is not None and events:
            self.on_events(events)
        return events

    def _forget_size(self, topic: str) -> None:
        groups, cells = self._sizes.pop(topic, (0, 0))
        self._group_topics -= groups
        self._cells -= cells

    def _periodic_intervals(self, topic: str, groups: int, cells: int) -> tuple[int, int]:
        """The OK summary and snapshot intervals now, stretched for the whole of what this
        replica models (``stretched_ms``)."""
        old_groups, old_cells = self._sizes.get(topic, (0, 0))
        self._sizes[topic] = (groups, cells)
        self._group_topics += groups - old_groups
        self._cells += cells - old_cells
        return (
            stretched_ms(
                self.ok_summary_interval_ms, self._group_topics, self.max_ok_summaries_per_s
            ),
            stretched_ms(self.snapshot_interval_ms, self._cells, self.max_snapshots_per_s),
        )

    def _report_events(
        self, model: TopicModel, reported: list[tuple[str, int]]
    ) -> list[dict[str, Any]]:
        """``partition_lag`` events of the reported partitions whose status changed, judged
        as the reports arrive (``TopicModel.judge_reports``: only when a report shows a
        stalled worker). Group summaries, periodic snapshots and the metrics stay with the
        samples; the next sample sees the same status and does not repeat the event."""
        if not reported:
            return []
        obs = model.judge_reports(reported)
        if obs is None:
            return []
        sent = model.last_status[:, : obs.topic_partitions]  # a view: updated in place
        emit = obs.mask & model.reported_mask(obs.mask.shape) & (sent != obs.status)
        if not emit.any():
            return []
        sent[emit] = obs.status[emit]
        gi, pi = np.nonzero(emit)
        partitions = obs.partition_events(gi, pi)
        self._annotate(model, obs.topic, partitions, obs.now_ms)
        return partitions

    def _annotate(
        self, model: TopicModel, topic: str, partitions: list[dict[str, Any]], now_ms: int
    ) -> None:
        owners = self._owners.get(topic)
        if owners:  # who owns each partition, where group health knows it
            for ev in partitions:
                owner = owners.get((ev["group"], ev["partition"]))
                if owner is not None:
                    ev["owner"] = owner
        if len(model.progress):  # the SDK worker that reports each partition, where one does
            model.progress.annotate(partitions, now_ms)

    def _events(
        self, model: TopicModel, obs: TopicObservation, now_ms: int
    ) -> list[dict[str, Any]]:
        worst, active = obs.group_status(), obs.active
        ok_every_ms, snapshot_every_ms = self._periodic_intervals(
            obs.topic, len(active), int(obs.mask.sum())
        )
        # a group's summary: while it is not OK, when its status changed, and every
        # ok_every_ms (the model's per-group arrays: no Python loop over the groups)
        status = worst[active]
        due_summary = (
            (status > 0)
            | (model.last_summary_status[active] != status)
            | (now_ms - model.last_summary_ms[active] >= ok_every_ms)
        )
        summaries = active[due_summary]
        model.last_summary_ms[summaries] = now_ms
        model.last_summary_status[summaries] = worst[summaries]
        out = obs.group_events(summaries.tolist(), self.cfg.worst_n)
        # partition snapshots: each group's partitions every snapshot interval, the ones not
        # OK every alert interval, at the group's own phase of it (so 50 groups do not all
        # publish on the same tick), and at once a partition whose status changed
        groups = len(obs.groups)
        phase = model.phase[:groups]
        last_snapshot, last_alert = model.last_snapshot_ms[:groups], model.last_alert_ms[:groups]
        due = _due(last_snapshot, now_ms, snapshot_every_ms, phase)
        alert = _due(last_alert, now_ms, self.alert_interval_ms, phase)
        last_snapshot[due | (last_snapshot == 0)] = now_ms  # (views: updated in place)
        last_alert[alert | (last_alert == 0)] = now_ms
        sent = model.last_status[:, : obs.topic_partitions]  # a view: updated in place
        changed = sent != obs.status
        if due.any() or alert.any():
            changed |= due[:, None] | (alert[:, None] & (obs.status > 0))
        emit = obs.mask & changed
        np.copyto(sent, obs.status, where=obs.mask)
        gi, pi = np.nonzero(emit)
        partitions = obs.partition_events(gi, pi)
        self._annotate(model, obs.topic, partitions, now_ms)
        out.extend(partitions)
        return out


def stretched_ms(interval_ms: int, items: int, max_per_s: float) -> int:
    """``interval_ms``, or longer: so that ``items`` sent once an interval make at most
    ``max_per_s`` a second (0: no bound)."""
    if max_per_s <= 0 or interval_ms <= 0:
        return interval_ms
    return max(interval_ms, int(items * 1000 / max_per_s))


def _due(last_ms: np.ndarray, now_ms: int, interval_ms: int, phase: np.ndarray) -> np.ndarray:
    """Per group: has a boundary of its phase-shifted ``interval_ms`` grid passed since
    ``last_ms``? (False before a group's first tick: ``last_ms`` 0.)"""
    interval = max(1, interval_ms)
    shift = phase % interval
    return (last_ms > 0) & ((now_ms + shift) // interval != (last_ms + shift) // interval)


def lag_key(event: dict[str, Any]) -> str:
    """Key of an event on ``lagpilot.lag``: ``group|topic``, ``group|topic|partition``, or
    the group for ``group_health``, ``input_state|replica`` for ``input_state``."""
    if event.get("event") == "group_health":
        return str(event["group"])
    if event.get("event") == "input_state":
        return f"input_state|{event['replica']}"
    if event.get("event") == "partition_lag":
        return f"{event['group']}|{event['topic']}|{event['partition']}"
    return f"{event['group']}|{event['topic']}"
