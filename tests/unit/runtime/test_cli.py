"""The command line's shared plumbing, without a broker: option order, exit codes, and the
sentence each librdkafka error becomes (built from librdkafka's own error codes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from runtime.cli import (
    EX_CONFIG,
    EX_FAILED,
    EX_NOINPUT,
    EX_NOPERM,
    EX_UNAVAILABLE,
    EX_USAGE,
    EXIT_CODES,
    Parser,
    add_connection,
    config_file_env,
    explain_kafka,
    run,
)
from schemas import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _parser() -> Parser:
    p = Parser(prog="lagpilot test")
    add_connection(p)
    p.option("--interval-ms", env="LAGPILOT_INTERVAL_MS", default=250, type=int, help="x")
    p.option("--flag", env="LAGPILOT_FLAG", default=False, type=bool, action="store_true")
    return p


def test_flag_beats_env_beats_config_file_beats_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("KAFKA_BOOTSTRAP", "LAGPILOT_INTERVAL_MS", "LAGPILOT_CONFIG", "LAGPILOT_FLAG"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "lagpilot.toml"
    cfg.write_text(
        'bootstrap = "file:1"\ninterval_ms = 300\nflag = true\n[kafka]\nsecurity_protocol = "SSL"\n'
    )
    assert _parser().parse_args([]).interval_ms == 250  # default
    args = _parser().parse_args(["--config", str(cfg)])
    assert (args.bootstrap, args.interval_ms, args.flag) == ("file:1", 300, True)
    assert args.kafka == {"security.protocol": "SSL"}
    monkeypatch.setenv("LAGPILOT_INTERVAL_MS", "400")
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "env:1")
    args = _parser().parse_args(["--config", str(cfg)])
    assert (args.bootstrap, args.interval_ms) == ("env:1", 400)
    args = _parser().parse_args(["--config", str(cfg), "--interval-ms", "500"])
    assert args.interval_ms == 500


def test_a_repeatable_option_reads_a_comma_separated_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = Parser(prog="lagpilot test")
    p.option("--group", env="LAGPILOT_TAIL_GROUP", action="append", help="x")
    monkeypatch.setenv("LAGPILOT_TAIL_GROUP", "parsers, crawlers")
    assert p.parse_args([]).group == ["parsers", "crawlers"]
    assert p.parse_args(["--group", "a"]).group == ["a"]


def test_a_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAGPILOT_INTERVAL_MS", "soon")
    with pytest.raises(ConfigError, match="LAGPILOT_INTERVAL_MS='soon': not a valid whole"):
        _parser().parse_args([])


def test_a_config_file_section_lagpilot_does_not_know_is_an_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[pipeline]\nwindow_s = 3\n")
    with pytest.raises(ConfigError, match=r"\[pipeline\] is not a section"):
        config_file_env(str(cfg))
    with pytest.raises(ConfigError, match=r"LAGPILOT_CONFIG=.*cannot be read"):
        config_file_env(str(tmp_path / "absent.toml"))


def test_help_shows_every_option_with_its_variable_and_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        _parser().parse_args(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "[env KAFKA_BOOTSTRAP; default 127.0.0.1:21092]" in text
    assert "[env LAGPILOT_INTERVAL_MS; default 250]" in text
    assert "[env LAGPILOT_CONNECT_TIMEOUT_S; default 10.0]" in text


def test_usage_errors_exit_64(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        _parser().parse_args(["--interval-ms", "x"])
    assert done.value.code == EX_USAGE
    assert "see lagpilot test --help" in capsys.readouterr().err


def _exc(code: int, text: str = "") -> KafkaException:
    return KafkaException(KafkaError(code, text))


@pytest.mark.parametrize(
    ("error", "seen", "code", "words"),
    [
        (_exc(KafkaError._TRANSPORT, "Failed to get metadata"),
         [KafkaError(KafkaError._TRANSPORT, "h:1/bootstrap: Connect to ipv4#h:1 failed: "
                     "Connection refused (after 0ms in state CONNECT)")],
         EX_UNAVAILABLE, ["cannot reach the broker at h:1", "Connection refused"]),
        (_exc(KafkaError._TRANSPORT, "Failed to get metadata"),
         [KafkaError(KafkaError._AUTHENTICATION, "SASL PLAIN mechanism handshake failed")],
         EX_NOPERM, ["authentication failed at h:1", "SASL_USERNAME"]),
        (_exc(KafkaError._TRANSPORT, "Failed to get metadata"),
         [KafkaError(KafkaError._TRANSPORT, "SSL handshake failed: connecting to a PLAINTEXT "
                     "broker listener?")],
         EX_CONFIG, ["TLS failed for h:1", "LAGPILOT_KAFKA_SECURITY_PROTOCOL"]),
        (_exc(KafkaError.TOPIC_AUTHORIZATION_FAILED), [], EX_NOPERM,
         ["permission denied on topic lagpilot.lag at h:1", "TOPIC_AUTHORIZATION_FAILED"]),
        (_exc(KafkaError.GROUP_AUTHORIZATION_FAILED), [], EX_NOPERM, ["permission denied"]),
        (_exc(KafkaError.CLUSTER_AUTHORIZATION_FAILED), [], EX_NOPERM, ["permission denied"]),
        (_exc(KafkaError.UNKNOWN_TOPIC_OR_PART), [], EX_NOINPUT,
         ["topic lagpilot.lag not found at h:1", "lagpilot run"]),
        (_exc(KafkaError._INVALID_ARG, 'No such configuration property: "x.y"'), [], EX_CONFIG,
         ["bad Kafka client setting", "x.y"]),
        (_exc(KafkaError.INVALID_CONFIG, "something else"), [], EX_FAILED,
         ["Kafka error at topic lagpilot.lag at h:1: INVALID_CONFIG"]),
    ],
)  # fmt: skip
def test_each_librdkafka_failure_is_one_sentence_with_its_code(
    error: KafkaException, seen: list[KafkaError], code: int, words: list[str]
) -> None:
    err = explain_kafka(error, bootstrap="h:1", topic="lagpilot.lag", seen=seen)
    assert err.exit_code == code
    for w in words:
        assert w in str(err)
    assert "\n" not in str(err) and "(after " not in str(err)


def test_run_turns_failures_into_one_line_and_debug_adds_the_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def body(_: object) -> int:
        raise _exc(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")

    assert run("lagpilot x", _parser(), body, ["--bootstrap", "h:1"]) == EX_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.startswith("lagpilot x: cannot reach the broker at h:1") and "Traceback" not in err
    assert run("lagpilot x", _parser(), body, ["--bootstrap", "h:1", "--debug"]) == 69
    assert "Traceback" in capsys.readouterr().err

    def bug(_: object) -> int:
        raise RuntimeError("boom")

    assert run("lagpilot x", _parser(), bug, []) == EX_FAILED
    err = capsys.readouterr().err
    assert "unexpected error: RuntimeError: boom; rerun with --debug" in err
    assert "Traceback" not in err


def test_the_runbook_documents_every_exit_code() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    documented = {int(c) for c in re.findall(r"^\| `(\d+)` \|", runbook, re.MULTILINE)}
    assert documented == set(EXIT_CODES)


def test_the_readme_config_file_example_names_real_variables(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```toml\n(.*?)```", readme, re.DOTALL)
    assert example is not None
    cfg = tmp_path / "lagpilot.toml"
    cfg.write_text(example.group(1))
    env = config_file_env(str(cfg))
    assert env == {
        "KAFKA_BOOTSTRAP": "redpanda-0:9092",
        "LAGPILOT_SAMPLE_INTERVAL_MS": "250",
        "LAGPILOT_POLICY_FILE": "/etc/lagpilot/policy.toml",
        "LAGPILOT_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    }


def test_librdkafka_lines_reach_lagpilot_kafka_at_debug_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real client on a closed port logs FAIL lines (librdkafka level 3): they arrive on
    ``lagpilot.kafka`` at DEBUG, both from lagpilot's clients and from the logger Quix
    Streams gives its clients; Quix's own lines on that logger pass unchanged."""
    import logging
    import time

    from confluent_kafka import Consumer

    from runtime.cli import CLIENT_LOG, setup_logging

    setup_logging("info")
    quix = logging.getLogger("quixstreams.kafka.consumer")
    caplog.set_level(logging.DEBUG)
    clients = [
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "logger": CLIENT_LOG}),
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "logger": quix}),
    ]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for c in clients:
            c.poll(0.1)
        client_lines = [r for r in caplog.records if r.name == "lagpilot.kafka"]
        if len({r.getMessage().split("[")[1] for r in client_lines}) == 2:
            break
    for c in clients:
        c.close()
    client_lines = [r for r in caplog.records if r.name == "lagpilot.kafka"]
    assert {r.levelno for r in client_lines} == {logging.DEBUG}
    assert any("Connection refused" in r.getMessage() for r in client_lines)
    assert len({r.getMessage().split("[")[1] for r in client_lines}) == 2  # both clients
    assert not [r for r in caplog.records if r.name == quix.name]
    quix.error("Kafka consumer error: x")  # Quix's own sentence is not swallowed
    assert [r.levelno for r in caplog.records if r.name == quix.name] == [logging.ERROR]


def test_the_broker_going_mid_run_is_said_once_in_lagpilots_words_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What Quix's clients log when the broker goes (librdkafka's FAIL line through Quix's
    logger, Quix's error callback at ERROR, its ALL_BROKERS_DOWN warning) reaches the user
    as lagpilot's one sentence, then the detail at DEBUG on ``lagpilot.kafka``."""
    import logging

    from runtime.cli import BrokerWatch

    quix = logging.getLogger("test.quix.client")
    watch = BrokerWatch("b:9092", repeat_s=60)
    quix.addFilter(watch)
    caplog.set_level(logging.DEBUG)
    try:
        refused = "Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
        fail = ("FAIL", "rdkafka#consumer-3", f"[thrd:b:9092/1]: b:9092/1: {refused} (after 0ms)")
        quix.error("%s [%s] %s", *fail)
        quix.error('Kafka consumer error: 1/1 brokers are down code="-187"')
        quix.warning("1/1 brokers are down")
        quix.error("Kafka consumer error: Broker: Group authorization failed code=30")
    finally:
        quix.removeFilter(watch)
    seen = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert seen[0] == (
        "lagpilot",
        "WARNING",
        "cannot reach the broker at b:9092 (b:9092/1: Connect to ipv4#10.0.0.1:9092 failed: "
        "Connection refused); retrying, /readyz is false",
    )
    assert [s[1] for s in seen[1:4]] == ["DEBUG"] * 3  # once, then detail only
    assert {s[0] for s in seen[1:4]} == {"lagpilot.kafka"}
    denied = "Kafka consumer error: Broker: Group authorization failed code=30"
    assert seen[4] == ("test.quix.client", "ERROR", denied)  # not the broker going: unchanged
    assert len(seen) == 5


def test_a_reader_that_stops_reading_is_not_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    """``lagpilot status --json | head -1``: the pipe closes under the command; it ends
    quietly with 0, not with "unexpected error: BrokenPipeError"."""

    def body(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert run("lagpilot status", _parser(), body, []) == 0
    assert capsys.readouterr().err == ""


def test_sigusr1_prints_every_threads_stack_and_the_process_goes_on() -> None:
    """The runbook's way to see what a stuck process waits for: its stacks, not its end."""
    import signal
    import subprocess
    import sys
    import time

    code = (
        "import sys, time\n"
        "from runtime.cli import setup_logging\n"
        "setup_logging('info')\n"
        "print('ready', flush=True)\n"
        "def waiting_for_the_broker():\n"
        "    time.sleep(3)\n"
        "waiting_for_the_broker()\n"
        "print('went on', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "went on" in out
    assert "waiting_for_the_broker" in err, err
