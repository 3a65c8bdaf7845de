"""One driver per flow: the checkpoint directory's lock, held by real processes (no network)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.errors import ExitCode, UnsafeOperation
from mirror.spark import checkpoint_lock
from mirror.spark.checkpoint_lock import LOCK_FILE, hold_checkpoint
from tests.unit.spark.lockholder import held_by_another_process

# A second driver's claim, in its own process: exit 0 when it got the lock, 3 when refused.
_PROBE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from mirror.errors import UnsafeOperation
    from mirror.spark.checkpoint_lock import hold_checkpoint

    try:
        with hold_checkpoint(Path(sys.argv[1]), "f"):
            pass
    except UnsafeOperation as exc:
        print(exc)
        sys.exit(exc.exit_code)
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    with held_by_another_process(tmp_path, "f") as proc:
        yield proc


def probe(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _PROBE, str(directory)], capture_output=True, text=True, timeout=60)


def test_a_held_checkpoint_refuses_a_second_driver_in_one_line_naming_the_holder(tmp_path, holder):
    with pytest.raises(UnsafeOperation) as refused:
        with hold_checkpoint(tmp_path, "f"):
            pytest.fail("a second driver got the lock")
    message = str(refused.value)
    assert refused.value.exit_code == ExitCode.UNSAFE
    assert "\n" not in message
    assert "flow f" in message and str(tmp_path) in message
    assert f"pid {holder.pid} on {socket.gethostname()}" in message


def test_a_released_checkpoint_can_be_claimed_again_while_its_old_holder_lives(tmp_path, holder):
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("release\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "released\n"
    assert holder.poll() is None
    with hold_checkpoint(tmp_path, "f"):
        assert f"pid {os.getpid()} " in probe(tmp_path).stdout  # now this process holds it


def test_a_killed_holder_releases_the_checkpoint_by_dying(tmp_path, holder):
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    with hold_checkpoint(tmp_path, "f"):
        pass


def test_the_driver_process_may_claim_its_own_checkpoint_again_and_holds_it_until_the_outer_claim_ends(tmp_path):
    with hold_checkpoint(tmp_path, "f"):
        with hold_checkpoint(tmp_path, "f"):  # the CLI's claim, then run_flow's
            pass
        refused = probe(tmp_path)
        assert refused.returncode == ExitCode.UNSAFE, refused.stderr
        assert refused.stdout.count("\n") == 1 and f"pid {os.getpid()} " in refused.stdout
    assert probe(tmp_path).returncode == 0, probe(tmp_path).stderr


def test_a_child_process_does_not_inherit_the_lock(tmp_path):
    """The driver starts its JVM as a child: the lock must go with the driver, not the JVM."""
    with hold_checkpoint(tmp_path, "f"):
        child = subprocess.Popen(["sleep", "60"], close_fds=False)
    try:
        assert probe(tmp_path).returncode == 0
    finally:
        child.kill()
        child.wait(30)


def test_the_lock_file_is_in_the_checkpoint_directory_and_forgets_its_holder_at_release(tmp_path):
    with hold_checkpoint(tmp_path, "f"):
        assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_FILE).read_text()
    assert (tmp_path / LOCK_FILE).read_text() == ""


def test_a_filesystem_without_locks_runs_unlocked_and_says_so_once(tmp_path, monkeypatch, caplog):
    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(checkpoint_lock.fcntl, "flock", no_locks)
    with caplog.at_level(logging.WARNING, logger=checkpoint_lock.__name__):
        for _ in range(2):
            with hold_checkpoint(tmp_path, "f"):
                pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(tmp_path) in warnings[0] and "not refused" in warnings[0]
