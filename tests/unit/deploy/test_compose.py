"""deploy/compose/: the compose file, Prometheus and Console configs, the schema registration,
and `make up` / `make down`, checked without a Docker engine: every image pinned or built
from this repository, every env var a real setting, every mounted file present, every port
and address consistent between the services that use it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import jsonschema
import pytest
import yaml

from schemas import codec
from tests.unit.deploy.facts import (
    LAGPILOT_IMAGE,
    ROOT,
    env_problem,
    is_third_party_pinned,
)

COMPOSE_DIR = ROOT / "deploy" / "compose"
INTERP = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _load(name: str) -> Any:
    return yaml.safe_load((COMPOSE_DIR / name).read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load("compose.yaml")


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def _env(svc: dict[str, Any]) -> dict[str, str]:
    """The service's environment as compose would pass it, with ${VAR:-default} -> default."""
    env = svc.get("environment", {})
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: INTERP.sub(lambda m: m.group(2) or "", str(v)) for k, v in env.items()}


def _lagpilot(services: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in services.items() if s.get("image") == LAGPILOT_IMAGE}


def test_the_stack_is_all_there(services: dict[str, Any]) -> None:
    expected = {"redpanda-0", "redpanda-1", "redpanda-2", "console", "register-schemas"}
    expected |= {"pipeline", "actuator", "prometheus", "grafana"}
    assert expected <= set(services)
    commands = {s.get("command", [None])[0] for s in _lagpilot(services).values()}
    assert {"run", "actuate"} <= commands, "pipeline and actuator from the one image"


def test_lagpilot_image_is_built_from_this_repository(services: dict[str, Any]) -> None:
    lp = _lagpilot(services)
    assert {"pipeline", "actuator", "register-schemas"} <= set(lp)
    for name, svc in lp.items():
        context = (COMPOSE_DIR / svc["build"]["context"]).resolve()
        assert context == ROOT, name
        assert (context / svc["build"]["dockerfile"]).is_file(), name


def test_third_party_images_are_pinned(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        image = svc["image"]
        if image == LAGPILOT_IMAGE:
            continue
        assert is_third_party_pinned(image), f"{name}: {image} has no version tag"
    versions = {s["image"].split(":")[0]: s["image"].split(":")[1] for s in services.values()}
    assert versions["redpandadata/redpanda"].startswith("v24.2.")
    assert versions["redpandadata/console"].startswith("v2.")
    assert {"prom/prometheus", "grafana/grafana"} <= set(versions)


def test_lagpilot_env_vars_are_real_settings(services: dict[str, Any]) -> None:
    for name, svc in _lagpilot(services).items():
        command = svc.get("command", [None])[0]
        if command not in {"run", "actuate", "scaler"}:
            continue
        for var in _env(svc):
            problem = env_problem(var, command)
            assert problem is None, f"service {name}: {problem}"


def test_settings_load_from_the_compose_environment(services: dict[str, Any]) -> None:
    """Not only the names: the values pass the same validation the processes run at start."""
    from actuators.settings import from_env
    from pipeline.settings import load_settings

    env = _env(services["pipeline"])
    s = load_settings(env=env)
    assert s.instance_id and s.replication_factor == 3
    a = from_env(env=_env(services["actuator"]))
    assert a.backend == "redpanda" and len(a.redpanda_admin_urls) == 3
    for svc in ("pipeline", "actuator"):
        codec.load_signing_key(_env(services[svc]))  # a key that loads (>= 16 bytes)
    assert (
        _env(services["pipeline"])["LAGPILOT_SIGNING_KEY"]
        == _env(services["actuator"])["LAGPILOT_SIGNING_KEY"]
    ), "pipeline signs with the key the actuator verifies with"


def _redpanda_listeners(services: dict[str, Any], flag: str) -> dict[str, int]:
    """{"redpanda-0": 9092, ...}: each broker's internal listener port for ``flag``."""
    out = {}
    for name, svc in services.items():
        for arg in svc.get("command", []):
            if isinstance(arg, str) and arg.startswith(f"--{flag}="):
                internal = next(a for a in arg.split("=", 1)[1].split(",") if "internal" in a)
                out[name] = int(internal.rsplit(":", 1)[1])
    return out


def test_addresses_point_at_real_listeners(services: dict[str, Any]) -> None:
    kafka = _redpanda_listeners(services, "kafka-addr")
    assert len(kafka) == 3
    for name in ("pipeline", "actuator", "scaler"):
        for hostport in _env(services[name])["KAFKA_BOOTSTRAP"].split(","):
            host, port = hostport.rsplit(":", 1)
            assert kafka.get(host) == int(port), f"{name}: {hostport} is no Kafka listener"
    for url in _env(services["actuator"])["LAGPILOT_REDPANDA_ADMIN_URLS"].split(","):
        assert re.fullmatch(r"http://redpanda-[0-2]:9644", url), url
    registry = _redpanda_listeners(services, "schema-registry-addr")
    cmd = services["register-schemas"]["command"]
    url = cmd[cmd.index("--registry") + 1]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    assert registry[host] == int(port)
    console = _load("console.yaml")
    for b in console["kafka"]["brokers"]:
        assert kafka[b.rsplit(":", 1)[0]] == int(b.rsplit(":", 1)[1])
    for u in console["kafka"]["schemaRegistry"]["urls"]:
        h, p = u.removeprefix("http://").rsplit(":", 1)
        assert registry[h] == int(p)


def test_metrics_ports_agree_everywhere(services: dict[str, Any]) -> None:
    ports = {
        "pipeline": int(_env(services["pipeline"])["LAGPILOT_METRICS_PORT"]),
        "actuator": int(_env(services["actuator"])["LAGPILOT_ACTUATOR_METRICS_PORT"]),
        "scaler": int(_env(services["scaler"])["LAGPILOT_SCALER_METRICS_PORT"]),
    }
    prom = _load("prometheus.yml")
    targets = {
        t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert targets == {f"{n}:{p}" for n, p in ports.items()}
    for name, port in ports.items():
        svc = services[name]
        assert f"{port}:{port}" in svc["ports"]
        assert f"127.0.0.1:{port}/readyz" in " ".join(svc["healthcheck"]["test"])


def test_published_host_ports_are_unique(services: dict[str, Any]) -> None:
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))
    assert "21092" not in host_ports, "keep clear of the local test broker's port"


def test_mounted_files_exist_and_volumes_are_declared(compose: dict[str, Any]) -> None:
    named = set(compose.get("volumes", {}))
    for name, svc in compose["services"].items():
        for mount in svc.get("volumes", []):
            src = mount.split(":")[0]
            if src.startswith((".", "/")):
                assert (COMPOSE_DIR / src).exists(), f"{name}: mounts missing {src}"
            else:
                assert src in named, f"{name}: volume {src} is not declared"
    grafana_env = compose["services"]["grafana"]["environment"]
    home = grafana_env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert any(m.endswith(f":{home}:ro") for m in compose["services"]["grafana"]["volumes"])


def test_console_waits_for_the_schemas(services: dict[str, Any]) -> None:
    dep = services["console"]["depends_on"]["register-schemas"]
    assert dep["condition"] == "service_completed_successfully"
    assert services["register-schemas"]["restart"] == "no"


# -- schema registration -------------------------------------------------------------------


def _register_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "register_schemas", COMPOSE_DIR / "register_schemas.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


reg = _register_module()


def _doc_table() -> dict[str, set[str]]:
    """topic -> events, from the table at the top of docs/events.md."""
    out = {}
    for line in (ROOT / "docs" / "events.md").read_text().splitlines():
        m = re.match(r"\| `(lagpilot\.[a-z]+)` \| (.+?) \|", line)
        if m:
            out[m.group(1)] = set(re.findall(r"`(\w+)`", m.group(2)))
    return out


def _doc_examples() -> list[dict[str, Any]]:
    text = (ROOT / "docs" / "events.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
    return [b for b in blocks if isinstance(b, dict) and "event" in b]


def test_topic_map_matches_docs_events() -> None:
    assert {t: set(e) for t, e in reg.TOPIC_EVENTS.items()} == _doc_table()


def test_every_schema_file_is_registered() -> None:
    files = reg.load_schema_files(ROOT / "schemas")
    assert set(files) == {p.stem for p in (ROOT / "schemas").glob("*.json")}
    subjects = reg.subjects(files)
    registered = json.dumps(subjects)
    for name, schema in files.items():
        assert schema["$id"] in registered, f"{name} is in no subject"
    for topic in reg.TOPIC_EVENTS:
        assert f"{topic}-value" in subjects


def test_each_topic_subject_accepts_its_events_and_only_those() -> None:
    subjects = reg.subjects(reg.load_schema_files(ROOT / "schemas"))
    examples = _doc_examples()
    assert {e["event"] for e in examples} >= {e for es in reg.TOPIC_EVENTS.values() for e in es}
    for schema in subjects.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    for example in examples:
        home = next((t for t, es in reg.TOPIC_EVENTS.items() if example["event"] in es), None)
        for topic in reg.TOPIC_EVENTS:
            ok = jsonschema.Draft202012Validator(subjects[f"{topic}-value"]).is_valid(example)
            assert ok == (topic == home), f"{example['event']} vs {topic}-value"


def test_an_unplaced_schema_file_is_refused() -> None:
    files = reg.load_schema_files(ROOT / "schemas")
    files["heartbeat.v1"] = {"type": "object"}
    with pytest.raises(ValueError, match=r"heartbeat.*TOPIC_EVENTS"):
        reg.subjects(files)


def test_register_posts_a_json_schema_and_explains_a_conflict() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/lagpilot.lag-value/versions"):
            return httpx.Response(409, json={"error_code": 409, "message": "incompatible"})
        return httpx.Response(200, json={"id": 7})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        ok, msg = reg.register(
            client, "http://r:8081", "lagpilot.control-value", {"type": "object"}
        )
        assert ok and "schema id 7" in msg
        ok, msg = reg.register(client, "http://r:8081", "lagpilot.lag-value", {"type": "object"})
        assert not ok and "incompatible" in msg and "bump the event's version" in msg
    body = json.loads(seen[0].content)
    assert body["schemaType"] == "JSON" and json.loads(body["schema"]) == {"type": "object"}
    assert seen[0].url.path == "/subjects/lagpilot.control-value/versions"


# -- make up / make down -------------------------------------------------------------------


def _make(target: str, path: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        ["make", "--no-print-directory", *flags, target], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_make_up_says_what_to_do_without_docker(tmp_path: Path) -> None:
    # A PATH with make and the shell tools but no docker binary.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("make", "bash", "sh", "env"):
        real = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if real:
            (bin_dir / tool).symlink_to(real)
    res = _make("up", str(bin_dir))
    assert res.returncode != 0
    assert "no Docker engine answers" in res.stderr and "make demo" in res.stderr


def test_make_up_and_down_drive_the_compose_file() -> None:
    up = _make("up", os.environ["PATH"], "-n").stdout
    down = _make("down", os.environ["PATH"], "-n").stdout
    assert "docker compose -f deploy/compose/compose.yaml up -d" in up
    assert "docker compose -f deploy/compose/compose.yaml down" in down
