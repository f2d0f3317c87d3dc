"""The one error type backends raise: it carries what decides the next step.

Third-party exceptions (librdkafka, kafka-python, httpx via the Redpanda client) are
translated at the I/O edge into ``ActuatorError``; the runner asks ``exc.retriable`` and
never a list of exception types, and the outcome carries ``message``, ``code`` and
``retriable`` as they are.
"""

from __future__ import annotations

from typing import Any

from runtime.kafka import fault
from schemas.errors import LagpilotError


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
        """An outcome's ``error`` (outcome.v1 has no hint field: the hint ends the message)."""
        message = f"{self.message}; {self.hint}" if self.hint else self.message
        return {"message": message, "code": self.code, "retriable": self.retriable}


def from_kafka(op: str, exc: BaseException, *, hint: str = "") -> ActuatorError:
    """A Kafka client's exception (librdkafka's or kafka-python's) as the actuator's error,
    translated at the edge: code and ``retriable`` as the one translator reads them
    (``runtime.kafka.fault``); ``op`` says what was being done."""
    f = fault(exc)
    return ActuatorError(f"{op}: {f.message}", code=f.code, retriable=f.retriable, hint=hint)
