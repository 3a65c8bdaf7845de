"""ACLs: allow a principal operations on resources, and take them back (the dev clusters' grants)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from mirror.kafka.admin.base import AdminBase


class AclAdmin(AdminBase):
    """CreateAcls and DeleteAcls for one principal."""

    def create_acls(self, principal: str, bindings: Mapping[tuple[str, str, str], Iterable[str]]) -> int:
        """Allow `principal` each operation on each (kind, name, pattern) resource; returns the count.

        kind: topic | group | cluster | transactional-id; pattern: literal | prefixed; operations by Kafka's
        names (Read, Write, Describe, IdempotentWrite, ...).
        """
        acls = [self._binding(principal, res, op) for res, ops in bindings.items() for op in ops]
        if not acls:
            return 0
        for fut in self._client.create_acls(acls, request_timeout=self.timeout).values():
            self._result(f"create ACLs for {principal}", fut)
        return len(acls)

    def delete_acls(self, principal: str, bindings: Mapping[tuple[str, str, str], Iterable[str]]) -> None:
        filters = [self._binding(principal, res, op, filter_=True) for res, ops in bindings.items() for op in ops]
        if filters:
            for fut in self._client.delete_acls(filters, request_timeout=self.timeout).values():
                self._result(f"delete ACLs of {principal}", fut)

    @staticmethod
    def _binding(principal: str, resource: tuple[str, str, str], operation: str, *, filter_: bool = False) -> Any:
        kind, name, pattern = resource
        op = AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()]
        cls = AclBindingFilter if filter_ else AclBinding
        return cls(
            ResourceType.BROKER if kind == "cluster" else ResourceType[kind.upper().replace("-", "_")],
            "kafka-cluster" if kind == "cluster" else name,
            ResourcePatternType[pattern.upper()],
            principal,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
