"""The admin client: topics, configs, partitions, offsets, groups, records deleted, ACLs.

`Admin` is one client per cluster; its requests are grouped by job, one module each (topics,
configs, offsets, groups, acls), over a shared base that owns the AdminClient and turns
errors and unanswered requests into this project's exceptions.
"""

from __future__ import annotations

from mirror.config import Config, FlowConfig
from mirror.kafka.admin.acls import AclAdmin, AclBindingAdmin
from mirror.kafka.admin.configs import TopicConfigAdmin
from mirror.kafka.admin.groups import GroupAdmin
from mirror.kafka.admin.offsets import LIST_OFFSETS_CHUNK, OffsetAdmin, PendingOffsets, Watermarks
from mirror.kafka.admin.topics import CREATE_BATCH_RECORDS, TopicAdmin, _create_chunks

__all__ = [
    "CREATE_BATCH_RECORDS",
    "LIST_OFFSETS_CHUNK",
    "Admin",
    "FlowAdmins",
    "PendingOffsets",
    "Watermarks",
    "_create_chunks",
]


class Admin(TopicAdmin, TopicConfigAdmin, OffsetAdmin, GroupAdmin, AclAdmin, AclBindingAdmin):
    """Admin requests against one cluster, each bounded by the cluster's timeout."""


class FlowAdmins:
    """One flow's source and target admin clients, each made at its first use.

    Side loops (group checkpoints, topic config sync) hold one: a loop stopped before it asks
    anything opens no connection, and tests hand in their own clients.
    """

    def __init__(
        self, config: Config, flow: FlowConfig, *, source: Admin | None = None, target: Admin | None = None
    ) -> None:
        self._config = config
        self._flow = flow
        self._source = source
        self._target = target

    @property
    def source(self) -> Admin:
        if self._source is None:
            self._source = Admin(self._flow.source, self._config.cluster(self._flow.source))
        return self._source

    @property
    def target(self) -> Admin:
        if self._target is None:
            self._target = Admin(self._flow.target, self._config.cluster(self._flow.target))
        return self._target
