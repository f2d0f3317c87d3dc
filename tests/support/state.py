"""A Quix state store in memory: what a stateful operator's unit test hands it."""

from __future__ import annotations

from typing import Any


class MemoryState:
    """``get``/``set`` of one key's state, as ``State`` offers them to ``apply(stateful=True)``."""

    def __init__(self) -> None:
        self.d: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.d.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.d[key] = value
