"""The one error type backends raise: it carries what decides the next step.

Third-party exceptions (librdkafka, kafka-python, httpx via the Redpanda client) are
translated at the I/O edge into ``ActuatorError``; the runner asks ``exc.retriable`` and
never a list of exception types, and the outcome carries ``message``, ``code`` and
``retriable`` as they are.
"""

from __future__ import annotations

from typing import Any

from schemas.runtime.errors import LagpilotError


class ActuatorError(LagpilotError):
    def __init__(
        self,
        message: str,
        *,
        code: int | str | None = None,
        retriable: bool,
        hint: str = "",
    ) -> None:
        super().__init__(message, retriable=retriable, code=code, hint=hint)

    def as_outcome_error(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code, "retriable": self.retriable}
