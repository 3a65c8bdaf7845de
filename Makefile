# The README's two commands are `make demo` and `make test`; both run `setup` first.
# Everything downloaded lives outside the clone (~/.cache/mirror, ~/.m2, pip's cache),
# so a second run is quick and a fresh clone needs no manual step.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE ?= $(HOME)/.cache/mirror
KAFKA_VERSION := 4.1.1
KAFKA_LIBS := $(CACHE)/kafka-$(KAFKA_VERSION)/libs
CASSANDRA_VERSION := 5.0.6
CASSANDRA_LIBS := $(CACHE)/cassandra-$(CASSANDRA_VERSION)/libs
MM2_LIBS := $(CACHE)/mm2-$(KAFKA_VERSION)/libs
# Spark's Kafka connector for the pinned pyspark (deps/spark/pom.xml, pyproject's `spark` extra).
SPARK_VERSION := 4.2.0
SPARK_JARS := $(CACHE)/spark-$(SPARK_VERSION)/jars
MVN := mvn -q -B
# `mirror spark run`'s JVM writer (jvm/writer, mirror.spark.jvm): a Maven module whose parent is
# deps/spark/pom.xml (one Spark version), rebuilt only when a source or a pom changes.
WRITER_JAR := build/jvm/mirror-spark-writer.jar
WRITER_SOURCES := $(shell find jvm/writer/src/main -type f 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: setup test unit integration demo demo-down bench bench-setup clean-dev lint container-test jvm-test

# MM2 is in setup because the bench smoke test (tests/integration/test_bench_smoke.py) runs it.
setup: $(VENV)/.installed jars $(WRITER_JAR) class-archive

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $@

# Jars from Maven Central, keyed by the pom's content (not its mtime: every fresh clone has
# a new mtime, and must not re-fetch). Fetched into a temporary folder and moved in whole,
# so a test running at the same time never sees half a classpath.
# $(1): the pom, $(2): the cache folder.
define fetch_jars
	@if ! cmp -s $(1) $(2)/.pom 2>/dev/null; then \
	  echo "fetching the jars of $(1) from Maven Central into $(2)"; \
	  rm -rf $(2).tmp && \
	  $(MVN) -f $(1) dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(2).tmp && \
	  cp $(1) $(2).tmp/.pom && rm -rf $(2) && mv $(2).tmp $(2); \
	fi
endef

.PHONY: jars
jars:
	$(call fetch_jars,deps/kafka/pom.xml,$(KAFKA_LIBS))
	$(call fetch_jars,deps/cassandra/pom.xml,$(CASSANDRA_LIBS))
	$(call fetch_jars,deps/mm2/pom.xml,$(MM2_LIBS))
	$(call fetch_jars,deps/spark/pom.xml,$(SPARK_JARS))

# The Maven command docker/Dockerfile.spark runs too. The jar is copied beside $@ and moved in
# whole: a test starting a JVM meanwhile never sees half of it.
$(WRITER_JAR): $(WRITER_SOURCES) jvm/writer/pom.xml deps/spark/pom.xml
	@echo "building $@"
	$(MVN) -f jvm/writer/pom.xml -DskipTests package
	cp build/jvm/writer/mirror-spark-writer.jar $@.tmp && mv $@.tmp $@

# The writer's JUnit tests (jvm/writer/src/test: kafka-clients' MockConsumer/MockProducer, no
# broker), with Surefire's summary; `make test` runs them before the Python suite.
jvm-test:
	mvn -B -ntp -f jvm/writer/pom.xml test

# The Spark driver JVM's class-data archive (mirror.spark.cds): built once per Java and pyspark
# install (a no-op when it exists), so `mirror spark run` maps Spark's classes instead of loading them.
.PHONY: class-archive
class-archive: | $(VENV)/.installed jars $(WRITER_JAR)
	@$(PY) -m mirror.spark.cds

# The unit tier (pure Python, no server) beside the integration tier, which itself runs as three
# pytest processes (MIRROR_TEST_SHARD, tests/integration/conftest.py), each on its own clusters:
# the tier mostly waits on servers, so four processes share the 2 cores. Shard 1 prints as it
# runs; shards 2 and 3 and the unit tier write logs, printed after it, so nothing interleaves.
# The closing summary lines come last, and `make test` fails if any process fails. One with no
# test selected (pytest's 5: PYTEST_ARGS=-k picked only others) is no failure; all selecting
# nothing is.
TEST_LOGS := build/test
INTEGRATION := $(PY) -m pytest tests/integration -p no:cacheprovider $(PYTEST_ARGS)
test: setup container-check jvm-test
	@mkdir -p $(TEST_LOGS)
	@$(PY) -m pytest tests/unit -p no:cacheprovider $(PYTEST_ARGS) > $(TEST_LOGS)/unit.log 2>&1 & unit=$$!; \
	MIRROR_TEST_SHARD=2 $(INTEGRATION) > $(TEST_LOGS)/integration-2.log 2>&1 & second=$$!; \
	MIRROR_TEST_SHARD=3 $(INTEGRATION) > $(TEST_LOGS)/integration-3.log 2>&1 & third=$$!; \
	set -o pipefail; MIRROR_TEST_SHARD=1 $(INTEGRATION) 2>&1 | tee $(TEST_LOGS)/integration-1.log; \
	first=$$?; wait $$second; second=$$?; wait $$third; third=$$?; wait $$unit; unit=$$?; \
	for k in 2 3; do echo "=== tests/integration shard $$k, run beside shard 1 ($(TEST_LOGS)/integration-$$k.log):"; \
	  cat $(TEST_LOGS)/integration-$$k.log; done; \
	echo "=== tests/unit, run beside tests/integration ($(TEST_LOGS)/unit.log):"; cat $(TEST_LOGS)/unit.log; \
	echo "=== closing summaries (tests/unit, tests/integration shards 1, 2, 3):"; \
	tail -n 1 $(TEST_LOGS)/unit.log; for k in 1 2 3; do tail -n 1 $(TEST_LOGS)/integration-$$k.log; done; \
	passed() { [ $$1 -eq 0 ] || [ $$1 -eq 5 ]; }; \
	passed $$unit && passed $$first && passed $$second && passed $$third && \
	  [ $$((unit + first + second + third)) -ne 20 ]

unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: setup
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

demo: setup
	$(PY) -m mirror.devenv.demo

demo-down:
	$(PY) -m mirror.devenv.demo down

# `make bench` (default size, ~15 min on 2 cores) or `make bench QUICK=1` (tiny, ~1-2 min);
# extra flags through BENCH_ARGS, e.g. BENCH_ARGS="--skip mm2-t2 --reps 5". See bench/README.md.
bench-setup: setup $(VENV)/.bench-installed

$(VENV)/.bench-installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,bench]'
	touch $@

# `make bench SCALE=1`: one flow over 10,000 partitions instead (bench/scale.py, ~5 min).
bench: bench-setup
	$(PY) -m bench $(if $(SCALE),--scale,$(if $(QUICK),--quick)) $(BENCH_ARGS)

# ruff (defects, import order, and the format the unit sizes are counted in), import-linter
# (the layers of docs/design.md, and no import cycle: also tools/import_cycles.py; both run by
# `make test` too, through tests/unit/test_layers.py),
# mypy on the package, and the unit sizes (no class over 400 lines, no function over 80:
# tools/unit_sizes.py).
lint: setup
	$(VENV)/bin/ruff check src failover canary bench tests tools
	$(VENV)/bin/ruff format --check src failover canary bench tests tools
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python tools/import_cycles.py
	$(VENV)/bin/mypy src/mirror failover canary tools
	$(VENV)/bin/python tools/unit_sizes.py src failover canary

clean-dev:
	-$(VENV)/bin/mirror dev down --home .mirror/dev
	rm -rf .mirror

# promtool checks and unit-tests configs/alerts.yaml; the prometheus server from the same
# Debian package runs in the alert integration test. Installed only when promtool is
# missing (CI machines start without it); silent when present. A service the package may
# have started is stopped again: tests run their own server on a free loopback port.
.PHONY: promtool
setup: promtool
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "installing the Debian package prometheus (promtool) with apt-get"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null && \
	  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then $$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; fi; }

# Podman, its runtime and DNS, podman-compose and debootstrap (tests/integration/
# test_containers.py builds and runs docker/ with them; docker/standins/README.md). Installed
# only when one is missing, like promtool above. iptables: Debian's netavark drives it for
# every bridge network but does not depend on it, and --no-install-recommends leaves it out.
CONTAINER_TOOLS := podman runc netavark aardvark-dns podman-compose debootstrap iptables
.PHONY: container-tools
setup: container-tools
container-tools:
	@for bin in podman runc podman-compose debootstrap iptables /usr/lib/podman/netavark /usr/lib/podman/aardvark-dns; do \
	  command -v $$bin >/dev/null 2>&1 || { missing=1; break; }; done; \
	[ -z "$$missing" ] || { \
	  echo "installing the Debian packages $(CONTAINER_TOOLS) with apt-get"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CONTAINER_TOOLS) >/dev/null; }

# Before the suite relies on it: can a container start here (docker/standins/podman.sh check)?
# Where the container test runs (CI, or as root) a "no" stops `make test` with the one line
# naming what is missing; elsewhere the test skips, so it is a note.
.PHONY: container-check
container-check: container-tools
	@docker/standins/podman.sh check || { \
	  if [ -n "$$CI" ] || [ "$$(id -u)" = 0 ]; then exit 1; fi; \
	  echo "(tests/integration/test_containers.py will skip: it needs root and podman)"; }

# The images of docker/ built and the compose stack run with podman, checked end to end
# (also part of `make test`). The test needs root (rootful podman) and skips without it.
container-test: setup container-check
	$(PY) -m pytest tests/integration/test_containers.py $(PYTEST_ARGS)
