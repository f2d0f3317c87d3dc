"""The policy TOML, read once: the file, its ``mode`` and its ``[allow]`` table.

Both sides read the same file: the pipeline all of it (``pipeline.decide.policy_config``,
one reader per table), the actuator only ``mode`` (its cap) and ``[allow]`` (checked again
before it applies anything). The file is parsed here, and ``mode`` and ``[allow]`` are
validated here, so the two readings of one file cannot drift apart (one parser, one
wording for each mistake). Errors name the key and what to write instead.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from schemas.actions import Mode
from schemas.allow import AllowList
from schemas.errors import ConfigError

FILE_ENV = "LAGPILOT_POLICY_FILE"
ALLOW_KEYS = ("partition_topics", "throttle_client_ids")


def read_toml(
    path: str | Path,
    where: str,
    unreadable_fix: str,
    invalid_fix: str,
    invalid_where: str | None = None,
) -> dict[str, Any]:
    """The parsed TOML document at ``path``, or a ``ConfigError`` that says ``where`` it
    failed (``invalid_where`` for bad syntax, if it differs) and the fix."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror}); {unreadable_fix}") from None
    except tomllib.TOMLDecodeError as exc:
        where = where if invalid_where is None else invalid_where
        raise ConfigError(f"{where}: not valid TOML ({exc}); {invalid_fix}") from None


def read_policy_file(path: str | Path) -> dict[str, Any]:
    """The parsed TOML document at ``path`` (the value of ``LAGPILOT_POLICY_FILE``)."""
    return read_toml(
        path,
        f"{FILE_ENV}={path}",
        "point it at the policy TOML file, e.g. deploy/policy.example.toml",
        "fix the syntax there",
        invalid_where=str(path),
    )


def parse_mode(raw: Any, name: str = "policy.mode") -> Mode:
    """``mode``; ``name`` is how the error names it (with the variable that set it)."""
    try:
        return Mode(raw)
    except ValueError:
        raise ConfigError(
            f"{name}: must be one of observe, recommend, act (got {raw!r}); set "
            'mode = "recommend" to publish recommendations only, "act" to let the actuator '
            "apply them"
        ) from None


def parse_allow(table: Any) -> AllowList:
    """``[allow]``: lists of fnmatch globs (schemas/allow.py); empty allows nothing."""
    if not isinstance(table, Mapping):
        raise ConfigError(
            f"policy.allow: must be a table (got {type(table).__name__}); write it as [allow]"
        )
    unknown = sorted(set(table) - set(ALLOW_KEYS))
    if unknown:
        raise ConfigError(
            f"policy.allow.{unknown[0]}: unknown key; [allow] knows "
            f"{' and '.join(ALLOW_KEYS)} (check the spelling)"
        )
    globs: dict[str, tuple[str, ...]] = {}
    for key in ALLOW_KEYS:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(
                f"policy.allow.{key}: must be a list of non-empty glob strings (got {value!r}); "
                f'e.g. {key} = ["orders*"]'
            )
        globs[key] = tuple(value)
    return AllowList(**globs)
