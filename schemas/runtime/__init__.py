"""The runtime both sides import, beside the contract: what every lagpilot process needs once.

- ``errors``: ``LagpilotError``, the base of every lagpilot error (``retriable``, ``code``,
  ``hint``: what decides the next step, and what to change);
- ``backoff``: one capped exponential backoff, with full jitter where a herd retries;
- ``kafka``: one translator of librdkafka's exceptions (code, name, retriable, fatal);
- ``env``: one coercer of environment values (booleans, numbers, lists, bool-or-path).

``pipeline`` and ``actuators`` still never import each other: they share ``schemas``.
Nothing here imports the rest of ``schemas`` (the codec imports ``errors``).
"""
