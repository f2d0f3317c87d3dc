"""What every lagpilot process runs on, beside the contract in ``schemas``.

- ``cli``, ``cli_errors``, ``client_log``: the commands' shared plumbing (argument parsing,
  exit codes, Kafka client logs turned into one sentence an operator can act on);
- ``backoff``: one capped exponential backoff, with full jitter where a herd retries;
- ``kafka``: one translator of Kafka clients' exceptions (code, retriable, fatal, denied);
- ``env``: one coercer of environment values (booleans, numbers, lists, bool-or-path);
- ``http``: one health and metrics HTTP server (/metrics, /healthz, /readyz);
- ``halts``: reading the halts still in force from the compacted halts topic;
- ``tracing``: the OpenTelemetry set-up, off unless ``OTEL_*`` asks for it;
- ``procs``: child processes that end with their parent.

It imports ``schemas`` (the error types, the codec) and nothing else of lagpilot;
``pipeline`` and ``actuators`` import both and never each other.
"""
