# shardcron — the two commands a newcomer needs: `make dev` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard proto/shardcron/v1/*.proto)
DEV_ARGS ?=

.PHONY: install servers s3-gateway promtool browser dev test test-clients cluster cluster-down cluster-reset proto proto-check lint fmt clean bench

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { apt-get update -q && apt-get install -y -q python3 python3-venv; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	touch $@

dev: install
	$(VENV)/bin/shardcron dev $(DEV_ARGS)

# shardcron against Celery+Redis and Temporal, same run; report under bench/results/.
# BENCH_ARGS: e.g. --quick, --systems shardcron,celery, --n W1=50000, --repeat 3
BENCH_ARGS ?=
bench: install
	@command -v redis-server >/dev/null || { apt-get update -q && apt-get install -y -q redis-server; }
	$(PIP) install -q -e '.[dev,bench]'
	$(PY) -m bench $(BENCH_ARGS)

# ZooKeeper + Cassandra + an S3 gateway + three shardcron nodes + two workers, state under .cluster/
cluster: install servers s3-gateway
	$(PY) -m deploy.cluster up

# Stops every process and keeps the ZooKeeper, Cassandra and S3 data: the next
# `make cluster` resumes the same jobs at a later epoch.
cluster-down:
	$(PY) -m deploy.cluster down

# Stops every process and deletes the cluster's data: the next `make cluster` starts empty.
cluster-reset:
	$(PY) -m deploy.cluster reset

# Regenerates the committed Python code from proto/ (never edit *_pb2*.py by hand).
proto: install
	$(PY) -m grpc_tools.protoc -Iproto --python_out=proto --grpc_python_out=proto \
		--pyi_out=proto $(PROTOS)

# Fails when the committed generated code is not what `make proto` produces.
proto-check: install
	@tmp=$$(mktemp -d) && \
	$(PY) -m grpc_tools.protoc -Iproto --python_out=$$tmp --grpc_python_out=$$tmp \
		--pyi_out=$$tmp $(PROTOS) && \
	for f in $$tmp/shardcron/v1/*; do \
		cmp -s $$f proto/shardcron/v1/$$(basename $$f) || \
		{ echo "stale generated code: proto/shardcron/v1/$$(basename $$f) (run make proto)"; exit 1; }; \
	done && rm -rf $$tmp && echo "generated code is current"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Headless Chromium and its driver (Debian's packages) for the dashboard's tests.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ apt-get update -q && apt-get install -y -q chromium chromium-driver; }

# Java, Maven and the ZooKeeper and Cassandra jars the tests start servers from.
servers:
	python3 -m deploy ensure-tools
	python3 -m deploy fetch all

# The S3-compatible service (the Versity S3 gateway) the blob store's tests run against:
# built once with `go install` (about 2 minutes) into ~/.cache/shardcron/bin; needs Go >= 1.25
# (golang-go is apt-installed when no go is found).
s3-gateway:
	python3 -m deploy fetch versitygw

# promtool (Debian's prometheus package): tests check deploy/prometheus/ and real scrapes with it.
promtool:
	@command -v promtool >/dev/null || { apt-get update -q && apt-get install -y -q prometheus; }

test: install proto-check servers s3-gateway promtool browser
	$(VENV)/bin/pytest -q --ignore=tests/cluster
	$(VENV)/bin/pytest -q tests/cluster
	$(MAKE) test-clients

# Go worker, TypeScript and Java clients generated from proto/, run against a live node.
test-clients: install
	bash examples/test-clients.sh

clean:
	rm -rf $(VENV) .pytest_cache
