"""One coercer of environment values, for every lagpilot process.

Every process reads its values here, so one value means one thing everywhere
(``TLS_VERIFY=off`` must not turn TLS verification off in one process and name a CA file
``off`` in another). Errors name the variable and the fix (``ConfigError``, never
retriable: the same value fails the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.errors import ConfigError

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(key: str, raw: Any) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case, spaces ignored); a bool as is."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise ConfigError(f"{key}={raw!r}: expected true or false (or 1/0, yes/no, on/off)")


def parse_bool_or_path(key: str, raw: Any) -> bool | str:
    """A boolean as ``parse_bool`` reads it, else the value itself: a path (a CA bundle for
    ``..._TLS_VERIFY``). Empty means true, the safe default."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip()
    if not text or text.lower() in TRUE:
        return True
    if text.lower() in FALSE:
        return False
    return text


def parse_int(key: str, raw: Any) -> int:
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={raw!r}: expected a whole number; fix or unset it") from None


def parse_float(key: str, raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={raw!r}: expected a number; fix or unset it") from None


def parse_list(raw: str) -> tuple[str, ...]:
    """A comma-separated list, items stripped, empty items dropped."""
    return tuple(u.strip() for u in raw.split(",") if u.strip())


def coerce(key: str, typ: type | str | Callable[[str], Any], raw: Any) -> Any:
    """``raw`` (the value of variable ``key``) as ``typ``: ``bool``, ``int``, ``float``, a
    ``tuple`` (a comma-separated list), ``bool | str`` (a boolean or a path), else as
    ``typ`` reads it (``str`` by default). ``typ`` may be the type's name, as a dataclass
    field's annotation is under ``from __future__ import annotations``; every settings
    reader of lagpilot (pipeline, actuator, the CLI's flags) asks this one function."""
    name = typ if isinstance(typ, str) else getattr(typ, "__name__", "")
    if name == "bool":
        return parse_bool(key, raw)
    if name == "bool | str":
        return parse_bool_or_path(key, raw)
    if name == "int":
        return parse_int(key, raw)
    if name == "float":
        return parse_float(key, raw)
    if name == "tuple" or name.startswith("tuple["):
        return parse_list(str(raw))
    if callable(typ) and not isinstance(typ, str):
        return typ(raw)
    return str(raw)
