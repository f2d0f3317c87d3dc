"""The command line's shared plumbing: options, exit codes, one-line errors, client logs.

``pipeline`` and ``actuators`` both have commands, and a user must meet one behaviour:

- **One way to configure.** Every option is read from its flag, then its environment
  variable, then the config file (``--config`` / ``LAGPILOT_CONFIG``), then its default.
  The config file is TOML whose keys are the environment variables' names without the
  ``LAGPILOT_`` prefix, lower case (``sample_interval_ms = 250``; ``bootstrap`` is
  ``KAFKA_BOOTSTRAP``; a ``[kafka]`` table holds the ``LAGPILOT_KAFKA_<NAME>`` client
  settings), so a setting has one name everywhere. ``--help`` shows each option's
  variable and default.
- **No traceback for an expected failure.** Broker unreachable, authentication or TLS
  failure, missing topic, ACL denied, bad key file, Admin API unreachable: one line saying
  what failed, where, and what to do, and a sysexits-style code (``EXIT_CODES``).
  ``--debug`` adds the traceback.
- **librdkafka speaks through lagpilot's logging**, at DEBUG on ``lagpilot.kafka``: its
  ``%3|...|FAIL|`` lines appear only with ``--log-level debug``, after lagpilot's own
  sentence has said what went wrong.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.cli_errors import EX_CONFIG as EX_CONFIG
from runtime.cli_errors import EX_FAILED as EX_FAILED
from runtime.cli_errors import EX_INTERRUPTED as EX_INTERRUPTED
from runtime.cli_errors import EX_NOINPUT as EX_NOINPUT
from runtime.cli_errors import EX_NOPERM as EX_NOPERM
from runtime.cli_errors import EX_OK as EX_OK
from runtime.cli_errors import EX_TEMPFAIL as EX_TEMPFAIL
from runtime.cli_errors import EX_UNAVAILABLE as EX_UNAVAILABLE
from runtime.cli_errors import EX_USAGE as EX_USAGE
from runtime.cli_errors import EXIT_CODES as EXIT_CODES
from runtime.cli_errors import CommandError as CommandError
from runtime.cli_errors import check_topic_access as check_topic_access
from runtime.cli_errors import connect as connect
from runtime.cli_errors import explain_kafka as explain_kafka
from runtime.cli_errors import is_denied as is_denied
from runtime.cli_errors import topic_creation_failed as topic_creation_failed
from runtime.client_log import CLIENT_LOG as CLIENT_LOG
from runtime.client_log import BrokerWatch as BrokerWatch
from runtime.client_log import ClientErrors as ClientErrors
from runtime.client_log import client_config as client_config
from runtime.client_log import unreachable_sentence as unreachable_sentence
from runtime.client_log import watch_client_logs as watch_client_logs
from runtime.env import coerce, parse_list
from schemas.codec import ConfigError
from schemas.policy_file import read_toml

CONFIG_ENV = "LAGPILOT_CONFIG"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP"
KAFKA_ENV_PREFIX = "LAGPILOT_KAFKA_"
DEFAULT_BOOTSTRAP = "127.0.0.1:21092"

log = logging.getLogger("lagpilot")


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Option:
    dest: str
    env: str
    default: Any
    type: Callable[[str], Any] = str
    fill: bool = True  # False: the command's own settings loader reads the variable
    many: bool = False  # a repeatable flag: the variable is comma-separated


def env_name(key: str) -> str:
    """The environment variable of a config-file key (``sample_interval_ms``)."""
    return BOOTSTRAP_ENV if key == "bootstrap" else f"LAGPILOT_{key.upper()}"


def config_file_env(path: str) -> dict[str, str]:
    """The config file as environment variables (lower priority than the real ones)."""
    doc = read_toml(
        path,
        f"{CONFIG_ENV}={path}",
        "point --config at a readable TOML file or unset it",
        "fix it there",
    )
    out: dict[str, str] = {}
    for key, value in doc.items():
        if key == "kafka" and isinstance(value, Mapping):
            for name, v in value.items():
                out[KAFKA_ENV_PREFIX + name.upper().replace(".", "_")] = _text(v)
        elif isinstance(value, Mapping):
            raise ConfigError(
                f"{path}: [{key}] is not a section lagpilot knows; settings are top-level "
                "keys (sample_interval_ms = 250) and client settings go in [kafka]"
            )
        else:
            out[env_name(key)] = _text(value)
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def kafka_settings(env: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from ``LAGPILOT_KAFKA_<NAME>``: ``..._SECURITY_PROTOCOL`` ->
    ``security.protocol``."""
    return {
        k[len(KAFKA_ENV_PREFIX) :].lower().replace("_", "."): v
        for k, v in env.items()
        if k.startswith(KAFKA_ENV_PREFIX) and v != ""
    }


class Parser(argparse.ArgumentParser):
    """argparse with lagpilot's rules: usage errors exit 64; options read flag > environment
    > config file > default; ``args.env`` is the environment merged with the config file."""

    def __init__(self, *args: Any, common: bool = True, **kw: Any) -> None:
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kw)
        self.options: list[Option] = []
        if common:
            add_common(self)

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: {message}; see {self.prog} --help\n")

    def option(
        self,
        *flags: str,
        env: str,
        default: Any = None,
        type: Callable[[str], Any] = str,
        help: str = "",
        fill: bool = True,
        **kw: Any,
    ) -> None:
        """An option with its variable and default in ``--help``."""
        shown = "none" if default in (None, "") else default
        action = self.add_argument(
            *flags, default=None, help=f"{help} [env {env}; default {shown}]", **kw
        )
        if kw.get("action") not in ("store_true", "store_false"):
            action.type = type
        many = kw.get("action") == "append"
        self.options.append(Option(action.dest, env, default, type, fill, many))

    def switch(self, *flags: str, env: str, help: str, **kw: Any) -> None:
        """A boolean flag, off unless given (or its variable is true)."""
        self.option(*flags, env=env, default=False, type=bool, action="store_true", help=help, **kw)

    def setting(self, *flags: str, env: str, help: str, **kw: Any) -> None:
        """A service's option: the service's own settings loader reads its variable."""
        self.option(*flags, env=env, help=help, fill=False, **kw)

    def subcommands(self, **kw: Any) -> Any:
        """Subparsers whose options are resolved by this parser (they add no common ones)."""
        return self.add_subparsers(parser_class=_SubParser, **kw)

    def adopt(self, sub: Parser) -> None:
        self.options.extend(sub.options)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns = super().parse_args(args, namespace)
        ns.env = dict(os.environ)
        path = getattr(ns, "config", None) or os.environ.get(CONFIG_ENV)
        if path:
            ns.env = {**config_file_env(path), **os.environ}
        for opt in self.options:
            if not hasattr(ns, opt.dest):  # another subcommand's option
                continue
            if getattr(ns, opt.dest) is not None or not opt.fill:
                continue
            raw = ns.env.get(opt.env, "")
            if raw == "":
                setattr(ns, opt.dest, opt.default)
                continue
            try:
                if opt.many:
                    value = [coerce(opt.env, opt.type, v) for v in parse_list(raw)]
                else:
                    value = coerce(opt.env, opt.type, raw)
                setattr(ns, opt.dest, value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{opt.env}={raw!r}: not a valid {_type_name(opt.type)}; fix or unset it"
                ) from None
        ns.kafka = kafka_settings(ns.env)
        return ns


class _SubParser(Parser):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, common=False, **kw)


def _type_name(typ: Any) -> str:
    return {int: "whole number", float: "number", bool: "true/false"}.get(typ, "value")


def add_common(p: Parser) -> None:
    """The options every command has, read the same way."""
    p.option("--config", env=CONFIG_ENV, help="TOML file of settings (keys: the variables' names)")
    p.option(
        "--log-level",
        env="LAGPILOT_LOG_LEVEL",
        default="info",
        help="debug shows the Kafka client's own lines",
    )
    p.switch("--debug", env="LAGPILOT_DEBUG", help="print the traceback of a failure")


def add_connection(
    p: Parser, *, fill_bootstrap: bool = True, connect_timeout_s: float = 10.0
) -> None:
    """``--bootstrap`` and ``--connect-timeout-s`` for commands that talk to the broker."""
    p.option(
        "--bootstrap",
        env=BOOTSTRAP_ENV,
        default=DEFAULT_BOOTSTRAP,
        help="Kafka bootstrap servers, host:port[,host:port]",
        fill=fill_bootstrap,
    )
    p.option(
        "--connect-timeout-s",
        env="LAGPILOT_CONNECT_TIMEOUT_S",
        default=connect_timeout_s,
        type=float,
        help="how long to wait for the broker before saying it is unreachable",
    )


def service_parser(prog: str, description: str, epilog: str) -> Parser:
    """The parser of a long-running service (``lagpilot run``, ``lagpilot actuate``): its
    options are ``setting``s, read by the service's settings loader, as is ``--bootstrap``."""
    p = Parser(prog=prog, description=description, epilog=epilog)
    add_connection(p, fill_bootstrap=False)
    return p


# --------------------------------------------------------------------------- logging


def setup_logging(level: str) -> None:
    try:
        logging.basicConfig(
            level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    except ValueError:
        raise CommandError(
            f"--log-level {level!r}: use debug, info, warning or error", EX_USAGE
        ) from None
    watch_client_logs()
    # `kill -USR1 <pid>` prints every thread's stack to stderr and the process goes on:
    # what a stuck lagpilot process is waiting for, without stopping it (docs/runbook.md)
    _stacks_on_sigusr1()
    if level.upper() != "DEBUG":  # HTTP clients' per-request lines are detail, as librdkafka's
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _stacks_on_sigusr1() -> None:
    """Register the stack dump on the process's stderr (the real one when a test harness
    has replaced ``sys.stderr`` with a buffer that has no file descriptor)."""
    if not hasattr(signal, "SIGUSR1"):
        return
    for stream in (sys.stderr, sys.__stderr__):
        if stream is None:
            continue
        try:
            faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)
            return
        except (AttributeError, OSError, ValueError):  # no fileno: try the next
            continue


# --------------------------------------------------------------------------- running


def run(prog: str, parser: Parser, body: Callable[[Any], int | None], argv: Any) -> int:
    """Parse, set up logging, run ``body``; turn every expected failure into one line.

    The line is ``<prog>: <what failed, where, what to do>`` on stderr; the exit code says
    which kind (``EXIT_CODES``). Anything unexpected prints its type and message and asks
    for ``--debug``, which prints every traceback.
    """
    from confluent_kafka import KafkaException

    debug = "--debug" in (argv or []) or os.environ.get("LAGPILOT_DEBUG", "") in {"1", "true"}
    args: Any = None
    try:
        args = parser.parse_args(argv)
        debug = debug or bool(getattr(args, "debug", False))
        setup_logging(args.log_level)
        return int(body(args) or 0)
    except CommandError as exc:
        return _fail(prog, str(exc), exc.exit_code, debug)
    except ConfigError as exc:
        return _fail(prog, f"configuration error: {exc}", EX_CONFIG, debug)
    except KafkaException as exc:
        where = getattr(args, "bootstrap", None) or "the broker"
        err = explain_kafka(exc, bootstrap=where)
        return _fail(prog, str(err), err.exit_code, debug)
    except KeyboardInterrupt:
        return EX_INTERRUPTED
    except BrokenPipeError:  # the reader stopped (`| head`, `| jq` that quit): not a failure
        _silence_stdout()
        return EX_OK
    except Exception as exc:
        return _fail(
            prog,
            f"unexpected error: {type(exc).__name__}: {exc}; rerun with --debug for the "
            "traceback and report it",
            EX_FAILED,
            debug,
        )


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (captured in a test)
        pass


def _fail(prog: str, message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    return code
