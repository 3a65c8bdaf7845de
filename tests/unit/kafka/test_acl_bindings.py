"""`Acl` values to the client's bindings and back (no network)."""

from __future__ import annotations

import pytest

from mirror.domain.acl_sync import Acl
from mirror.kafka.admin.acls import _to_acl, _to_binding


@pytest.mark.parametrize(
    "acl",
    [
        Acl("topic", "nyc.orders", "literal", "User:app", "*", "Read", "allow"),
        Acl("topic", "nyc.orders.", "prefixed", "User:app", "10.0.0.1", "Describe", "deny"),
        Acl("group", "billing", "literal", "User:app", "*", "Read", "allow"),
        Acl("transactional-id", "app-", "prefixed", "User:app", "*", "Write", "allow"),
        Acl("cluster", "kafka-cluster", "literal", "User:app", "*", "IdempotentWrite", "allow"),
    ],
)
def test_round_trip(acl: Acl) -> None:
    assert _to_acl(_to_binding(acl)) == acl
