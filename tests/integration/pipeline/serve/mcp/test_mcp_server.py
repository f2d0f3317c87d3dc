"""``lagpilot mcp`` over stdio, with the SDK's own client, against a live pipeline (observe
mode, one per module) on the real broker: the tools are listed, lag_status is
``lagpilot status``, a request in observe mode is a recommendation and nothing reaches the
control topic, a target outside the allow-list is refused with the reason, and bad
arguments are tool errors after which the server keeps serving."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from bench.support.harness import (
    LagReader,
    PipelineProcess,
    ScriptedLoad,
    create_topic,
    free_port,
)
from pipeline.commands.status import main as status
from pipeline.serve.mcp.reading import recent_events
from tests.support.pipeline import wait_ready

KEY = "mcp-e2e-signing-key-0123456789"
RUN = uuid.uuid4().hex[:6]
POLICY = """
mode = "observe"
policy_version = "mcp-e2e"
[allow]
partition_topics = []
throttle_client_ids = ["ingest-*"]
"""


class Live:
    def __init__(self, bootstrap: str, topic: str, group: str, env: dict[str, str]) -> None:
        self.bootstrap, self.topic, self.group, self.env = bootstrap, topic, group, env


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("mcp")
    topic, group = f"mcp-{RUN}", f"g-mcp-{RUN}"
    create_topic(kafka_bootstrap, topic, 2)
    policy = tmp / "policy.toml"
    policy.write_text(POLICY)
    env = {
        "KAFKA_BOOTSTRAP": kafka_bootstrap,
        "LAGPILOT_SIGNING_KEY": KEY,
        "LAGPILOT_POLICY_FILE": str(policy),
        "LAGPILOT_CONTROL_TOPIC": f"lagpilot.control.mcp-{RUN}",
        "LAGPILOT_REQUESTS_TOPIC": f"lagpilot.requests.mcp-{RUN}",
        "LAGPILOT_OUTCOMES_TOPIC": f"lagpilot.outcomes.mcp-{RUN}",
    }
    pipe = PipelineProcess(
        kafka_bootstrap, f"{topic}$", tmp / "state", LAGPILOT_RUN_POLICY="true", **env
    ).start()
    reader = LagReader(kafka_bootstrap, {group})
    try:
        wait_ready(pipe)
        reader.start()
        with ScriptedLoad(kafka_bootstrap, topic, group, rate=50, partitions=2):
            reader.wait_for(lambda e: e["event"] == "group_lag" and e["topic"] == topic, 60)
            # and each partition's first event: lag_status and `lagpilot status` read the
            # topic one after the other, and a partition that has had none yet is in one
            # answer and not the other (CI: the MCP's partitions were [] and the CLI's two)
            for partition in (0, 1):
                reader.wait_for(lambda e, p=partition: e["event"] == "partition_lag"
                                and e["topic"] == topic and e["partition"] == p, 60)  # fmt: skip
            yield Live(kafka_bootstrap, topic, group, {**env, "LAGPILOT_MCP_IDENTITY": "e2e-bot"})
    finally:
        reader.close()
        pipe.stop()


class Session:
    """One stdio session with ``lagpilot mcp`` for the whole module, driven from the tests'
    thread through an anyio portal (one server process, not one per test)."""

    def __init__(self, portal: Any, client: Client) -> None:
        self.portal, self.client = portal, client

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return self.portal.call(lambda: self.client.call_tool(name, args))

    def tools(self) -> list[Any]:
        return list(self.portal.call(self.client.list_tools).tools)


@pytest.fixture(scope="module")
def mcp(live: Live) -> Iterator[Session]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pipeline.commands.cli", "mcp"],
        env=live.env,
        cwd=str(Path(__file__).resolve().parents[5]),
    )
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Client(params, read_timeout_seconds=60)) as client,
    ):
        yield Session(portal, client)


def test_lists_the_tools_and_lag_status_is_lagpilot_status(live: Live, mcp: Session) -> None:
    tools = mcp.tools()
    got = mcp.call("lag_status", {"group": live.group})
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"lag_status", "explain", "actions", "group_health", "request_action"}
    assert by_name["request_action"].input_schema["required"] == [
        "type",
        "target",
        "params",
        "reason",
    ]
    assert all(t.output_schema is not None for t in tools)
    assert not got.is_error, got.content
    doc = got.structured_content
    out = io.StringIO()
    with redirect_stdout(out):
        assert status(["--json", "--group", live.group]) == 0
    cli = orjson.loads(out.getvalue())
    assert [(g["group"], g["topic"]) for g in doc["groups"]] == [(live.group, live.topic)]
    assert [(g["group"], g["topic"]) for g in cli["groups"]] == [(live.group, live.topic)]
    assert (
        [(p["topic"], p["partition"]) for p in doc["partitions"]]
        == [(p["topic"], p["partition"]) for p in cli["partitions"]]
        == [(live.topic, 0), (live.topic, 1)]
    )
    # the same events: one read a moment after the other sees the same one, or a newer one
    ours, theirs = doc["groups"][0], cli["groups"][0]
    assert ours.keys() == theirs.keys()
    if ours["observed_at_ms"] == theirs["observed_at_ms"]:
        assert ours == theirs
    else:
        assert ours["observed_at_ms"] < theirs["observed_at_ms"]
    assert doc["table"].splitlines()[0].split() == [
        "GROUP", "TYPE", "TOPIC", "STATUS", "LAG", "TIME", "LAG", "s", "RATE/s", "PARTS",
    ]  # fmt: skip
    row = next(line for line in doc["table"].splitlines() if line.startswith(live.group))
    assert row.split()[1] == "consumer"


def test_a_request_in_observe_mode_is_a_recommendation_not_an_action(
    live: Live, mcp: Session
) -> None:
    params = {"group": live.group, "topic": live.topic, "partition": 1, "lanes": 4}
    asked = mcp.call("request_action", {
        "type": "spread_partition", "target": f"group:{live.group}/topic:{live.topic}/1",
        "params": params, "reason": "partition 1 holds the 500-page PDFs"})  # fmt: skip
    seen = mcp.call("actions", {"since_s": 120, "group": live.group})
    assert not asked.is_error, asked.content
    answer = asked.structured_content
    assert (answer["result"], answer["rail"], answer["action_id"]) == ("recommended", "mode", None)
    assert "observe mode" in answer["why"] and answer["action"]["type"] == "spread_partition"
    assert answer["requested_by"].startswith("e2e-bot via ")
    listed = seen.structured_content
    assert listed["actions"] == []  # nothing was published on the control topic
    assert [r["request_id"] for r in listed["requests"]] == [answer["request_id"]]


def test_a_target_outside_the_allow_list_is_refused_with_the_reason(
    live: Live, mcp: Session
) -> None:
    params = {"entity": "client-id", "name": "crawler-7", "producer_byte_rate": 2_000_000,
              "lease_s": 60, "topics": [live.topic]}  # fmt: skip
    got = mcp.call("request_action", {
        "type": "throttle_producer", "target": "client-id:crawler-7", "params": params,
        "reason": "crawler-7 floods the topic"})  # fmt: skip
    answer = got.structured_content
    assert (answer["result"], answer["rail"]) == ("refused", "allow_list"), answer
    assert "'crawler-7'" in answer["why"] and "throttle_client_ids" in answer["why"]


def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(
    live: Live, mcp: Session
) -> None:
    bad = {"type": "delete_topic", "target": "topic:x", "params": {}, "reason": "because"}
    bad_type = mcp.call("request_action", bad)
    missing = mcp.call("explain", {"group": live.group})
    negative = mcp.call("actions", {"since_s": -5})
    after = mcp.call("lag_status", {"group": live.group})
    for result, word in ((bad_type, "type"), (missing, "topic"), (negative, "since_s")):
        assert result.is_error
        assert word in result.content[0].text, result.content[0].text
    assert not after.is_error and after.structured_content["groups"]


def test_http_offers_halt_with_an_operator_key_and_records_the_caller(live: Live) -> None:
    port = free_port()
    env = {**os.environ, **live.env, "LAGPILOT_MCP_OPERATOR_KEY": "operator-key-0123456789"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.commands.cli",
            "mcp",
            "--transport",
            "http",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    scope = f"mcp-halt-{RUN}"
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            assert time.monotonic() < deadline and proc.poll() is None, "lagpilot mcp not up"
            time.sleep(0.2)

        async def go() -> Any:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = {t.name for t in (await client.list_tools()).tools}
                halted = await client.call_tool("halt", {"group": scope, "reason": "INC-7"})
                resumed = await client.call_tool("resume", {"group": scope, "reason": "INC-7 over"})
                return names, halted, resumed

        names, halted, resumed = anyio.run(go)
    finally:
        proc.terminate()
        proc.wait(10)
    assert {"halt", "resume"} <= names
    assert not halted.is_error and not resumed.is_error, (halted.content, resumed.content)
    sent = [
        e
        for _, e in recent_events(
            live.bootstrap, {}, [live.env["LAGPILOT_CONTROL_TOPIC"]], since_s=120, timeout_s=10
        )
        if e.get("params", {}).get("group") == scope
    ]
    assert [e["type"] for e in sent] == ["halt", "resume"]
    assert all(e["reason"]["by"].startswith("e2e-bot via ") for e in sent)
    assert sent[0]["reason"]["why"] == "INC-7" and sent[0]["reason"]["operator_key_id"]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
