"""Authentication and ACLs on a real broker with an authorizer, and the broker going mid-run.

One broker of our own for the module (``deploy/local/kafka.sh`` with
``LAGPILOT_BROKER_SASL_USERS``: SASL/PLAIN, StandardAuthorizer, ``admin`` the only super
user) on a port of ``support.ports``, clear of the session broker and the other tests'
brokers. ``alice``
logs in but holds no ACL unless a test grants one. Every command run as her must end in one
line and exit 77; ``lagpilot doctor`` must name each missing ACL with its fix. The last test
stops this broker under a running ``lagpilot run``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from support.cli import LAGPILOT, clean_env, lagpilot, one_clean_line
from support.ports import own_port

ROOT = Path(__file__).resolve().parents[4]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
PORT = own_port("sasl")
BOOTSTRAP = f"127.0.0.1:{PORT}"
KEY = "k" * 32
USERS = {"admin": "admin-pw", "alice": "alice-pw"}


def login(user: str, password: str | None = None) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP": BOOTSTRAP,
        "LAGPILOT_SIGNING_KEY": KEY,
        "LAGPILOT_CONNECT_TIMEOUT_S": "5",
        "LAGPILOT_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "LAGPILOT_KAFKA_SASL_MECHANISM": "PLAIN",
        "LAGPILOT_KAFKA_SASL_USERNAME": user,
        "LAGPILOT_KAFKA_SASL_PASSWORD": USERS[user] if password is None else password,
    }


def admin_client() -> Any:
    from confluent_kafka.admin import AdminClient

    env = login("admin")
    quiet = {"logger": logging.getLogger("test.kafka")}  # librdkafka's lines, not on stderr
    return AdminClient({"bootstrap.servers": BOOTSTRAP, **quiet} | {
        k[len("LAGPILOT_KAFKA_"):].lower().replace("_", "."): v
        for k, v in env.items() if k.startswith("LAGPILOT_KAFKA_")
    })  # fmt: skip


@pytest.fixture(scope="module")
def sasl_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SASL broker's run folder: ``kafka.sh up`` records there the release it started."""
    return tmp_path_factory.mktemp("sasl-broker")


@pytest.fixture(scope="module")
def sasl_broker(sasl_run_dir: Path) -> Iterator[Callable[[], None]]:
    users = ",".join(f"{u}:{p}" for u, p in USERS.items())
    env = {**os.environ, "PYTHON": sys.executable, "LAGPILOT_BROKER_PORT": str(PORT),
           "LAGPILOT_BROKER_RUN_DIR": str(sasl_run_dir),
           "LAGPILOT_BROKER_SASL_USERS": users}  # fmt: skip
    up = subprocess.run([str(KAFKA_SH), "up"], env=env, capture_output=True, text=True, timeout=180)
    if up.returncode != 0:
        pytest.fail(f"could not start the SASL broker on port {PORT}:\n{up.stderr}")
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if not stopped:
            subprocess.run([str(KAFKA_SH), "down"], env=env, capture_output=True, timeout=60)
            stopped = True

    try:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        topics = ("lagpilot.lag", "lagpilot.control", "lagpilot.outcomes", "lagpilot.watermarks")
        admin = admin_client()  # held until the futures resolve
        for fut in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            try:
                fut.result(timeout=30)
            except KafkaException as exc:  # a client may have had one auto-created already
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        yield stop
    finally:
        stop()


def grant(principal: str, *acls: tuple[str, str, str, str]) -> None:
    """ACLs as (resource type, name, pattern, operation), allowed for ``principal``."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [
        AclBinding(ResourceType[rtype], name, ResourcePatternType[pattern], f"User:{principal}",
                   "*", AclOperation[op], AclPermissionType.ALLOW)
        for rtype, name, pattern, op in acls
    ]  # fmt: skip
    admin = admin_client()  # held until the futures resolve
    for fut in admin.create_acls(bindings).values():
        fut.result(timeout=15)
    time.sleep(0.5)  # the authorizer applies ACLs from the metadata log


def doctor_rows(user: str) -> tuple[int, dict[str, dict[str, Any]]]:
    r = lagpilot("doctor", "--json", **login(user))
    assert "Traceback" not in r.stderr and "%3|" not in r.stderr, r.stderr
    return r.returncode, {row["check"]: row for row in orjson.loads(r.stdout)}


def test_the_sasl_broker_refuses_a_wrong_password_in_one_line(sasl_broker: Any) -> None:
    r = lagpilot("status", **login("alice", password="wrong"))
    one_clean_line(r, 77, f"authentication failed at {BOOTSTRAP}", "SASL_PASSWORD")
    r = lagpilot("control", "tail", **login("admin", password="wrong"))
    one_clean_line(r, 77, "authentication failed", "Invalid username or password")


def test_the_super_user_passes_every_doctor_check_and_sees_the_release(
    sasl_broker: Any, sasl_run_dir: Path
) -> None:
    """The doctor names the release the broker runs (KAFKA_VERSION picks it; ``kafka.sh up``
    records it in the run folder) and its metadata.version."""
    code, rows = doctor_rows("admin")
    # no pipeline replica runs beside this broker: the row of their input states has nothing
    # to judge, and says so
    assert rows.pop("pipeline input")["status"] == "skip"
    assert code == 0 and {row["status"] for row in rows.values()} == {"ok"}, rows
    started = (sasl_run_dir / "version").read_text().strip()  # e.g. 4.4.0
    release = ".".join(started.split(".")[:2])  # 4.4.0 -> 4.4
    detail = rows["broker"]["detail"]
    assert re.search(rf"Apache Kafka {re.escape(release)} \(metadata\.version {release}-IV\d\)",
                     detail), detail  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "topic"),
    [
        (["status"], "lagpilot.lag"),
        (["status", "--json"], "lagpilot.lag"),
        (["control", "tail"], "lagpilot.control"),
        (["control", "halt"], "lagpilot.control"),
        (["sample"], "lagpilot.watermarks"),
        (["actuate", "--backend", "dry-run"], "lagpilot.control"),
        (["scaler", "--port", "0", "--metrics-port", "0"], "lagpilot.lag"),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else "",
)
def test_a_principal_without_acls_gets_one_line_and_77(
    sasl_broker: Any, argv: list[str], topic: str
) -> None:
    r = lagpilot(*argv, **login("alice"))
    line = one_clean_line(r, 77, f"permission denied on topic {topic} at {BOOTSTRAP}", "ACLs")
    assert line.startswith(f"lagpilot {argv[0]}: ")


def test_run_without_acls_stops_at_once_with_77(sasl_broker: Any, tmp_path: Path) -> None:
    r = lagpilot("run", **login("alice"), LAGPILOT_METRICS_PORT="0",
                 LAGPILOT_STATE_DIR=str(tmp_path / "state"), timeout=120)  # fmt: skip
    assert r.returncode == 77, r.stderr  # a service: its INFO lines come first, then the one
    assert "Traceback" not in r.stderr and "%3|" not in r.stderr and "FAIL [" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("lagpilot run: permission denied: cannot create or read"), last
    assert BOOTSTRAP in last and "docs/runbook.md" in last


def test_doctor_names_each_missing_acl_and_its_fix(sasl_broker: Any) -> None:
    code, rows = doctor_rows("alice")
    assert code == 77 and rows["broker"]["status"] == "ok", rows
    offsets = rows["__consumer_offsets"]
    assert offsets["status"] == "fail" and offsets["exit_code"] == 77
    assert "DESCRIBE and READ denied" in offsets["detail"]
    assert "--operation Read --operation Describe --topic __consumer_offsets" in offsets["fix"]
    assert rows["lagpilot topics"]["status"] == "fail"
    assert "--topic lagpilot. --resource-pattern-type prefixed" in rows["lagpilot topics"]["fix"]
    assert "denied" in rows["client quotas"]["detail"]  # not needed in recommend mode: a warning
    assert rows["client quotas"]["status"] == "warn"

    # DESCRIBE alone: the offsets topic is seen, READ is still missing; halts are not written
    grant("alice", ("TOPIC", "__consumer_offsets", "LITERAL", "DESCRIBE"),
          ("TOPIC", "lagpilot.", "PREFIXED", "DESCRIBE"))  # fmt: skip
    code, rows = doctor_rows("alice")
    assert code == 77 and rows["__consumer_offsets"]["detail"].startswith("READ denied"), rows
    r = lagpilot("control", "halt", **login("alice"))
    one_clean_line(r, 77, "permission denied", "AUTHORIZATION_FAILED")  # idempotent WRITE


def _librdkafka(user: str, password: str | None = None) -> dict[str, str]:
    env = login(user, password)
    return {"bootstrap.servers": BOOTSTRAP} | {
        k[len("LAGPILOT_KAFKA_"):].lower().replace("_", "."): v
        for k, v in env.items() if k.startswith("LAGPILOT_KAFKA_")
    }  # fmt: skip


def test_the_sampler_asks_per_broker_with_the_same_login(sasl_broker: Any) -> None:
    """The sampler's per-broker way (kafka-python) logs in with what ``kafka_python_config``
    makes of the librdkafka settings; a topic the principal may not describe is -1 alone
    and counted; a refused login is an error waiting cannot fix (the AdminClient's way then)."""
    from confluent_kafka.admin import NewTopic

    from pipeline.read.list_offsets import BrokerListOffsets, kafka_python_config
    from pipeline.read.sampling import error_kind, is_retriable

    seen, hidden = "acl-sampled-seen", "acl-sampled-hidden"
    admin = admin_client()
    for fut in admin.create_topics([NewTopic(t, 2, 1) for t in (seen, hidden)]).values():
        fut.result(timeout=30)
    grant("alice", ("TOPIC", seen, "LITERAL", "DESCRIBE"))
    metadata = admin.list_topics(timeout=10).topics
    watched = {t: tuple(metadata[t].partitions[p].leader for p in range(2)) for t in (seen, hidden)}

    def latest(user: str) -> Any:
        config = kafka_python_config(_librdkafka(user))
        assert config is not None and config["security_protocol"] == "SASL_PLAINTEXT"
        fast = BrokerListOffsets(config, 5000, wait_ms=250)
        try:
            deadline = time.monotonic() + 10
            while not fast.connect():
                assert time.monotonic() < deadline, "kafka-python did not bootstrap"
            fast.set_partitions(watched)
            return fast.latest()
        finally:
            fast.close()

    as_admin = latest("admin")
    assert as_admin.hwms == {seen: [0, 0], hidden: [0, 0]} and not as_admin.failed
    as_alice = latest("alice")
    assert as_alice.hwms == {seen: [0, 0], hidden: [-1, -1]}
    assert as_alice.failed == {"topic_authorization_failed": 2}

    # kafka-python's bootstrap retries a refused login until its timeout: the sampler sees
    # a timeout, samples with the AdminClient, and tries again after a (doubling) pause
    config = kafka_python_config(_librdkafka("alice", password="wrong"))
    assert config is not None
    fast = BrokerListOffsets(config, 2000, wait_ms=250)
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as refused:
            while not fast.connect():
                assert time.monotonic() - started < 10, "the bootstrap did not end"
    finally:
        fast.close()
    assert error_kind(refused.value) == "timed_out" and is_retriable(refused.value)
    assert 1.5 < time.monotonic() - started < 5  # its timeout: 2 s


def _get(url: str) -> int:
    return _fetch(url)[0]


def _fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:  # 503 arrives as an exception
        return int(exc.code), ""
    except OSError:
        return 0, ""


#: how long ``lagpilot run`` may take to say the broker went (see the test)
SAID_WITHIN_S = 60.0


def after_stop(log: Path, before: int) -> str:
    return "\n".join(log.read_text().splitlines()[before:])


def test_run_says_first_in_its_own_words_that_the_broker_went(
    sasl_broker: Callable[[], None], tmp_path: Path
) -> None:
    """Last in the module: it stops the broker. Before lagpilot's sentence, nothing of the
    client's may reach the user; after it, only lagpilot's own lines."""
    metrics_port = str(own_port("sasl_metrics"))
    env = clean_env(**login("admin"), LAGPILOT_METRICS_PORT=metrics_port,
                    LAGPILOT_STATE_DIR=str(tmp_path / "state"),
                    LAGPILOT_CONSUMER_GROUP="lagpilot-acl-test")  # fmt: skip
    log = tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen([LAGPILOT, "run"], env=env, stderr=out, stdout=out, text=True)
    try:
        deadline = time.monotonic() + 120
        sampled = 'lagpilot_model_inputs_total{event="watermarks"}'
        while sampled not in _fetch(f"http://127.0.0.1:{metrics_port}/metrics")[1]:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)  # running: its model has had watermark samples
        before = len(log.read_text().splitlines())
        sasl_broker()
        gone = time.monotonic()
        sentence = f"cannot reach the broker at {BOOTSTRAP}"
        # A wait, not a speed claim: the sentence comes at the first client line after the
        # broker went, which a busy 2-core host (the whole suite beside this test) delays
        # by tens of seconds at times; it must come, and come first.
        while sentence not in after_stop(log, before) and time.monotonic() - gone < SAID_WITHIN_S:
            time.sleep(0.2)
        time.sleep(1)
        after = log.read_text().splitlines()[before:]
        assert proc.poll() is None, "a service keeps running while the broker is away"
        assert _get(f"http://127.0.0.1:{metrics_port}/readyz") == 503
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # stopping waits on the absent broker: not tested here
            proc.kill()
            proc.wait(timeout=10)
    said = next((i for i, line in enumerate(after) if sentence in line), None)
    # the whole log on a miss: an earlier sentence (said at most once a minute) shows there
    assert said is not None, log.read_text()
    assert "WARNING lagpilot: " in after[said] and "retrying, /readyz is false" in after[said]
    # before it, nothing louder than INFO but lagpilot's own lines (e.g. the sampler's
    # "list_offsets failed (fenced_leader_epoch)" while the broker shuts down)
    ours = re.compile(r"[\[ ](INFO|DEBUG)[\] ]| (WARNING|ERROR) (lagpilot|pipeline)[\w.]*:? ")
    assert not [line for line in after[:said] if not ours.search(line)], after[:said]
    client = re.compile(
        r"%\d\||FAIL \[rdkafka|\[(ERROR|WARNING)\] \[quixstreams|Kafka (consumer|producer) error"
    )
    assert not [line for line in after if client.search(line)], after  # only with debug
