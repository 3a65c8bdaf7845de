"""`mirror run -c CONFIG --until-caught-up` in-process, for the failover tests.

`mirror run` wires the offset-map recorder and the group checkpointers itself
(`mirror.daemon`), so what these tests exercise is exactly what an operator runs.
"""

from __future__ import annotations

import signal
from pathlib import Path

from mirror.cli import main


def mirror_until_caught_up(config_path: Path, *args: str) -> None:
    # `mirror run` installs SIGINT/SIGTERM handlers for its drain; give pytest its own back.
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = main(["run", "-c", str(config_path), "--until-caught-up", *args])
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert rc == 0, f"mirror run --until-caught-up exited {rc}"
