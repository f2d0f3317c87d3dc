# lagpilot: `make demo` runs the product on a local broker; `make test` runs the suite.
# Both install what they need (a .venv with the project, the broker's jars via Maven).
SHELL := /bin/bash
PYTHON_SYS ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BROKER := deploy/local/kafka.sh
BROKERS ?= 1
PYTEST_ARGS ?= --durations=25
# `make test TESTS=<paths>` runs just those; unset, the whole suite (see `test`)
TESTS ?=
export PYTHON := $(abspath $(PY))

.PHONY: install prometheus-tools postgres-tools jaeger-tools broker-jars kafka-tools broker-up broker-down broker-status test test-unit test-kafka-4.1 lint run demo \
        bench-decode bench-detection bench-share-detection bench-ingest bench-model bench-metrics bench-scale bench-list-offsets bench-actuation bench-war-story bench-incidents bench-keda bench-timelag bench-faults bench-soak bench-workers clean

install: $(VENV)/.installed prometheus-tools postgres-tools

# Prometheus and promtool (Debian's `prometheus` package) for the tests that evaluate the
# dashboard and the alert rules. Quick when present; as root, apt-get installs them (and
# stops the service the package may start: the tests run their own Prometheus).
prometheus-tools:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's prometheus package (prometheus, promtool)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null; }; } || \
	    { echo "error: apt-get could not install prometheus; run: apt-get update && apt-get install -y --no-install-recommends prometheus" >&2; exit 1; }; \
	  if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi; \
	else \
	  echo "warning: prometheus/promtool not found; the Prometheus tests need them: sudo apt-get install -y --no-install-recommends prometheus (Debian/Ubuntu), or put both binaries from https://prometheus.io/download/ on PATH" >&2; \
	fi

# Jaeger, built once from its Go module and cached outside the clone (~/.cache/lagpilot), for
# the test that finds an action's whole trace in a real trace backend (deploy/local/jaeger.sh);
# `make test` needs it (and Go), `make demo` does not.
jaeger-tools:
	@deploy/local/jaeger.sh build

# PostgreSQL's server binaries (Debian's `postgresql` package: initdb, pg_ctl) for the tests
# of PostgresDedupeStore, which start their own server in a temp folder
# (bench/support/postgres.py). As root, apt-get installs them and stops the cluster the
# package may start: the tests never use it.
postgres-tools:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && exit 0; command -v initdb >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's postgresql package (initdb, pg_ctl)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null; }; } || \
	    { echo "error: apt-get could not install postgresql; run: apt-get update && apt-get install -y --no-install-recommends postgresql" >&2; exit 1; }; \
	  if command -v systemctl >/dev/null && systemctl is-active --quiet postgresql 2>/dev/null; then systemctl disable --now postgresql >/dev/null 2>&1 || true; fi; \
	else \
	  echo "warning: PostgreSQL's initdb/pg_ctl not found; the PostgreSQL dedupe tests need them: sudo apt-get install -y --no-install-recommends postgresql (Debian/Ubuntu)" >&2; \
	fi

$(VENV)/.installed: pyproject.toml
	@command -v $(firstword $(PYTHON_SYS)) >/dev/null || { echo "error: python3 not found; lagpilot needs Python 3.11+" >&2; exit 1; }
	@$(PYTHON_SYS) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || { echo "error: lagpilot needs Python 3.11+, found $$($(PYTHON_SYS) --version 2>&1); set PYTHON_SYS=/path/to/python3.11" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON_SYS) -m venv $(VENV)
	@echo "installing lagpilot and its dependencies into $(VENV) (the first time takes a few minutes)"
	$(PY) -m pip install -q --upgrade pip
	set -o pipefail; $(PY) -m pip install --progress-bar off -e '.[dev]' | sed -n -E '/^(Collecting|Successfully)/p'
	@$(PY) -c 'import pipeline.app, actuators.runner' || { echo "error: the install did not complete; run 'make install' again and read pip's output" >&2; exit 1; }
	@touch $@

broker-jars:
	@$(BROKER) jars

# Kafka's own tools (kafka-tools: ConsumerGroupCommand, ShareGroupCommand, the console share
# consumer), the reference tests/integration/pipeline/model/test_lag_kafka_tools.py compares
# lagpilot's lag with; fetched once, like the broker's jars, before `make test` starts its two
# pytest processes (kafka.sh also locks and renames, so two first uses never see half a folder).
kafka-tools:
	@$(BROKER) tools

broker-up: install
	@$(BROKER) up --brokers $(BROKERS)

broker-down:
	@$(BROKER) down

broker-status:
	@$(BROKER) status

# Starts the local broker unless KAFKA_BOOTSTRAP names one (or one is already up), runs
# pytest with KAFKA_BOOTSTRAP set to it, stops only what it started, returns pytest's status.
# KAFKA_VERSION=x.y.z picks the Apache Kafka release of every broker it and the tests start
# (kafka.sh reads it; the tests' own clusters inherit it); a broker already up on another
# release is refused rather than tested as if it were the one asked for.
# The whole suite runs as two pytest processes at once: the unit and conformance tests
# (pure, CPU-bound, no broker) beside the broker-facing ones (which mostly wait on the
# broker and their own subprocesses), so the two overlap on two cores; the pure half runs
# niced, on the CPU the other leaves, so the broker-facing tests' timings see no more than
# a busy host; its report prints after the other's, and either failing fails the run.
# bench smokes that assert an accuracy the host's CPU moves (the time lag's error bound): they
# run in the main lane at full priority, not niced in the side lane
EXACT_SMOKES := tests/bench/test_timelag_smoke.py
# integration tests that time nothing tightly and mostly wait on brokers of their own (a
# fresh clone's, a SASL one, a 4.1.1 one) or on Jaeger: they run in the side lane after the
# bench smokes, so the two lanes take about as long (the suite stays well under 20 minutes
# on two cores)
SIDE_INTEGRATION := tests/integration/deploy/test_kafka_sh.py \
  tests/integration/deploy/test_traces_jaeger.py \
  tests/integration/pipeline/read/test_share_groups_sasl.py \
  tests/integration/pipeline/read/test_share_groups_kafka41.py

test: install jaeger-tools kafka-tools
	@started=0; release=; \
	if [ -z "$$KAFKA_BOOTSTRAP" ]; then \
	  if ! $(BROKER) status >/dev/null 2>&1; then \
	    $(BROKER) up --brokers 1 >/dev/null || exit 1; started=1; \
	  elif [ -n "$$KAFKA_VERSION" ]; then \
	    $(BROKER) up --brokers 1 >/dev/null || exit 1; \
	  fi; \
	  export KAFKA_BOOTSTRAP=$$($(BROKER) status); release=$$($(BROKER) version 2>/dev/null); \
	elif [ -n "$$KAFKA_VERSION" ]; then \
	  echo "note: KAFKA_BOOTSTRAP names the cluster under test, whatever it runs; KAFKA_VERSION=$$KAFKA_VERSION picks only the brokers the tests start themselves" >&2; \
	fi; \
	trap '[ $$started = 1 ] && $(BROKER) down' EXIT; \
	echo "testing against $$KAFKA_BOOTSTRAP$${release:+ (Apache Kafka $$release)}"; \
	if [ -n "$(TESTS)" ]; then $(PY) -m pytest $(PYTEST_ARGS) $(TESTS); exit $$?; fi; \
	side=$$(mktemp); \
	{ nice -n 15 $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/unit tests/conformance; \
	  u=$$?; nice -n 5 $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/bench \
	    $(foreach t,$(EXACT_SMOKES),--ignore=$(t)); \
	  b=$$?; nice -n 5 $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) $(SIDE_INTEGRATION); \
	  i=$$?; [ $$u -eq 0 ] && [ $$b -eq 0 ] && [ $$i -eq 0 ]; } >$$side 2>&1 & side_pid=$$!; \
	$(PY) -m pytest $(PYTEST_ARGS) tests/integration $(foreach t,$(SIDE_INTEGRATION),--ignore=$(t)) \
	  $(EXACT_SMOKES); rc=$$?; \
	wait $$side_pid; side_rc=$$?; \
	echo "== tests/unit, tests/conformance, tests/bench, then $(SIDE_INTEGRATION) (run beside the tests above) =="; \
	cat $$side; rm -f $$side; \
	echo "integration tests: exit $$rc; unit, conformance, bench and side-lane integration tests: exit $$side_rc"; \
	[ $$rc -eq 0 ] && [ $$side_rc -eq 0 ]

# The broker-facing tests (tests/integration, tests/bench) on Apache Kafka 4.1.1, the older
# of the two releases the suite is tested on (4.4.0, the default, is the other).
test-kafka-4.1: export KAFKA_VERSION := 4.1.1
test-kafka-4.1: TESTS := tests/integration tests/bench
test-kafka-4.1: test

# The README's main command: the avalanche incident and lagpilot fixing it, live.
demo: install
	@$(PY) -m bench.demo

test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench-decode: install
	$(PY) -m bench.perf.decode

bench-detection: install
	$(PY) -m bench.perf.detection

# A share group (KIP-932) stalled: Kafka's own console share consumer, SIGSTOPped; p99 < 2 s
bench-share-detection: install kafka-tools
	$(PY) -m bench.perf.share_detection

bench-ingest: install
	$(PY) -m bench.perf.ingest

bench-model: install
	$(PY) -m bench.perf.model

# A full /metrics scrape at 250,000 group-partitions, before and after issue 16's work
# (no broker): bench/results/metrics_render.json, docs/benchmarks.md.
bench-metrics: install
	$(PY) -m bench.perf.metrics_render

# The shape on one and two replicas (bench/results/scale.json), then what two replicas hold
# against one when each gets the same CPU (a cgroup v1 quota of 0.3 core per replica's
# process tree, at 1,000 x 50 so both fit beside the broker and the generator on two cores:
# bench/results/scale_capped.json; needs root and a cgroup v1 cpu controller).
SCALE_CAPPED_ARGS ?= --topics 20 --groups 50 --cpu-per-replica 0.3 --max-steps 8
bench-scale: install
	$(PY) -m bench.perf.scale
	$(PY) -m bench.perf.scale $(SCALE_CAPPED_ARGS) --out bench/results/scale_capped.json

bench-list-offsets: install
	$(PY) -m bench.perf.list_offsets

bench-actuation: install
	$(PY) -m bench.perf.actuation

# The SDK workers' group protocol in the war story and the incident suite's storm and
# avalanche: `make bench-war-story GROUP_PROTOCOL=consumer` runs them under KIP-848 (the
# results record which one ran, as group_protocol)
GROUP_PROTOCOL ?= classic

bench-war-story: install
	$(PY) -m bench.incidents.war_story --group-protocol $(GROUP_PROTOCOL)

# The incident suite: avalanche (naive / sdk / lagpilot) and flood, each off and on, on the
# real broker; writes bench/results/incidents.json and a PNG per scenario.
bench-incidents: install
	$(PY) -m bench.incidents --group-protocol $(GROUP_PROTOCOL)

bench-keda: install
	$(PY) -m bench.perf.keda

bench-timelag: install
	$(PY) -m bench.perf.timelag

# Worker throughput vs. a naive consumer (1 ms work, 8 partitions, 1,000 keys) on the real
# broker and a PostgreSQL server it starts: bench/results/workers.json, docs/benchmarks.md.
bench-workers: install
	$(PY) -m bench.perf.workers

# Faults survived, one row per fault: bench/results/faults.json and docs/reliability.md.
# Starts and stops its own broker on port 23092 (never the one `make broker-up` runs).
bench-faults: install
	$(PY) -m bench.faults

# an hour by default (SOAK_MINUTES=10 for a shorter look; the committed soak.json is an hour).
# Starts and stops its own broker on port 28092 (a __consumer_offsets of its own commits).
SOAK_MINUTES ?= 60
bench-soak: install
	SOAK_MINUTES=$(SOAK_MINUTES) $(PY) -m bench.perf.soak

clean: broker-down
	rm -rf $(VENV) deploy/local/.cache deploy/local/.run .pytest_cache .mypy_cache .ruff_cache

# lagpilot beside a 3-node Redpanda with Console, Prometheus and Grafana (deploy/compose/).
COMPOSE := docker compose -f deploy/compose/compose.yaml
.PHONY: up down
up:
	@command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 || { echo "error: no Docker engine answers (\`docker info\` failed): start Docker (or install it), then run \`make up\` again; without Docker, \`make demo\` runs lagpilot on the local Kafka broker" >&2; exit 2; }
	$(COMPOSE) up -d --build
	@echo "Console http://localhost:8080  Grafana http://localhost:3000  Prometheus http://localhost:9090"

down:
	$(COMPOSE) down

# The KEDA external scaler's gRPC stubs are committed (docs/keda.md says why); regenerate
# them after a change to the .proto. tests/unit/pipeline/serve/keda/test_proto_contract.py fails
# when they differ from it.
.PHONY: keda-stubs
keda-stubs: install
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. pipeline/serve/keda/externalscaler.proto
