"""The spark-submit line `mirror spark submit` runs (pure: no Spark, no network)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from mirror.errors import ExitCode, UsageError
from mirror.spark.package import Package
from mirror.spark.submit import SubmitRequest, check_deploy_mode, command, loopback_master, parse_conf, render

PKG = Package(Path("/cache/mirror-abc"))
JARS = ["/jars/kafka-clients.jar", "/jars/spark-sql-kafka-0-10_2.13-4.2.0.jar"]
SUBMIT = Path("/spark/bin/spark-submit")


def conf(cmd: list[str]) -> dict[str, str]:
    return dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")


def opt(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def app_args(cmd: list[str]) -> list[str]:
    return cmd[cmd.index(str(PKG.app)) + 1 :]


def test_client_mode_on_standalone_ships_the_pex_and_runs_the_driver_in_it(tmp_path):
    cfg = tmp_path / "m.yaml"
    req = SubmitRequest(
        cfg,
        "f1",
        "spark://127.0.0.1:7077",
        until_caught_up=True,
        max_records_per_batch=500,
        conf=(("spark.executor.memory", "2g"),),
    )
    cmd = command(req, PKG, JARS, SUBMIT)
    assert cmd[0] == str(SUBMIT)
    assert (opt(cmd, "--master"), opt(cmd, "--deploy-mode"), opt(cmd, "--name")) == (
        "spark://127.0.0.1:7077",
        "client",
        "mirror-f1",
    )
    assert opt(cmd, "--jars") == ",".join(JARS)
    assert opt(cmd, "--files") == "/cache/mirror-abc/mirror.pex"
    assert conf(cmd) == {
        "spark.pyspark.python": "./mirror.pex",  # executors: the copy --files put in their working directory
        "spark.pyspark.driver.python": "/cache/mirror-abc/mirror.pex",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "2g",
    }
    assert app_args(cmd) == [
        "-c",
        str(cfg.resolve()),
        "--flow",
        "f1",
        "--until-caught-up",
        "--max-records-per-batch",
        "500",
    ]


def test_cluster_mode_ships_the_config_and_names_it_by_its_base_name(tmp_path):
    cfg = tmp_path / "m.yaml"
    req = SubmitRequest(
        cfg,
        "f1",
        "yarn",
        deploy_mode="cluster",
        checkpoint=Path("hdfs-mounted/cp"),
        metrics_port=9100,
        app_flags=("-v",),
    )
    cmd = command(req, PKG, JARS, SUBMIT)
    assert opt(cmd, "--files") == f"/cache/mirror-abc/mirror.pex,{cfg.resolve()}"
    assert conf(cmd) == {
        "spark.pyspark.python": "./mirror.pex"
    }  # no driver.python: the driver runs on the cluster, beside the shipped PEX
    assert app_args(cmd) == [
        "-c",
        "m.yaml",
        "--flow",
        "f1",
        "-v",
        "--checkpoint",
        "hdfs-mounted/cp",
        "--metrics-port",
        "9100",
    ]


def test_local_mode_runs_the_pex_by_its_full_path_and_retries_tasks(tmp_path):
    req = SubmitRequest(tmp_path / "m.yaml", "f1", "local[2]")
    cmd = command(req, PKG, JARS, SUBMIT, master="local[2,4]")
    assert opt(cmd, "--master") == "local[2,4]"
    assert conf(cmd)["spark.pyspark.python"] == "/cache/mirror-abc/mirror.pex"


@pytest.mark.parametrize("master", ["spark://127.0.0.1:7077", "spark://a:7077,b:7077", "local[*]", "local"])
def test_cluster_deploy_mode_is_refused_where_spark_cannot_run_python_in_it(master):
    with pytest.raises(UsageError) as err:
        check_deploy_mode(master, "cluster")
    assert (
        err.value.exit_code == ExitCode.USAGE
        and "--deploy-mode cluster" in str(err.value)
        and "yarn and k8s://" in str(err.value)
    )


@pytest.mark.parametrize("master", ["yarn", "k8s://https://10.0.0.1:6443"])
def test_cluster_deploy_mode_is_accepted_on_yarn_and_kubernetes(master):
    check_deploy_mode(master, "cluster")
    check_deploy_mode(master, "client")


def test_conf_pairs_and_a_bad_one():
    assert parse_conf(["a.b=1", "c=x=y", "d="]) == (("a.b", "1"), ("c", "x=y"), ("d", ""))
    with pytest.raises(UsageError, match="--conf 'nope': expected KEY=VALUE"):
        parse_conf(["nope"])


@pytest.mark.parametrize(
    ("master", "loopback"),
    [
        ("local[2]", True),
        ("spark://127.0.0.1:7077", True),
        ("spark://localhost:7077", True),
        ("spark://10.1.2.3:7077", False),
        ("yarn", False),
    ],
)
def test_loopback_masters(master, loopback):
    assert loopback_master(master) is loopback


def test_the_printed_line_is_what_a_shell_splits_back(tmp_path):
    cfg = tmp_path / "with space.yaml"
    cmd = command(SubmitRequest(cfg, "f1", "yarn"), PKG, JARS, SUBMIT)
    assert shlex.split(render(cmd)) == cmd
