"""A Quix state store in memory: what a stateful operator's unit test hands it."""

from __future__ import annotations

from typing import Any


class MemoryState:
    """``get``/``set``/``delete`` of one key's state, as ``State`` offers them to
    ``apply(stateful=True)``; ``data`` is what the store holds (copy it: a 'restart')."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)
