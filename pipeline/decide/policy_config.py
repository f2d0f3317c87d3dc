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
from pathlib import Path
from typing import Any

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
from schemas import ActionType, ConfigError
from schemas.policy_file import parse_allow, parse_mode, read_policy_file

# -- validation helpers: each names its key and the fix -------------------------------------


class _TableReader:
    """Reads one TOML table, remembering which keys it used so leftovers are reported."""

    def __init__(self, table: Any, path: str, origins: Mapping[str, str]) -> None:
        self.path = path
        self.origins = origins
        if not isinstance(table, dict):
            raise ConfigError(f"{self.name(None)}: must be a table (got {table!r}); write [{path}]")
        self.table = table
        self.used: set[str] = set()

    def name(self, key: str | None) -> str:
        dotted = f"{self.path}.{key}" if key and self.path else (key or self.path)
        origin = self.origins.get(dotted)
        return f"policy.{dotted}" + (f" (from {origin})" if origin else "")

    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        return ConfigError(f"{self.name(key)}: {problem}; {fix}")

    def get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        return self.table.get(key, default)

    def number(
        self,
        key: str,
        default: float,
        *,
        minimum: float = 0.0,
        strict: bool = True,
        maximum: float | None = None,
        unit: str = "number",
    ) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number (got {value!r})", f"set a {unit}")
        low_ok = value > minimum if strict else value >= minimum
        if not low_ok or (maximum is not None and value > maximum):
            bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
            if maximum is not None:
                bound += f" and <= {maximum:g}"
            raise self.fail(key, f"must be {bound} (got {value!r})", f"set a {unit} {bound}")
        return float(value)

    def integer(
        self, key: str, default: int, *, minimum: int = 1, unit: str = "whole number"
    ) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(
                key,
                f"must be an integer >= {minimum} (got {value!r})",
                f"set a {unit} >= {minimum}",
            )
        return value

    def string(self, key: str, default: str | None) -> str | None:
        value = self.get(key, default)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(key, f"must be a non-empty string (got {value!r})", "quote a value")
        return value

    def strings(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(
                key,
                f"must be a list of non-empty strings (got {value!r})",
                'write e.g. ["orders", "docs.*"]',
            )
        return tuple(value)

    def done(self, known: tuple[str, ...] = ()) -> None:
        unknown = sorted(set(self.table) - self.used - set(known))
        if unknown:
            names = ", ".join(sorted(self.used | set(known))) or "none"
            raise self.fail(
                unknown[0], "unknown key", f"remove it or fix its spelling (known: {names})"
            )


def _thresholds(r: _TableReader, base: Thresholds, *, partial: bool) -> dict[str, Any]:
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
    }
    values = {k: read() for k, read in readers.items() if not partial or k in r.table}
    r.used.update(readers)
    r.done()
    return values


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
    r = _TableReader(table, f'thresholds."{key}"', origins)
    return Override(key, group, topic, _thresholds(r, base, partial=True))


def _producers(table: Any, origins: Mapping[str, str]) -> tuple[Producer, ...]:
    r = _TableReader(table, "producers", origins)
    out = []
    for key in table:
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
    return tuple(out)


_ENV: dict[str, tuple[tuple[str, ...], Callable[[str], Any]]] = {
    "LAGPILOT_POLICY_MODE": (("mode",), str),
    "LAGPILOT_POLICY_VERSION": (("policy_version",), str),
    "LAGPILOT_POLICY_ACTIONS_PER_MINUTE": (("budget", "actions_per_minute"), int),
    "LAGPILOT_POLICY_ACTIONS_ENABLED": (
        ("actions", "enabled"),
        lambda s: [p.strip() for p in s.split(",") if p.strip()],
    ),
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


def config_from_mapping(
    data: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> PolicyConfig:
    """Validate a parsed TOML document (plus environment overrides) into a PolicyConfig."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    origins = _apply_env(data, env or {})
    top = _TableReader(data, "", origins)
    d = PolicyConfig()

    mode = parse_mode(top.get("mode", d.mode.value), top.name("mode"))
    version = top.string("policy_version", d.policy_version) or d.policy_version

    th = _TableReader(top.get("thresholds", {}), "thresholds", origins)
    default = Thresholds(
        **_thresholds(
            _TableReader(th.get("default", {}), "thresholds.default", origins),
            d.default_thresholds,
            partial=False,
        )
    )
    overrides = tuple(
        _override(k, v, default, origins) for k, v in th.table.items() if k != "default"
    )
    th.used.update(th.table)

    cd = _TableReader(top.get("cooldowns", {}), "cooldowns", origins)
    cooldown_default = cd.number(
        "default_s", d.cooldown_default_s, strict=False, unit="number of seconds"
    )
    per_type = {
        str(t): cd.number(
            t, DEFAULT_COOLDOWNS_S.get(t, cooldown_default), strict=False, unit="number of seconds"
        )
        for t in POLICY_ACTIONS
        if t in cd.table or t in DEFAULT_COOLDOWNS_S
    }
    cd.done(known=tuple(map(str, POLICY_ACTIONS)))

    bu = _TableReader(top.get("budget", {}), "budget", origins)
    per_minute = bu.integer("actions_per_minute", d.actions_per_minute, unit="number of actions")
    bu.done()

    tr = _TableReader(top.get("throttle", {}), "throttle", origins)
    floor = tr.integer("floor_bytes_per_s", d.throttle_floor_bytes_per_s, unit="byte rate")
    start = tr.integer("start_bytes_per_s", d.throttle_start_bytes_per_s, unit="byte rate")
    step = tr.number(
        "step_ratio", d.throttle_step_ratio, maximum=1.0, unit="fraction kept at each step"
    )
    lease = tr.number("lease_s", d.throttle_lease_s, unit="number of seconds")
    tr.done()
    if start < floor:
        raise tr.fail(
            "start_bytes_per_s",
            f"is below floor_bytes_per_s ({start} < {floor})",
            "raise it to at least the floor",
        )
    throttle_cooldown = per_type.get(ActionType.THROTTLE_PRODUCER, cooldown_default)
    if throttle_cooldown >= lease:
        raise tr.fail(
            "lease_s",
            f"must exceed the throttle cooldown ({lease:g} <= "
            f"{throttle_cooldown:g} s), or the lease lapses before it can be renewed",
            "raise lease_s or lower cooldowns.throttle_producer",
        )

    allow = parse_allow(top.get("allow", {}))  # the same reading as the actuator's

    producers = _producers(top.get("producers", {}), origins)

    br = _TableReader(top.get("brokers", {}), "brokers", origins)
    ids = br.get("ids", [])
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids
    ):
        raise br.fail(
            "ids",
            f"must be a list of broker ids >= 0 (got {ids!r})",
            "write e.g. ids = [1, 2, 3], or remove it to use the leaders seen",
        )
    br.done()

    ac = _TableReader(top.get("actions", {}), "actions", origins)
    enabled = ac.strings("enabled", tuple(d.enabled))
    bad = [e for e in enabled if e not in {str(t) for t in POLICY_ACTIONS}]
    if bad:
        raise ac.fail(
            "enabled",
            f"unknown action type {bad[0]!r}",
            f"use any of {', '.join(map(str, POLICY_ACTIONS))}",
        )
    ttl = ac.number("ttl_s", d.action_ttl_s, unit="number of seconds")
    ac.done()

    hs = _TableReader(top.get("hotspot", {}), "hotspot", origins)
    hot_ratio = hs.number("ratio", d.hot_ratio, minimum=1.0, unit="ratio to the next worst")
    lanes = hs.integer("lanes", d.spread_lanes, minimum=2, unit="number of lanes")
    pool = hs.string("pool", d.spread_pool)
    hs.done()

    le = _TableReader(top.get("leadership", {}), "leadership", origins)
    min_parts = le.integer(
        "min_partitions",
        d.leadership_min_partitions,
        minimum=2,
        unit="number of lagging partitions one broker leads",
    )
    le.done()

    sc = _TableReader(top.get("scale", {}), "scale", origins)
    per_replica = sc.integer("lag_per_replica", d.lag_per_replica, unit="number of offsets")
    sc.done()

    pa = _TableReader(top.get("partitions", {}), "partitions", origins)
    growth = pa.number("growth_ratio", d.partitions_growth_ratio, minimum=1.0, unit="growth ratio")
    max_total = pa.integer("max_total", d.partitions_max_total, unit="partition count")
    pa.done()

    st = _TableReader(top.get("state", {}), "state", origins)
    forget = st.number("forget_after_s", d.forget_after_s, unit="number of seconds")
    st.done()

    dg = _TableReader(top.get("diagnosis", {}), "diagnosis", origins)
    diagnose = dg.get("enabled", d.diagnose)
    if not isinstance(diagnose, bool):
        raise dg.fail("enabled", f"must be true or false (got {diagnose!r})",
                      "write enabled = true to act by cause")  # fmt: skip
    burst = dg.number("burst_ratio", d.burst_ratio, minimum=1.0, unit="ratio to the usual rate")
    hold = dg.number("hold_ratio", d.hold_ratio, maximum=1.0, unit="fraction of the usual rate")
    stale = dg.number("rates_stale_s", d.rates_stale_s, unit="number of seconds")
    dg.done()

    ve = _TableReader(top.get("verify", {}), "verify", origins)
    improve = ve.number("improve_ratio", d.verify_improve_ratio, maximum=1.0,
                        unit="fraction of the time lag at apply")  # fmt: skip
    ve.done()

    top.used.add("ladders")
    try:
        ladders = parse_ladders(data.get("ladders", {}))
    except ValueError as exc:
        raise ConfigError(f"policy.{exc}; see docs/policy.md for the steps") from None
    top.done()

    return PolicyConfig(
        mode=mode,
        policy_version=version,
        default_thresholds=default,
        overrides=overrides,
        cooldown_default_s=cooldown_default,
        cooldowns_s=per_type,
        actions_per_minute=per_minute,
        throttle_start_bytes_per_s=start,
        throttle_floor_bytes_per_s=floor,
        throttle_step_ratio=step,
        throttle_lease_s=lease,
        partition_topics=allow.partition_topics,
        throttle_client_ids=allow.throttle_client_ids,
        producers=producers,
        broker_ids=tuple(sorted(set(ids))),
        enabled=frozenset(enabled),
        action_ttl_s=ttl,
        hot_ratio=hot_ratio,
        spread_lanes=lanes,
        spread_pool=pool,
        leadership_min_partitions=min_parts,
        lag_per_replica=per_replica,
        partitions_growth_ratio=growth,
        partitions_max_total=max_total,
        forget_after_s=forget,
        diagnose=diagnose,
        burst_ratio=burst,
        hold_ratio=hold,
        rates_stale_s=stale,
        verify_improve_ratio=improve,
        ladders=ladders,
    )


def load_policy_config(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> PolicyConfig:
    """Read ``path`` (or ``$LAGPILOT_POLICY_FILE``; built-in defaults when neither is set)."""
    env = os.environ if env is None else env
    path = path or env.get(FILE_ENV) or None
    return config_from_mapping(read_policy_file(path) if path is not None else {}, env)
