"""lagpilot's benchmarks, the demo and the swarm simulator: run as ``python -m bench.NAME``.

``bench.support`` holds what they share with the tests (the pipeline process, the lag
reader, the swarm, the Admin API stub, the record encoders); it is meant to be imported.
"""
