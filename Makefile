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
MVN := mvn -q -B
PYTEST_ARGS ?=

.PHONY: setup test unit integration demo bench clean-dev lint

setup: $(VENV)/.installed $(KAFKA_LIBS)/.complete $(CASSANDRA_LIBS)/.complete

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(KAFKA_LIBS)/.complete: deps/kafka/pom.xml
	rm -rf $(KAFKA_LIBS)
	$(MVN) -f deps/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(KAFKA_LIBS)
	touch $@

# Apache Cassandra for the offset store (`mirror dev up --cassandra`, integration tests).
$(CASSANDRA_LIBS)/.complete: deps/cassandra/pom.xml
	rm -rf $(CASSANDRA_LIBS)
	$(MVN) -f deps/cassandra/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CASSANDRA_LIBS)
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

integration: setup
	$(PY) -m pytest tests/integration $(PYTEST_ARGS)

demo: setup
	$(PY) -m mirror.demo

clean-dev:
	-$(VENV)/bin/mirror dev down --home .mirror/dev
	rm -rf .mirror
