"""The actuator's configuration: its own settings, plus `mode` and `[allow]` of the policy file.

Configuration is validated before any I/O (configure -> start -> stop), and every error names
the key and the fix, because a typo in a safety rail must stop the process, not disable the
rail. The actuator reads only `mode` and `[allow]` from the policy TOML that the pipeline
uses: the pipeline owns (and strictly validates) the rest of that file.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from runtime import env as env_values
from runtime.kafka import KAFKA_PYTHON_NAMES as _KAFKA_PYTHON_NAMES
from schemas import ConfigError, Mode
from schemas import topics as topic_names
from schemas.allow import AllowList
from schemas.policy_file import parse_allow, parse_mode, read_policy_file

BACKENDS = ("kafka", "redpanda", "dry-run")

#: env var -> (settings field, parser). Env overrides defaults; CLI flags override env.
ENV_KEYS: dict[str, str] = {
    "KAFKA_BOOTSTRAP": "bootstrap",
    "LAGPILOT_ACTUATOR_BACKEND": "backend",
    "LAGPILOT_ACTUATOR_ID": "actuator_id",
    "LAGPILOT_ACTUATOR_GROUP": "group_id",
    "LAGPILOT_POLICY_FILE": "policy_file",
    "LAGPILOT_ACTUATOR_METRICS_PORT": "metrics_port",
    "LAGPILOT_ACTUATOR_MAX_RETRIES": "max_retries",
    "LAGPILOT_ACTUATOR_BACKOFF_BASE_S": "backoff_base_s",
    "LAGPILOT_ACTUATOR_BACKOFF_MAX_S": "backoff_max_s",
    "LAGPILOT_ACTUATOR_MAX_BATCH": "max_batch",
    "LAGPILOT_ACTUATOR_DRY_RUN_LOG": "dry_run_log",
    "LAGPILOT_CONTROL_TOPIC": "control_topic",
    "LAGPILOT_OUTCOMES_TOPIC": "outcomes_topic",
    "LAGPILOT_REDPANDA_ADMIN_URLS": "redpanda_admin_urls",
    "LAGPILOT_REDPANDA_ADMIN_USERNAME": "redpanda_admin_username",
    "LAGPILOT_REDPANDA_ADMIN_PASSWORD": "redpanda_admin_password",
    "LAGPILOT_REDPANDA_ADMIN_TLS_VERIFY": "redpanda_admin_tls_verify",
}


@dataclass(frozen=True)
class Policy:
    """What the actuator takes from the policy file: the mode cap and the allow-lists."""

    mode: Mode = Mode.RECOMMEND
    allow: AllowList = field(default_factory=AllowList)


def parse_policy(doc: Mapping[str, Any]) -> Policy:
    """`mode` and `[allow]` from a parsed policy TOML document (other keys are the pipeline's)."""
    return Policy(
        mode=parse_mode(doc.get("mode", Mode.RECOMMEND.value)),
        allow=parse_allow(doc.get("allow", {})),
    )


def load_policy(path: str | None) -> Policy:
    """The policy file's mode and allow-lists; without a file: recommend mode, allow nothing."""
    return parse_policy(read_policy_file(path)) if path else Policy()


@dataclass(frozen=True)
class Settings:
    """The actuator's own settings. ``actuator_id`` must be unique per running actuator and
    stable across its restarts: it is the transactional id, so a restarted actuator fences
    its dead predecessor and aborts its open transaction at once."""

    bootstrap: str = "127.0.0.1:21092"
    backend: str = "kafka"
    actuator_id: str = field(default_factory=socket.gethostname)
    group_id: str = "lagpilot-actuator"
    policy_file: str | None = None
    control_topic: str = topic_names.CONTROL
    outcomes_topic: str = topic_names.OUTCOMES
    metrics_port: int = 9102
    max_retries: int = 3
    backoff_base_s: float = 0.05
    backoff_max_s: float = 1.0
    max_batch: int = 32
    dry_run_log: str | None = None
    redpanda_admin_urls: tuple[str, ...] = ()
    redpanda_admin_username: str | None = None
    redpanda_admin_password: str | None = None
    redpanda_admin_tls_verify: bool | str = True
    # librdkafka client settings for TLS/SASL, from LAGPILOT_KAFKA_<NAME> (as the pipeline):
    # LAGPILOT_KAFKA_SECURITY_PROTOCOL=SASL_SSL -> security.protocol
    kafka: Mapping[str, str] = field(default_factory=dict)

    def kafka_python_security(self) -> dict[str, Any]:
        """The same settings as kafka-python keyword arguments (its admin clients)."""
        return kafka_python_security(self.kafka)

    def validated(self) -> Settings:
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"backend: must be one of {', '.join(BACKENDS)} (got {self.backend!r}); set "
                "LAGPILOT_ACTUATOR_BACKEND or --backend"
            )
        if self.backend == "redpanda" and not self.redpanda_admin_urls:
            raise ConfigError(
                "redpanda_admin_urls: the redpanda backend needs the Admin API; set "
                "LAGPILOT_REDPANDA_ADMIN_URLS=http://host:9644[,http://host2:9644]"
            )
        if not self.bootstrap.strip():
            raise ConfigError("bootstrap: empty; set KAFKA_BOOTSTRAP=host:port or --bootstrap")
        if not self.actuator_id:
            raise ConfigError("actuator_id: empty; set LAGPILOT_ACTUATOR_ID to a unique name")
        for name, low in (("max_retries", 0), ("max_batch", 1), ("metrics_port", 0)):
            if getattr(self, name) < low:
                raise ConfigError(f"{name}: must be >= {low} (got {getattr(self, name)})")
        if not 0 < self.backoff_base_s <= self.backoff_max_s:
            raise ConfigError(
                f"backoff_base_s/backoff_max_s: need 0 < base <= max (got {self.backoff_base_s}"
                f", {self.backoff_max_s}); e.g. 0.05 and 1.0"
            )
        return self


#: each setting's annotation (a string, under ``from __future__ import annotations``)
_FIELD_TYPES = {f.name: f.type for f in fields(Settings)}


def _coerce(name: str, raw: str) -> Any:
    """An environment value as the setting's type (runtime.env, as the pipeline)."""
    key = next(k for k, v in ENV_KEYS.items() if v == name)
    return env_values.coerce(key, _FIELD_TYPES[name], raw)


KAFKA_ENV_PREFIX = "LAGPILOT_KAFKA_"


def kafka_python_security(kafka: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka TLS/SASL settings as kafka-python arguments; others have no equivalent
    and are refused, so a setting is never silently ignored by half of the clients."""
    out: dict[str, Any] = {}
    for key, value in kafka.items():
        if key in _KAFKA_PYTHON_NAMES:
            out[_KAFKA_PYTHON_NAMES[key]] = value
        elif key.startswith(("ssl.", "sasl.", "security.")):
            raise ConfigError(
                f"{KAFKA_ENV_PREFIX}{key.upper().replace('.', '_')}: the actuator's admin "
                f"clients cannot use {key!r}; supported: {', '.join(sorted(_KAFKA_PYTHON_NAMES))}"
            )
    return out


def from_env(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Defaults, then environment, then explicit overrides (CLI flags); validated."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for key, name in ENV_KEYS.items():
        if env.get(key):
            values[name] = _coerce(name, env[key])
    kafka = {
        k[len(KAFKA_ENV_PREFIX) :].lower().replace("_", "."): v
        for k, v in env.items()
        if k.startswith(KAFKA_ENV_PREFIX)
    }
    if kafka:
        kafka_python_security(kafka)  # refuse what half of the clients could not honour
        values["kafka"] = kafka
    values.update({k: v for k, v in overrides.items() if v is not None})
    return replace(Settings(), **values).validated()
