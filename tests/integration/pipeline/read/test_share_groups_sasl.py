"""The share-group reader logs in with SASL PLAIN and SCRAM-SHA-256/512 on a real broker
whose authorizer checks ACLs, and says which ACL is missing.

Starts its own SASL broker (``LAGPILOT_BROKER_SASL_USERS``: PLAIN users, SCRAM enabled on
the client listener) on its own ports of the checkout's block (``tests/support/ports.py``),
stops it after.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ports import own_port

from bench.support.share_consumer import KAFKA_SH, ShareConsumer
from pipeline.coordinator.sasl import SaslError
from pipeline.read.share_groups import ShareGroupsDenied, ShareGroupsReader, ShareGroupState

pytestmark = pytest.mark.integration

PORT = own_port("share_sasl")
#: the release this module's broker and tools run, whatever KAFKA_VERSION the suite runs
#: (make test-kafka-4.1 too): share groups with their lag are 4.2+, and the tools' classes
#: used here are named as in 4.4 (4.1's ConfigCommand is kafka.admin.ConfigCommand)
RELEASE = {"KAFKA_VERSION": "4.4.0"}
TOPIC, GROUP = "secret", "secret-share"
ADMIN_LOGIN = (
    "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-pw";\n'
)


def _tool(bootstrap: str, admin: Path, cls: str, *args: str) -> str:
    proc = subprocess.run(
        [str(KAFKA_SH), "tool", cls, "--bootstrap-server", bootstrap,
         "--command-config", str(admin), *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **RELEASE},
    )  # fmt: skip
    assert proc.returncode == 0, f"{cls} {args}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    here = tmp_path_factory.mktemp("sasl")
    env = {**os.environ, "LAGPILOT_BROKER_PORT": str(PORT),
           "LAGPILOT_BROKER_RUN_DIR": str(here / "run"),
           "LAGPILOT_BROKER_SASL_USERS": "admin:admin-pw,alice:alice-pw", **RELEASE}  # fmt: skip
    up = subprocess.run([str(KAFKA_SH), "up"], env=env, capture_output=True, text=True,
                        timeout=300)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"could not start the SASL broker on port {PORT}:\n{up.stderr[-3000:]}")
    bootstrap = up.stdout.strip().splitlines()[-1]
    admin = here / "admin.properties"
    admin.write_text(ADMIN_LOGIN)
    try:
        for user, mechanism in (("bob", "SCRAM-SHA-256"), ("carol", "SCRAM-SHA-512")):
            _tool(bootstrap, admin, "org.apache.kafka.tools.ConfigCommand", "--alter",
                  "--entity-type", "users", "--entity-name", user,
                  "--add-config", f"{mechanism}=[password={user}-pw]")  # fmt: skip
        _tool(bootstrap, admin, "org.apache.kafka.tools.TopicCommand", "--create", "--topic",
              TOPIC, "--partitions", "1")  # fmt: skip
        yield bootstrap, admin
    finally:
        subprocess.run([str(KAFKA_SH), "down"], env=env, capture_output=True, timeout=120)


def _reader(bootstrap: str, mechanism: str, user: str, password: str) -> ShareGroupsReader:
    return ShareGroupsReader({"bootstrap.servers": bootstrap,
                              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                              "sasl.username": user, "sasl.password": password})  # fmt: skip


def _assigned(reader: ShareGroupsReader, timeout_s: float = 60.0) -> ShareGroupState:
    deadline = time.monotonic() + timeout_s
    while True:
        found = [g for g in reader.read() if g.group == GROUP]
        if found and found[0].members == 1 and found[0].partitions:
            return found[0]
        assert time.monotonic() < deadline, f"the share consumer not assigned: {found}"
        time.sleep(0.5)


def test_logins_and_the_acls_a_principal_needs(sasl_broker: tuple[str, Path]) -> None:
    bootstrap, admin_config = sasl_broker
    admin = _reader(bootstrap, "PLAIN", "admin", "admin-pw")
    bob = _reader(bootstrap, "SCRAM-SHA-256", "bob", "bob-pw")
    carol = _reader(bootstrap, "SCRAM-SHA-512", "carol", "carol-pw")
    with ShareConsumer(bootstrap, TOPIC, GROUP, "--command-config", str(admin_config),
                       release=RELEASE["KAFKA_VERSION"]):  # fmt: skip
        assert _assigned(admin).partitions[0].topic == TOPIC  # PLAIN, a super user
        # SCRAM logins work; without ACLs ListGroups lists nothing to them
        assert bob.read() == [] and carol.read() == []
        assert bob.served and carol.served

        acl = ("org.apache.kafka.tools.AclCommand", "--add", "--allow-principal", "User:bob",
               "--operation", "Describe")  # fmt: skip
        _tool(bootstrap, admin_config, *acl, "--group", GROUP)
        # the group, but not its topic: ShareGroupDescribe denies it (TOPIC_AUTHORIZATION_FAILED,
        # no topic named), and the error says to grant DESCRIBE on the group's topics
        deadline = time.monotonic() + 30
        while True:
            try:
                bob.read()
            except ShareGroupsDenied as exc:
                said = str(exc)
                assert "TOPIC_AUTHORIZATION_FAILED" in said and "User:bob DESCRIBE on" in said
                assert "--operation Describe --topic" in said
                assert not exc.retriable
                break
            assert time.monotonic() < deadline, "no TOPIC_AUTHORIZATION_FAILED within 30s"
            time.sleep(0.5)

        _tool(bootstrap, admin_config, *acl, "--topic", TOPIC)
        assert _assigned(bob).partitions[0].topic == TOPIC
    for reader in (admin, bob, carol):
        reader.close()


def test_a_wrong_password_says_what_to_check(sasl_broker: tuple[str, Path]) -> None:
    bootstrap, _ = sasl_broker
    for mechanism, user in (("SCRAM-SHA-256", "bob"), ("PLAIN", "alice")):
        with pytest.raises(SaslError, match=r"check sasl\.username, sasl\.password") as exc:
            _reader(bootstrap, mechanism, user, "wrong").read()
        assert not exc.value.retriable
