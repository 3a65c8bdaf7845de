"""The offset store: where (source offset -> target offset) rows and checkpoints live.

`open_store` picks the backend the config names. SQLite is imported always (standard
library); Cassandra only when a config asks for it, through `mirror.store.cassandra`'s
`load()` (cassandra-driver is heavy and its reactors vary by Python version).

`base` holds the contract every backend keeps and the shared types; `sqlite` and
`cassandra` implement it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mirror.config import CassandraStoreConfig, Config, SqliteStoreConfig
from mirror.errors import MirrorError
from mirror.store.base import (
    NEWEST,
    FullOffsetStore,
    SourceEnds,
    SyncWindow,
    checkpointed_groups,
    group_sync_windows,
    sync_tips,
    sync_window,
    sync_windows,
)
from mirror.store.sqlite import SqliteStore

__all__ = [
    "NEWEST",
    "FullOffsetStore",
    "SourceEnds",
    "SqliteStore",
    "SyncWindow",
    "checkpointed_groups",
    "group_sync_windows",
    "open_optional",
    "open_store",
    "sync_tips",
    "sync_window",
    "sync_windows",
]

log = logging.getLogger(__name__)


def open_store(config: SqliteStoreConfig | CassandraStoreConfig, *, base_dir: Path | None = None) -> FullOffsetStore:
    """The configured backend. A relative SQLite path is taken from `base_dir` (default: cwd)."""
    if isinstance(config, SqliteStoreConfig):
        path = Path(config.path)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return SqliteStore(path)
    # The one lazy import of the package: cassandra-driver is heavy (and its event loop
    # threads are best not started) when the store is SQLite; only this function loads it.
    from mirror.store import cassandra

    return cassandra.CassandraStore(config)


def open_optional(config: Config) -> FullOffsetStore | None:
    """The offset store for read-only extras (checkpoint ages), or None when it cannot be opened."""
    try:
        return open_store(config.offset_store)
    except MirrorError as exc:
        log.warning("checkpoint ages unavailable: %s", exc)
        return None
