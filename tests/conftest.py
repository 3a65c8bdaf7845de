from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `tests.support` importable whatever the rootdir


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


# Servers the tests start die with this process, even if the session is killed before its
# teardown; SIGTERM (CI time-outs) becomes an interrupt so the teardown does run.
os.environ["MIRROR_DEV_DIE_WITH_PARENT"] = "1"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _interrupt)
