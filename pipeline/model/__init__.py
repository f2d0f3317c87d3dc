"""Stage 2, model: from watermark samples and commits to lag, rates, time lag and status.

Pure and numpy-based (``now_ms`` passed in): ``lag`` (the columnar topic model), ``config``
(its knobs), ``status`` (the status rules), ``events`` (a tick's observation and the
``group_lag``/``partition_lag`` events built from it), ``fits`` (masked least squares),
``history`` (the compacted HWM history), ``progress`` (the workers' own progress),
``group_health`` (membership and rebalances; ``group_status`` judges them), ``truth`` (the
record at the committed offset). ``model_op`` is the stateful Quix operator around them.
"""
