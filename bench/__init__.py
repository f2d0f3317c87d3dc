"""lagpilot's benchmarks, the demo and the swarm simulator, by family:

- ``bench.perf``: one figure of one part each (``python -m bench.perf.NAME``: decode,
  detection, ingest, model, metrics_render, scale, list_offsets, actuation, keda, timelag,
  workers);
- ``bench.incidents``: the incident scenarios (``python -m bench.incidents`` runs them all;
  ``python -m bench.incidents.NAME`` one: calm, flood, mixed, slow_group, storm, war_story)
  and the member processes they start (``slow_member``, ``storm_member``);
- ``bench.faults``: the faults survived (``python -m bench.faults``), one module per fault;
- ``bench.demo``: ``make demo``.

No scenario imports another: what two of them share is in ``bench.support``, with what
they share with the tests (the pipeline process, the lag reader, the swarm, the Admin API
stub, the record encoders, the results file); it is meant to be imported.
"""
