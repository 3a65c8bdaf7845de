"""ACLs: allow a principal operations on resources, and take them back (the dev clusters' grants)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from mirror.domain.acl_sync import Acl
from mirror.kafka.admin.base import AdminBase
from mirror.kafka.errors import authorization_error


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


_KINDS = {
    ResourceType.TOPIC: "topic",
    ResourceType.GROUP: "group",
    ResourceType.BROKER: "cluster",
    ResourceType.TRANSACTIONAL_ID: "transactional-id",
}
_ALTER_CLUSTER = ("Alter", "cluster", "kafka-cluster")  # CreateAcls and DeleteAcls need it


class AclBindingAdmin(AdminBase):
    """Any principal's ACLs as `Acl` values: described, created and deleted one binding at a time
    (the ACL sync and failover promotion; `AclAdmin` above grants one principal)."""

    def describe_acls(self, need: str = "Describe") -> list[Acl]:
        """Every literal and prefixed TOPIC, GROUP, TRANSACTIONAL_ID and cluster ACL on the cluster.

        `need`: the cluster operation the caller needs (Describe, or the Alter that implies it
        where it will also change ACLs), checked first: a DescribeAcls the broker refuses comes
        back from librdkafka as an empty list, not an error, and a sync that took "no ACLs" for
        an answer would remove every copy it made."""
        self.require_cluster_operation(need, "describe ACLs")
        anything: Any = None  # a filter's None matches every name, principal and host
        flt = AclBindingFilter(
            ResourceType.ANY,
            anything,
            ResourcePatternType.ANY,
            anything,
            anything,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        found = self._result("describe ACLs", self._client.describe_acls(flt, request_timeout=self.timeout))
        return sorted(a for a in map(_to_acl, found) if a is not None)

    def require_cluster_operation(self, operation: str, what: str) -> None:
        """Raise `AuthorizationFailed` naming `operation` on the cluster unless the principal holds it
        (DescribeCluster's authorized operations, which count implied ones: Alter implies Describe)."""
        fut = self._client.describe_cluster(include_authorized_operations=True, request_timeout=self.timeout)
        ops = self._result(f"{what} (describe the cluster)", fut).authorized_operations or []
        if _op(operation) not in ops:
            err = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED)
            raise authorization_error(self.name, err, what, (operation, "cluster", "kafka-cluster"))

    def create_bindings(self, acls: Sequence[Acl]) -> None:
        if acls:
            for fut in self._client.create_acls([_to_binding(a) for a in acls], request_timeout=self.timeout).values():
                self._result("create ACLs", fut, _ALTER_CLUSTER)

    def delete_bindings(self, acls: Sequence[Acl]) -> None:
        if acls:
            filters = [_to_binding(a, filter_=True) for a in acls]
            for fut in self._client.delete_acls(filters, request_timeout=self.timeout).values():
                self._result("delete ACLs", fut, _ALTER_CLUSTER)


def _op(name: str) -> AclOperation:
    """Kafka's operation name (IdempotentWrite) as the client's enum (IDEMPOTENT_WRITE)."""
    return AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def _op_name(op: AclOperation) -> str:
    return "".join(part.capitalize() for part in op.name.split("_"))


def _to_acl(b: Any) -> Acl | None:
    kind = _KINDS.get(b.restype)
    if kind is None or b.resource_pattern_type not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        return None
    return Acl(
        kind,
        b.name,
        b.resource_pattern_type.name.lower(),
        b.principal,
        b.host,
        _op_name(b.operation),
        b.permission_type.name.lower(),
    )


def _to_binding(a: Acl, *, filter_: bool = False) -> Any:
    cls = AclBindingFilter if filter_ else AclBinding
    return cls(
        ResourceType.BROKER if a.kind == "cluster" else ResourceType[a.kind.upper().replace("-", "_")],
        a.name,
        ResourcePatternType[a.pattern.upper()],
        a.principal,
        a.host,
        _op(a.operation),
        AclPermissionType[a.permission.upper()],
    )
