"""Secured clusters end to end: SASL_SSL with SCRAM-SHA-512 and ACLs enforced.

One pair of secured clusters for this module (`mirror dev up --security sasl_ssl`'s code).
The `mirror` user holds exactly the ACLs `mirror acls` lists for each test's config
(granted by `DevClusters.grant`); test data is written and read back as the admin user.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from mirror.config import load
from mirror.devenv.kafka import DevClusters
from mirror.devenv.security import Material, Security, password_var
from mirror.domain.acl_sync import Acl
from mirror.domain.acls import cluster_bindings, required_grants
from mirror.errors import ClusterUnavailable
from tests.support.clusters import free_base_port, start_cassandra
from tests.support.kafkautil import wait_for
from tests.support.metrics import scrape, total
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import free_port

pytestmark = pytest.mark.slow

NAMES = ("ssrc", "sdst")


class Secured:
    def __init__(self, dev: DevClusters) -> None:
        self.dev = dev
        self.material = Material(dev.home)
        self.passwords = self.material.passwords()
        self.nodes = {n.spec.name: n for n in dev.nodes()}

    def bootstrap(self, name: str) -> str:
        return self.nodes[name].spec.bootstrap

    def admin_settings(self, name: str) -> dict:
        return {"bootstrap.servers": self.bootstrap(name), **self.nodes[name].client("admin", with_password=True)}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    dev = DevClusters(tmp_path_factory.mktemp("secured"))
    # SASL_SSL clients on the main listener; SSL (mTLS) and SASL_PLAINTEXT ones on two more.
    dev.up(
        list(NAMES),
        free_base_port(len(NAMES)),
        security=Security.SASL_SSL,
        extra_security=[Security.SSL, Security.SASL_PLAINTEXT],
    )
    sec = Secured(dev)
    saved = {k: os.environ.get(k) for k in map(password_var, sec.passwords)}
    # Configs name ${MIRROR_DEV_MIRROR_PASSWORD}: the children inherit it from here.
    os.environ.update({password_var(u): p for u, p in sec.passwords.items()})
    try:
        yield sec
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        dev.down()


def _config(
    sec: Secured,
    tmp: Path,
    u: str,
    *,
    password_var_name: str | None = None,
    store: str | None = None,
    mode: str = "sasl_ssl",
    timeout: str = "10s",
    commands: tuple[str, ...] | None = None,
    flow_extra: str = "",
) -> Path:
    """A config for the mirror user, with the password as ${VAR}; grants exactly `mirror acls`."""
    clusters = ""
    for name in NAMES:
        client = sec.nodes[name].client("mirror", mode=mode)  # sasl.password: ${MIRROR_DEV_MIRROR_PASSWORD}
        if password_var_name:
            client["sasl.password"] = f"${{{password_var_name}}}"
        clusters += (
            f"  {name}:\n    bootstrap: {sec.nodes[name].bootstrap(mode)}\n    timeout: {timeout}\n    "
            f"client: {json.dumps(client)}\n"
        )
    path = tmp / f"secured-{u}.yaml"
    path.write_text(f"""\
clusters:
{clusters}flows:
  - name: f-{u}
    source: ssrc
    target: sdst
    consumer_group: mirror-{u}
    refresh_interval: 1s
    commit_interval: 500ms
    topics: {{include: ["sec-{u}-.*"]}}
    groups: ["billing-{u}"]
{flow_extra}offset_store: {store or f"{{kind: sqlite, path: offsets-{u}.db}}"}
canary: {{topic: canary-{u}, interval: 1s, max_latency: 20s}}
metrics: {{port: 0, host: 127.0.0.1}}
""")
    if password_var_name is None:
        sec.dev.grant(load(path), **({"commands": commands} if commands else {}))
    return path


def _produce(sec: Secured, topic: str, count: int, partitions: int, start: int = 0) -> None:
    admin = AdminClient(sec.admin_settings("ssrc"))
    fut = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    try:
        fut.result(30)
    except Exception as exc:  # noqa: BLE001 - already there on a second call
        assert "already exists" in str(exc)
    p = Producer({**sec.admin_settings("ssrc"), "enable.idempotence": True, "linger.ms": 5})
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, key=b"k%d" % i, value=b"%d:" % i + b"x" * 100, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def _ends(sec: Secured, cluster: str, topic: str, partitions: int, *, committed: bool = True) -> dict[int, int]:
    """End offsets (`committed`: below every open transaction, as a read_committed consumer's)."""
    isolation = "read_committed" if committed else "read_uncommitted"
    c = Consumer({**sec.admin_settings(cluster), "group.id": "tests-ends", "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def _committed(sec: Secured, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({**sec.admin_settings("ssrc"), "group.id": group, "enable.auto.commit": False})
    try:
        return {
            tp.partition: max(tp.offset, 0)
            for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        }
    finally:
        c.close()


def _values(sec: Secured, topic: str, partitions: int) -> list[int]:
    """The record numbers on the target, as the admin reads them back."""
    ends = _ends(sec, "sdst", topic, partitions)
    c = Consumer({**sec.admin_settings("sdst"), "group.id": "tests-reader", "enable.auto.commit": False})
    out: list[int] = []
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = dict.fromkeys(range(partitions), 0)

        def done() -> bool:
            # Batches back to back while records come (wait_for's pause only when none did).
            while True:
                batch = c.consume(5000, timeout=0.5)
                for m in batch:
                    if m.error() is None:
                        out.append(int(m.value().split(b":")[0]))
                        seen[m.partition()] = m.offset() + 1
                if all(seen[p] >= ends[p] for p in range(partitions)):
                    return True
                if not batch:
                    return False

        wait_for(done, 60, f"reading {topic} back")
    finally:
        c.close()
    return out


def _mirror(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mirror", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _kill_part_way(sec: Secured, cfg: Path, topic: str, partitions: int) -> None:
    """`mirror run` SIGKILLed as soon as anything landed on the target: on a quiet machine the
    mirror copies tens of thousands of records between two looks (each look logs in anew)."""
    m = MirrorProcess(cfg)
    try:
        wait_for(
            lambda: sum(_ends_or_zero(sec, "sdst", f"ssrc.{topic}", partitions).values()) > 0,
            120,
            "the mirror to be part way",
            detail=m.output,
        )
        m.kill()
    finally:
        m.close()


@pytest.mark.parametrize("mode", ["sasl_ssl", "ssl", "sasl_plaintext"])
def test_sigkill_then_clean_stop(secured, tmp_path, mode):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, mode=mode)
    t, n, total = f"sec-{u}-orders", 3, 150_000
    _produce(secured, t, total, n)
    _kill_part_way(secured, cfg, t, n)
    on_target = _ends(secured, "sdst", f"ssrc.{t}", n)
    committed = _committed(secured, f"mirror-{u}", t, n)
    assert sum(on_target.values()) < total, "the mirror finished before it was killed; the test proves nothing"
    assert all(committed[p] <= on_target[p] for p in range(n)), "committed past what the target acknowledged"
    in_flight = sum(on_target[p] - committed[p] for p in range(n))

    res = _mirror("run", "-c", str(cfg), "--until-caught-up")
    assert res.returncode == 0, res.stderr
    seen = _values(secured, f"ssrc.{t}", n)
    assert set(seen) == set(range(total)), "records lost"
    assert len(seen) - total <= in_flight

    # Clean stop: drain, commit, exit; a restart mirrors nothing twice.
    _produce(secured, t, 9_000, n, start=total)
    m = MirrorProcess(cfg)
    try:
        wait_for(
            lambda: sum(_ends(secured, "sdst", f"ssrc.{t}", n).values()) >= len(seen) + 9_000,
            120,
            "the new records to arrive",
            detail=m.output,
        )
        m.stop()
        assert m.proc.returncode in (0, 130), m.output()
    finally:
        m.close()
    before = _ends(secured, "sdst", f"ssrc.{t}", n)
    assert _mirror("run", "-c", str(cfg), "--until-caught-up").returncode == 0
    assert _ends(secured, "sdst", f"ssrc.{t}", n) == before, "a clean stop left records to mirror twice"


def _commit_group(sec: Secured, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({**sec.admin_settings("ssrc"), "group.id": group, "enable.auto.commit": False})

    def commit() -> bool:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        return True

    try:
        wait_for(commit, 60, f"committing {group}")  # a new cluster loads its offsets topic first
    finally:
        c.close()


def test_every_command_with_the_documented_grants_never_shows_a_password(secured, tmp_path):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u)
    t, n = f"sec-{u}-pay", 2
    _produce(secured, t, 2_000, n)
    _commit_group(secured, f"billing-{u}", t, {0: 400, 1: 500})
    outputs: list[str] = []
    files: list[Path] = []
    port = free_port()
    m = MirrorProcess(cfg, "--metrics-port", str(port))
    try:
        wait_for(
            lambda: sum(_ends(secured, "sdst", f"ssrc.{t}", n).values()) >= 2_000,
            120,
            "the mirror to catch up",
            detail=m.output,
        )
        debug = ["--debug", "-vv"]
        for args in (
            ["validate", "-c", str(cfg)],
            ["acls", "-c", str(cfg)],
            ["topics", "-c", str(cfg)],
            ["lag", "-c", str(cfg), "--json"],
            ["canary", "once", "-c", str(cfg), "--json"],
        ):
            res = _mirror(*debug, *args)
            outputs += [res.stdout, res.stderr]
            assert res.returncode == 0, f"{args}: {res.stderr[-2000:]}"
        # The checkpointer has stored the group's position: a translated plan.
        wait_for(
            lambda: (
                _mirror(
                    "failover",
                    "plan",
                    "-c",
                    str(cfg),
                    "--flow",
                    f"f-{u}",
                    "--group",
                    f"billing-{u}",
                    "--translate",
                    "--json",
                ).returncode
                == 0
            ),
            60,
            "a failover plan",
        )
        res = _mirror(
            *debug,
            "failover",
            "plan",
            "-c",
            str(cfg),
            "--flow",
            f"f-{u}",
            "--group",
            f"billing-{u}",
            "--translate",
            "--json",
        )
        outputs += [res.stdout, res.stderr]
        plan = json.loads(res.stdout)
        assert {p["partition"]: p["target_offset"] for p in plan["partitions"]} == {0: 400, 1: 500}
        export = tmp_path / "export.json"
        res = _mirror(
            *debug,
            "failover",
            "export",
            "-c",
            str(cfg),
            "--cluster",
            "ssrc",
            "--group",
            f"billing-{u}",
            "-o",
            str(export),
        )
        outputs += [res.stdout, res.stderr]
        assert res.returncode == 0, res.stderr[-2000:]
        files.append(export)
        backup = tmp_path / "backup.json"
        res = _mirror(
            *debug,
            "failover",
            "apply",
            "-c",
            str(cfg),
            "--flow",
            f"f-{u}",
            "--group",
            f"billing-{u}",
            "--translate",
            "--yes",
            "--backup",
            str(backup),
        )
        outputs += [res.stdout, res.stderr]
        assert res.returncode == 0, res.stderr[-2000:]
        res = _mirror(*debug, "failover", "import", "-c", str(cfg), "--cluster", "ssrc", str(export), "--yes")
        outputs += [res.stdout, res.stderr]
        assert res.returncode == 0, res.stderr[-2000:]
        assert _committed(secured, f"billing-{u}", t, n) == {0: 400, 1: 500}
        res = _mirror(*debug, "failback", "-c", str(cfg), "--flow", f"f-{u}", "--json")
        outputs += [res.stdout, res.stderr]
        assert res.returncode == 0, res.stderr[-2000:]
        assert json.loads(res.stdout)["never_mirrored"] == 0
        metrics = scrape(port)
        outputs.append(json.dumps(metrics))
        assert any(v > 0 for _, v in metrics.get("mirror_records_total", [])), "no records counted"
        # The lag exporter, scraped as Prometheus would.
        mport = free_port()
        mon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mirror",
                *debug,
                "monitor",
                "-c",
                str(cfg),
                "--port",
                str(mport),
                "--host",
                "127.0.0.1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            lag: dict = {}

            def scraped() -> bool:
                nonlocal lag
                try:
                    lag = scrape(mport)
                except OSError:
                    return False
                return bool(lag.get("mirror_replication_lag_records"))

            wait_for(scraped, 60, "the exporter's lag series")
            outputs.append(json.dumps(lag))
            assert {labels["topic"] for labels, _ in lag["mirror_replication_lag_records"]} >= {t}
        finally:
            mon.terminate()
            outputs.append(mon.communicate(timeout=60)[0])
    finally:
        m.stop()
    outputs.append(m.output())
    files += [p for p in tmp_path.rglob("*") if p.is_file()]
    for user, password in secured.passwords.items():
        for i, text in enumerate(outputs):
            assert password not in text, f"the {user} password appears in output #{i}"
        for f in files:
            assert password.encode() not in f.read_bytes(), f"the {user} password appears in {f}"


def test_a_missing_grant_is_one_line_and_nothing_is_committed_past_it(secured, tmp_path):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u)
    t, n = f"sec-{u}-x", 2
    _produce(secured, t, 1_000, n)
    assert _mirror("run", "-c", str(cfg), "--until-caught-up").returncode == 0
    admin = secured.dev.admin("sdst")
    denied = {("topic", f"ssrc.sec-{u}-", "prefixed"): ["Write"]}
    admin.delete_acls("User:mirror", denied)
    try:
        _produce(secured, t, 1_000, n, start=1_000)
        res = _mirror("run", "-c", str(cfg), "--until-caught-up")
        errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
        assert res.returncode == 1, res.stderr
        assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "User:mirror" in errors[0] and "Write" in errors[0] and f"ssrc.sec-{u}-x" in errors[0], errors[0]
        committed = _committed(secured, f"mirror-{u}", t, n)
        on_target = _ends(secured, "sdst", f"ssrc.{t}", n)
        assert all(committed[p] <= on_target[p] for p in range(n)), (committed, on_target)
        # lag (read-only) still works: the refusal is the run's alone.
        assert _mirror("lag", "-c", str(cfg)).returncode == 0
    finally:
        admin.create_acls("User:mirror", denied)
    assert _mirror("run", "-c", str(cfg), "--until-caught-up").returncode == 0
    assert sorted(_values(secured, f"ssrc.{t}", n)) == list(range(2_000))


def test_wrong_password_names_the_cluster_and_never_echoes_it(secured, tmp_path):
    u = uuid.uuid4().hex[:6]
    # A refused login surfaces when the request times out: a short timeout keeps this quick.
    cfg = _config(secured, tmp_path, u, password_var_name="SEC_TEST_WRONG_PASSWORD", timeout="3s")
    wrong = "wrong-" + uuid.uuid4().hex
    res = _mirror("lag", "-c", str(cfg), env={**os.environ, "SEC_TEST_WRONG_PASSWORD": wrong})
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: cluster 'ssrc'"), res.stderr
    assert "SASL credentials refused" in lines[0]
    assert wrong not in res.stderr + res.stdout
    res = _mirror("--debug", "-vv", "lag", "-c", str(cfg), env={**os.environ, "SEC_TEST_WRONG_PASSWORD": wrong})
    assert res.returncode != 0 and wrong not in res.stderr + res.stdout


@pytest.fixture(scope="module")
def auth_cassandra(secured: Secured, tmp_path_factory: pytest.TempPathFactory):
    """Cassandra with PasswordAuthenticator and a `mirror` role holding the mirror user's password."""
    node = start_cassandra(tmp_path_factory.mktemp("cassandra-auth"), auth=True)
    try:
        node.create_role("mirror", secured.passwords["mirror"])
        yield node
    finally:
        node.stop()


def test_cassandra_store_with_a_password_from_the_environment(secured, auth_cassandra, tmp_path, monkeypatch):
    u = uuid.uuid4().hex[:6]
    monkeypatch.setenv("SEC_TEST_CASSANDRA_PASSWORD", secured.passwords["mirror"])
    store = (
        f'{{kind: cassandra, contact_points: ["{auth_cassandra.contact_point}"], keyspace: sec_{u}, username: '
        f'mirror, password: "${{SEC_TEST_CASSANDRA_PASSWORD}}"}}'
    )
    cfg = _config(secured, tmp_path, u, store=store)
    t, n = f"sec-{u}-c", 2
    _produce(secured, t, 500, n)
    res = _mirror("--debug", "-vv", "run", "-c", str(cfg), "--until-caught-up")
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(_values(secured, f"ssrc.{t}", n)) == list(range(500))
    assert secured.passwords["mirror"] not in res.stdout + res.stderr

    wrong = "wrong-" + uuid.uuid4().hex
    res = _mirror("run", "-c", str(cfg), "--until-caught-up", env={**os.environ, "SEC_TEST_CASSANDRA_PASSWORD": wrong})
    assert res.returncode == 1, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "cannot log in" in errors[0] and "'mirror'" in errors[0], errors[0]
    assert wrong not in res.stdout + res.stderr


def test_dev_status_shows_client_settings_and_a_private_password_file(secured, tmp_path):
    res = _mirror("dev", "status", "--home", str(secured.dev.home), "--json")
    assert res.returncode == 0, res.stderr
    status = json.loads(res.stdout)
    client = status["clusters"]["ssrc"]["client"]
    assert client["security.protocol"] == "SASL_SSL" and client["sasl.username"] == "mirror"
    assert client["sasl.password"] == "${MIRROR_DEV_MIRROR_PASSWORD}"
    path = Path(status["passwords"])
    assert path.stat().st_mode & 0o777 == 0o600
    assert {line.split("=", 1)[0] for line in path.read_text().splitlines()} == {
        password_var(u) for u in ("admin", "mirror", "nogrants")
    }
    for password in secured.passwords.values():
        assert password not in res.stdout
    assert len(set(secured.passwords.values())) == 3, "passwords are generated, one per user"

    # The user with no grants sees nothing and may do nothing: one line, exit 1.
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u)
    cfg.write_text(
        cfg.read_text()
        .replace('"sasl.username": "mirror"', '"sasl.username": "nogrants"')
        .replace("MIRROR_DEV_MIRROR_PASSWORD", "MIRROR_DEV_NOGRANTS_PASSWORD")
    )
    res = _mirror("failover", "export", "-c", str(cfg), "--cluster", "ssrc", "--group", f"billing-{u}")
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "User:nogrants" in lines[0]
        and f"group 'billing-{u}'" in lines[0]
        and "Describe" in lines[0]
    ), res.stderr
    # Topics it may not Describe are not taken for missing ones: by a regex's prefix...
    res = _mirror("validate", "-c", str(cfg))
    assert res.returncode == 0 and f"sec-{u}-* (matching 'sec-{u}-.*')" in res.stdout, res.stdout
    res = _mirror("lag", "-c", str(cfg))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert "User:nogrants" in lines[0] and f"missing Read on topics prefixed 'sec-{u}-'" in lines[0], lines[0]
    # ...or by name.
    _produce(secured, f"sec-{u}-lit", 1, 1)
    cfg.write_text(cfg.read_text().replace(f'"sec-{u}-.*"', f'"sec-{u}-lit"'))
    res = _mirror("validate", "-c", str(cfg))
    assert res.returncode == 0, res.stderr
    assert (
        f"not allowed to Describe on ssrc (not mirrored until granted; see `mirror acls`): sec-{u}-lit" in res.stdout
    ), res.stdout
    res = _mirror("run", "-c", str(cfg), "--until-caught-up")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert "User:nogrants" in lines[0] and f"missing Read on topic 'sec-{u}-lit' (not even Describe" in lines[0], lines[
        0
    ]


# -- one grant removed at a time ---------------------------------------------------------

# Every (cluster, resource role, operation) `mirror acls` lists for `run`; the test checks
# these and CONDITIONAL are exactly what it lists. Describe and DescribeConfigs are implied by
# Read/Write/Alter/Delete and AlterConfigs (so `mirror acls` leaves them out).
RUN_GRANTS = [
    ("ssrc", "topics", "Read"),
    ("ssrc", "topics", "DescribeConfigs"),
    ("ssrc", "canary", "Read"),
    ("ssrc", "canary", "DescribeConfigs"),
    ("ssrc", "mirror-group", "Read"),
    ("ssrc", "groups", "Describe"),
    *[("sdst", role, op) for role in ("topics", "canary") for op in ("Create", "Write", "Alter", "AlterConfigs")],
]
# Needed only in a situation a fresh run does not meet, by a path that warns and goes on.
CONDITIONAL = {
    ("sdst", "topics", "Delete"): "empty a target topic someone else recreated (DeleteRecords); warned, best effort",
    ("sdst", "canary", "Delete"): "as above",
}
# A request may need an operation the listed grant implies (Kafka's rule): the error names that one.
IMPLIES = {
    "Read": {"Describe"},
    "Write": {"Describe"},
    "Alter": {"Describe"},
    "Delete": {"Describe"},
    "AlterConfigs": {"DescribeConfigs"},
}


LAG_GRANTS = [
    ("ssrc", "topics", "Read"),
    ("ssrc", "mirror-group", "Describe"),
    ("ssrc", "reader", "Describe"),
    ("ssrc", "groups", "Describe"),
    ("sdst", "topics", "Describe"),
    ("sdst", "groups", "Describe"),
]


def _role(kind: str, name: str, u: str) -> str:
    if kind == "group":
        return {f"mirror-{u}": "mirror-group", "mirror-reader-": "reader", "mirror-failover-probe-": "probe"}.get(
            name, "groups"
        )
    return "canary" if name.endswith(f"canary-{u}") else "topics"


def _bindings(cfg: Path, u: str, command: str = "run") -> dict[tuple[str, str, str], tuple[str, str, str]]:
    """(cluster, role, operation) -> the ACL resource (kind, name, pattern), from `mirror acls --json`."""
    res = _mirror("acls", "-c", str(cfg), "--json")
    assert res.returncode == 0, res.stderr
    out = {}
    for g in json.loads(res.stdout):
        if g["command"] == command:
            for op in g["operations"]:
                out[(g["cluster"], _role(g["resource_type"], g["resource"], u), op)] = (
                    g["resource_type"],
                    g["resource"],
                    g["pattern_type"],
                )
    return out


def _ends_or_zero(sec: Secured, cluster: str, topic: str, partitions: int, *, committed: bool = True) -> dict[int, int]:
    try:
        return _ends(sec, cluster, topic, partitions, committed=committed)
    except Exception:  # noqa: BLE001 - the target topic was never created: nothing on it
        return dict.fromkeys(range(partitions), 0)


@pytest.mark.parametrize(("cluster", "role", "op"), RUN_GRANTS, ids=["-".join(g) for g in RUN_GRANTS])
def test_run_without_one_grant(secured, tmp_path, cluster, role, op):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("run",))
    bindings = _bindings(cfg, u)
    assert set(bindings) == {*RUN_GRANTS, *CONDITIONAL}, "RUN_GRANTS is not what `mirror acls` lists for run"
    kind, name, pattern = bindings[(cluster, role, op)]
    t, n = f"sec-{u}-t", 2
    _produce(secured, t, 200, n)
    _produce(secured, f"canary-{u}", 2, 2)  # `mirror canary` makes it (run has no Create on it) and probes it
    if op == "Alter":  # the target topic is there with fewer partitions than its source: grow it
        tgt = AdminClient(secured.admin_settings("sdst"))
        name_on_target = f"ssrc.canary-{u}" if role == "canary" else f"ssrc.{t}"
        tgt.create_topics([NewTopic(name_on_target, 1, 1)])[name_on_target].result(30)
    _commit_group(secured, f"billing-{u}", t, {0: 10, 1: 20})
    admin = secured.dev.admin(cluster)
    admin.delete_acls("User:mirror", {(kind, name, pattern): [op]})
    try:
        res = _mirror("run", "-c", str(cfg), "--until-caught-up", timeout=90)
    finally:
        admin.create_acls("User:mirror", {(kind, name, pattern): [op]})
    committed = _committed(secured, f"mirror-{u}", t, n)
    on_target = _ends_or_zero(secured, "sdst", f"ssrc.{t}", n)
    assert all(committed[p] <= on_target[p] for p in range(n)), (committed, on_target)
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    shown = name if kind != "cluster" else "the cluster"
    assert res.returncode == 1, res.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "User:mirror" in errors[0] and any(f"missing {o} on" in errors[0] for o in {op, *IMPLIES.get(op, ())}), (
        errors[0]
    )
    assert shown.rstrip("-") in errors[0], errors[0]


def _check_one_line(res: subprocess.CompletedProcess, op: str, kind: str, name: str) -> None:
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert res.returncode == 1, res.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "User:mirror" in errors[0] and f"missing {op} on" in errors[0] and name.rstrip("-") in errors[0], errors[0]


@pytest.mark.parametrize(("cluster", "role", "op"), LAG_GRANTS, ids=["-".join(g) for g in LAG_GRANTS])
def test_lag_without_one_grant(secured, tmp_path, cluster, role, op):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("lag",))
    bindings = _bindings(cfg, u, "lag")
    assert set(bindings) == set(LAG_GRANTS), "LAG_GRANTS is not what `mirror acls` lists for lag"
    kind, name, pattern = bindings[(cluster, role, op)]
    # Nothing mirrored yet (lag to read a first record of), the target topic there, the
    # checkpointed group on both sides.
    t, n = f"sec-{u}-t", 2
    _produce(secured, t, 50, n)
    tgt = AdminClient(secured.admin_settings("sdst"))
    tgt.create_topics([NewTopic(f"ssrc.{t}", n, 1)])[f"ssrc.{t}"].result(30)
    _commit_group(secured, f"billing-{u}", t, {0: 10, 1: 20})
    c = Consumer({**secured.admin_settings("sdst"), "group.id": f"billing-{u}", "enable.auto.commit": False})
    try:
        wait_for(
            lambda: c.commit(offsets=[TopicPartition(f"ssrc.{t}", 0, 0)], asynchronous=False) or True,
            60,
            "a target commit",
        )
    finally:
        c.close()
    ok = _mirror("lag", "-c", str(cfg), "--json")
    assert ok.returncode == 0 and not json.loads(ok.stdout)["flows"][0]["errors"], ok.stdout + ok.stderr[-2000:]
    admin = secured.dev.admin(cluster)
    admin.delete_acls("User:mirror", {(kind, name, pattern): [op]})
    try:
        res = _mirror("lag", "-c", str(cfg), "--json", timeout=90)
    finally:
        admin.create_acls("User:mirror", {(kind, name, pattern): [op]})
    _check_one_line(res, op, kind, name)


PLAN_GRANTS = [
    ("ssrc", "mirror-group", "Describe"),
    ("ssrc", "topics", "Describe"),
    ("ssrc", "groups", "Describe"),
    ("sdst", "topics", "Read"),
]


def _first_timestamp(sec: Secured, cluster: str, topic: str) -> int:
    c = Consumer({**sec.admin_settings(cluster), "group.id": "tests-ts", "enable.auto.commit": False})
    stamps: list[int] = []

    def read() -> bool:
        m = c.poll(1)
        if m is not None and m.error() is None:
            stamps.append(m.timestamp()[1])
        return bool(stamps)

    try:
        c.assign([TopicPartition(topic, 0, 0)])
        wait_for(read, 30, f"a record of {topic}")
    finally:
        c.close()
    return stamps[0]


@pytest.mark.parametrize(("cluster", "role", "op"), PLAN_GRANTS, ids=["-".join(g) for g in PLAN_GRANTS])
def test_failover_plan_without_one_grant(secured, tmp_path, cluster, role, op):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("run", "failover plan"))
    bindings = _bindings(cfg, u, "failover plan")
    assert set(bindings) == set(PLAN_GRANTS), "PLAN_GRANTS is not what `mirror acls` lists for failover plan"
    kind, name, pattern = bindings[(cluster, role, op)]
    t, n = f"sec-{u}-t", 2
    _produce(secured, t, 200, n)
    _commit_group(secured, f"billing-{u}", t, {0: 10, 1: 20})
    res = _mirror("run", "-c", str(cfg), "--until-caught-up")
    assert res.returncode == 0, res.stderr[-2000:]
    # From here on the mirror user holds exactly what `failover plan` needs.
    config = load(cfg)
    union = required_grants(config, ("run", "failover plan"))
    for c in NAMES:
        secured.dev.admin(c).delete_acls(
            "User:mirror", {(r.kind, r.name, r.pattern): ops for r, ops in cluster_bindings(union, c).items()}
        )
    secured.dev.grant(config, commands=("failover plan",))
    plan = ["failover", "plan", "-c", str(cfg), "--flow", f"f-{u}", "--group", f"billing-{u}", "--translate", "--json"]
    ok = _mirror(*plan)
    assert ok.returncode == 0, ok.stderr[-2000:]
    if (cluster, role) == ("sdst", "topics"):
        # --at a record's own millisecond: the boundary reader counts the records sharing
        # it, with no group ACL (none is listed for it).
        at = _mirror(*plan[:-2], "--at", str(_first_timestamp(secured, "sdst", f"ssrc.{t}")), "--json")
        assert at.returncode == 0 and json.loads(at.stdout)["boundary_records"] > 0, at.stdout + at.stderr[-2000:]
    admin = secured.dev.admin(cluster)
    admin.delete_acls("User:mirror", {(kind, name, pattern): [op]})
    try:
        res = _mirror(*plan, timeout=90)
    finally:
        admin.create_acls("User:mirror", {(kind, name, pattern): [op]})
    _check_one_line(res, op, kind, name)


def test_spark_run_on_sasl_ssl_clusters_with_scram_and_a_pem_ca(secured, tmp_path, spark_local, capfd):
    """The librdkafka settings of a SASL_SSL (SCRAM-SHA-512, PEM CA) cluster, mapped to the Java
    source's options: the Spark run reads the secured source; the password is never printed.
    (On this module's secured pair, as the admin user, in the session's Spark.)"""
    from mirror.spark.job import run_flow
    from tests.support.kafkautil import read_partition as read_back

    u = uuid.uuid4().hex[:6]
    topic = f"sp-{u}-sec"
    creator = AdminClient(secured.admin_settings("ssrc"))
    creator.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    p = Producer({**secured.admin_settings("ssrc"), "enable.idempotence": True})
    for i in range(200):
        p.produce(topic, value=b"s%d" % i, key=b"%d" % i, partition=i % 2, headers=[("h", b"x")] if i % 2 else None)
    assert p.flush(30) == 0
    # The main (SASL_SSL) listener; the password as ${VAR}, which the fixture set.
    clusters = "".join(
        f"  {name}:\n    bootstrap: {secured.bootstrap(name)}\n    client: "
        f"{json.dumps(secured.nodes[name].client('admin'))}\n"
        for name in NAMES
    )
    path = tmp_path / "secured.yaml"
    path.write_text(
        f"clusters:\n{clusters}flows:\n  - {{name: f-{u}, source: ssrc, target: sdst, consumer_group: "
        f"mirror-{u}, topics: {{include: ['{topic}']}}}}\n"
        f"offset_store: {{kind: sqlite, path: {tmp_path / 'o.db'}}}\n"
    )
    assert "SASL_SSL" in path.read_text() and "${" in path.read_text()
    config = load(path)
    job = run_flow(config, config.flow(f"f-{u}"), until_caught_up=True, spark=spark_local)
    assert job.records == 200
    assert set(job.paths) == {"jvm"}  # the JVM writer's producer logged in with the same settings
    for part in range(2):
        copies = read_back(
            secured.bootstrap("sdst"),
            f"ssrc.{topic}",
            part,
            settings=secured.nodes["sdst"].client("admin", with_password=True),
        )
        assert [r.content() for r in copies] == [
            r.content()
            for r in read_back(
                secured.bootstrap("ssrc"),
                topic,
                part,
                settings=secured.nodes["ssrc"].client("admin", with_password=True),
            )
        ]
    out, err = capfd.readouterr()
    assert secured.passwords["admin"] not in out + err


def _fails_without(sec: Secured, grant, op: str, run, command: str) -> None:
    """`run()` with one grant (its resource, `op`) withdrawn from the mirror user, restored
    after: exit 1 and one line naming the principal, the operation (or one it implies) and
    the resource."""
    resource = (grant.resource.kind, grant.resource.name, grant.resource.pattern)
    admin = sec.dev.admin(grant.cluster)
    admin.delete_acls("User:mirror", {resource: [op]})
    try:
        res = run()
    finally:
        admin.create_acls("User:mirror", {resource: [op]})
    where = f"{command} without {op} on {grant.cluster} {resource}"
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert res.returncode == 1 and len(errors) == 1 and "Traceback" not in res.stderr, (
        f"{where}: {res.returncode} {res.stdout[-1000:]} {res.stderr[-2000:]}"
    )
    assert "User:mirror" in errors[0] and any(f"missing {o} on" in errors[0] for o in {op, *IMPLIES.get(op, ())}), (
        f"{where}: {errors[0]} {res.stderr[-2000:]}"
    )
    assert grant.resource.name.rstrip("-.") in errors[0], f"{where}: {errors[0]}"


# ---------------------------------------------------------------------------- a whole site

SITE_COMMANDS = (
    "failover plan --from",
    "failover apply --plan",
    "failover import --backup",
    "failover export",
    "failover import",
    "failback --from",
)


def _only(sec: Secured, config, commands: tuple[str, ...], keep: tuple[str, ...]) -> None:
    """The mirror user holds exactly what `mirror acls` lists for `keep`."""
    union = required_grants(config, commands)
    for c in NAMES:
        sec.dev.admin(c).delete_acls(
            "User:mirror", {(r.kind, r.name, r.pattern): ops for r, ops in cluster_bindings(union, c).items()}
        )
    sec.dev.grant(config, commands=keep)


def _set_group(sec: Secured, cluster: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """As the admin: the group's offsets on the cluster are exactly `offsets`."""
    admin = sec.dev.admin(cluster)

    def done() -> bool:
        try:
            admin.delete_groups([group])
            if offsets:
                admin.alter_group_offsets(group, {(topic, p): o for p, o in offsets.items()})
            return True
        except ClusterUnavailable:  # a cluster where no group committed yet: its offsets topic is being made
            return False

    wait_for(done, 60, f"setting {group} on {cluster}")


@pytest.mark.timeout(900)  # about twenty commands, each once with one grant missing
def test_site_failover_commands_without_one_grant(secured, tmp_path):
    """Every grant `mirror acls` lists for the site commands (and export/import) is one the
    command notices: removed alone, the command fails with one line naming it."""
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("run",))
    config = load(cfg)
    t, n, group = f"sec-{u}-t", 2, f"billing-{u}"
    topic_on = {"ssrc": t, "sdst": f"ssrc.{t}"}
    _produce(secured, t, 200, n)
    _commit_group(secured, group, t, {0: 10, 1: 20})
    res = _mirror("run", "-c", str(cfg), "--until-caught-up")
    assert res.returncode == 0, res.stderr[-2000:]
    plan_path, export, backup = tmp_path / "site.json", tmp_path / "export.json", tmp_path / "site.backup.json"
    argvs = {
        "failover plan --from": [
            "failover",
            "plan",
            "-c",
            str(cfg),
            "--from",
            "ssrc",
            "--translate",
            "--out",
            str(plan_path),
        ],
        "failover apply --plan": ["failover", "apply", "--plan", str(plan_path), "--yes"],
        "failover import --backup": ["failover", "import", "-c", str(cfg), "--backup", str(backup), "--yes"],
        "failback --from": ["failback", "-c", str(cfg), "--from", "ssrc", "--scrape", "--yes"],
        "failover export": [
            "failover",
            "export",
            "-c",
            str(cfg),
            "--cluster",
            "CLUSTER",
            "--group",
            group,
            "-o",
            str(export),
        ],
        "failover import": ["failover", "import", "-c", str(cfg), "--cluster", "CLUSTER", str(export), "--yes"],
    }

    def reset(command: str, cluster: str) -> None:
        """Each run starts from the state its command acts on."""
        if command == "failover apply --plan":
            _set_group(secured, "sdst", group, topic_on["sdst"], {0: 0})  # as planned: the backup then holds p0 only
        elif command == "failover import --backup":
            _set_group(
                secured, "sdst", group, topic_on["sdst"], {0: 5, 1: 5}
            )  # p1 not in the backup: restoring deletes the group first
        elif command == "failover import":
            _set_group(secured, cluster, group, topic_on[cluster], {0: 7, 1: 8})  # the export holds p0 only
        elif command == "failover export":
            _set_group(secured, cluster, group, topic_on[cluster], {0: 3})
        elif command == "failback --from":  # the run before scraped them
            _commit_group(secured, group, t, {0: 10, 1: 20})
            _commit_group(secured, f"mirror-{u}", t, {0: 1, 1: 1})

    _set_group(secured, "sdst", group, topic_on["sdst"], {0: 0})
    for command in SITE_COMMANDS:
        _only(secured, config, ("run", *SITE_COMMANDS), (command,))
        per_cluster = command in ("failover export", "failover import")
        for cluster in ["ssrc", "sdst"] if per_cluster else ["sdst"]:
            argv = [a if a != "CLUSTER" else cluster for a in argvs[command]]
            if command == "failover import":  # a file of the group's offsets on this cluster: p0 only
                reset("failover export", cluster)
                assert _mirror(*[a if a != "CLUSTER" else cluster for a in argvs["failover export"]]).returncode == 0
            reset(command, cluster)
            ok = _mirror(*argv)
            assert ok.returncode == 0, f"{command} with exactly its grants: {ok.stderr[-2000:]}"
            for g in required_grants(config, (command,)):
                if per_cluster and g.cluster != cluster:
                    continue
                for op in g.operations:
                    reset(command, cluster)
                    _fails_without(secured, g, op, lambda argv=argv: _mirror(*argv, timeout=90), command)


def test_site_apply_refused_halfway_then_run_again_finishes_the_rest(secured, tmp_path):
    """`failover apply --plan` stopped halfway on a real broker: the target refuses one
    group's commit (its Read grant withdrawn after the plan), the others are moved; the same
    command run again (the grant back) keeps the first run's backup, leaves the groups already
    moved as they are, moves the rest and says so."""
    u = uuid.uuid4().hex[:6]
    commands = ("run", "failover plan --from", "failover apply --plan")
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=commands)
    cfg.write_text(cfg.read_text().replace(f'groups: ["billing-{u}"]', f'groups: ["billing-{u}", "orders-{u}"]'))
    secured.dev.grant(load(cfg), commands=commands)
    t, n = f"sec-{u}-t", 2
    _produce(secured, t, 100, n)
    want = {f"billing-{u}": {0: 10, 1: 20}, f"orders-{u}": {0: 30, 1: 40}}
    for group, offsets in want.items():
        _commit_group(secured, group, t, offsets)
    assert (res := _mirror("run", "-c", str(cfg), "--until-caught-up")).returncode == 0, res.stderr[-2000:]
    plan, backup = tmp_path / "site.json", tmp_path / "site.backup.json"
    res = _mirror("failover", "plan", "-c", str(cfg), "--from", "ssrc", "--translate", "--out", str(plan))
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(plan.read_text())
    planned = {g["group"]: {r["partition"]: r["offset"] for r in g["offsets"]} for g in doc["groups"]}
    assert planned == want, planned  # a fresh topic mirrored one to one

    def on_target(group: str) -> dict[int, int]:
        c = Consumer({**secured.admin_settings("sdst"), "group.id": group, "enable.auto.commit": False})
        try:
            committed = c.committed([TopicPartition(f"ssrc.{t}", p) for p in range(n)], timeout=10)
        finally:
            c.close()
        return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}

    orders = ("group", f"orders-{u}", "literal")
    admin = secured.dev.admin("sdst")
    admin.create_acls("User:mirror", {orders: ["Describe"]})  # still visible: apply's checks pass, its commit not
    admin.delete_acls("User:mirror", {orders: ["Read"]})
    try:
        first = _mirror("failover", "apply", "--plan", str(plan), "--yes", timeout=90)
    finally:
        admin.create_acls("User:mirror", {orders: ["Read"]})
        admin.delete_acls("User:mirror", {orders: ["Describe"]})
    errors = [line for line in first.stderr.splitlines() if line.startswith("Error:")]
    assert first.returncode == 1 and len(errors) == 1 and "Traceback" not in first.stderr, first.stderr[-3000:]
    assert f"missing Read on group 'orders-{u}'" in errors[0], errors[0]
    assert "moved at least 1 of 2 groups; run the same command again" in errors[0], errors[0]
    assert on_target(f"billing-{u}") == want[f"billing-{u}"] and on_target(f"orders-{u}") == {}
    written = backup.read_bytes()

    again = _mirror("failover", "apply", "--plan", str(plan), "--yes", timeout=90)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: 1 group(s) already moved by an earlier run are left as they are; backup {backup}" in (
        again.stdout
    ), again.stdout
    assert f"[1/1] orders-{u} -> sdst: 2 partitions set" in again.stdout, again.stdout
    assert "moved 1 group(s), 1 already moved by an earlier run" in again.stdout, again.stdout
    assert backup.read_bytes() == written  # the offsets from before anything moved, kept
    assert {g: on_target(g) for g in want} == want
    third = _mirror("failover", "apply", "--plan", str(plan), "--yes", "--json")
    assert third.returncode == 0 and json.loads(third.stdout)["moved"] == [], third.stdout + third.stderr[-2000:]


def _as_admin(sec: Secured, cfg: Path, u: str) -> Path:
    """The same config, logged in as the admin (a super user): runs what a test does not check."""
    text = cfg.read_text()
    for name in NAMES:
        text = text.replace(json.dumps(sec.nodes[name].client("mirror")), json.dumps(sec.nodes[name].client("admin")))
    path = cfg.with_name(f"admin-{u}.yaml")
    path.write_text(text)
    return path


@pytest.mark.timeout(600)
def test_canary_without_one_grant(secured, tmp_path):
    """Every grant `mirror acls` lists for `canary` is one `mirror canary once` notices: removed
    alone, it fails with one line naming it. The mirror it probes runs as the admin; the topic's
    Create last, with the topic gone (a canary that finds it needs no Create)."""
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("canary",))
    config = load(cfg)
    grants = [(g, op) for g in required_grants(config, ("canary",)) for op in g.operations]
    assert {(g.cluster, _role(g.resource.kind, g.resource.name, u), op) for g, op in grants} == {
        ("ssrc", "canary", "Create"),
        ("ssrc", "canary", "Write"),
        ("sdst", "canary", "Read"),
        ("sdst", "reader", "Describe"),
    }
    grants.sort(key=lambda x: x[1] == "Create")
    mirror = MirrorProcess(_as_admin(secured, cfg, u))
    once = ("canary", "once", "-c", str(cfg), "--json")
    try:
        wait_for(lambda: _mirror(*once).returncode == 0, 120, "a canary round with every grant", detail=mirror.output)
        for g, op in grants:
            if op == "Create":
                secured.dev.admin("ssrc").delete_topics([f"canary-{u}"])
            _fails_without(secured, g, op, lambda: _mirror(*once, timeout=90), "canary")
        # Write on some other topic of the source (as other flows' grants give) lets the
        # producer have its idempotence id (KIP-679): the probes themselves are refused then.
        other = ("topic", f"other-{u}", "literal")
        secured.dev.admin("ssrc").create_acls("User:mirror", {other: ["Write"]})
        try:
            write = next(g for g, op in grants if op == "Write")
            _fails_without(secured, write, "Write", lambda: _mirror(*once, timeout=90), "canary")
        finally:
            secured.dev.admin("ssrc").delete_acls("User:mirror", {other: ["Write"]})
    finally:
        mirror.stop()


DRILL_RUNBOOK = """\
# Runbook: one group to the DR cluster, for a drill's least privilege

## 1. Stop the group

manual: stop-group — its owner stops it on the primary.

## 2. Move it

```sh
mirror failover apply -c $CONFIG --flow $FLOW --group $GROUP --translate --yes --backup before-dr.json
```
expect: exit 0

## 3. Start it on the DR cluster

manual: start-group — its owner starts it there.

## 4. End of the drill

manual: stop-dr-group — it reads what reached the DR cluster, then stops.
"""


@pytest.mark.timeout(900)
def test_drill_without_one_grant(secured, tmp_path):
    """Every grant `mirror acls` lists for `drill` is one a drill notices: removed alone (the
    runbook's `failover apply` granted too), the drill fails with one line naming it. The
    mirror runs as the admin; the workload topic's Create last, with the topic gone."""
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("drill", "failover apply"))
    # One store for the mirror and the drill's commands (which run in the report folder).
    cfg.write_text(cfg.read_text().replace(f"path: offsets-{u}.db", f"path: {tmp_path / 'offsets.db'}"))
    config = load(cfg)
    runbook = tmp_path / "drill-acls.md"
    runbook.write_text(DRILL_RUNBOOK)
    topic = f"sec-{u}-drill"
    grants = sorted(
        ((g, op) for g in required_grants(config, ("drill",)) for op in g.operations), key=lambda x: x[1] == "Create"
    )
    assert {(g.cluster, _role(g.resource.kind, g.resource.name, u), op) for g, op in grants} == {
        ("ssrc", "topics", "Create"),
        ("ssrc", "topics", "Write"),
        ("ssrc", "topics", "Read"),
        ("ssrc", "mirror-group", "Describe"),
        ("ssrc", "reader", "Describe"),
        ("ssrc", "groups", "Read"),
        ("sdst", "topics", "Read"),
        ("sdst", "groups", "Read"),
    }

    # The lag at the cutover reads the first unmirrored record at the mirror's committed
    # position; only a partition the mirror never committed is read by the reader group's
    # stored offset (OffsetFetch: the group ACL). The mirror is caught up here: not noticed.
    grants = [(g, op) for g, op in grants if g.resource.name != "mirror-reader-"]

    def drill(report: str) -> subprocess.CompletedProcess:
        argv = ["drill", str(runbook), "-c", str(cfg), "--flow", f"f-{u}", "--group", f"billing-{u}"]
        return _mirror(*argv, "--topic", topic, "--partitions", "2", "--yes", "--out", str(tmp_path / report))

    mirror = MirrorProcess(_as_admin(secured, cfg, u))
    try:
        ok = drill("all-grants")
        assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-3000:] + mirror.output()[-2000:]
        for i, (g, op) in enumerate(grants):
            if op == "Create":
                secured.dev.admin("ssrc").delete_topics([topic])
            _fails_without(secured, g, op, lambda i=i: drill(f"without-{i}"), "drill")
    finally:
        mirror.stop()


# ---------------------------------------------------------------------------- exactly-once

EOS = "    exactly_once: true\n"
# What exactly_once adds to run's grants on the target: (kind, name, pattern) given u, operation.
EOS_GRANTS = [
    ("transactional-id", "mirror.f-{u}.", "prefixed", "Write"),
    ("group", "mirror-eos.f-{u}", "literal", "Read"),
    ("topic", "ssrc.sec-{u}-", "prefixed", "Read"),
]


def _copies(sec: Secured, topic: str, partitions: int) -> dict[int, list[int]]:
    """Partition -> the record numbers a read_committed consumer of the target sees, in order."""
    c = Consumer(
        {
            **sec.admin_settings("sdst"),
            "group.id": "tests-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

        def done() -> bool:
            for m in c.consume(5000, timeout=0.5):
                if m.error() is None:
                    out[m.partition()].append(int(m.value().split(b":")[0]))
            # Positions, not the last record's offset: a transaction's commit marker ends a partition.
            pos = c.position([TopicPartition(topic, p) for p in range(partitions)])
            return all(tp.offset >= ends[tp.partition] for tp in pos)

        wait_for(done, 60, f"reading {topic} back read_committed", interval=0)
    finally:
        c.close()
    return out


def _exactly(sec: Secured, t: str, total: int, partitions: int) -> dict[str, int]:
    """The target's copy of `t` against the records `_produce` wrote (record i in partition i % n):
    counts of lost and duplicated records, and order per partition."""
    got = _copies(sec, f"ssrc.{t}", partitions)
    copied = [v for vs in got.values() for v in vs]
    counts = {
        "copied": len(copied),
        "lost": len(set(range(total)) - set(copied)),
        "duplicated": len(copied) - len(set(copied)),
    }
    if not counts["lost"] and not counts["duplicated"]:
        for p, vs in got.items():
            assert vs == list(range(p, total, partitions)), f"partition {p}: order differs"
    return counts


def test_exactly_once_between_secured_clusters(secured, tmp_path):
    """exactly_once over SASL_SSL with only what `mirror acls` lists: a worker SIGKILLed while
    its transaction is open (records fed all along), the next one fences it (Write on its
    transactional id, by the granted prefix) and finishes; read_committed sees every record
    once, in order per partition."""
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, flow_extra=EOS)
    listed = {(g.resource.kind, g.resource.name, g.resource.pattern) for g in required_grants(load(cfg), ("run",))}
    assert {(k, name.format(u=u), pattern) for k, name, pattern, _ in EOS_GRANTS} <= listed
    t, n = f"sec-{u}-eos", 3
    _produce(secured, t, 3_000, n)
    stop, fed = threading.Event(), [3_000]

    def feed() -> None:  # bounded: at most 200,000 records
        p = Producer({**secured.admin_settings("ssrc"), "enable.idempotence": True, "linger.ms": 5})
        while not stop.is_set() and fed[0] < 200_000:
            for i in range(fed[0], fed[0] + 200):
                p.produce(t, key=b"k%d" % i, value=b"%d:" % i + b"x" * 100, partition=i % n)
            fed[0] += 200
            p.poll(0)
            stop.wait(0.05)
        assert p.flush(60) == 0

    def open_transaction() -> bool:
        ends = _ends_or_zero(secured, "sdst", f"ssrc.{t}", n)
        return sum(_ends_or_zero(secured, "sdst", f"ssrc.{t}", n, committed=False).values()) > sum(ends.values())

    feeder = threading.Thread(target=feed, daemon=True)
    m = MirrorProcess(cfg)
    try:
        feeder.start()
        wait_for(open_transaction, 120, "a transaction open on the target", interval=0.05, detail=m.output)
        m.kill()
    finally:
        m.close()
        stop.set()
        feeder.join(90)
    res = _mirror("-v", "run", "-c", str(cfg), "--until-caught-up")
    assert res.returncode == 0, res.stderr[-3000:]
    assert re.search(r"fenced mirror\.f-", res.stderr), res.stderr[-3000:]
    counts = _exactly(secured, t, fed[0], n)
    print(f"exactly-once on SASL_SSL after a SIGKILL: {counts}")
    assert counts == {"copied": fed[0], "lost": 0, "duplicated": 0}


@pytest.mark.parametrize(("kind", "name", "pattern", "op"), EOS_GRANTS, ids=[g[0] for g in EOS_GRANTS])
def test_exactly_once_run_without_one_grant(secured, tmp_path, kind, name, pattern, op):
    """Exit 1, one line naming the missing grant, no hang; granted again, the next run copies
    every record once."""
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, timeout="3s", commands=("run",), flow_extra=EOS)
    resource = (kind, name.format(u=u), pattern)
    t, n = f"sec-{u}-t", 2
    _produce(secured, t, 500, n)
    admin = secured.dev.admin("sdst")
    admin.delete_acls("User:mirror", {resource: [op]})
    try:
        res = _mirror("run", "-c", str(cfg), "--until-caught-up", timeout=90)
    finally:
        admin.create_acls("User:mirror", {resource: [op]})
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert res.returncode == 1, res.stderr[-3000:]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "User:mirror" in errors[0] and any(f"missing {o} on" in errors[0] for o in {op, *IMPLIES[op]}), errors[0]
    assert resource[1].rstrip("-.") in errors[0], errors[0]
    assert _committed(secured, f"mirror-{u}", t, n) == {0: 0, 1: 0}, "committed without a transaction"
    assert _mirror("run", "-c", str(cfg), "--until-caught-up").returncode == 0
    assert _exactly(secured, t, 500, n) == {"copied": 500, "lost": 0, "duplicated": 0}


# ---------------------------------------------------------------------------- ACL sync

ACL_SYNC = "    sync_acls: true\n    sync_acls_interval: 2s\n"


def _acls(sec: Secured, cluster: str, marker: str) -> set[Acl]:
    """The cluster's ACLs naming `marker` in their principal (this test's own)."""
    return {a for a in sec.dev.admin(cluster).describe_acls() if marker in a.principal}


def _acl_metrics(port: int) -> dict[str, float]:
    """The worker's mirror_acl_sync_* samples (zeros while it is not serving yet)."""
    try:
        samples = scrape(port)
    except OSError:
        samples = {}
    names = ("rounds", "created", "removed", "refused")
    out = {n: total(samples, f"mirror_acl_sync_{n}_total") or 0.0 for n in names}
    out["in_sync"] = total(samples, "mirror_acl_sync_in_sync") or 0.0
    return out


def _rounds_pass(ports: list[int], count: int, m: list[MirrorProcess]) -> None:
    """Wait until every worker has finished `count` more sync rounds."""
    start = [_acl_metrics(p)["rounds"] for p in ports]
    wait_for(
        lambda: all(_acl_metrics(p)["rounds"] >= s + count for p, s in zip(ports, start)),
        120,
        f"{count} more ACL sync rounds on every worker",
        detail=lambda: "\n".join(w.output()[-3000:] for w in m),
    )


def test_acl_sync_copies_read_acls_renamed_follows_deletes_and_two_workers_agree(secured, tmp_path):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, flow_extra=ACL_SYNC)
    t, app, bad, hand, writer = f"sec-{u}-orders", f"User:app-{u}", f"User:bad-{u}", f"User:hand-{u}", f"User:w-{u}"
    _produce(secured, t, 10, 1)
    src = secured.dev.admin("ssrc")

    def a(kind, name, pattern, who, op, perm="allow") -> Acl:
        return Acl(kind, name, pattern, who, "*", op, perm)

    literal = a("topic", t, "literal", app, "Read")
    prefixed = a("topic", f"sec-{u}-", "prefixed", app, "Describe")
    group = a("group", f"billing-{u}", "literal", app, "Read")
    deny = a("topic", t, "literal", bad, "Read", "deny")
    write = a("topic", t, "literal", writer, "Write")
    other = a("topic", f"other-{u}", "literal", app, "Read")  # not a mirrored topic
    src.create_bindings([literal, prefixed, group, deny, write, other])
    made_by_hand = a("topic", f"ssrc.{t}", "literal", hand, "Describe")
    secured.dev.admin("sdst").create_bindings([made_by_hand])
    expected = {
        a("topic", f"ssrc.{t}", "literal", app, "Read"),
        a("topic", f"ssrc.{t}", "literal", app, "Describe"),  # the prefix, as the mirrored topic it covers
        group,
        a("topic", f"ssrc.{t}", "literal", bad, "Read", "deny"),
    }

    def acl_drift() -> tuple[int, list[str]]:
        res = _mirror("topics", "-c", str(cfg), "--check", "--json")
        # This test's principals only: the mirror's own source grants are copied too, per topic.
        lines = [line for f in json.loads(res.stdout) for line in f["acl_drift"]]
        return res.returncode, [line for line in lines if f"-{u} " in line]

    code, drift = acl_drift()  # nothing copied yet: `topics --check` lists each copy missing
    assert code == 1 and len(drift) == len(expected) and all("ACL missing on the target" in d for d in drift), drift

    ports = [free_port(), free_port()]
    workers = [MirrorProcess(cfg, "--metrics-port", str(p)) for p in ports]
    try:
        detail = lambda: "\n".join(w.output()[-3000:] for w in workers)  # noqa: E731
        wait_for(lambda: _acls(secured, "sdst", u) >= expected | {made_by_hand}, 120, "the copies", detail=detail)
        assert _acls(secured, "sdst", u) == expected | {made_by_hand}, "copied more than READ/DESCRIBE of the flow"
        assert acl_drift()[1] == []

        # Converged: further rounds on both workers change nothing (no ACL made and unmade in turn).
        _rounds_pass(ports, 2, workers)
        before = [_acl_metrics(p) for p in ports]
        _rounds_pass(ports, 3, workers)
        after = [_acl_metrics(p) for p in ports]
        for b, c in zip(before, after):
            assert (c["created"], c["removed"]) == (b["created"], b["removed"]), (before, after)
        assert sum(b["created"] for b in before) in range(len(expected), 2 * len(expected) + 1)

        # Deleted at the source: gone from the target; the hand-made one stays.
        src.delete_bindings([literal, deny])
        gone = {
            a("topic", f"ssrc.{t}", "literal", app, "Read"),
            a("topic", f"ssrc.{t}", "literal", bad, "Read", "deny"),
        }
        wait_for(lambda: not (_acls(secured, "sdst", u) & gone), 120, "the copies to go", detail=detail)
        _rounds_pass(ports, 2, workers)
        assert _acls(secured, "sdst", u) == (expected - gone) | {made_by_hand}
        final = [_acl_metrics(p) for p in ports]
        assert sum(f["created"] for f in final) == sum(b["created"] for b in before), "a removed ACL came back"
        assert all(w.alive() for w in workers), detail()
    finally:
        for w in workers:
            w.stop()
        src.delete_bindings([prefixed, group, write, other])
        dst = secured.dev.admin("sdst")
        dst.delete_bindings(sorted(a for a in dst.describe_acls() if u in a.principal or u in a.name))


@pytest.mark.parametrize(("cluster", "op"), [("ssrc", "Describe"), ("sdst", "Alter")])
def test_acl_sync_without_one_grant_warns_once_per_round_and_records_flow(secured, tmp_path, cluster, op):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, flow_extra=ACL_SYNC)
    grants = [g for g in required_grants(load(cfg), ("run",)) if g.resource.kind == "cluster"]
    assert {(g.cluster, g.operations) for g in grants} == {("ssrc", ("Describe",)), ("sdst", ("Alter",))}
    t = f"sec-{u}-t"
    _produce(secured, t, 100, 1)
    admin = secured.dev.admin(cluster)
    # The grant and every one that implies it (Alter implies Describe): the mirror user may
    # hold Alter on the source for other commands (`failback --promote` writes ACLs there).
    implying = {"Describe": ("Describe", "Alter", "All"), "Alter": ("Alter", "All")}[op]
    held = [
        a.operation
        for a in admin.describe_acls()
        if a.kind == "cluster" and a.principal == "User:mirror" and a.operation in implying
    ]
    admin.delete_acls("User:mirror", {("cluster", "kafka-cluster", "literal"): held})
    port = free_port()
    m = MirrorProcess(cfg, "--metrics-port", str(port))
    try:
        wait_for(lambda: _ends_or_zero(secured, "sdst", f"ssrc.{t}", 1)[0] >= 100, 120, "the records", detail=m.output)
        wait_for(lambda: _acl_metrics(port)["refused"] >= 2, 120, "two refused rounds", detail=m.output)
        _produce(secured, t, 50, 1, start=100)
        wait_for(lambda: _ends_or_zero(secured, "sdst", f"ssrc.{t}", 1)[0] >= 150, 120, "more records", detail=m.output)
        assert m.alive(), m.output()[-3000:]
        refused = _acl_metrics(port)["refused"]
    finally:
        m.stop()
        admin.create_acls("User:mirror", {("cluster", "kafka-cluster", "literal"): held})
    out = m.output()
    warnings = [line for line in out.splitlines() if "ACL sync refused" in line]
    assert warnings and "Traceback" not in out, out[-3000:]
    assert all(f"missing {op} on the cluster" in w and f"'{cluster}'" in w for w in warnings), warnings
    # One line per refused round (a round may end between the scrape and the stop).
    assert refused <= len(warnings) <= refused + 2, (len(warnings), refused)


def _write_as_nogrants(sec: Secured, cluster: str, topic: str) -> str | None:
    """Produce one record as the `nogrants` user: None when written, else the error."""
    p = Producer(
        {"bootstrap.servers": sec.bootstrap(cluster), **sec.nodes[cluster].client("nogrants", with_password=True)}
    )
    errors: list[str] = []
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
    left = p.flush(30)
    return errors[0] if errors else ("not delivered" if left else None)


def test_failover_apply_promote_adds_write_and_import_backup_removes_it(secured, tmp_path):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, flow_extra=ACL_SYNC)
    t, group = f"sec-{u}-t", f"billing-{u}"
    _produce(secured, t, 100, 1)
    _commit_group(secured, group, t, {0: 40})
    write = Acl("topic", t, "literal", "User:nogrants", "*", "Write", "allow")
    promoted = Acl("topic", f"ssrc.{t}", "literal", "User:nogrants", "*", "Write", "allow")
    secured.dev.admin("ssrc").create_bindings([write])
    try:
        res = _mirror("run", "-c", str(cfg), "--until-caught-up")
        assert res.returncode == 0, res.stderr[-3000:]
        assert promoted not in secured.dev.admin("sdst").describe_acls(), "WRITE copied before a failover"
        assert "authoriz" in (_write_as_nogrants(secured, "sdst", f"ssrc.{t}") or "").lower()

        plan = tmp_path / "site.json"
        res = _mirror(
            "failover", "plan", "-c", str(cfg), "--from", "ssrc", "--translate", "--out", str(plan), "--promote"
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert f"--promote would add on sdst: ALLOW User:nogrants Write on topic literal 'ssrc.{t}'" in res.stdout
        res = _mirror("failover", "apply", "--plan", str(plan), "--yes", "--promote")
        assert res.returncode == 0, res.stdout + res.stderr[-3000:]
        assert f"promote on sdst: ALLOW User:nogrants Write on topic literal 'ssrc.{t}'" in res.stdout, res.stdout
        assert promoted in secured.dev.admin("sdst").describe_acls()
        backup = json.loads((tmp_path / "site.backup.json").read_text())
        assert [r["acl"] for r in backup["promoted_acls"]] == [promoted.key()]
        wait_for(
            lambda: _write_as_nogrants(secured, "sdst", f"ssrc.{t}") is None, 60, "a write with the promoted grant"
        )

        res = _mirror("failover", "import", "--backup", str(tmp_path / "site.backup.json"), "--yes")
        assert res.returncode == 0, res.stdout + res.stderr[-3000:]
        assert promoted not in secured.dev.admin("sdst").describe_acls()
        assert "authoriz" in (_write_as_nogrants(secured, "sdst", f"ssrc.{t}") or "").lower()
    finally:
        secured.dev.admin("ssrc").delete_bindings([write])
        secured.dev.admin("sdst").delete_bindings([promoted])


def test_failback_promote_copies_the_dr_write_back_and_import_backup_removes_it(secured, tmp_path):
    u = uuid.uuid4().hex[:6]
    cfg = _config(secured, tmp_path, u, flow_extra=ACL_SYNC)
    t = f"sec-{u}-b"
    _produce(secured, t, 10, 1)
    on_dr = Acl("topic", f"ssrc.{t}", "literal", "User:nogrants", "*", "Write", "allow")
    back = Acl("topic", t, "literal", "User:nogrants", "*", "Write", "allow")
    try:
        res = _mirror("run", "-c", str(cfg), "--until-caught-up")  # the DR copy ssrc.<t> exists
        assert res.returncode == 0, res.stderr[-3000:]
        secured.dev.admin("sdst").create_bindings([on_dr])  # granted on the DR cluster only
        assert "authoriz" in (_write_as_nogrants(secured, "ssrc", t) or "").lower()

        shown = f"on ssrc: ALLOW User:nogrants Write on topic literal '{t}'"
        res = _mirror("failback", "-c", str(cfg), "--flow", f"f-{u}", "--promote")
        assert res.returncode == 0, res.stdout + res.stderr[-3000:]
        assert f"--promote would add {shown}" in res.stdout, res.stdout
        assert back not in secured.dev.admin("ssrc").describe_acls(), "added without --yes"

        backup = tmp_path / "failback.json"
        res = _mirror("failback", "-c", str(cfg), "--flow", f"f-{u}", "--promote", "--yes", "--backup", str(backup))
        assert res.returncode == 0, res.stdout + res.stderr[-3000:]
        assert f"promote {shown}" in res.stdout, res.stdout
        assert back in secured.dev.admin("ssrc").describe_acls()
        # The application's grant, recorded for the undo. The mirror's own principal, which
        # holds Write on the DR copies (and, after earlier tests, transactional ids), may be
        # promoted beside it: its grants are recorded and undone the same way.
        promoted = [r["acl"] for r in json.loads(backup.read_text())["promoted_acls"]]
        assert [k for k in promoted if "User:nogrants" in k] == [back.key()], promoted
        assert all("User:nogrants" in k or "User:mirror" in k for k in promoted), promoted
        wait_for(lambda: _write_as_nogrants(secured, "ssrc", t) is None, 60, "a write with the promoted grant")

        res = _mirror("failover", "import", "--backup", str(backup), "--yes")
        assert res.returncode == 0, res.stdout + res.stderr[-3000:]
        assert back not in secured.dev.admin("ssrc").describe_acls()
        assert on_dr in secured.dev.admin("sdst").describe_acls()  # the DR cluster's own grant stays
        assert "authoriz" in (_write_as_nogrants(secured, "ssrc", t) or "").lower()
    finally:
        secured.dev.admin("sdst").delete_bindings([on_dr])
        secured.dev.admin("ssrc").delete_bindings([back])


def test_acl_sync_record_in_cassandra_carries_over_a_restart(secured, auth_cassandra, tmp_path, monkeypatch):
    """Each `--until-caught-up` run is one worker's life: the second removes what the first
    copied, from the record the first left in Cassandra."""
    u = uuid.uuid4().hex[:6]
    monkeypatch.setenv("SEC_TEST_CASSANDRA_PASSWORD", secured.passwords["mirror"])
    store = (
        f'{{kind: cassandra, contact_points: ["{auth_cassandra.contact_point}"], keyspace: sec_{u}, username: '
        f'mirror, password: "${{SEC_TEST_CASSANDRA_PASSWORD}}"}}'
    )
    cfg = _config(secured, tmp_path, u, store=store, flow_extra=ACL_SYNC)
    t = f"sec-{u}-c"
    _produce(secured, t, 10, 1)
    read = Acl("topic", t, "literal", f"User:app-{u}", "*", "Read", "allow")
    copy = Acl("topic", f"ssrc.{t}", "literal", f"User:app-{u}", "*", "Read", "allow")
    secured.dev.admin("ssrc").create_bindings([read])
    try:
        res = _mirror("run", "-c", str(cfg), "--until-caught-up")
        assert res.returncode == 0, res.stderr[-3000:]
        assert _acls(secured, "sdst", u) == {copy}
        from mirror.store.cassandra import CassandraStore

        cas = CassandraStore(load(cfg).offset_store)  # type: ignore[arg-type]
        try:
            assert cas.synced_acls(f"f-{u}") == {copy.key()}
        finally:
            cas.close()

        secured.dev.admin("ssrc").delete_bindings([read])
        res = _mirror("run", "-c", str(cfg), "--until-caught-up")
        assert res.returncode == 0, res.stderr[-3000:]
        assert _acls(secured, "sdst", u) == set()
    finally:
        secured.dev.admin("ssrc").delete_bindings([read])
        secured.dev.admin("sdst").delete_bindings([copy])
