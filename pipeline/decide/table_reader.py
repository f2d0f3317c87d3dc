"""Reading one table of the policy TOML: typed values whose errors name the key and the fix.

Each error reads ``policy.<section>.<key>: <problem>; <fix>``, with ``(from VARIABLE)``
after the key when an environment override set it. A reader remembers the keys it was
asked for, so :meth:`TableReader.done` can report a misspelt one instead of ignoring it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas import ConfigError

__all__ = ["TableReader"]


class TableReader:
    """Reads one TOML table, remembering which keys it used so leftovers are reported."""

    def __init__(self, table: Any, path: str, origins: Mapping[str, str]) -> None:
        self.path = path
        self.origins = origins
        if not isinstance(table, dict):
            raise ConfigError(f"{self.name(None)}: must be a table (got {table!r}); write [{path}]")
        self.table = table
        self.used: set[str] = set()

    def name(self, key: str | None) -> str:
        dotted = f"{self.path}.{key}" if key and self.path else (key or self.path)
        origin = self.origins.get(dotted)
        return f"policy.{dotted}" + (f" (from {origin})" if origin else "")

    def fail(self, key: str, problem: str, fix: str) -> ConfigError:
        return ConfigError(f"{self.name(key)}: {problem}; {fix}")

    def get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        return self.table.get(key, default)

    def number(
        self,
        key: str,
        default: float,
        *,
        minimum: float = 0.0,
        strict: bool = True,
        maximum: float | None = None,
        unit: str = "number",
    ) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number (got {value!r})", f"set a {unit}")
        low_ok = value > minimum if strict else value >= minimum
        if not low_ok or (maximum is not None and value > maximum):
            bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
            if maximum is not None:
                bound += f" and <= {maximum:g}"
            raise self.fail(key, f"must be {bound} (got {value!r})", f"set a {unit} {bound}")
        return float(value)

    def integer(
        self, key: str, default: int, *, minimum: int = 1, unit: str = "whole number"
    ) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(
                key,
                f"must be an integer >= {minimum} (got {value!r})",
                f"set a {unit} >= {minimum}",
            )
        return value

    def string(self, key: str, default: str | None) -> str | None:
        value = self.get(key, default)
        if value is not None and (not isinstance(value, str) or not value):
            raise self.fail(key, f"must be a non-empty string (got {value!r})", "quote a value")
        return value

    def strings(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(
                key,
                f"must be a list of non-empty strings (got {value!r})",
                'write e.g. ["orders", "docs.*"]',
            )
        return tuple(value)

    def done(self, known: tuple[str, ...] = ()) -> None:
        unknown = sorted(set(self.table) - self.used - set(known))
        if unknown:
            names = ", ".join(sorted(self.used | set(known))) or "none"
            raise self.fail(
                unknown[0], "unknown key", f"remove it or fix its spelling (known: {names})"
            )
