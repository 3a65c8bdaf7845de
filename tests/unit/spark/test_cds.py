"""The driver's class-data archive: where it is, when a run maps it, how options combine (no JVM)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirror.spark import cds, class_archive, session


def test_the_archive_key_changes_with_the_jvm_build_and_the_pyspark_install():
    base = cds.archive_key(Path("/jdk"), (100, 1), Path("/venv/pyspark/jars"), 5)
    assert base == cds.archive_key(Path("/jdk"), (100, 1), Path("/venv/pyspark/jars"), 5)
    assert len(base) == 16
    others = {
        cds.archive_key(Path("/jdk2"), (100, 1), Path("/venv/pyspark/jars"), 5),  # another Java
        cds.archive_key(Path("/jdk"), (100, 2), Path("/venv/pyspark/jars"), 5),  # the same path upgraded
        cds.archive_key(Path("/jdk"), (100, 1), Path("/other/pyspark/jars"), 5),  # another venv
        cds.archive_key(Path("/jdk"), (100, 1), Path("/venv/pyspark/jars"), 6),  # pyspark reinstalled
    }
    assert base not in others and len(others) == 4


def test_the_users_driver_options_come_last_so_they_win():
    assert cds.with_java_options(None, ["-XX:SharedArchiveFile=/a.jsa", "-Xlog:cds=off"]) == (
        "-XX:SharedArchiveFile=/a.jsa -Xlog:cds=off"
    )
    assert cds.with_java_options("-Xss4m -XX:-UseSharedSpaces", ["-XX:SharedArchiveFile=/a.jsa"]) == (
        "-XX:SharedArchiveFile=/a.jsa -Xss4m -XX:-UseSharedSpaces"
    )


def test_a_run_maps_the_archive_only_once_it_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv(cds.ARCHIVE_ENV, str(tmp_path))
    path = cds.archive_path()
    assert path is not None, "no Java found: mirror's Spark engine (and `make setup`) needs Java 17"
    assert path.parent == tmp_path and path.name.startswith("driver-classes-") and path.suffix == ".jsa"
    assert cds.use_options() == []  # not built: the JVM starts as it always did
    path.write_bytes(b"x")
    assert cds.use_options() == [f"-XX:SharedArchiveFile={path}", *cds.QUIET]


def test_no_java_means_no_archive(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojava"))
    assert cds.archive_path() is None
    assert cds.use_options() == []


class _Builder:
    """Records the settings `spark_session` gives pyspark's builder."""

    def __init__(self) -> None:
        self.conf: dict[str, str] = {}

    def appName(self, name: str) -> _Builder:  # noqa: N802 - pyspark's name
        return self.config("spark.app.name", name)

    def master(self, master: str) -> _Builder:
        return self.config("spark.master", master)

    def config(self, key: str, value: str) -> _Builder:
        self.conf[key] = value
        return self

    def getOrCreate(self) -> _Builder:  # noqa: N802 - pyspark's name
        return self


@pytest.fixture
def builder(monkeypatch, tmp_path):
    from pyspark.sql import SparkSession

    fake = _Builder()
    monkeypatch.setattr(SparkSession, "builder", fake)
    for name, value in (("PYSPARK_PYTHON", sys.executable), ("PYSPARK_DRIVER_PYTHON", sys.executable)):
        monkeypatch.setenv(name, value)  # what `spark_session` sets by default, undone after the test
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf unless a test writes one
    monkeypatch.setattr(session, "connector_jars", lambda version: [])
    monkeypatch.setattr(class_archive, "use_options", lambda: ["-XX:SharedArchiveFile=/a.jsa"])
    return fake


def test_a_session_started_here_maps_the_archive_after_the_users_options(builder):
    session.spark_session("local[2]", "app", {cds.DRIVER_OPTIONS: "-Xss4m"}, quiet=False, ui_port=None)
    assert builder.conf[cds.DRIVER_OPTIONS] == "-XX:SharedArchiveFile=/a.jsa -Xss4m"


def test_a_driver_spark_submit_started_or_the_archives_own_build_maps_none(builder):
    session.spark_session("local[2]", "app", quiet=False, submitted=True, ui_port=None)
    assert cds.DRIVER_OPTIONS not in builder.conf  # its JVM runs already
    session.spark_session("local[2]", "app", {cds.DRIVER_OPTIONS: "-Xss4m"}, quiet=False, class_archive=False)
    assert builder.conf[cds.DRIVER_OPTIONS] == "-Xss4m"


# The build tests replace `cds._exercise`, the one step that starts a driver JVM: they are about
# how an archive is written, tried and installed, not about the JVM that dumps it.
def test_a_failed_build_leaves_no_archive_and_setup_goes_on(tmp_path, monkeypatch, capsys):
    path = tmp_path / "driver-classes-k.jsa"
    monkeypatch.setattr(cds, "archive_path", lambda: path)

    def exercise(options: str) -> None:  # the driver JVM dumped half an archive, then failed
        tmp = Path(options.split("=", 1)[1].split()[0])
        tmp.write_bytes(b"half")
        raise RuntimeError("the driver JVM exited with status 1")

    monkeypatch.setattr(cds, "_exercise", exercise)
    assert cds.main([]) == 0
    assert "no class-data archive: the driver JVM exited with status 1" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # neither the archive nor the half-written one


def test_an_archive_that_the_trial_jvm_cannot_map_is_not_installed(tmp_path, monkeypatch):
    path = tmp_path / "driver-classes-k.jsa"
    monkeypatch.setattr(cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(b"x"))

    def trial(argv, **kwargs):
        raise cds.subprocess.CalledProcessError(1, argv)

    monkeypatch.setattr(cds.subprocess, "run", trial)
    with pytest.raises(RuntimeError, match=r"^the trial JVM could not map the archive \(exit 1\)$"):
        cds.build(path)  # no crash report: none named
    assert list(tmp_path.iterdir()) == []


def test_a_tried_archive_is_renamed_into_place_and_another_javas_is_removed(tmp_path, monkeypatch):
    monkeypatch.delenv(cds.ARCHIVE_ENV, raising=False)  # the checkout's own build/jvm
    path = tmp_path / "driver-classes-new.jsa"
    (tmp_path / "driver-classes-old.jsa").write_bytes(b"old")
    monkeypatch.setattr(cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(b"x"))
    tried: list[list[str]] = []
    monkeypatch.setattr(cds.subprocess, "run", lambda argv, **kwargs: tried.append(argv))
    cds.build(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name] and path.read_bytes() == b"x"
    assert tried[0][3] == "--try" and tried[0][4].endswith(".tmp")  # tried under its temporary name


def test_the_driver_options_of_spark_defaults_conf_are_kept_beside_the_archive(builder, tmp_path):
    """A --conf beats spark-defaults.conf: setting the driver options for the archive must not
    drop the ones an administrator put there (spark-submit reads $SPARK_CONF_DIR/spark-defaults.conf)."""
    (tmp_path / "spark-defaults.conf").write_text(
        "# site settings\nspark.executor.memory 2g\nspark.driver.extraJavaOptions   -Dsite=1 -Xss8m\n"
    )
    session.spark_session("local[2]", "app", quiet=False, ui_port=None)
    assert builder.conf[cds.DRIVER_OPTIONS] == "-XX:SharedArchiveFile=/a.jsa -Dsite=1 -Xss8m"
    session.spark_session("local[2]", "app", {cds.DRIVER_OPTIONS: "-Dmine=2"}, quiet=False, ui_port=None)
    assert builder.conf[cds.DRIVER_OPTIONS] == "-XX:SharedArchiveFile=/a.jsa -Dmine=2"  # --conf wins, as in Spark


@pytest.mark.parametrize(
    "theirs",
    ["-Xshare:on", "-XX:ArchiveClassesAtExit=/tmp/mine.jsa", "-XX:SharedArchiveFile=/mine.jsa -Xss4m"],
)
def test_a_user_who_sets_class_data_sharing_options_gets_none_of_ours(builder, theirs):
    """With ours before theirs, -Xshare:on fails the JVM when ours does not match, and a
    dynamic dump cannot take our dynamic archive as its base: their choice alone."""
    session.spark_session("local[2]", "app", {cds.DRIVER_OPTIONS: theirs}, quiet=False, ui_port=None)
    assert builder.conf[cds.DRIVER_OPTIONS] == theirs


def test_an_administrators_class_data_sharing_choice_gets_none_of_ours(builder, tmp_path):
    """spark.driver.defaultJavaOptions come before the driver's own options: an -Xshare:on
    there fails the JVM beside an archive of ours that does not match just the same."""
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.defaultJavaOptions=-Xshare:on\n")
    session.spark_session("local[2]", "app", {cds.DRIVER_OPTIONS: "-Xss4m"}, quiet=False, ui_port=None)
    assert builder.conf[cds.DRIVER_OPTIONS] == "-Xss4m"


def test_a_build_in_a_shared_archive_folder_leaves_the_other_installs_archives(tmp_path, monkeypatch):
    """$MIRROR_SPARK_CLASS_ARCHIVE may serve several checkouts (each its own pyspark, so its own
    key): one's `make setup` must not delete the archive the others map."""
    monkeypatch.setenv(cds.ARCHIVE_ENV, str(tmp_path))
    path = tmp_path / "driver-classes-mine.jsa"
    (tmp_path / "driver-classes-theirs.jsa").write_bytes(b"theirs")
    monkeypatch.setattr(cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(b"x"))
    monkeypatch.setattr(cds.subprocess, "run", lambda argv, **kwargs: None)
    cds.build(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver-classes-mine.jsa", "driver-classes-theirs.jsa"]


def test_the_archive_is_on_disk_before_it_gets_its_name(tmp_path, monkeypatch):
    """A JVM crashes on a truncated archive: were the machine to stop after the rename with the
    archive's blocks still unwritten, every run would find a truncated one under the name."""
    monkeypatch.delenv(cds.ARCHIVE_ENV, raising=False)
    path = tmp_path / "driver-classes-k.jsa"
    monkeypatch.setattr(cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(b"x"))
    monkeypatch.setattr(cds.subprocess, "run", lambda argv, **kwargs: None)
    synced: list[tuple[str, bool]] = []
    real = os.fsync
    monkeypatch.setattr(
        cds.os, "fsync", lambda fd: (synced.append((os.readlink(f"/proc/self/fd/{fd}"), path.exists())), real(fd))
    )
    cds.build(path)
    assert any(name.endswith(".tmp") and not named for name, named in synced)
    assert path.read_bytes() == b"x"


def test_a_killed_builds_temporary_is_removed_and_a_live_builders_is_left(tmp_path, monkeypatch):
    """A `make setup` killed while its JVM dumps leaves its ~150 MB temporary, which its own
    clean-up never ran for; one whose builder lives may still be written and tried."""
    monkeypatch.delenv(cds.ARCHIVE_ENV, raising=False)  # the checkout's own build/jvm
    path = tmp_path / "driver-classes-k.jsa"
    monkeypatch.setattr(cds, "archive_path", lambda: path)
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    killed = [tmp_path / f"driver-classes-{key}.jsa.{int(exited.stdout)}.tmp" for key in ("k", "old")]
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        building = tmp_path / f"driver-classes-k.jsa.{live.pid}.tmp"
        building.write_bytes(b"being written")
        killed[0].write_bytes(b"killed")
        monkeypatch.setattr(
            cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(b"x")
        )
        monkeypatch.setattr(cds.subprocess, "run", lambda argv, **kwargs: None)
        assert cds.main([]) == 0  # builds
        assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, building.name]
        killed[1].write_bytes(b"killed")  # beside an archive another build installed
        assert cds.main([]) == 0  # builds nothing
        assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, building.name]
        assert building.read_bytes() == b"being written"
    finally:
        live.stdin.close()  # type: ignore[union-attr]
        live.wait(timeout=30)


def test_the_trial_jvm_writes_a_crash_report_beside_the_archive(tmp_path, monkeypatch):
    """A JVM that crashes writes hs_err_pid<N>.log into its cwd, which for `make setup` is the checkout."""
    path = tmp_path / "driver-classes-k.jsa"
    monkeypatch.setattr(cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(b"x"))
    tried: list[list[str]] = []
    monkeypatch.setattr(cds.subprocess, "run", lambda argv, **kwargs: tried.append(argv))
    cds.build(path)
    given: list[str] = []
    monkeypatch.setattr(cds, "_exercise", given.append)
    assert tried[0][1:4] == ["-m", "mirror.spark.cds", "--try"]
    assert cds.main(tried[0][3:]) == 0  # the trial process, as it is started
    assert f"-XX:ErrorFile={tmp_path / 'driver-classes-k.hs_err.log'}" in given[0].split()


def test_a_trial_jvm_that_crashes_on_a_truncated_archive_says_where_its_report_is(tmp_path, monkeypatch):
    """A real crash: the first 20 MB of the archive `make setup` built pass the JVM's checks and
    crash it as it maps them. The report is beside the archive, named in the build's error."""
    built = cds.archive_path()
    if built is None or not built.is_file():
        # Never skipped in CI (CI=true): `make setup` builds the archive there, so a missing one fails.
        if os.environ.get("CI"):
            pytest.fail("no class-data archive built: `make setup` builds it (python -m mirror.spark.cds)")
        pytest.skip("no class-data archive built here (`make setup` builds it)")
    monkeypatch.delenv(cds.ARCHIVE_ENV, raising=False)
    with built.open("rb") as archive:
        truncated = archive.read(20_000_000)
    monkeypatch.setattr(
        cds, "_exercise", lambda options: Path(options.split("=", 1)[1].split()[0]).write_bytes(truncated)
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    path = tmp_path / "driver-classes-k.jsa"
    report = tmp_path / "driver-classes-k.hs_err.log"
    with pytest.raises(RuntimeError, match="the trial JVM could not map the archive") as info:
        cds.build(path)
    assert str(info.value).endswith(f"; the JVM's crash report: {report}")
    assert "A fatal error has been detected by the Java Runtime Environment" in report.read_text()
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", report.name]  # no archive installed
