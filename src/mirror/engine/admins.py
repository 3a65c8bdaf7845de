"""`AdminPair`: a flow worker's admin clients to its source and target clusters, renewed together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mirror.config import ClusterConfig, FlowConfig

AdminFactory = Callable[[str, ClusterConfig], Any]


class AdminPair:
    """The admin clients of one flow: `source` and `target`, always a pair made together.

    An admin client that lived through a broker restart can keep failing long after the
    broker is back; a new one answers at once, so a unit that saw a cluster not answer
    calls `renew`, and everyone reads `source`/`target` anew at each use (never keeps one).
    """

    def __init__(
        self, flow: FlowConfig, source: ClusterConfig, target: ClusterConfig, make_admin: AdminFactory
    ) -> None:
        self._flow, self._source_cfg, self._target_cfg, self._make = flow, source, target, make_admin
        self.source: Any = None
        self.target: Any = None
        self.renew()

    def renew(self) -> None:
        self.source = self._make(self._flow.source, self._source_cfg)
        self.target = self._make(self._flow.target, self._target_cfg)
