"""Another driver holding a flow's checkpoint lock: a real child process (`hold_checkpoint`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Holds the lock, says so, releases it on the first line of stdin (and says so), then waits
# for the second line (or its death).
_HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from mirror.spark.checkpoint_lock import hold_checkpoint

    with hold_checkpoint(Path(sys.argv[1]), sys.argv[2]):
        print("held", flush=True)
        sys.stdin.readline()
    print("released", flush=True)
    sys.stdin.readline()
    """
)


@contextmanager
def held_by_another_process(directory: Path, flow: str) -> Iterator[subprocess.Popen[str]]:
    """A child process holding `directory` for `flow` until the block ends (or it is told or killed)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory), flow],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(30)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
