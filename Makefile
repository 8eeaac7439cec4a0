# connmon: the two commands a person needs are `make demo` and `make test`.
# Both set up everything on a fresh machine (venv + pip, Maven jars, Debian's prometheus and
# alertmanager), idempotently: a second run downloads nothing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.connmon-installed
PYTEST_ARGS ?=
APT_BPFTRACE = apt-get install -y -q --no-install-recommends bpftrace >/dev/null 2>&1
DEMO_ARGS ?=

.PHONY: setup prereqs artifacts javadriver clients routing kube images prometheus bpftrace test unit integration e2e lint demo clean

setup: prereqs $(STAMP) artifacts javadriver clients routing kube images prometheus bpftrace

# First thing, before the venv: one line naming a tool setup needs that is missing or too old.
prereqs:
	@sh deploy/local/check-prereqs.sh $(PYTHON)

$(STAMP): pyproject.toml constraints.txt
	@echo ">> python venv and pinned packages (pip shows progress)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=24"
	$(BIN)/pip install --progress-bar on -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

artifacts: $(STAMP)
	@echo ">> Maven jars: Kafka broker, Spark Kafka connector (per-user cache: $$CONNMON_CACHE_DIR, else ~/.cache/connmon)"
	$(BIN)/python -m streaming.stack.artifacts

javadriver: artifacts
	@echo ">> Java client driver for the scenarios (kafka-clients from Maven Central, javac)"
	$(BIN)/python -m streaming.scenarios.javadriver

clients: $(STAMP)
	@echo ">> Go (Sarama, franz-go) and Node.js (kafkajs) clients for the scenarios (go build, npm ci)"
	$(BIN)/python -m streaming.scenarios.goclients
	$(BIN)/python -m streaming.scenarios.nodeclients

routing: $(STAMP)
	@echo ">> the Prometheus Operator's Alertmanager configuration builder and amtool, to test the AlertmanagerConfig (go build)"
	$(BIN)/python -m streaming.stack.operator_routing

kube: $(STAMP)
	@echo ">> etcd, kube-apiserver and kubectl, to test the Kubernetes objects against a real API server (go build)"
	$(BIN)/python -m streaming.stack.kubetools

images: $(STAMP)
	@echo ">> buildah, podman, runc, mmdebstrap and a Debian base image from Debian's packages, for the image tests (as root only; else they skip)"
	@if [ "$$(id -u)" = 0 ]; then $(BIN)/python -m streaming.stack.images; else echo "not root: the image tests will skip"; fi

prometheus: $(STAMP)
	@echo ">> prometheus, promtool, alertmanager, amtool (Debian packages, installed once)"
	$(BIN)/python -c "from streaming.prometheus_bin import ensure_installed; ensure_installed()"

bpftrace:
	@echo ">> bpftrace for the agent's eBPF collector (Debian package; as root only, else its tests skip)"
	@command -v bpftrace >/dev/null || { [ "$$(id -u)" = 0 ] && { $(APT_BPFTRACE) || { apt-get update -q >/dev/null && $(APT_BPFTRACE); }; }; } \
		|| echo "bpftrace not installed: the eBPF tests will skip"

test: setup
	$(BIN)/ruff check .
	$(BIN)/pytest --durations=30 $(PYTEST_ARGS) tests

unit: $(STAMP)
	$(BIN)/pytest -m unit $(PYTEST_ARGS) tests

integration: setup
	$(BIN)/pytest -m "integration" $(PYTEST_ARGS) tests

e2e: setup
	$(BIN)/pytest -m e2e $(PYTEST_ARGS) tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

demo: setup
	$(BIN)/connmon demo $(DEMO_ARGS)

clean:
	-$(BIN)/connmon stack down
	rm -rf var reports

-include deploy/prometheus/Makefile.mixin.mk
