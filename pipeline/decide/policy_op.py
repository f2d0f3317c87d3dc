"""The stateful operator that runs the policy inside Quix Streams, on one key.

Every ``group_lag`` summary and ``group_health`` event, every halt/resume from
``lagpilot.control``, the actuators' ``outcome`` events and the producers'
``producer_rates`` arrive under the single key ``POLICY_KEY``, so one replica decides with
one state: the global action budget, cooldowns and throttles it issued, the ladders and
their verification survive restarts in the state store. Action requests from
``lagpilot.requests`` (``lagpilot mcp``) arrive under the same key and spend the same
cooldowns and budget (``pipeline.decide.requests``); their verdicts go to ``lagpilot.outcomes``.
Actions leave signed; halt/resume events are verified before they move the kill switch;
``verification`` events leave as they are (for ``lagpilot.outcomes``).
"""

from __future__ import annotations

import logging
from typing import Any

from pipeline.decide import inputs, requests
from pipeline.decide.policy import PolicyState, apply_control, decide
from pipeline.decide.policy_config import PolicyConfig
from runtime import tracing
from runtime.halts import read_in_force
from schemas import (
    ConfigError,
    EventError,
    Mode,
    Signer,
    Verifier,
    group_lag_from_dict,
    sign,
    validate,
    verify,
)
from schemas.halts import halts_topic_for

log = logging.getLogger(__name__)

POLICY_KEY = "policy"


class PolicyOperator:
    """``sdf.apply(PolicyOperator(...), stateful=True, metadata=True, expand=True)``."""

    def __init__(
        self,
        config: PolicyConfig,
        signing_key: Signer,
        metrics: Any = None,
        persist_interval_ms: int = 1000,
        verifier: Verifier | None = None,
    ) -> None:
        self.config = config
        self._key = signing_key
        # halts and resumes on the control topic are the operator's: checked against the
        # trusted public keys (the shared key alone before the migration to role keys)
        if verifier is None:
            if not isinstance(signing_key, bytes):
                raise ConfigError(
                    "a policy signing with a role key needs verifier= (the trusted keys)"
                )
            verifier = signing_key
        self._verifier: Verifier = verifier
        self.metrics = metrics
        self.rejected_control = 0
        self.rejected_requests = 0  # unsigned, forged or malformed action requests
        self.skipped_rates = 0
        self.persist_interval_ms = persist_interval_ms
        # The state lives in memory between messages and is written to the store when an
        # action leaves or a kill-switch event lands (never lost: cooldowns, budget,
        # throttles), else at most every persist_interval_ms (hysteresis counters: a
        # restart loses under a second of them). ``gen`` tells a stale cache apart.
        self._cached: PolicyState | None = None
        self._kept_halts: list[dict[str, Any]] = []  # folded into the state on first load
        self._gen = 0
        self._saved_ms = 0

    @property
    def decides(self) -> bool:
        """False in observe mode: the operator then only answers action requests."""
        return self.config.mode is not Mode.OBSERVE

    def adopt_kept_halts(self, config: dict[str, Any], control_topic: str) -> int:
        """Read the halts in force from the halts topic (schemas/halts.py): a pipeline whose
        state never saw a halt (new, or its state lost) obeys it from its first message.
        Folded like any halt (a stale one, older than what the state holds, changes
        nothing). Returns how many."""

        def accept(event: dict[str, Any]) -> dict[str, Any] | None:
            try:
                validate(event)
                verify(event, self._verifier)
            except EventError:
                self.rejected_control += 1
                return None
            return event

        config = {**config, "group.id": "lagpilot-pipeline-halts"}  # assigned, never committed
        self._kept_halts = read_in_force(config, halts_topic_for(control_topic), accept)
        return len(self._kept_halts)

    def _load(self, state: Any) -> PolicyState:
        gen = state.get("gen", 0)
        if self._cached is None or gen != self._gen:
            raw = state.get("state")
            self._cached = PolicyState.from_dict(raw) if raw else PolicyState()
            self._gen = gen
        if self._kept_halts:
            for halt in self._kept_halts:
                self._cached = apply_control(self._cached, halt, int(halt["issued_at"]))
            self._kept_halts = []
        return self._cached

    def _save(self, state: Any, new: PolicyState, now_ms: int) -> None:
        self._gen += 1
        state.set("state", new.to_dict())
        state.set("gen", self._gen)
        self._saved_ms = now_ms

    def __call__(
        self, value: Any, key: Any, timestamp: int, headers: Any, state: Any
    ) -> list[dict[str, Any]]:
        if not isinstance(value, dict):
            return []
        current = self._load(state)
        if value.get("event") == "action":
            try:
                validate(value)
                verify(value, self._verifier)
            except EventError as exc:
                self.rejected_control += 1
                log.warning("ignored a %s on the control topic: %s", value.get("type"), exc)
                return []
            new = apply_control(current, value, max(timestamp, current.clock_ms))
            self._cached = new
            if new is not current:
                self._save(state, new, new.clock_ms)
                if self.metrics is not None:
                    self.metrics.policy_halted.set(1 if new.halted else 0)
            return []
        kind = value.get("event")
        if kind == "action_request":
            return self._request(value, current, state, timestamp)
        if kind in ("outcome", "group_health", "producer_rates"):
            self._fold(kind, value, current, state)
            return []
        if kind != "group_lag":
            return []
        summary = group_lag_from_dict(value)
        actions, new = decide(summary, current, self.config, summary.observed_at_ms)
        self._cached = new
        if actions or summary.observed_at_ms - self._saved_ms >= self.persist_interval_ms:
            self._save(state, new, summary.observed_at_ms)
        verdicts = [a for a in actions if a.get("event") == "verification"]
        signed = [sign(a, self._key) for a in actions if a.get("event") == "action"]
        if self.metrics is not None:
            for a in signed:
                self.metrics.actions.labels(a["type"], a["mode"]).inc()
        if signed and tracing.on():
            _trace_decision(value, signed)
        for a in signed:
            log.info(
                "action %s %s on %s (%s): %s",
                a["mode"],
                a["type"],
                a["target"],
                a["id"],
                a["reason"],
            )
        for v in verdicts:
            log.info("%s %s %s on %s: %s", v["result"], v["cause"], v["action_type"],
                     v["target"], v["why"])  # fmt: skip
        _log_diagnosis(current, new)
        return [*signed, *verdicts]

    def _request(
        self, value: dict[str, Any], current: PolicyState, state: Any, timestamp: int
    ) -> list[dict[str, Any]]:
        """A person's or agent's request, through every rail (``pipeline.decide.requests``): the
        signed action it may become, and always its verdict (for ``lagpilot.outcomes``)."""
        try:
            validate(value)
            verify(value, self._verifier)
        except EventError as exc:
            self.rejected_requests += 1
            log.warning("ignored an action request: %s", exc)
            return []
        out, new = requests.evaluate(value, current, self.config, max(timestamp, current.clock_ms))
        if new is not current:
            self._cached = new
            self._save(state, new, new.clock_ms)
        signed = [sign(a, self._key) for a in out if a.get("event") == "action"]
        verdicts = [v for v in out if v.get("event") == "request_verdict"]
        for v in verdicts:
            if signed:
                v["action"] = signed[0]
            log.info("request %s %s on %s by %s: %s (%s)", v["request_id"], v["type"],
                     v["target"], v["requested_by"], v["result"], v["why"])  # fmt: skip
        if self.metrics is not None:
            for a in signed:
                self.metrics.actions.labels(a["type"], a["mode"]).inc()
        return [*signed, *verdicts]

    def _fold(self, kind: str, value: dict[str, Any], current: PolicyState, state: Any) -> None:
        """Outcomes start or end a step's watch; health and producer rates feed diagnosis."""
        if kind == "outcome":
            new = inputs.fold_outcome(current, value)
        elif kind == "group_health":
            new = inputs.fold_health(current, value)
        else:
            try:
                validate(value)
            except EventError as exc:
                self.skipped_rates += 1
                log.debug("skipped a producer_rates event: %s", exc)
                return
            new = inputs.fold_producer_rate(current, value, self.config.burst_ratio)
        if new is current:
            return
        self._cached = new
        if kind == "outcome":  # a watch must survive a restart
            self._save(state, new, new.clock_ms)


def _trace_decision(event: dict[str, Any], signed: list[dict[str, Any]]) -> None:
    """The trace of an incident's actions: the lag event that opened it (from its
    ``observed_at_ms``), the decision, and each action, whose ``traceparent`` rides on its
    control message (``tracing.action_headers``)."""
    opened = {
        "lagpilot.group": event.get("group"),
        "lagpilot.topic": event.get("topic"),
        "lagpilot.status": event.get("status"),
        "lagpilot.max_time_lag_s": event.get("max_time_lag_s"),
    }
    start_ms = event.get("observed_at_ms")
    with (
        tracing.span("lagpilot.lag_event", attributes=opened, start_ms=start_ms) as root,
        tracing.span(
            "lagpilot.decide", parent=root, attributes={"lagpilot.actions": len(signed)}
        ) as decided,
    ):
        for a in signed:
            attributes = {
                "lagpilot.action_id": a["id"],
                "lagpilot.action_type": a["type"],
                "lagpilot.target": a["target"],
                "lagpilot.mode": a["mode"],
            }
            with tracing.span("lagpilot.control_event", parent=decided, attributes=attributes) as s:
                tracing.remember(a["id"], tracing.headers_of(s))


def _log_diagnosis(before: PolicyState, after: PolicyState) -> None:
    """One line each time an incident's ladder starts or its cause changes (what acts next)."""
    for key, lad in after.ladders.items():
        old = before.ladders.get(key)
        if old is not None and old is lad:
            continue
        if old is None or (old.get("cause"), old.get("since_ms")) != (
            lad.get("cause"),
            lad.get("since_ms"),
        ):
            group, _, rest = key.partition("\x00")
            log.info("diagnosed %s on group %s, topic %s: %s", lad.get("cause"), group,
                     rest.replace("\x00", " partition "), lad.get("evidence"))  # fmt: skip
