"""Baselines: lagpilot's own code as it was before a piece of work, kept only because a
benchmark still measures today's code against it (the "before" of its figure). Each module
says what it is the "before" of and which benchmark (and test) compares against it; one that
no benchmark needs any more is deleted, not kept.

- ``exposition_before_16``: the /metrics lag families' renderer before issue 16
  (``bench.perf.metrics_render``; ``tests/unit/pipeline/observe/test_exposition_text.py``);
- ``model_before_16``: the lag model's tick before issue 16 (``bench.perf.model``, the
  ``rebuilt`` kind).
"""
