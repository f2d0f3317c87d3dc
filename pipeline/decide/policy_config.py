"""The policy's configuration: one TOML file plus a few environment overrides.

Validated once, at load, with no I/O afterwards: every error names the key (as
``policy.<section>.<key>``, and the environment variable when one set it) and says what to
write instead. Unknown keys are errors, because a typo such as ``actions_per_minte`` must
not silently remove a safety rail.

The file is read, and ``mode`` and ``[allow]`` validated, by ``schemas.policy_file``, the
reading the actuator shares (it takes only ``mode`` and ``[allow]``); so ``[allow]`` keeps
exactly two keys: ``partition_topics`` and ``throttle_client_ids`` (lists of fnmatch globs).
Every other table has its own reader here.

Environment overrides (applied over the file, validated the same way):

=========================================== =====================================
``LAGPILOT_POLICY_FILE``                    path of the TOML file (else built-in defaults)
``LAGPILOT_POLICY_MODE``                    ``mode``: observe | recommend | act
``LAGPILOT_POLICY_VERSION``                 ``policy_version``
``LAGPILOT_POLICY_ACTIONS_PER_MINUTE``      ``budget.actions_per_minute``
``LAGPILOT_POLICY_ACTIONS_ENABLED``         ``actions.enabled`` (comma-separated types)
``LAGPILOT_POLICY_THROTTLE_FLOOR_BYTES_PER_S`` ``throttle.floor_bytes_per_s``
``LAGPILOT_POLICY_LEASE_S``                 ``throttle.lease_s``
=========================================== =====================================

Any other ``LAGPILOT_POLICY_*`` variable is an error (a misspelt override would be ignored).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.decide.diagnosis import CAUSES
from pipeline.decide.ladder import parse_ladders
from pipeline.decide.policy_types import (
    DEFAULT_COOLDOWNS_S,
    ENV_PREFIX,
    FILE_ENV,
    POLICY_ACTIONS,
    Override,
    PolicyConfig,
    Producer,
    Thresholds,
)
from pipeline.decide.table_reader import TableReader
from runtime.env import parse_list
from schemas import ActionType, ConfigError, LagStatus
from schemas.policy_file import parse_allow, parse_mode, read_policy_file

_ENV: dict[str, tuple[tuple[str, ...], Callable[[str], Any]]] = {
    "LAGPILOT_POLICY_MODE": (("mode",), str),
    "LAGPILOT_POLICY_VERSION": (("policy_version",), str),
    "LAGPILOT_POLICY_ACTIONS_PER_MINUTE": (("budget", "actions_per_minute"), int),
    "LAGPILOT_POLICY_ACTIONS_ENABLED": (("actions", "enabled"), lambda s: list(parse_list(s))),
    "LAGPILOT_POLICY_THROTTLE_FLOOR_BYTES_PER_S": (("throttle", "floor_bytes_per_s"), int),
    "LAGPILOT_POLICY_LEASE_S": (("throttle", "lease_s"), float),
}


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """Merge the overrides into ``data``; returns {dotted key: variable} for error messages."""
    origins: dict[str, str] = {}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name == FILE_ENV:
            continue
        if name not in _ENV:
            raise ConfigError(
                f"{name}: unknown policy override; use one of "
                f"{', '.join(sorted([FILE_ENV, *_ENV]))} or unset it"
            )
        path, parse = _ENV[name]
        try:
            value = parse(env[name])
        except ValueError:
            kind = {"int": "whole number", "float": "number"}.get(parse.__name__, "value")
            raise ConfigError(
                f"{name} (policy.{'.'.join(path)}): cannot read {env[name]!r} as a {kind}; "
                f"set it to a {kind} or unset it"
            ) from None
        table = data
        for part in path[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise ConfigError(f"policy.{part}: must be a table; write [{part}]")
        table[path[-1]] = value
        origins[".".join(path)] = name
    return origins


# -- one parser per section, run in the order of _SECTIONS ---------------------------------


@dataclass(frozen=True, slots=True)
class _Parse:
    """What a section parser gets: the defaults, which environment variable set which key
    (for messages), and the fields parsed so far (a section may check against an earlier
    one: the throttle lease against the cooldowns)."""

    d: PolicyConfig
    origins: Mapping[str, str]
    got: dict[str, Any]

    def reader(self, table: Any, path: str) -> TableReader:
        return TableReader(table, path, self.origins)


Fields = dict[str, Any]  # PolicyConfig keyword arguments


def _top_level(top: TableReader, d: PolicyConfig) -> Fields:
    mode = parse_mode(top.get("mode", d.mode.value), top.name("mode"))
    version = top.string("policy_version", d.policy_version) or d.policy_version
    return {"mode": mode, "policy_version": version}


def _thresholds(r: TableReader, base: Thresholds, *, partial: bool) -> dict[str, Any]:
    """Threshold values of one table; ``partial`` (an override) keeps only keys it sets."""
    readers: dict[str, Callable[[], Any]] = {
        "time_lag_s": lambda: r.number(
            "time_lag_s", base.time_lag_s, unit="positive number of seconds"
        ),
        "offset_lag": lambda: r.integer("offset_lag", base.offset_lag, unit="number of offsets"),
        "accel_per_s2": lambda: r.number(
            "accel_per_s2", base.accel_per_s2, unit="positive number of offsets/s²"
        ),
        "exit_ratio": lambda: r.number(
            "exit_ratio", base.exit_ratio, maximum=1.0, unit="fraction of the enter level"
        ),
        "enter_windows": lambda: r.integer(
            "enter_windows", base.enter_windows, unit="number of consecutive summaries"
        ),
        "exit_windows": lambda: r.integer(
            "exit_windows", base.exit_windows, unit="number of consecutive summaries"
        ),
        "min_status": lambda: _status(r, "min_status", base.min_status),
    }
    values = {k: read() for k, read in readers.items() if not partial or k in r.table}
    r.used.update(readers)
    r.done()
    return values


def _status(r: TableReader, key: str, default: str) -> str:
    value = r.get(key, default)
    if value not in {s.value for s in LagStatus}:
        raise r.fail(key, f"unknown status {value!r}",
                     f"use one of {', '.join(s.value for s in LagStatus)} (WARN: the model's "
                     "judgement against each partition's own cadence)")  # fmt: skip
    return str(value)


def _override(key: str, table: Any, base: Thresholds, origins: Mapping[str, str]) -> Override:
    """``"group:GLOB"``, ``"topic:GLOB"`` or ``"group:GLOB,topic:GLOB"``."""
    group = topic = None
    rest = key
    if ",topic:" in rest:  # topic names cannot contain commas, group ids can
        rest, topic = rest.rsplit(",topic:", 1)
    if rest.startswith("group:") and rest[6:]:
        group = rest[6:]
    elif rest.startswith("topic:") and rest[6:] and topic is None:
        topic = rest[6:]
    else:
        group = topic = None
    if (group is None and topic is None) or topic == "":
        raise ConfigError(
            f'policy.thresholds."{key}": not a threshold section; name it "default", '
            '"group:<glob>", "topic:<glob>" or "group:<glob>,topic:<glob>"'
        )
    r = TableReader(table, f'thresholds."{key}"', origins)
    return Override(key, group, topic, _thresholds(r, base, partial=True))


def _thresholds_section(raw: Any, p: _Parse) -> Fields:
    th = p.reader(raw, "thresholds")
    default_table = p.reader(th.get("default", {}), "thresholds.default")
    default = Thresholds(**_thresholds(default_table, p.d.default_thresholds, partial=False))
    overrides = tuple(
        _override(k, v, default, p.origins) for k, v in th.table.items() if k != "default"
    )
    return {"default_thresholds": default, "overrides": overrides}


def _cooldowns(raw: Any, p: _Parse) -> Fields:
    r = p.reader(raw, "cooldowns")
    seconds = "number of seconds"
    default = r.number("default_s", p.d.cooldown_default_s, strict=False, unit=seconds)
    per_type = {
        str(t): r.number(t, DEFAULT_COOLDOWNS_S.get(t, default), strict=False, unit=seconds)
        for t in POLICY_ACTIONS
        if t in r.table or t in DEFAULT_COOLDOWNS_S
    }
    r.done(known=tuple(map(str, POLICY_ACTIONS)))
    return {"cooldown_default_s": default, "cooldowns_s": per_type}


def _one_key(
    section: str, key: str, field: str, unit: str, *, whole: bool = True, **limits: Any
) -> Callable[[Any, _Parse], Fields]:
    """The parser of a section of one key: a whole number (or, not ``whole``, a number)
    that becomes the PolicyConfig ``field``."""

    def parse(raw: Any, p: _Parse) -> Fields:
        r = p.reader(raw, section)
        read = r.integer if whole else r.number
        value = read(key, getattr(p.d, field), unit=unit, **limits)
        r.done()
        return {field: value}

    return parse


_budget = _one_key("budget", "actions_per_minute", "actions_per_minute", "number of actions")
_leadership = _one_key("leadership", "min_partitions", "leadership_min_partitions",
                       "number of lagging partitions one broker leads", minimum=2)  # fmt: skip
_scale = _one_key("scale", "lag_per_replica", "lag_per_replica", "number of offsets")
_state = _one_key("state", "forget_after_s", "forget_after_s", "number of seconds", whole=False)


def _throttle(raw: Any, p: _Parse) -> Fields:
    r, d = p.reader(raw, "throttle"), p.d
    floor = r.integer("floor_bytes_per_s", d.throttle_floor_bytes_per_s, unit="byte rate")
    start = r.integer("start_bytes_per_s", d.throttle_start_bytes_per_s, unit="byte rate")
    step = r.number(
        "step_ratio", d.throttle_step_ratio, maximum=1.0, unit="fraction kept at each step"
    )
    lease = r.number("lease_s", d.throttle_lease_s, unit="number of seconds")
    r.done()
    if start < floor:
        raise r.fail(
            "start_bytes_per_s",
            f"is below floor_bytes_per_s ({start} < {floor})",
            "raise it to at least the floor",
        )
    cooldown = p.got["cooldowns_s"].get(ActionType.THROTTLE_PRODUCER, p.got["cooldown_default_s"])
    if cooldown >= lease:
        raise r.fail(
            "lease_s",
            f"must exceed the throttle cooldown ({lease:g} <= "
            f"{cooldown:g} s), or the lease lapses before it can be renewed",
            "raise lease_s or lower cooldowns.throttle_producer",
        )
    return {
        "throttle_start_bytes_per_s": start,
        "throttle_floor_bytes_per_s": floor,
        "throttle_step_ratio": step,
        "throttle_lease_s": lease,
    }


def _allow(raw: Any, p: _Parse) -> Fields:
    allow = parse_allow(raw)  # the same reading as the actuator's (schemas.policy_file)
    return {
        "partition_topics": allow.partition_topics,
        "throttle_client_ids": allow.throttle_client_ids,
    }


def _producers(raw: Any, p: _Parse) -> Fields:
    r = p.reader(raw, "producers")
    out = []
    for key in r.table:
        topics = r.strings(key, ())
        stem = key[:-1] if key.endswith("*") else key
        if not stem or "*" in stem or "?" in stem or "[" in stem:
            raise r.fail(
                key,
                "a producer is a client id or a prefix ending in one '*'",
                'write e.g. "ingest-7" = ["docs"] or "ingest-*" = ["docs"]',
            )
        if not topics:
            raise r.fail(key, "lists no topics", 'name the topics it writes, e.g. ["docs"]')
        out.append(Producer("client-id-prefix" if key.endswith("*") else "client-id", stem, topics))
    r.done()
    return {"producers": tuple(out)}


def _brokers(raw: Any, p: _Parse) -> Fields:
    r = p.reader(raw, "brokers")
    ids = r.get("ids", [])
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise r.fail(
            "ids",
            f"must be a list of broker ids >= 0 (got {ids!r})",
            "write e.g. ids = [1, 2, 3], or remove it to use the leaders seen",
        )
    r.done()
    return {"broker_ids": tuple(sorted(set(ids)))}


def _actions(raw: Any, p: _Parse) -> Fields:
    r = p.reader(raw, "actions")
    enabled = r.strings("enabled", tuple(p.d.enabled))
    bad = [e for e in enabled if e not in {str(t) for t in POLICY_ACTIONS}]
    if bad:
        raise r.fail(
            "enabled",
            f"unknown action type {bad[0]!r}",
            f"use any of {', '.join(map(str, POLICY_ACTIONS))}",
        )
    ttl = r.number("ttl_s", p.d.action_ttl_s, unit="number of seconds")
    r.done()
    return {"enabled": frozenset(enabled), "action_ttl_s": ttl}


def _hotspot(raw: Any, p: _Parse) -> Fields:
    r, d = p.reader(raw, "hotspot"), p.d
    out = {
        "hot_ratio": r.number("ratio", d.hot_ratio, minimum=1.0, unit="ratio to the next worst"),
        "spread_lanes": r.integer("lanes", d.spread_lanes, minimum=2, unit="number of lanes"),
        "spread_pool": r.string("pool", d.spread_pool),
        "spread_restore_after_s": r.number(
            "restore_after_s", d.spread_restore_after_s, strict=False, unit="number of seconds"
        ),
    }
    r.done()
    return out


def _partitions(raw: Any, p: _Parse) -> Fields:
    r, d = p.reader(raw, "partitions"), p.d
    out = {
        "partitions_growth_ratio": r.number(
            "growth_ratio", d.partitions_growth_ratio, minimum=1.0, unit="growth ratio"
        ),
        "partitions_max_total": r.integer(
            "max_total", d.partitions_max_total, unit="partition count"
        ),
    }
    r.done()
    return out


def _diagnosis(raw: Any, p: _Parse) -> Fields:
    r, d = p.reader(raw, "diagnosis"), p.d
    diagnose = r.get("enabled", d.diagnose)
    if not isinstance(diagnose, bool):
        raise r.fail("enabled", f"must be true or false (got {diagnose!r})",
                     "write enabled = true to act by cause")  # fmt: skip
    out = {
        "diagnose": diagnose,
        "burst_ratio": r.number(
            "burst_ratio", d.burst_ratio, minimum=1.0, unit="ratio to the usual rate"
        ),
        "hold_ratio": r.number(
            "hold_ratio", d.hold_ratio, maximum=1.0, unit="fraction of the usual rate"
        ),
        "rates_stale_s": r.number("rates_stale_s", d.rates_stale_s, unit="number of seconds"),
        "settle_s": r.number("settle_s", d.settle_s, strict=False, unit="number of seconds"),
        "confirm_s": _confirm(r, d.confirm_s),
    }
    r.done()
    return out


def _confirm(r: TableReader, default: Mapping[str, float]) -> dict[str, float]:
    """``confirm_s = { slow_group = 3.0 }``: seconds a cause must hold before it acts."""
    table = r.get("confirm_s", dict(default))
    if not isinstance(table, dict):
        raise r.fail("confirm_s", f"must be a table of cause = seconds (got {table!r})",
                     "write confirm_s = { slow_group = 3.0 }")  # fmt: skip
    sub = TableReader(table, f"{r.path}.confirm_s", r.origins)
    out = {cause: sub.number(cause, 0.0, strict=False, unit="number of seconds")
           for cause in table if cause in CAUSES}  # fmt: skip
    sub.done(known=CAUSES)
    return out


def _verify(raw: Any, p: _Parse) -> Fields:
    r = p.reader(raw, "verify")
    improve = r.number("improve_ratio", p.d.verify_improve_ratio, maximum=1.0,
                       unit="fraction of the time lag at apply")  # fmt: skip
    hold = r.number("hold_s", p.d.verify_hold_s, strict=False, unit="number of seconds")
    r.done()
    return {"verify_improve_ratio": improve, "verify_hold_s": hold}


def _ladders(raw: Any, p: _Parse) -> Fields:
    try:
        return {"ladders": parse_ladders(raw)}
    except ValueError as exc:
        raise ConfigError(f"policy.{exc}; see docs/policy.md for the steps") from None


#: Every section of the file and its parser, in the order they are read (and checked).
SECTIONS: tuple[tuple[str, Callable[[Any, _Parse], Fields]], ...] = (
    ("thresholds", _thresholds_section),
    ("cooldowns", _cooldowns),
    ("budget", _budget),
    ("throttle", _throttle),
    ("allow", _allow),
    ("producers", _producers),
    ("brokers", _brokers),
    ("actions", _actions),
    ("hotspot", _hotspot),
    ("leadership", _leadership),
    ("scale", _scale),
    ("partitions", _partitions),
    ("state", _state),
    ("diagnosis", _diagnosis),
    ("verify", _verify),
    ("ladders", _ladders),
)


def config_from_mapping(
    data: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> PolicyConfig:
    """Validate a parsed TOML document (plus environment overrides) into a PolicyConfig:
    the top-level keys, then each of :data:`SECTIONS` by its own parser."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    origins = _apply_env(data, env or {})
    top = TableReader(data, "", origins)
    parse = _Parse(PolicyConfig(), origins, {})
    parse.got.update(_top_level(top, parse.d))
    for name, section in SECTIONS:
        parse.got.update(section(top.get(name, {}), parse))
    top.done()
    return PolicyConfig(**parse.got)


def load_policy_config(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> PolicyConfig:
    """Read ``path`` (or ``$LAGPILOT_POLICY_FILE``; built-in defaults when neither is set)."""
    env = os.environ if env is None else env
    path = path or env.get(FILE_ENV) or None
    return config_from_mapping(read_policy_file(path) if path is not None else {}, env)
