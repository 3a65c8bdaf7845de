"""`mirror spark submit`: a flow as a Spark application, launched by spark-submit.

The command line is the whole contract (`--dry-run` prints it for a scheduler): the
package (`mirror.spark.package`) goes to the executors as a file and is their Python; the
connector jars come from the cache `make setup` filled; the application is
`mirror.cli.spark_app`, run by the same package on the driver.

    client mode (standalone, YARN, Kubernetes): the driver runs here, the PEX as its Python
    cluster mode (YARN, Kubernetes only): the driver runs on the cluster, the config file
        is shipped beside the PEX and named by its base name
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from mirror.errors import UsageError
from mirror.spark.package import APP_NAME, PEX_NAME, Package

log = logging.getLogger(__name__)

DEPLOY_MODES = ("client", "cluster")
STOP_GRACE = 120.0  # after a stop is forwarded, how long the driver may take to finish its batch


@dataclass(frozen=True)
class SubmitRequest:
    """What `mirror spark submit` was asked: the flow, where, and the application's flags."""

    config: Path
    flow: str
    master: str
    deploy_mode: str = "client"
    until_caught_up: bool = False
    checkpoint: Path | None = None
    max_records_per_batch: int | None = None
    metrics_port: int | None = None
    conf: tuple[tuple[str, str], ...] = ()
    app_flags: tuple[str, ...] = field(default=())  # -v / --debug, handed to the application


def check_deploy_mode(master: str, deploy_mode: str) -> None:
    """Cluster deploy mode exists for YARN and Kubernetes only: Spark standalone runs Python
    applications in client mode (spark-submit refuses otherwise), and local mode has no cluster."""
    if deploy_mode not in DEPLOY_MODES:
        raise UsageError(f"--deploy-mode {deploy_mode}: expected one of {', '.join(DEPLOY_MODES)}")
    if deploy_mode == "cluster" and (master.startswith("spark://") or master.startswith("local")):
        raise UsageError(
            f"--deploy-mode cluster: Spark does not run Python applications in cluster mode on {master}",
            hint="use client mode on standalone and local masters; cluster mode is for yarn and k8s:// masters",
        )


def parse_conf(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """`--conf KEY=VALUE` pairs, as spark-submit takes them."""
    out = []
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--conf {pair!r}: expected KEY=VALUE")
        out.append((key.strip(), value))
    return tuple(out)


def loopback_master(master: str) -> bool:
    """Local mode, or a standalone master on this host's loopback address."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    return urlparse("//" + master[len("spark://") :].split(",")[0]).hostname in ("127.0.0.1", "localhost")


def command(
    req: SubmitRequest, package: Package, jars: Sequence[str], spark_submit: Path, master: str | None = None
) -> list[str]:
    """The spark-submit line for `req` (`master`: the URL to give, default `req.master`)."""
    cluster = req.deploy_mode == "cluster"
    local = req.master.startswith("local")
    files = [str(package.pex)]
    if cluster:
        files.append(str(req.config.resolve()))
    cmd = [
        str(spark_submit),
        "--master",
        master or req.master,
        "--deploy-mode",
        req.deploy_mode,
        "--name",
        f"mirror-{req.flow}",
        "--jars",
        ",".join(jars),
        "--files",
        ",".join(files),
    ]
    # Executors start the PEX shipped into their working directory; local mode's tasks run
    # beside the driver, whose working directory is wherever this was started.
    confs = [("spark.pyspark.python", str(package.pex) if local else f"./{PEX_NAME}")]
    if not cluster:
        confs.append(("spark.pyspark.driver.python", str(package.pex)))
    if loopback_master(req.master):
        # The driver listens on loopback only (the host name may resolve to an address
        # nothing routes to), as `mirror spark run` does.
        confs += [("spark.driver.host", "127.0.0.1"), ("spark.driver.bindAddress", "127.0.0.1")]
    for key, value in [*confs, *req.conf]:
        cmd += ["--conf", f"{key}={value}"]
    cmd += [
        str(package.app),
        "-c",
        req.config.name if cluster else str(req.config.resolve()),
        "--flow",
        req.flow,
        *req.app_flags,
    ]
    if req.until_caught_up:
        cmd.append("--until-caught-up")
    if req.checkpoint is not None:
        cmd += ["--checkpoint", str(req.checkpoint if cluster else req.checkpoint.resolve())]
    if req.max_records_per_batch is not None:
        cmd += ["--max-records-per-batch", str(req.max_records_per_batch)]
    if req.metrics_port is not None:
        cmd += ["--metrics-port", str(req.metrics_port)]
    return cmd


def render(cmd: Sequence[str]) -> str:
    """The line as a shell would take it."""
    return shlex.join(cmd)


def run(cmd: Sequence[str], *, loopback: bool, stop: threading.Event, received: Sequence[int]) -> int:
    """Run spark-submit until it exits; its exit status is the application's.

    spark-submit runs in its own session, so a Ctrl-C reaches this process only: it is
    forwarded to the Python driver (which finishes its batch, commits and stops the session)
    instead of ending spark-submit's JVM under the driver mid-batch. Whatever happens here,
    the child's process group does not outlive this call.
    """
    env = dict(os.environ)
    if loopback:
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log.info("running %s", render(cmd))
    # In its own session, spark-submit would outlive this process killed by SIGKILL: util-linux's
    # setpriv makes the kernel send it SIGTERM then (not a preexec_fn: unsafe with threads).
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []
    proc = subprocess.Popen([*prefix, *cmd], env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    forwarded_at: float | None = None
    try:
        while True:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            if stop.is_set() and forwarded_at is None:
                sig = received[-1] if received else signal.SIGTERM
                targets = _drivers(proc.pid) or [proc.pid]
                log.info("forwarding signal %d to the Spark driver (pids %s)", sig, targets)
                for pid in targets:
                    _signal(pid, sig)
                forwarded_at = time.monotonic()
            elif forwarded_at is not None and time.monotonic() - forwarded_at > STOP_GRACE:
                log.warning("the Spark driver did not stop within %gs of the signal; killing spark-submit", STOP_GRACE)
                _killpg(proc.pid)
                return proc.wait()
    finally:
        if proc.poll() is None:
            _killpg(proc.pid)
            proc.wait()


def _drivers(pid: int) -> list[int]:
    """The Python driver processes under spark-submit: the descendants running the app (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for tasks in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                children = [int(c) for c in tasks.read_text().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                try:
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                except OSError:
                    continue
                if APP_NAME.encode() in cmdline:
                    found.append(child)
                todo.append(child)
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def spark_submit_path() -> Path:
    """pyspark's own spark-submit (the one `make setup` installed with the `spark` extra)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("pyspark is not installed", hint="run `make setup` (it installs the `spark` extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "spark-submit"


def prepare(req: SubmitRequest, package_dir: Path) -> list[str]:
    """Checks that need no cluster, the package built or reused, and the line to run."""
    import importlib.metadata

    from mirror.spark.package import ensure_package
    from mirror.spark.session import connector_jars, with_task_retries, writer_jars

    check_deploy_mode(req.master, req.deploy_mode)
    jars = connector_jars(importlib.metadata.version("pyspark")) + writer_jars()
    submit = spark_submit_path()
    package = ensure_package(package_dir)
    return command(req, package, jars, submit, master=with_task_retries(req.master))
