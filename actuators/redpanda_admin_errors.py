"""The Redpanda Admin API's errors in lagpilot's terms: what failed, where, and what to change.

Redpanda answers errors as ``{"message": str, "code": int}`` (PUT /v1/cluster_config: a map
of property name to reason). :class:`RedpandaAdminError` keeps the HTTP status, the URL
that answered and a hint next to them, and is an :class:`~actuators.errors.ActuatorError`,
so a backend passes it to the runner as it is: the runner asks ``retriable``, the outcome
records the whole sentence.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from actuators.errors import ActuatorError

__all__ = [
    "RETRY_STATUSES",
    "RedpandaAdminError",
    "error_from_response",
    "hint_for",
    "parse_error_body",
]

#: Answers that mean "try again later". Other 4xx/5xx are final for this request.
RETRY_STATUSES = frozenset({429, 503, 504})


class RedpandaAdminError(ActuatorError):
    """A failed Admin API call, with what the caller needs to decide the next step.

    ``code`` is Redpanda's own code from the error body (often equal to the HTTP status),
    ``status`` the HTTP status (None when no answer came), ``retriable`` whether the same
    call may succeed later unchanged, ``url`` the URL that answered (after redirects).
    """

    def __init__(
        self,
        message: str,
        *,
        retriable: bool,
        method: str = "",
        url: str = "",
        status: int | None = None,
        code: int | None = None,
        hint: str = "",
    ) -> None:
        super().__init__(message, retriable=retriable, code=code, hint=hint)
        self.method = method
        self.url = url
        self.status = status

    def __str__(self) -> str:
        where = f"{self.method} {self.url}: " if self.method else ""
        answer = []
        if self.status is not None:
            answer.append(f"HTTP {self.status}")
        if self.code is not None:
            answer.append(f"Redpanda code {self.code}")
        detail = f" ({', '.join(answer)})" if answer else ""
        hint = f"; {self.hint}" if self.hint else ""
        return f"{where}{self.message}{detail}{hint}"

    def to_dict(self) -> dict[str, Any]:
        """The error as plain data: message, code, status, retriable, method, url."""
        return {
            "message": self.message,
            "code": self.code,
            "status": self.status,
            "retriable": self.retriable,
            "method": self.method,
            "url": self.url,
        }

    def as_outcome_error(self) -> dict[str, Any]:
        """An outcome's ``error``: the whole sentence (request, status, hint) as message."""
        return {"message": f"Redpanda Admin API: {self}", "code": self.code,
                "retriable": self.retriable}  # fmt: skip


def parse_error_body(content: bytes) -> tuple[str, int | None]:
    """Redpanda's message and code from an error body, whatever shape it came in.

    Most routes answer ``{"message", "code"}``; PUT /v1/cluster_config answers 400 with a map
    of property name to error; proxies in between answer HTML or nothing.
    """
    text = content.decode("utf-8", "replace").strip()
    if not text:
        return "empty error body", None
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return text[:300], None
    if isinstance(body, dict):
        message = body.get("message")
        code = body.get("code")
        code_int = code if isinstance(code, int) and not isinstance(code, bool) else None
        if isinstance(message, str):
            return message, code_int
        fields = "; ".join(f"{k}: {v}" for k, v in sorted(body.items()) if k != "code")
        if fields:
            return f"invalid properties: {fields}", code_int
    return text[:300], None


def hint_for(status: int) -> str:
    """What to change after an answer with this HTTP status."""
    if status == 401:
        return "admin_api_require_auth is on: pass username/password of a SASL user"
    if status == 403:
        return "the user is not allowed: add it to the cluster's `superusers`"
    if status == 404:
        return "check the topic, partition and namespace exist (GET /v1/partitions)"
    if status == 400:
        return "the request was refused as invalid: fix the arguments named in the message"
    if status in RETRY_STATUSES:
        return "the cluster is busy; retry later or raise max_retries/backoff_max_s"
    return "see the broker's log for this request"


def error_from_response(
    method: str, url: str, response: httpx.Response, attempts: int = 1
) -> RedpandaAdminError:
    """The error an unsuccessful (already read) answer stands for."""
    message, code = parse_error_body(response.content)
    status = response.status_code
    if status in RETRY_STATUSES and attempts > 1:
        message = f"{message} (gave up after {attempts} attempts)"
    return RedpandaAdminError(
        message,
        retriable=status in RETRY_STATUSES,
        method=method,
        url=url,
        status=status,
        code=code,
        hint=hint_for(status),
    )
