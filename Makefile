# raftka: the two commands a newcomer needs are `make cluster` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SEEDS ?= 2000
JOBS ?= 2

.PHONY: venv cluster down test sim proto lint bench

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=proto --pyi_out=proto \
		--grpc_python_out=proto proto/raftka/v1/*.proto
