"""The ``lagpilot`` command: one subcommand per process lagpilot runs.

Each subcommand names the module whose ``main(argv)`` runs it; modules are imported only
when their subcommand is chosen, so ``pipeline`` never imports ``actuators`` (the two share
only ``schemas``) and ``lagpilot --help`` starts fast.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

from runtime.cli import EX_USAGE

COMMANDS: dict[str, tuple[str, str]] = {
    "run": (
        "pipeline.__main__",
        "run the pipeline: __consumer_offsets + watermarks -> lag -> policy",
    ),
    "sample": ("pipeline.commands.sample", "run only the high-watermark sampler"),
    "status": ("pipeline.commands.status", "print the current lag table from lagpilot.lag"),
    "control": ("pipeline.commands.control", "kill switch and control topic: halt | resume | tail"),
    "scaler": ("pipeline.serve.keda.server", "KEDA external scaler (gRPC) on lagpilot.lag"),
    "mcp": ("pipeline.serve.mcp.server", "MCP server for agents: lag, explain, actions, requests"),
    "actuate": ("actuators.__main__", "run the actuator: lagpilot.control -> cluster -> outcomes"),
    "workers": (
        "actuators.workers.supervisor",
        "run agent worker processes, scaled by lagpilot's scale_consumers",
    ),
    "keys": (
        "pipeline.commands.keys",
        "make an Ed25519 role key pair: keys new --role R --out DIR",
    ),
    "doctor": (
        "pipeline.commands.doctor",
        "check broker, permissions, topics, Admin API, key, policy, clock",
    ),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: lagpilot <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += [
        f"  {'version':<{width}}  print the version",
        "",
        "lagpilot <command> --help for its options, their environment variables and",
        "defaults, and an example. Exit codes: 0 ok, 64 usage, 66 topic missing,",
        "69 unreachable, 75 try again, 77 permission, 78 configuration, 1 other failure.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name in {"version", "--version"}:
        try:
            print(version("lagpilot"))
        except PackageNotFoundError:
            print("unknown (not installed)")
        return 0
    if name not in COMMANDS:
        print(f"lagpilot: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return EX_USAGE
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
