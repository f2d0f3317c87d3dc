"""deploy/k8s/: the manifests parse, name only objects, keys, ports, env vars and files that
exist, and carry what running lagpilot safely needs (static membership from the pod name,
probes on the right endpoints, requests/limits, non-root, secrets as files)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from actuators.settings import parse_policy
from pipeline.decide.policy_config import config_from_mapping
from schemas import Mode
from tests.unit.deploy.facts import LAGPILOT_IMAGE, ROOT, VERSION, env_problem

K8S = ROOT / "deploy" / "k8s"


def _docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


DOCS = _docs()


def _get(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


WORKLOADS = {
    "pipeline": (_get("StatefulSet", "lagpilot-pipeline"), "run", "LAGPILOT_METRICS_PORT"),
    "actuator": (
        _get("Deployment", "lagpilot-actuator"),
        "actuate",
        "LAGPILOT_ACTUATOR_METRICS_PORT",
    ),
    "scaler": (_get("Deployment", "lagpilot-scaler"), "scaler", "LAGPILOT_SCALER_METRICS_PORT"),
}
#: the roles that sign or verify actions and read the policy (the scaler does neither)
POLICY_ROLES = ("actuator", "pipeline")


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def test_kustomization_lists_every_manifest() -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == files
    assert k["images"] == [{"name": "lagpilot", "newTag": VERSION}]


@pytest.mark.parametrize("role", sorted(WORKLOADS))
def test_runs_the_repo_image_with_its_command(role: str) -> None:
    workload, command, _ = WORKLOADS[role]
    c = _container(workload)
    assert c["image"] == LAGPILOT_IMAGE
    assert c["args"] == [command]


@pytest.mark.parametrize("role", sorted(WORKLOADS))
def test_env_vars_are_real_settings(role: str) -> None:
    workload, command, _ = WORKLOADS[role]
    c = _container(workload)
    for name in _env(c):
        assert env_problem(name, command) is None, f"{role}: {env_problem(name, command)}"
    for source in c.get("envFrom", []):
        secret = _get("Secret", source["secretRef"]["name"])
        for key in secret["stringData"]:
            assert env_problem(key, command) is None, f"{role} envFrom: {key}"
    assert "KAFKA_BOOTSTRAP" in _env(c)


@pytest.mark.parametrize("role", sorted(WORKLOADS))
def test_secrets_and_configmaps_referenced_exist(role: str) -> None:
    workload, _, _ = WORKLOADS[role]
    spec = workload["spec"]["template"]["spec"]
    for e in _env(_container(workload)).values():
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["key"] in _get("Secret", ref["name"])["stringData"], ref
    for v in spec["volumes"]:
        if "secret" in v:
            _get("Secret", v["secret"]["secretName"])
        if "configMap" in v:
            _get("ConfigMap", v["configMap"]["name"])


def _file_source(workload: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The volume and the key a file path inside the container comes from."""
    spec = workload["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        volumes[claim["metadata"]["name"]] = {"name": claim["metadata"]["name"], "claim": claim}
    for m in _container(workload)["volumeMounts"]:
        mount = PurePosixPath(m["mountPath"])
        p = PurePosixPath(path)
        if m.get("subPath") and p == mount:
            return volumes[m["name"]], m["subPath"]
        if not m.get("subPath") and mount in p.parents:
            return volumes[m["name"]], str(p.relative_to(mount))
    raise AssertionError(f"{path} is on no mounted volume")


@pytest.mark.parametrize("role", POLICY_ROLES)
def test_policy_and_signing_key_files_are_mounted(role: str) -> None:
    workload, _, _ = WORKLOADS[role]
    env = _env(_container(workload))
    volume, key = _file_source(workload, env["LAGPILOT_POLICY_FILE"]["value"])
    assert key in _get("ConfigMap", volume["configMap"]["name"])["data"]
    volume, key = _file_source(workload, env["LAGPILOT_SIGNING_KEY_FILE"]["value"])
    assert key in _get("Secret", volume["secret"]["secretName"])["stringData"]
    assert "LAGPILOT_SIGNING_KEY" not in env, "the key comes from a Secret file, not plain env"


def test_pipeline_scales_out_in_one_group_with_static_membership() -> None:
    sts, _, _ = WORKLOADS["pipeline"]
    env = _env(_container(sts))
    assert env["LAGPILOT_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["LAGPILOT_CONSUMER_GROUP"]["value"].startswith("lagpilot")
    assert sts["spec"]["replicas"] >= 2
    state = env["LAGPILOT_STATE_DIR"]["value"]
    assert "claim" in _file_source(sts, state + "/x")[0], "state on the replica's own volume"
    svc = _get("Service", sts["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None"


def test_actuator_id_is_the_pod_name() -> None:
    dep, _, _ = WORKLOADS["actuator"]
    env = _env(_container(dep))
    assert env["LAGPILOT_ACTUATOR_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    assert env["LAGPILOT_REDPANDA_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]


@pytest.mark.parametrize("role", sorted(WORKLOADS))
def test_probes_requests_limits_and_security(role: str) -> None:
    workload, _, port_env = WORKLOADS[role]
    spec = workload["spec"]["template"]["spec"]
    c = _container(workload)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == int(_env(c)[port_env]["value"])
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{role} {kind}"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] >= 1000
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert spec["enableServiceLinks"] is False, "service links would inject LAGPILOT_* vars"


@pytest.mark.parametrize("role", sorted(WORKLOADS))
def test_service_and_servicemonitor_reach_the_metrics_port(role: str) -> None:
    workload, _, _ = WORKLOADS[role]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svcs = [
        d
        for d in DOCS
        if d["kind"] == "Service" and d["spec"]["selector"].items() <= labels.items()
    ]
    assert len(svcs) == 1, f"{role}: one Service selects its pods"
    svc = svcs[0]
    assert any(
        p["name"] == "metrics" and p["targetPort"] == "metrics" for p in svc["spec"]["ports"]
    )
    sm = _get("ServiceMonitor", "lagpilot")
    expr = sm["spec"]["selector"]["matchExpressions"][0]
    assert expr["operator"] == "In"
    assert svc["metadata"]["labels"][expr["key"]] in expr["values"]
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"


def test_policy_configmap_is_a_valid_policy_for_both_processes() -> None:
    text = _get("ConfigMap", "lagpilot-policy")["data"]["policy.toml"]
    import tomllib

    doc = tomllib.loads(text)
    config = config_from_mapping(doc, {})
    assert config.mode is Mode.RECOMMEND, "ship in recommend mode: act is an explicit choice"
    assert parse_policy(doc).mode is Mode.RECOMMEND


def test_placeholder_secrets_are_loadable_and_kafka_keys_are_settings() -> None:
    from schemas.codec import load_signing_key

    key = _get("Secret", "lagpilot-signing-key")["stringData"]["signing-key"]
    assert load_signing_key({"LAGPILOT_SIGNING_KEY": key})
    for k in _get("Secret", "lagpilot-kafka-client")["stringData"]:
        assert k.startswith("LAGPILOT_KAFKA_") and env_problem(k, "run") is None


def test_scaler_runs_two_replicas_behind_a_grpc_service_a_scaled_object_names() -> None:
    from pipeline.serve.keda.metadata import KEDA_KEYS, parse_metadata

    dep, _, _ = WORKLOADS["scaler"]
    assert dep["spec"]["replicas"] >= 2, "reads lagpilot.lag itself: replicas answer alike"
    c = _container(dep)
    grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
    assert grpc_port == int(_env(c)["LAGPILOT_SCALER_PORT"]["value"])
    svc = _get("Service", "lagpilot-scaler")
    (port,) = [p for p in svc["spec"]["ports"] if p["name"] == "grpc"]
    assert port["targetPort"] == "grpc"
    example = yaml.safe_load((K8S / "examples" / "keda-scaledobject.yaml").read_text())
    assert example["kind"] == "ScaledObject" and example["apiVersion"] == "keda.sh/v1alpha1"
    (trigger,) = example["spec"]["triggers"]
    assert trigger["type"] == "external-push"
    md = trigger["metadata"]
    host, _, p = md["scalerAddress"].rpartition(":")
    assert host == "lagpilot-scaler.lagpilot.svc.cluster.local" and int(p) == port["port"]
    spec = parse_metadata(md)  # the example's keys pass the scaler's own validation
    assert "scalerAddress" in KEDA_KEYS and spec.group and spec.topic
    assert spec.max_replicas == example["spec"]["maxReplicaCount"]
