"""The runtime both sides import, beside the contract: what every lagpilot process needs once.

- ``errors``: ``LagpilotError``, the base of every lagpilot error (``retriable``, ``code``,
  ``hint``: what decides the next step, and what to change);
- ``backoff``: one capped exponential backoff, with full jitter where a herd retries;
- ``kafka``: one translator of Kafka clients' exceptions (code, retriable, fatal, denied);
- ``env``: one coercer of environment values (booleans, numbers, lists, bool-or-path);
- ``http``: one health and metrics HTTP server (/metrics, /healthz, /readyz);
- ``allow``: one allow-list rule, for the policy that proposes and the actuator that applies.

``pipeline`` and ``actuators`` still never import each other: they share ``schemas``.
Nothing here imports the rest of ``schemas`` (the codec imports ``errors``).
"""
