"""One driver per flow: an OS lock on the flow's checkpoint directory, held for the whole run.

Nothing else keeps two drivers of one flow apart: a Spark driver never joins the flow's
consumer group (it assigns partitions and commits explicit offsets), so the group's live
members show only `mirror run`. Two drivers on one checkpoint would both produce until
Spark's offset log failed the later one at the first batch id they both planned.

The lock is `flock` on `<checkpoint>/mirror-driver.lock`, taken without waiting: a second
driver is refused (`UnsafeOperation`, exit 3) naming the holder, whose pid, host and start
time the holder writes into the file. The kernel releases the lock when the holder's process
ends however it ends, so a SIGKILLed driver leaves nothing to clean up; the file itself stays
(removing a locked file would let a third driver lock a new file beside the held one).

Invariants: the lock belongs to the driver's run, not to an object. Claims on one thread
nest (the CLI claims before the JVM starts, `run_flow` again around the run) and the lock is
released when the outermost claim ends; a claim from another thread of the process is
another run, refused like another process's. The descriptor is not inherited (Python opens it
close-on-exec): the JVM a driver starts must not keep the flow locked after the driver died.

flock is a local-filesystem lock; on NFS Linux maps it to the server's byte-range locks, so
it also holds across hosts sharing the directory. A filesystem that cannot lock (ENOLCK,
EOPNOTSUPP) is not a reason to refuse a run: it runs unlocked after one WARNING.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirror.errors import MirrorError, UnsafeOperation

log = logging.getLogger(__name__)

LOCK_FILE = "mirror-driver.lock"

# Errors that say "this filesystem does not lock", as opposed to "someone holds it".
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL}

_guard = threading.Lock()
# directory -> the claim: [descriptor (-1: unlocked filesystem or inherited by a fork), claims, owner thread]
_held: dict[Path, list[Any]] = {}
_warned: set[Path] = set()


@contextmanager
def hold_checkpoint(directory: Path, flow: str) -> Iterator[None]:
    """Hold flow `flow`'s checkpoint `directory` for this process until the block ends;
    another process's hold refuses (exit 3) at once."""
    key = directory.resolve()
    with _guard:
        entry = _held.get(key)
        if entry is None:
            entry = _held[key] = [_acquire(key, flow), 0, threading.current_thread()]
        elif entry[2] is not threading.current_thread():
            raise UnsafeOperation(
                f"flow {flow}: its checkpoint {key} is held by another run in this process",
                hint="one run per flow at a time",
            )
        entry[1] += 1
    try:
        yield
    finally:
        with _guard:
            entry[1] -= 1
            # Not ours any more if a fork happened in between: the child forgot it (`_forget_in_child`).
            if entry[1] == 0 and _held.get(key) is entry:
                del _held[key]
                _release(entry[0])


def _acquire(directory: Path, flow: str) -> int:
    """The locked descriptor of the directory's lock file, the holder written into it; -1 on a
    filesystem without locks."""
    path = directory / LOCK_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Not through a symlink: writing the holder truncates, and must only ever truncate ours.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise MirrorError(f"flow {flow}: cannot open the checkpoint's lock file {path}: {exc.strerror}") from exc
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError as exc:
        os.close(fd)
        raise MirrorError(f"flow {flow}: cannot read the checkpoint's lock file {path}: {exc.strerror}") from exc
    if not regular:
        os.close(fd)
        raise MirrorError(f"flow {flow}: the checkpoint's lock file {path} is not a regular file")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in _NO_LOCKS:
            if directory not in _warned:
                _warned.add(directory)
                log.warning(
                    "flow %s: the checkpoint %s cannot be locked (%s): a second driver of this flow is not refused",
                    flow,
                    directory,
                    exc.strerror,
                )
            return -1
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise UnsafeOperation(
                f"flow {flow}: its checkpoint {directory} is held by another driver{_holder(path)}",
                hint="stop that driver first: one driver per flow at a time",
            ) from exc
        raise MirrorError(f"flow {flow}: cannot lock the checkpoint's lock file {path}: {exc.strerror}") from exc
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
    except OSError as exc:  # a full or failing volume: the checkpoint would not be written either
        os.close(fd)
        raise MirrorError(f"flow {flow}: cannot write the checkpoint's lock file {path}: {exc.strerror}") from exc
    return fd


def _release(fd: int) -> None:
    """Forget the holder, then let go (closing the only descriptor releases the flock)."""
    if fd < 0:
        return
    try:
        os.ftruncate(fd, 0)
    except OSError as exc:  # best effort: the run's own outcome is what the caller must see
        log.warning("cannot clear the checkpoint's lock file: %s", exc.strerror)
    finally:
        os.close(fd)


def _forget_in_child() -> None:
    """A forked child (without exec) shares the parent's locked file description: it lets go of
    its copies, or the flow would stay locked after the driver stopped, and its inherited
    claims end as no-ops. The guard, held across the fork (`before=`), is a fresh one here."""
    global _guard
    _guard = threading.Lock()
    for entry in _held.values():
        if entry[0] >= 0:
            os.close(entry[0])
        entry[0] = -1
    _held.clear()


# Forks wait for a claim in progress on another thread: its descriptor is then in `_held`
# (closed in the child) or not opened yet, never half-made.
os.register_at_fork(
    before=lambda: _guard.acquire(), after_in_parent=lambda: _guard.release(), after_in_child=_forget_in_child
)


def _holder(path: Path) -> str:
    """Who holds the lock, as its file says (the holder may not have written it yet)."""
    try:
        doc = json.loads(path.read_text())
        return f": pid {int(doc['pid'])} on {doc['host']}, since {doc['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return ""
