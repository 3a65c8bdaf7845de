"""Prelude of `bench.startup_timeline`: timestamps of a Spark contender's start-up steps.

Run in the contender's process before its own code (like `bench.experiments`' preludes): an
import hook wraps the calls that mark a step (pyspark launching its JVM, the SparkContext and
session made, the query's source and start, our run's steps) and appends one line per first
call and return to $STAMP_FILE: seconds since $STAMP_T0 (the harness's clock at Popen), the
thread and the step, tab-separated. Measuring only: nothing here changes what the contender does.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

T0 = float(os.environ["STAMP_T0"])
_out = open(os.environ["STAMP_FILE"], "a", buffering=1)  # noqa: SIM115 - open for the process's life
_seen: set[str] = set()

# module -> (attribute owner or "", function) to stamp when that module is imported
STEPS: dict[str, list[tuple[str, str]]] = {
    "pyspark.java_gateway": [("", "launch_gateway")],
    "pyspark.core.context": [("SparkContext", "__init__")],
    "pyspark.sql.session": [("SparkSession", "__init__")],
    "pyspark.sql.streaming.readwriter": [("DataStreamReader", "load"), ("DataStreamWriter", "start")],
    "mirror.spark.session": [("", "spark_session")],
    "mirror.spark.job": [("SparkFlow", "check_clusters"), ("SparkFlow", "run"), ("SparkFlow", "_run_query")],
    "mirror.spark.batches": [("Batches", "on_batch"), ("Batches", "warm_up")],
}
IMPORTS = {"mirror.cli", "mirror.spark.job", "pyspark", "pyspark.sql", "confluent_kafka", "mirror.config"}


def mark(what: str) -> None:
    if what in _seen:
        return
    _seen.add(what)
    _out.write(f"{time.time() - T0:.3f}\t{threading.current_thread().name}\t{what}\n")


def _stamped(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    def stamped(*args: Any, **kwargs: Any) -> Any:
        mark(f"{label} called")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"{label} returned")

    return stamped


def _wrap(module: Any, owner: str, name: str) -> None:
    target = getattr(module, owner) if owner else module
    fn = getattr(target, name, None)
    if fn is not None:
        setattr(target, name, _stamped(fn, f"{owner + '.' if owner else ''}{name}"))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in STEPS and fullname not in IMPORTS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            mark(f"import {fullname} begins")
            real(module)
            mark(f"import {fullname} done")
            for owner, name in STEPS.get(fullname, []):
                _wrap(module, owner, name)
            if fullname == "pyspark.sql.session":
                _wrap(module.SparkSession, "Builder", "getOrCreate")

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


mark("prelude")
sys.meta_path.insert(0, _Finder())
