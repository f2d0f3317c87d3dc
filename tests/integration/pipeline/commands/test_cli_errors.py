"""Every command, as a user runs it (the installed ``lagpilot`` script in a subprocess), on an
unreachable broker and on bad input: one line saying what failed, where and what to do, the
documented exit code, and never a traceback nor librdkafka's own ``%3|...|FAIL|`` lines.

The unreachable broker is 127.0.0.1:1 (nothing listens there) with a 1 s connect timeout;
authentication and TLS failures are real ones: SASL and TLS clients against the shared
broker's PLAINTEXT listener.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import orjson
import pytest
from support.cli import LAGPILOT, lagpilot, one_clean_line

KEY = "k" * 32
UNREACHABLE = "127.0.0.1:1"


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["control", "tail"],
        ["control", "halt"],
        ["control", "resume", "--scope", "g"],
        ["sample"],
        ["actuate", "--backend", "dry-run"],
    ],
    ids=lambda a: " ".join(a),
)
def test_unreachable_broker_is_one_line_exit_69(argv: list[str]) -> None:
    started = time.monotonic()
    r = lagpilot(*argv, KAFKA_BOOTSTRAP=UNREACHABLE, LAGPILOT_SIGNING_KEY=KEY)
    line = one_clean_line(r, 69, f"cannot reach the broker at {UNREACHABLE}", "KAFKA_BOOTSTRAP")
    assert line.startswith(f"lagpilot {argv[0]}: ")
    assert time.monotonic() - started < 15


def test_the_flag_overrides_the_environment() -> None:
    r = lagpilot("status", "--bootstrap", UNREACHABLE, KAFKA_BOOTSTRAP="127.0.0.1:2")
    one_clean_line(r, 69, "at 127.0.0.1:1 ")


def test_debug_shows_the_traceback() -> None:
    r = lagpilot("status", "--debug", KAFKA_BOOTSTRAP=UNREACHABLE)
    assert r.returncode == 69 and "Traceback" in r.stderr
    r = lagpilot("status", "--log-level", "debug", KAFKA_BOOTSTRAP=UNREACHABLE)
    assert "lagpilot.kafka" in r.stderr  # the client's own lines, through lagpilot's logging


def test_doctor_with_the_broker_unreachable() -> None:
    r = lagpilot("doctor", "--json", KAFKA_BOOTSTRAP=UNREACHABLE, LAGPILOT_SIGNING_KEY=KEY)
    assert r.returncode == 69 and "Traceback" not in r.stderr and "%3|" not in r.stderr
    rows = {row["check"]: row for row in orjson.loads(r.stdout)}
    assert rows["broker"]["status"] == "fail" and rows["clock skew"]["status"] == "skip"
    assert rows["signing key"]["status"] == "ok" and rows["policy file"]["status"] == "ok"
    assert f"cannot reach the broker at {UNREACHABLE}" in rows["broker"]["detail"]
    r = lagpilot("doctor", KAFKA_BOOTSTRAP=UNREACHABLE)  # the table, with the fix
    assert "fix: start the broker" in r.stdout and r.stdout.startswith("CHECK")


def test_run_says_in_its_own_words_it_keeps_retrying() -> None:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("LAGPILOT_") and k != "KAFKA_BOOTSTRAP"}  # fmt: skip
    env = {**base, "KAFKA_BOOTSTRAP": UNREACHABLE, "LAGPILOT_SIGNING_KEY": KEY,
           "LAGPILOT_METRICS_PORT": "0", "LAGPILOT_CONNECT_TIMEOUT_S": "1"}  # fmt: skip
    proc = subprocess.Popen([LAGPILOT, "run"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        assert proc.stderr is not None
        while not any("WARNING" in line for line in lines):
            lines.append(proc.stderr.readline())
            assert lines[-1], "run ended instead of retrying"
        assert proc.poll() is None  # still running: a service keeps trying
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    warning = next(line for line in lines if "WARNING" in line)
    assert "lagpilot" in warning and f"cannot reach the broker at {UNREACHABLE}" in warning
    assert "retrying" in warning and "/readyz is false" in warning
    assert not any("ERROR" in line or "%3|" in line for line in lines), lines


@pytest.mark.parametrize(
    "cmd", ["status", "control tail", "sample", "actuate", "doctor", "run", "scaler"]
)
def test_usage_errors_exit_64(cmd: str) -> None:
    r = lagpilot(*cmd.split(), "--no-such-option")
    one_clean_line(r, 64, "unrecognized arguments: --no-such-option", "--help")


def test_unknown_command_exits_64() -> None:
    assert lagpilot("frobnicate").returncode == 64


def test_help_has_an_example_and_every_variable() -> None:
    for cmd in ("status", "control", "sample", "actuate", "doctor", "run", "scaler"):
        r = lagpilot(cmd, "--help")
        text = " ".join(r.stdout.split())
        assert r.returncode == 0 and "example" in text, cmd
        assert "[env KAFKA_BOOTSTRAP; default" in text, cmd
        assert "[env LAGPILOT_LOG_LEVEL; default info]" in text, cmd


def test_bad_key_file_and_bad_policy_exit_78(tmp_path: Path, kafka_bootstrap: str) -> None:
    missing = str(tmp_path / "absent.key")
    r = lagpilot("control", "halt", KAFKA_BOOTSTRAP=kafka_bootstrap,
                 LAGPILOT_SIGNING_KEY_FILE=missing)  # fmt: skip
    one_clean_line(r, 78, f"LAGPILOT_SIGNING_KEY_FILE={missing} cannot be read")
    r = lagpilot("actuate", KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SIGNING_KEY_FILE=missing)
    one_clean_line(r, 78, "LAGPILOT_SIGNING_KEY_FILE")
    bad = tmp_path / "policy.toml"
    bad.write_text('mode = "yolo"\n')
    for cmd in ("actuate", "run"):
        r = lagpilot(cmd, KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SIGNING_KEY=KEY,
                     LAGPILOT_POLICY_FILE=str(bad))  # fmt: skip
        one_clean_line(r, 78, "policy.mode", "yolo")
    r = lagpilot("sample", KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SAMPLE_INTERVAL_MS="often")
    one_clean_line(r, 78, "LAGPILOT_SAMPLE_INTERVAL_MS='often'")


def test_authentication_and_tls_failures(kafka_bootstrap: str) -> None:
    sasl = {"LAGPILOT_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "LAGPILOT_KAFKA_SASL_MECHANISM": "PLAIN", "LAGPILOT_KAFKA_SASL_USERNAME": "u",
            "LAGPILOT_KAFKA_SASL_PASSWORD": "p"}  # fmt: skip
    r = lagpilot("status", KAFKA_BOOTSTRAP=kafka_bootstrap, **sasl)
    one_clean_line(r, 77, f"authentication failed at {kafka_bootstrap}", "SASL")
    r = lagpilot("control", "tail", KAFKA_BOOTSTRAP=kafka_bootstrap,
                 LAGPILOT_KAFKA_SECURITY_PROTOCOL="SSL")  # fmt: skip
    one_clean_line(r, 78, f"TLS failed for {kafka_bootstrap}", "LAGPILOT_KAFKA_SSL_")
    r = lagpilot("sample", KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_KAFKA_SECURITY_PROTOCOL="SSL",
                 LAGPILOT_KAFKA_SSL_CA_LOCATION="/nonexistent/ca.pem")  # fmt: skip
    one_clean_line(r, 78, "ssl.ca.location")


def test_missing_topic_exits_66(kafka_bootstrap: str) -> None:
    absent = f"lagpilot-test-absent-{uuid.uuid4().hex[:8]}"
    r = lagpilot("control", "--topic", absent, "tail", KAFKA_BOOTSTRAP=kafka_bootstrap)
    one_clean_line(r, 66, f"topic {absent} not found at {kafka_bootstrap}")


def test_doctor_on_the_real_broker(kafka_bootstrap: str) -> None:
    started = time.monotonic()
    r = lagpilot("doctor", "--json", KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SIGNING_KEY=KEY,
                 LAGPILOT_POLICY_FILE="deploy/policy.example.toml")  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    rows = {row["check"]: row for row in orjson.loads(r.stdout)}
    assert time.monotonic() - started < 15
    # the input states of whatever pipeline replicas other tests run on this broker (judged
    # in tests/unit/pipeline/commands): here only that the row is there and says something
    inputs = rows.pop("pipeline input")
    assert inputs["status"] in ("ok", "skip", "warn") and inputs["detail"], inputs
    assert {row["status"] for row in rows.values()} == {"ok"}, rows
    assert "READ allowed" in rows["__consumer_offsets"]["detail"]
    # the version from ApiVersions: a KRaft Kafka names its release, anything else its APIs
    assert re.search(
        r": (Apache Kafka \d+\.\d+ \(metadata\.version \d+\.\d+-IV\d\)|"
        r"Kafka protocol, \d+ APIs)",
        rows["broker"]["detail"],
    ), rows["broker"]
    assert "against the broker" in rows["clock skew"]["detail"]
    # a bad policy and an unreachable Admin API fail, each with its code; the broker is fine
    r = lagpilot("doctor", KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SIGNING_KEY=KEY,
                 LAGPILOT_REDPANDA_ADMIN_URLS=f"http://{UNREACHABLE}")  # fmt: skip
    assert r.returncode == 69 and "admin api" in r.stdout and "fix: check" in r.stdout
    assert "Traceback" not in r.stderr


def test_admin_api_unreachable_or_refusing_at_actuator_start(kafka_bootstrap: str) -> None:
    from bench.support.redpanda_admin_stub import running_stubs

    common = {"KAFKA_BOOTSTRAP": kafka_bootstrap, "LAGPILOT_SIGNING_KEY": KEY,
              "LAGPILOT_ACTUATOR_BACKEND": "redpanda"}  # fmt: skip
    url = f"http://{UNREACHABLE}"
    r = lagpilot("actuate", LAGPILOT_REDPANDA_ADMIN_URLS=url, **common)
    one_clean_line(r, 69, f"cannot reach the Redpanda Admin API at {url}", "ADMIN_URLS")
    with running_stubs(require_auth=("admin", "right")) as [stub]:
        r = lagpilot("actuate", LAGPILOT_REDPANDA_ADMIN_URLS=stub.url,
                     LAGPILOT_REDPANDA_ADMIN_USERNAME="admin",
                     LAGPILOT_REDPANDA_ADMIN_PASSWORD="wrong", **common)  # fmt: skip
        one_clean_line(r, 77, "refused the credentials (HTTP 401)", "ADMIN_PASSWORD")
        r = lagpilot("doctor", "--json", LAGPILOT_REDPANDA_ADMIN_URLS=stub.url,
                     LAGPILOT_REDPANDA_ADMIN_USERNAME="admin",
                     LAGPILOT_REDPANDA_ADMIN_PASSWORD="right", **common)  # fmt: skip
        rows = {row["check"]: row for row in orjson.loads(r.stdout)}
        assert rows["admin api"]["status"] == "ok" and "Redpanda v24" in rows["admin api"]["detail"]


def test_run_stops_on_an_authentication_failure(kafka_bootstrap: str) -> None:
    r = lagpilot("run", KAFKA_BOOTSTRAP=kafka_bootstrap, LAGPILOT_SIGNING_KEY=KEY,
                 LAGPILOT_METRICS_PORT="0", LAGPILOT_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
                 LAGPILOT_KAFKA_SASL_MECHANISM="PLAIN", LAGPILOT_KAFKA_SASL_USERNAME="u",
                 LAGPILOT_KAFKA_SASL_PASSWORD="p")  # fmt: skip
    assert r.returncode == 77, r.stderr
    assert "authentication failed at" in r.stderr and "Traceback" not in r.stderr
