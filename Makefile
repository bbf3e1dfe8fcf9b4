# raftka: a newcomer needs two commands, `make cluster` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)
SEEDS ?= 2000
JOBS ?= 2

.PHONY: venv cluster down test lint sim bench proto kcat

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

# Lint, then every test: unit, scripted core edges, simulation, real processes.
test: $(STAMP) lint kcat
	$(BIN)/python -m pytest

# Debian's kcat for the Kafka client tests. Without apt-get and root (or sudo without a
# password) it stays missing, and those tests say so (and fail under CI=true).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
kcat:
	@command -v kcat >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		{ $(SUDO) apt-get install -y -qq kcat >/dev/null 2>&1 || \
		  { $(SUDO) apt-get update -qq >/dev/null 2>&1 && $(SUDO) apt-get install -y -qq kcat >/dev/null 2>&1; }; }; } || \
		echo "kcat: could not install it with apt-get; the Kafka client tests will say it is missing"

lint: $(STAMP)
	$(BIN)/ruff check .

# Long simulation runs: make sim SEEDS=20000 [JOBS=2]
sim: $(STAMP)
	$(BIN)/python -m tests.simulation --seeds $(SEEDS) --jobs $(JOBS)

# Append throughput/latency with the load inside the leader's process (fsync on).
bench: $(STAMP)
	$(BIN)/raftka perf quorum --concurrency 1,16,128 --duration 10

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/raftka/v1/*.proto
