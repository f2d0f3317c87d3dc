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
  reference folder, ``reference``); ``offsets_records``: realistic commits and a fuzzed
  corpus built with the first;
- the incident scenarios' parts: ``agents``, ``groups``, ``control_loop``, ``shipped``,
  ``judge``, ``verdicts``, ``plots``, ``scenario_cli``, ``flood_load`` (the flood's load, also
  the mixed scenario's), ``effects`` (a member's side effect), ``restarter``, ``drain``,
  ``health_reads``, ``keda_poll``;
- the fault rows' load: ``fault_load`` (with ``netproxy``);
- the scale benchmark's parts: ``scale_*``, ``host_probe`` (timing ``model_workload``, the
  model benchmark's workload);
- ``baselines``: lagpilot's code before a piece of work, kept only while a benchmark
  compares against it;
- ``results``: every benchmark's result file, written with the commit, the time and the
  host's load (``write_result``).
"""
