"""Test-only helpers: the reference folder lookup, the lag oracle, offset vectors, Prometheus.

What the benchmarks and the demo share with the tests (the pipeline process, the Admin API
stub, the record encoders) is in ``bench/support/``, meant to be imported by both."""
