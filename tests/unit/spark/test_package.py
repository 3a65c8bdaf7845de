"""What goes into the executors' package and when it is rebuilt (no build here: pex is slow)."""

from __future__ import annotations

import os
import time

from mirror.spark.package import Package, _prune, content_key, ensure_package, requirements


def test_requirements_are_the_runtime_ones_without_what_spark_provides():
    reqs = requirements()
    names = {r.split("<")[0].split(">")[0].split("=")[0].lower() for r in reqs}
    assert {"confluent-kafka", "pydantic", "pyyaml", "cassandra-driver"} <= names
    assert not names & {"pyspark", "py4j", "pytest", "ruff", "mypy", "py-spy"}


def test_the_key_follows_the_sources(tmp_path):
    src = tmp_path / "mirror"
    (src / "spark").mkdir(parents=True)
    (src / "spark" / "task.py").write_text("A = 1\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"junk")
    key = content_key(src, ["a>=1"])
    assert content_key(src, ["a>=1"]) == key
    (src / "__pycache__" / "x.pyc").write_bytes(b"other junk")  # compiled files do not count
    assert content_key(src, ["a>=1"]) == key
    assert content_key(src, ["a>=2"]) != key
    (src / "spark" / "task.py").write_text("A = 2\n")
    assert content_key(src, ["a>=1"]) != key


def test_a_package_with_the_same_key_is_reused_not_rebuilt(tmp_path, monkeypatch):
    import mirror.spark.package as package

    built = []

    def fake_build(staging, sources, reqs):  # pex itself takes seconds: the integration tests run it
        built.append(staging)
        for name in (package.PEX_NAME, package.APP_NAME):
            (staging / name).write_text("x")

    monkeypatch.setattr(package, "_build", fake_build)
    first = ensure_package(tmp_path)
    second = ensure_package(tmp_path)
    assert first == second and len(built) == 1 and first.pex.is_file() and first.app.is_file()
    assert [p.name for p in tmp_path.iterdir()] == [first.folder.name]  # no staging folder left behind


def test_pruning_keeps_the_most_recently_used(tmp_path):
    folders = []
    for i in range(5):
        f = tmp_path / f"mirror-{i}"
        f.mkdir()
        os.utime(f, (time.time() - 100 + i, time.time() - 100 + i))
        folders.append(f)
    os.utime(folders[0], None)  # used just now
    _prune(tmp_path, keep=folders[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mirror-0", "mirror-3", "mirror-4"]
    assert Package(folders[0]).pex.name == "mirror.pex"


def test_the_key_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    """Run from the checkout, `importlib.metadata` also finds the editable install's
    mirror.egg-info there: a distribution seen twice must not make another package."""
    import importlib.metadata

    src = tmp_path / "mirror"
    src.mkdir()
    (src / "a.py").write_text("A = 1\n")
    key = content_key(src, [])
    found = list(importlib.metadata.distributions())
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [*found, *found[:3]])
    assert content_key(src, []) == key
