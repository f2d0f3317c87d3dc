"""What the deploy files may refer to, read from the code itself (not restated by hand).

The compose file and the Kubernetes manifests are checked against these sets, so a renamed
setting or a moved file breaks a unit test here instead of a deployment at 3 a.m.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

from actuators.settings import ENV_KEYS as ACTUATOR_ENV_KEYS
from pipeline.decide.policy_config import _ENV as POLICY_OVERRIDES
from pipeline.decide.policy_config import FILE_ENV as POLICY_FILE_ENV
from pipeline.serve.keda.server import ENV_KEYS as SCALER_ENV_KEYS
from pipeline.settings import ENV_PREFIX, KAFKA_ENV_PREFIX, Settings
from schemas.codec import SIGNING_KEY_ENV, SIGNING_KEY_FILE_ENV

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION: str = PYPROJECT["project"]["version"]
LAGPILOT_IMAGE = f"lagpilot:{VERSION}"

SIGNING_ENV = {SIGNING_KEY_ENV, SIGNING_KEY_FILE_ENV}
PIPELINE_ENV = (
    {f"{ENV_PREFIX}{f.name.upper()}" for f in fields(Settings) if f.name != "kafka"}
    | {"KAFKA_BOOTSTRAP", POLICY_FILE_ENV}
    | set(POLICY_OVERRIDES)
    | SIGNING_ENV
)
ACTUATOR_ENV = set(ACTUATOR_ENV_KEYS) | SIGNING_ENV
SCALER_ENV = set(SCALER_ENV_KEYS)

#: Third-party images must carry an explicit version tag (never latest, never untagged).
PINNED_TAG = re.compile(r"^[\w.\-/]+:v?\d+\.\d+(\.\d+)?[\w.\-]*$")


def env_problem(name: str, command: str) -> str | None:
    """Why ``name`` is not a setting of the lagpilot ``command`` (run / actuate / scaler),
    or None."""
    if command == "scaler":
        if name in SCALER_ENV or re.fullmatch(r"LAGPILOT_KAFKA_[A-Z0-9_]+", name):
            return None
        return f"{name} is not a scaler setting (pipeline/serve/keda/server.py ENV_KEYS)"
    if command == "run":
        if name in PIPELINE_ENV:
            return None
        if name.startswith(KAFKA_ENV_PREFIX) and re.fullmatch(r"LAGPILOT_KAFKA_[A-Z0-9_]+", name):
            return None  # passed through to librdkafka as a client setting
        return f"{name} is not a pipeline setting (pipeline/settings.py, policy_config.py)"
    if command == "actuate":
        if name in ACTUATOR_ENV:
            return None
        if name.startswith(KAFKA_ENV_PREFIX):
            from actuators.settings import ConfigError, kafka_python_security

            key = name[len(KAFKA_ENV_PREFIX) :].lower().replace("_", ".")
            try:
                kafka_python_security({key: "x"})
            except ConfigError as exc:
                return str(exc)
            return None  # passed to librdkafka and, mapped, to kafka-python
        return f"{name} is not an actuator setting (actuators/settings.py ENV_KEYS)"
    return f"{name}: unknown lagpilot command {command!r}"


def is_third_party_pinned(image: str) -> bool:
    return bool(PINNED_TAG.match(image)) and not image.endswith(":latest")


SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
}


def exported_names(exposition: str) -> dict[str, int]:
    """Every series name a Prometheus query can use, from a /metrics text, with its number of
    samples: a counter ``x`` is queried as ``x_total``, a histogram as ``x_bucket``/``_sum``/
    ``_count``. Families that declare no sample yet (a labelled counter never incremented)
    are included with 0: the process exports them, Prometheus just has no series until then.
    """
    from prometheus_client.parser import text_string_to_metric_families

    names: dict[str, int] = {}
    for fam in text_string_to_metric_families(exposition):
        for suffix in SUFFIXES.get(fam.type, ("",)):
            names.setdefault(fam.name + suffix, 0)
        for s in fam.samples:
            names[s.name] = names.get(s.name, 0) + 1
    return names


def worker_exported_names() -> dict[str, int]:
    """The series names an agent worker exports (``actuators.workers.WorkerMetrics``), from a
    worker that is built but never started (no broker needed)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from actuators.workers import MemoryDedupeStore, Worker, WorkerMetrics

    worker = Worker(bootstrap="unused:9092", group="g", topics=["t"], handler=lambda m, c: None,
                    dedupe=MemoryDedupeStore(), signing_key=b"k")  # fmt: skip
    registry = CollectorRegistry()
    registry.register(WorkerMetrics(worker))
    return exported_names(generate_latest(registry).decode())


METRIC_NAME = re.compile(r"\blagpilot_[a-z0-9_]+\b")


def dashboard_queries(dashboard: dict) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets and template variable queries."""
    out: list[str] = []
    for panel in dashboard["panels"]:
        out += [t["expr"] for t in panel.get("targets", [])]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var["query"]
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


def dashboard_metrics(dashboard: dict) -> set[str]:
    return {m for q in dashboard_queries(dashboard) for m in METRIC_NAME.findall(q)}
