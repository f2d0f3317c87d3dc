"""What the benchmarks, the demo and the tests share, meant to be imported.

- ``harness``: the pipeline as a process (``PipelineProcess``), the ``lagpilot.lag``
  reader (``LagReader``), scripted loads and topic helpers, on a real broker;
- ``actuator_harness``: the actuator in threads on fresh topics, signed test actions;
- ``scaler_harness``: the KEDA external scaler as a process, and its gRPC client;
- ``swarm`` (with ``naive``): the simulated agent swarm; ``broker``: the local broker;
- ``redpanda_admin_stub`` (with ``redpanda_admin_contract``, the contract it serves, and
  ``redpanda_admin_cluster``, the cluster behind it): the Admin API stub;
- ``layout_codec`` and ``kafka_schemas``: two encoders of ``__consumer_offsets`` records
  independent of the decoder (the stated layouts; Apache Kafka's own schemas, read from the
  reference folder, ``reference``).
"""
