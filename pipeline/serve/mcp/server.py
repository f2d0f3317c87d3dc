"""``lagpilot mcp``: the Model Context Protocol server (stdio or streamable HTTP).

Tools: ``lag_status``, ``explain``, ``actions``, ``group_health``, ``request_action``, and
``halt`` / ``resume`` only when an operator key is configured. Resources: the runbook, the
current policy, and the event schemas. Everything it knows it reads from lagpilot's topics;
the only things it writes are signed requests (evaluated by the decide stage with every
rail) and, with the operator key, the kill switch, each recorded with the caller's identity.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import socket
import sys
import time
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from pipeline.decide.policy_config import load_policy_config
from pipeline.serve.mcp import reading, views
from pipeline.serve.mcp.requesting import Requester, Topics
from pipeline.serve.mcp.resources import add_resources
from runtime.cli import CommandError, Parser, add_connection, explain_kafka, run
from schemas import ActionType, ConfigError, EventError, load_signer, topics
from schemas.codec import read_secret
from schemas.keys import OPERATOR

log = logging.getLogger("lagpilot.mcp")
OPERATOR_KEY_ENV = "LAGPILOT_MCP_OPERATOR_KEY"
OPERATOR_KEY_FILE_ENV = "LAGPILOT_MCP_OPERATOR_KEY_FILE"
REQUESTABLE = Literal[
    "throttle_producer",
    "release_producer",
    "transfer_leadership",
    "add_partitions",
    "spread_partition",
    "restore_partition",
    "scale_consumers",
]
Group = Annotated[str, Field(min_length=1, max_length=255, description="consumer group")]
Topic = Annotated[str, Field(min_length=1, max_length=249, description="Kafka topic")]
Reason = Annotated[str, Field(min_length=1, max_length=2000)]
HaltScope = Literal["actions", "workload"]


def operator_key(env: Mapping[str, str]) -> bytes | None:
    """The operator key (``LAGPILOT_MCP_OPERATOR_KEY`` or ``..._FILE``), or None: no halt."""
    key = read_secret(env, OPERATOR_KEY_ENV, OPERATOR_KEY_FILE_ENV, "file holding the operator key")
    if not key:
        return None
    if len(key) < 16:
        raise ConfigError(
            f"{OPERATOR_KEY_ENV}: shorter than 16 bytes; use a random secret "
            "(openssl rand -hex 32) or unset it to offer no halt/resume"
        )
    return key


class Lagpilot:
    """The server's settings and its I/O: what every tool calls (tests call it directly)."""

    def __init__(self, args: Any) -> None:
        self.bootstrap, self.kafka = args.bootstrap, dict(args.kafka)
        self.timeout_s, self.since_s, self.wait_s = (
            args.connect_timeout_s,
            args.since_s,
            args.wait_s,
        )
        self.policy_path = args.policy_file or args.env.get("LAGPILOT_POLICY_FILE") or None
        self.policy = load_policy_config(self.policy_path, env=args.env)
        self.identity = args.identity or f"{getpass.getuser()}@{socket.gethostname()}"
        # requests and halts are signed as the operator's (its role key, or the shared key)
        self.key = load_signer(args.env, OPERATOR)
        self.operator_key = operator_key(args.env)
        self.topics = Topics(args.requests_topic, args.outcomes_topic, args.control_topic)
        self.requester = Requester(self.bootstrap, self.kafka, self.key, self.topics)

    def lag_status(self, group: str | None, topic: str | None) -> dict[str, Any]:
        return reading.lag_status(
            self.bootstrap,
            self.kafka,
            group=group,
            topic=topic,
            since_s=self.since_s,
            timeout_s=self.timeout_s,
        )

    def joined(self, since_s: float, group: str | None) -> dict[str, list[dict[str, Any]]]:
        events = reading.recent_events(
            self.bootstrap,
            self.kafka,
            [self.topics.control, self.topics.outcomes],
            since_s=since_s,
            timeout_s=self.timeout_s,
        )
        return views.join_actions(events, group)

    def caller(self, client: str | None) -> str:
        return f"{self.identity} via {client}" if client else self.identity

    def switch(
        self, kind: ActionType, scope: str, group: str | None, reason: str, caller: str
    ) -> dict[str, Any]:
        from confluent_kafka import Producer

        from pipeline.decide.control import control_action, publish_actions
        from runtime.cli import client_config

        assert self.operator_key is not None  # the tool exists only with the key
        now_ms = int(time.time() * 1000)
        action = control_action(kind, scope, now_ms=now_ms, reason=reason, group=group)
        key_id = hashlib.sha256(self.operator_key).hexdigest()[:12]
        action["reason"] = {
            **action["reason"],
            "by": caller,
            "via": "lagpilot mcp",
            "operator_key_id": key_id,
        }
        producer = Producer(
            {**client_config(self.bootstrap, self.kafka), "enable.idempotence": True, "acks": "all"}
        )
        [event] = publish_actions(producer, [action], self.key, topic=self.topics.control)
        log.warning("%s scope=%s by %s (operator key %s): %s", kind, scope, caller, key_id, reason)
        return {
            "published": True,
            "id": event["id"],
            "type": str(kind),
            "scope": scope,
            "group": group,
            "by": caller,
            "operator_key_id": key_id,
            "topic": self.topics.control,
        }


def _client_name(ctx: Any) -> str | None:
    try:
        params = ctx.session.client_params
    except Exception:  # no session (a direct call): no client name to record
        return None
    info = getattr(params, "client_info", None)
    return f"{info.name}/{info.version}" if info is not None else None


def _io(fn: Any, *args: Any, bootstrap: str = "the broker") -> Any:
    """Run one broker call; its expected failures become one-line tool errors (the same
    sentences the command line prints: what failed, where, what to do)."""
    from confluent_kafka import KafkaException

    from pipeline.decide.control import PublishError

    try:
        return fn(*args)
    except (CommandError, ConfigError, EventError) as exc:
        raise ToolError(str(exc)) from exc
    except PublishError as exc:
        again = "try again" if exc.retriable else "retrying will not help"
        raise ToolError(f"{exc} ({again})") from exc
    except KafkaException as exc:
        raise ToolError(str(explain_kafka(exc, bootstrap=bootstrap))) from exc


def build_server(lp: Lagpilot) -> MCPServer:
    """The MCPServer with lagpilot's tools and resources."""

    def io(fn: Any, *args: Any) -> Any:
        return _io(fn, *args, bootstrap=lp.bootstrap)

    mcp = MCPServer(
        "lagpilot",
        instructions=(
            "lagpilot watches Kafka/Redpanda consumer lag. Ask lag_status for the table, "
            "explain(group, topic) for why a stream is slow and what lagpilot does about it, "
            "actions for what was done. request_action asks the decide stage for an action: "
            "it never acts directly, every rail applies, and the answer says applied, "
            "recommended or refused and why."
        ),
    )

    @mcp.tool()
    def lag_status(group: Group | None = None, topic: Topic | None = None) -> dict[str, Any]:
        """The current lag table, as `lagpilot status` prints it: per group and topic the
        status, offset lag, time lag (seconds behind), lag rate, and per partition (with a
        group) the owner; `table` is the same text `lagpilot status` prints."""
        return dict(io(lp.lag_status, group, topic))

    @mcp.tool()
    def explain(group: Group, topic: Topic, since_s: float = 900.0) -> dict[str, Any]:
        """Why is this group slow on this topic? The open incident (status, time lag, worst
        partitions), its diagnosed cause and evidence, the remedies taken with their
        outcomes and verification, and what lagpilot would do next."""
        lag = io(lp.lag_status, group, topic)
        joined = io(lp.joined, since_s, group)
        return views.explain(group, topic, lag, joined, lp.policy)

    @mcp.tool()
    def actions(
        since_s: Annotated[float, Field(gt=0, le=7 * 86400)] = 3600.0, group: Group | None = None
    ) -> dict[str, Any]:
        """Actions of the last `since_s` seconds (of one consumer group, if given), each with
        its reason, the actuator's outcomes, how many worker instances applied it, and its
        verification; and the requests made through request_action, with their verdicts."""
        joined = io(lp.joined, since_s, group)
        for a in joined["actions"]:
            a["state"] = views.state_of(a)
        return dict(joined)

    @mcp.tool()
    def group_health(group: Group) -> dict[str, Any]:
        """A consumer group's health: state, generation, members (client id, host, assigned
        partitions), rebalances per minute, whether commits are stalled, and the member
        a rebalance storm is blamed on."""
        doc = io(lp.lag_status, group, None)
        found = doc["group_health"]
        if not found:
            raise ToolError(
                f"no group_health event for {group!r} in the last {lp.since_s:g} s: "
                "is the group alive and watched by the pipeline?"
            )
        return dict(found[0])

    @mcp.tool()
    def request_action(
        type: REQUESTABLE,
        target: Annotated[str, Field(min_length=1, max_length=500)],
        params: dict[str, Any],
        reason: Reason,
        ctx: Context,
    ) -> dict[str, Any]:
        """Ask lagpilot to take an action. It is never applied directly: a signed request
        goes to the decide stage, which applies every rail (mode, kill switch, allow-lists,
        floors, cooldown, budget, hysteresis). Returns `result`: applied, recommended,
        refused (with the `rail` and `why`), failed, delegated (to the SDK workers),
        recorded (noted, not applied), or pending if no answer
        came in time. `params` are the action's, as in docs/events.md (e.g. spread_partition:
        group, topic, partition, lanes)."""
        caller = lp.caller(_client_name(ctx))
        return dict(
            io(
                lambda: lp.requester.request(
                    type, target, params, reason, requested_by=caller, wait_s=lp.wait_s
                )
            )
        )

    if lp.operator_key is not None:

        @mcp.tool()
        def halt(
            reason: Reason, ctx: Context, scope: HaltScope = "actions", group: Group | None = None
        ) -> dict[str, Any]:
            """The kill switch. scope "actions": lagpilot changes nothing (of one consumer
            group, if given); "workload": the group's SDK workers pause processing (needs
            group). Recorded with your identity."""
            caller = lp.caller(_client_name(ctx))
            return dict(io(lp.switch, ActionType.HALT, scope, group, reason, caller))

        @mcp.tool()
        def resume(
            reason: Reason, ctx: Context, scope: HaltScope = "actions", group: Group | None = None
        ) -> dict[str, Any]:
            """Lift a halt of this scope (and group). Recorded with your identity."""
            caller = lp.caller(_client_name(ctx))
            return dict(io(lp.switch, ActionType.RESUME, scope, group, reason, caller))

    add_resources(mcp, lp.policy, lp.policy_path)
    return mcp


EXAMPLE = """examples:
  LAGPILOT_SIGNING_KEY_FILE=/etc/lagpilot/key lagpilot mcp            # stdio, for a desktop client
  lagpilot mcp --transport http --port 8765 --identity oncall-bot      # http://HOST:8765/mcp
"""


def _parser() -> Parser:
    p = Parser(prog="lagpilot mcp", description=__doc__, epilog=EXAMPLE)
    add_connection(p)
    p.option(
        "--transport",
        env="LAGPILOT_MCP_TRANSPORT",
        default="stdio",
        choices=["stdio", "http"],
        help="stdio, or streamable HTTP at /mcp",
    )
    p.option("--host", env="LAGPILOT_MCP_HOST", default="127.0.0.1", help="HTTP listen address")
    p.option("--port", env="LAGPILOT_MCP_PORT", default=8765, type=int, help="HTTP port")
    p.option(
        "--identity",
        env="LAGPILOT_MCP_IDENTITY",
        help="who the caller is, recorded on every request and halt (default user@host)",
    )
    p.option(
        "--policy-file",
        env="LAGPILOT_POLICY_FILE",
        help="the policy file the pipeline runs (for explain and the policy resource)",
    )
    for name, default, help_ in (  # --<name>-topic, LAGPILOT_<NAME>_TOPIC
        ("control", topics.CONTROL, "control topic"),
        ("requests", topics.REQUESTS, "where action requests go (the pipeline's "
         "LAGPILOT_REQUESTS_TOPIC)"),
        ("outcomes", topics.OUTCOMES, "outcomes, verification and request verdicts "
         "(the pipeline's and actuator's)"),
    ):  # fmt: skip
        env = f"LAGPILOT_{name.upper()}_TOPIC"
        p.option(f"--{name}-topic", env=env, default=default, help=help_)
    p.option(
        "--since-s",
        env="LAGPILOT_STATUS_SINCE_S",
        default=5.0,
        type=float,
        help="lag_status reads this many seconds back",
    )
    p.option(
        "--wait-s",
        env="LAGPILOT_MCP_WAIT_S",
        default=15.0,
        type=float,
        help="how long request_action waits for the verdict and the outcome",
    )
    return p


def _serve(args: Any) -> int:
    lp = Lagpilot(args)
    server = build_server(lp)
    halt = "offered" if lp.operator_key is not None else f"not offered (no {OPERATOR_KEY_ENV})"
    log.info("lagpilot mcp on %s; identity %s; halt/resume %s", args.transport, lp.identity, halt)
    if args.transport == "http":
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run("lagpilot mcp", _parser(), _serve, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
