"""The actuator's settings and its reading of the policy file's `mode` and `[allow]`."""

from __future__ import annotations

from pathlib import Path

import pytest

from actuators.settings import AllowList, from_env, load_policy, parse_policy
from schemas import ConfigError, Mode


def test_policy_defaults_to_recommend_and_allows_nothing() -> None:
    policy = load_policy(None)
    assert policy.mode is Mode.RECOMMEND
    assert not policy.allow.allows_throttle("client-id", "agent-1")
    assert not policy.allow.allows_partitions("orders")


def test_policy_file_reads_mode_and_allow_and_ignores_the_pipelines_sections(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        'mode = "act"\npolicy_version = "x"\n[thresholds.default]\ntime_lag_s = 5\n'
        '[allow]\npartition_topics = ["orders*"]\nthrottle_client_ids = ["agent-*"]\n'
    )
    policy = load_policy(str(path))
    assert policy.mode is Mode.ACT
    assert policy.allow.allows_partitions("orders-eu")
    assert not policy.allow.allows_partitions("payments")
    assert policy.allow.allows_throttle("client-id", "agent-7")


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ({"mode": "yolo"}, "policy.mode"),
        ({"allow": {"partition_topics": "orders"}}, "policy.allow.partition_topics"),
        ({"allow": {"throttle_client_ids": [""]}}, "policy.allow.throttle_client_ids"),
        ({"allow": {"throtle_client_ids": ["a"]}}, "policy.allow.throtle_client_ids"),
        ({"allow": ["a"]}, "policy.allow"),
    ],
)
def test_policy_errors_name_the_key(doc: dict, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        parse_policy(doc)


def test_unreadable_policy_file_names_the_env_var(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="LAGPILOT_POLICY_FILE"):
        load_policy(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("mode = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_policy(str(bad))


@pytest.mark.parametrize(
    ("prefix", "glob", "allowed"),
    [
        ("agent-", "agent-*", True),  # every agent-... id matches agent-*
        ("agent-7", "agent-*", True),
        ("a", "agent-*", False),  # "a" would also throttle "alice"
        ("agent-", "agent-?", False),  # agent-10 is not covered by agent-?
        ("agent-", "agent-", False),  # an exact glob cannot cover a prefix
    ],
)
def test_a_prefix_throttle_must_be_covered_by_a_glob(prefix: str, glob: str, allowed: bool) -> None:
    assert (
        AllowList(throttle_client_ids=(glob,)).allows_throttle("client-id-prefix", prefix)
        is allowed
    )


def test_env_overrides_defaults_and_flags_override_env() -> None:
    env = {"KAFKA_BOOTSTRAP": "k:1", "LAGPILOT_ACTUATOR_MAX_RETRIES": "5"}
    s = from_env(env, actuator_id="x")
    assert (s.bootstrap, s.max_retries, s.actuator_id) == ("k:1", 5, "x")
    assert from_env(env, bootstrap="k:2").bootstrap == "k:2"
    urls = from_env({"LAGPILOT_REDPANDA_ADMIN_URLS": "http://a:9644, http://b:9644"})
    assert urls.redpanda_admin_urls == ("http://a:9644", "http://b:9644")
    assert from_env({"LAGPILOT_REDPANDA_ADMIN_TLS_VERIFY": "no"}).redpanda_admin_tls_verify is False


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"LAGPILOT_ACTUATOR_BACKEND": "magic"}, "LAGPILOT_ACTUATOR_BACKEND"),
        ({"LAGPILOT_ACTUATOR_BACKEND": "redpanda"}, "LAGPILOT_REDPANDA_ADMIN_URLS"),
        ({"LAGPILOT_ACTUATOR_MAX_RETRIES": "many"}, "LAGPILOT_ACTUATOR_MAX_RETRIES"),
        ({"LAGPILOT_ACTUATOR_MAX_BATCH": "0"}, "max_batch"),
        ({"LAGPILOT_ACTUATOR_BACKOFF_BASE_S": "5"}, "backoff_base_s"),
    ],
)
def test_settings_errors_name_the_key_and_fix(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        from_env(env)


def test_kafka_tls_sasl_settings_pass_through_to_both_kinds_of_client() -> None:
    from actuators.settings import from_env

    s = from_env(
        {
            "LAGPILOT_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "LAGPILOT_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
            "LAGPILOT_KAFKA_SASL_USERNAME": "lagpilot",
            "LAGPILOT_KAFKA_SASL_PASSWORD": "secret",
            "LAGPILOT_KAFKA_SSL_CA_LOCATION": "/etc/ca.pem",
        }
    )
    assert s.kafka["security.protocol"] == "SASL_SSL"
    assert s.kafka_python_security() == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "lagpilot",
        "sasl_plain_password": "secret",
        "ssl_cafile": "/etc/ca.pem",
    }


def test_a_security_setting_the_admin_clients_cannot_honour_is_refused() -> None:
    import pytest

    from actuators.settings import from_env
    from schemas import ConfigError

    with pytest.raises(ConfigError, match="LAGPILOT_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM"):
        from_env({"LAGPILOT_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "none"})
