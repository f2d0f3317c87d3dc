"""``LagpilotError``: the base every lagpilot error subclasses.

It carries what decides the next step (aiokafka's ``retriable``), a stable ``code`` for
outcomes, metrics and logs (a broker's or an API's code where one exists), and a ``hint``:
what to change. A caller asks ``exc.retriable``, never a list of exception types, and an
error crossing a boundary is rebuilt from these fields (``as_dict``), never by ``hasattr``.
"""

from __future__ import annotations

from typing import Any


class LagpilotError(Exception):
    """An error with ``retriable``, ``code`` and ``hint``.

    Subclasses set class-level defaults (``retriable = False`` for an error that the same
    input repeats); an instance may override each one. ``str(exc)`` is the message; the
    hint is a field of its own (``as_dict``), which a subclass may add to its sentence
    (``RedpandaAdminError`` does).
    """

    retriable: bool = False
    code: int | str | None = None
    hint: str = ""

    def __init__(
        self,
        message: str = "",
        *,
        retriable: bool | None = None,
        code: int | str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if retriable is not None:
            self.retriable = retriable
        if code is not None:
            self.code = code
        if hint is not None:
            self.hint = hint

    def as_dict(self) -> dict[str, Any]:
        """The error as plain data (an outcome's ``error``): message, code, retriable, hint."""
        out: dict[str, Any] = {
            "message": str(getattr(self, "message", "") or self),
            "code": self.code,
            "retriable": self.retriable,
        }
        if self.hint:
            out["hint"] = self.hint
        return out


class ConfigError(LagpilotError, ValueError):
    """A setting is missing or wrong; the message names the key and the fix.

    Never retriable: the same setting fails the same way. (Exported as
    ``schemas.ConfigError``.)"""

    code = "config"
