"""Exit codes and one-line errors of lagpilot's commands (re-exported by ``runtime.cli``).

``explain_kafka`` turns a librdkafka failure into one sentence and a sysexits-style code:
what failed, where, and what to change. ``connect`` is every command's first call to the
broker, so the first failure a user meets is said in these words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime.client_log import ClientErrors, client_config
from runtime.client_log import short as _short
from schemas.errors import LagpilotError

EX_OK = 0
EX_FAILED = 1
EX_USAGE = 64
EX_NOINPUT = 66
EX_UNAVAILABLE = 69
EX_CANTCREAT = 73
EX_TEMPFAIL = 75
EX_NOPERM = 77
EX_CONFIG = 78
EX_INTERRUPTED = 130

#: every exit code a lagpilot command returns, and what it means (docs/runbook.md lists them)
EXIT_CODES: dict[int, str] = {
    EX_OK: "success",
    EX_FAILED: "a doctor check failed, or an unexpected error (rerun with --debug)",
    EX_USAGE: "bad command line: unknown option, missing or malformed argument",
    EX_NOINPUT: "a topic lagpilot reads is missing (is the pipeline running?)",
    EX_UNAVAILABLE: "broker or Redpanda Admin API unreachable",
    EX_CANTCREAT: "the state directory cannot be written (read-only, full, not a directory): "
    "the message names it and the fix",
    EX_TEMPFAIL: "a publish timed out or failed retriably: try again",
    EX_NOPERM: "authentication failed or an ACL denies the operation",
    EX_CONFIG: "configuration error: a setting, the policy file, TLS files or the signing key",
    EX_INTERRUPTED: "interrupted (Ctrl-C)",
}


class CommandError(LagpilotError):
    """An expected failure: ``str(exc)`` is the one line a user reads, ``exit_code`` its class."""

    def __init__(self, message: str, exit_code: int = EX_FAILED) -> None:
        super().__init__(message, code=exit_code)
        self.exit_code = exit_code


# --------------------------------------------------------------------------- errors

_MISSING = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_ID"}
_UNREACHABLE = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE", "_MSG_TIMED_OUT",
                "REQUEST_TIMED_OUT", "_TIMED_OUT_QUEUE", "NETWORK_EXCEPTION"}  # fmt: skip
_CONFIG = {"_INVALID_ARG", "_SSL", "_UNKNOWN_PROTOCOL", "_NOT_IMPLEMENTED"}
_TLS_WORDS = ("SSL", "TLS", "certificate")


def explain_kafka(
    exc: Any, *, bootstrap: str, topic: str | None = None, seen: Sequence[Any] = ()
) -> CommandError:
    """One sentence and an exit code for a librdkafka failure.

    ``seen`` are the errors the client reported through ``error_cb`` meanwhile: the most
    specific of them (authentication, TLS) names the cause better than the call's own error.
    """
    from confluent_kafka import KafkaError

    from runtime.kafka import AUTH_FAILED, DENIED, Fault, fault

    faults = [
        fault(e) if isinstance(e, BaseException | KafkaError) else Fault(str(e), None, True)
        for e in (exc, *seen)
    ]
    names = [f.code if isinstance(f.code, str) else "" for f in faults]  # librdkafka's names
    texts = [f.message for f in faults]
    where = f"topic {topic} at {bootstrap}" if topic else bootstrap
    for name, text in zip(names, texts, strict=True):
        if name in AUTH_FAILED:
            return CommandError(
                f"authentication failed at {bootstrap} ({_short(text)}); check "
                "LAGPILOT_KAFKA_SASL_MECHANISM, _SASL_USERNAME and _SASL_PASSWORD, and that "
                "the listener speaks LAGPILOT_KAFKA_SECURITY_PROTOCOL",
                EX_NOPERM,
            )
    for name, text in zip(names, texts, strict=True):  # a fatal error names it in its text
        if name in DENIED or "authorization failed" in text.lower():
            return CommandError(
                f"permission denied on {where} ({name}); grant lagpilot's principal the "
                "ACLs listed in docs/runbook.md (lagpilot doctor shows which are missing)",
                EX_NOPERM,
            )
    for name, text in zip(names, texts, strict=True):
        if name in _CONFIG or (name == "_TRANSPORT" and any(w in text for w in _TLS_WORDS)):
            tls = any(w in text for w in _TLS_WORDS)
            fix = (
                "check LAGPILOT_KAFKA_SECURITY_PROTOCOL and the LAGPILOT_KAFKA_SSL_* files "
                "against the broker's listener"
                if tls
                else "check the LAGPILOT_KAFKA_* client settings (librdkafka names)"
            )
            what = "TLS failed" if tls else "bad Kafka client setting"
            return CommandError(f"{what} for {bootstrap} ({_short(text)}); {fix}", EX_CONFIG)
    for name in names:
        if name in _MISSING:
            return CommandError(
                f"{'topic ' + topic if topic else 'a topic'} not found at {bootstrap}; "
                "start the pipeline (lagpilot run creates lagpilot's topics) or check the name",
                EX_NOINPUT,
            )
    detail_first = list(zip(names, texts, strict=True))
    for name, text in detail_first[1:] + detail_first[:1]:  # the client's own words first
        if name in _UNREACHABLE:
            return CommandError(
                f"cannot reach the broker at {bootstrap} ({_short(text)}); check --bootstrap "
                "or KAFKA_BOOTSTRAP and that the broker is up (lagpilot doctor)",
                EX_UNAVAILABLE,
            )
    return CommandError(f"Kafka error at {where}: {names[0]}: {_short(texts[0])}", EX_FAILED)


def topic_creation_failed(exc: Exception, topic: str | None, bootstrap: str) -> CommandError:
    """Quix Streams' CreateTopicFailure / TopicPermissionError in one line: an ACL denial is
    exit 77 with the ACLs to grant (Quix words it "verify if ... allowed for your
    credentials"). ``topic`` None: lagpilot's topics, whichever Quix was creating."""
    text = str(exc)
    what = f"topic {topic}" if topic else "lagpilot's topics"
    if "allowed for your credentials" in text or "AUTHORIZATION" in text.upper():
        return CommandError(
            f"permission denied: cannot create or read {what} at {bootstrap}; create them by "
            "hand, or grant lagpilot's principal CREATE on the cluster and READ, WRITE, "
            "DESCRIBE, DESCRIBE_CONFIGS on them (docs/runbook.md lists the ACLs)",
            EX_NOPERM,
        )
    return CommandError(f"cannot create {what} at {bootstrap}: {text}", EX_FAILED)


def connect(
    bootstrap: str, kafka: Mapping[str, str], timeout_s: float, *, topic: str | None = None
) -> Any:
    """Cluster metadata from an AdminClient, or a ``CommandError`` saying why not."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors = ClientErrors()
    conf = client_config(bootstrap, kafka, errors)
    conf.setdefault("socket.connection.setup.timeout.ms", max(1000, int(timeout_s * 1000)))
    # asking for one topic must not create it (an admin handle allows that by default, and
    # brokers with auto.create.topics.enable obey)
    conf["allow.auto.create.topics"] = False
    admin = None
    try:
        admin = AdminClient(conf)
        md = admin.list_topics(topic=topic, timeout=timeout_s)
    except KafkaException as exc:
        if admin is not None:
            admin.poll(0)  # serve the error callbacks: they hold the cause
        raise explain_kafka(exc, bootstrap=bootstrap, seen=errors.errors) from exc
    if topic is not None:
        check_topic_access(md, topic, bootstrap)
    return md


def check_topic_access(md: Any, topic: str, bootstrap: str) -> None:
    """Raise the ACL denial a metadata answer holds for ``topic`` (exit 77).

    A principal without DESCRIBE on a topic gets TOPIC_AUTHORIZATION_FAILED for it, whether
    or not it exists; a listing of every topic just leaves it out, which would read as
    "missing". A missing topic is the caller's to judge (some create it).
    """
    meta = md.topics.get(topic)
    err = getattr(meta, "error", None)
    if err is not None and is_denied(err):
        raise explain_kafka(err, bootstrap=bootstrap, topic=topic)


def is_denied(err: Any) -> bool:
    """Whether a librdkafka error (or exception) is an ACL denial (runtime.kafka's
    rule; imported when asked, so that a command's ``--help`` does not load librdkafka)."""
    from runtime.kafka import is_denied as denied

    return denied(err)
