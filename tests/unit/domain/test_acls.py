"""The least-privilege table of `mirror acls`: regex -> ACL resource, grants per command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mirror import config
from mirror.cli import cli
from mirror.domain.acls import (
    Resource,
    cluster_bindings,
    minimal_operations,
    principal_for,
    required_grants,
    resource_for,
    transactional_id_prefix,
    visibility_probes,
)

BODY = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092", client: {sasl.username: mirror-nyc, sasl.password: "${PW}"}}
  sf: {bootstrap: "127.0.0.1:19192"}
flows:
  - name: f
    source: nyc
    target: sf
    topics: {include: ["orders\\\\..*", "users", "pay(ments)?"]}
    groups: ["billing.*"]
    sync_topic_configs: %s
canary: {topic: canary-t}
"""


@pytest.mark.parametrize(
    ("regex", "resource", "exact"),
    [
        ("users", Resource("topic", "users"), True),
        ("orders\\..*", Resource("topic", "orders.", "prefixed"), True),
        ("orders.*", Resource("topic", "orders", "prefixed"), True),
        (".*", Resource("topic", "*"), True),
        ("pay(ments)?", Resource("topic", "pay", "prefixed"), False),
        ("paym?", Resource("topic", "pay", "prefixed"), False),
        ("a|b", Resource("topic", "*"), False),
    ],
)
def test_regex_to_resource(regex, resource, exact):
    assert resource_for("topic", regex) == (resource, exact)


def _grants(sync: bool = True):
    return required_grants(config.parse(BODY % str(sync).lower(), env={"PW": "pw"}))


def test_run_needs_write_and_idempotence_on_the_target_read_on_the_source():
    target = cluster_bindings([g for g in _grants() if g.command == "run"], "sf")
    # Kafka >= 3.0 (KIP-679): Write on the topic is enough for an idempotent producer.
    assert not any(r.kind == "cluster" for r in target)
    # Prefix renaming: the target resources carry the source cluster's prefix.
    ops = target[Resource("topic", "nyc.orders.", "prefixed")]
    assert {"Create", "Write", "AlterConfigs", "Alter"} <= set(ops)
    # Implied by Kafka (Write/Alter/Delete imply Describe, AlterConfigs DescribeConfigs): not listed.
    assert "Describe" not in ops and "DescribeConfigs" not in ops
    assert "Read" not in ops  # sync_group_offsets is off: nothing is committed on the target
    assert Resource("topic", "nyc.canary-t") in target
    source = cluster_bindings([g for g in _grants() if g.command == "run"], "nyc")
    assert set(source[Resource("topic", "orders.", "prefixed")]) == {"Read", "DescribeConfigs"}
    assert source[Resource("topic", "canary-t")] == ("Read", "DescribeConfigs")  # `mirror canary` creates it
    assert source[Resource("group", "mirror.f")] == ("Read",)
    assert "Write" not in {op for ops in source.values() for op in ops}


def test_implied_operations_are_left_out():
    assert minimal_operations(["Describe", "Read", "DescribeConfigs", "Read"]) == ("Read", "DescribeConfigs")
    assert minimal_operations(["Create", "Describe", "Write", "DescribeConfigs", "AlterConfigs"]) == (
        "Create",
        "Write",
        "AlterConfigs",
    )
    assert minimal_operations(["Describe"]) == ("Describe",)
    # Merged over commands: lag's Describe on a topic run also Reads is implied there too.
    source = cluster_bindings(_grants(), "nyc")
    assert "Describe" not in source[Resource("topic", "orders.", "prefixed")]


def test_topic_config_sync_off_drops_alter_configs():
    target = cluster_bindings([g for g in _grants(sync=False) if g.command == "run"], "sf")
    assert "AlterConfigs" not in target[Resource("topic", "nyc.users")]


def test_topic_deletes_read_the_target_topics_they_may_delete():
    text = (BODY % "true").replace("    sync_topic_configs: true\n", "    sync_topic_deletes: true\n")
    grants = required_grants(config.parse(text, env={"PW": "pw"}))
    target = cluster_bindings([g for g in grants if g.command == "run"], "sf")
    assert {"Read", "Delete"} <= set(target[Resource("topic", "nyc.users")])
    assert (
        "Read"
        not in cluster_bindings([g for g in _grants() if g.command == "run"], "sf")[Resource("topic", "nyc.users")]
    )


def test_read_only_commands_never_write():
    for g in _grants():
        if g.command in ("validate", "topics", "lag", "failover plan", "failover export"):
            assert set(g.operations) <= {"Describe", "Read", "DescribeConfigs"}, g


def test_principal_and_cli_output():
    assert principal_for({"sasl.username": "bob"}) == "User:bob"
    assert principal_for({}, "User:CN=x") == "User:CN=x"


def test_acls_command_prints_kafka_acls_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("PW", "hunter2-secret")
    path = tmp_path / "c.yaml"
    path.write_text(BODY % "true")
    res = CliRunner().invoke(cli, ["acls", "-c", str(path), "--json", "--command", "canary"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert {r["cluster"] for r in rows} == {"nyc", "sf"}
    nyc = [r for r in rows if r["cluster"] == "nyc" and r["resource_type"] == "topic"]
    assert nyc[0]["kafka_acls_args"] == [
        "--bootstrap-server",
        "127.0.0.1:19092",
        "--add",
        "--allow-principal",
        "User:mirror-nyc",
        "--operation",
        "Create",
        "--operation",
        "Write",
        "--topic",
        "canary-t",
    ]
    text = CliRunner().invoke(cli, ["acls", "-c", str(path)]).output
    assert "# mirror run on sf" in text and "--operation Create --operation Write --operation AlterConfigs" in text
    assert "hunter2-secret" not in text + res.output


def test_security_guide_table_covers_every_command():
    from pathlib import Path

    from mirror.domain.acls import COMMANDS

    guide = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    table = guide.split("## Least privilege", 1)[1].split("\n\n", 3)[2]
    rows = {
        cell.strip("` ")
        for line in table.splitlines()
        if line.startswith("| `")
        for cell in line.split("|")[1].split(",")
    }
    assert set(COMMANDS) <= rows, set(COMMANDS) - rows


def test_visibility_probes_ask_for_what_no_listed_topic_matches():
    listed = ["orders.eu", "users"]
    probes = visibility_probes(["orders\\..*", "users", "payments", "pay\\..*", "audit-[0-9]+", ".*"], listed)
    # Matched by a listed topic: nothing to ask; a literal name: itself; a regex: its prefix.
    assert probes == {"payments": "payments", "pay\\..*": "pay.", "audit-[0-9]+": "audit-"}


def test_drill_plays_the_application_on_both_sides_and_measures_the_lag():
    drill = [g for g in _grants() if g.command == "drill"]
    source, target = cluster_bindings(drill, "nyc"), cluster_bindings(drill, "sf")
    assert source[Resource("topic", "orders.", "prefixed")] == ("Create", "Write", "Read")
    assert source[Resource("group", "billing", "prefixed")] == ("Read",)
    assert source[Resource("group", "mirror.f")] == ("Describe",)
    assert source[Resource("group", "mirror-reader-", "prefixed")] == ("Describe",)
    assert target == {
        Resource("topic", "nyc.orders.", "prefixed"): ("Read",),
        Resource("topic", "nyc.users"): ("Read",),
        Resource("topic", "nyc.pay", "prefixed"): ("Read",),
        Resource("group", "billing", "prefixed"): ("Read",),
    }


def test_exactly_once_run_needs_its_transactional_ids_and_progress_group_on_the_target():
    """A transactional producer needs Write on its transactional.id (InitProducerId,
    AddPartitionsToTxn, EndTxn; Describe, implied, for its coordinator); the progress written
    in the transaction needs Read on the progress group (AddOffsetsToTxn, TxnOffsetCommit)
    and Read on the target topics whose offsets it commits (TxnOffsetCommit). Ids are new per
    worker incarnation (`mirror.<flow>.<hex>`; Spark's `mirror.<flow>.spark.<topic>.<p>`):
    a prefix."""
    body = (BODY % "true").replace("    sync_topic_configs: true\n", "    exactly_once: true\n")
    grants = [g for g in required_grants(config.parse(body, env={"PW": "pw"})) if g.command == "run"]
    target = cluster_bindings(grants, "sf")
    assert target[Resource("transactional-id", "mirror.f.", "prefixed")] == ("Write",)
    assert target[Resource("group", "mirror-eos.f")] == ("Read",)
    assert "Read" in target[Resource("topic", "nyc.orders.", "prefixed")]
    assert "Read" in target[Resource("topic", "nyc.canary-t")]  # the canary is copied in the same transactions
    # Nothing transactional on the source, and nothing for an at-least-once flow.
    assert not any(r.kind == "transactional-id" for r in cluster_bindings(grants, "nyc"))
    plain = cluster_bindings([g for g in _grants() if g.command == "run"], "sf")
    assert not any(r.kind == "transactional-id" or r.name == "mirror-eos.f" for r in plain)


def test_transactional_id_grant_as_kafka_acls_arguments():
    assert Resource("transactional-id", "mirror.f.", "prefixed").args() == [
        "--transactional-id",
        "mirror.f.",
        "--resource-pattern-type",
        "prefixed",
    ]


def test_every_exactly_once_writer_id_has_the_granted_prefix():
    from mirror.kafka.progress import new_writer_id
    from mirror.spark.exactly_once import writer_id

    prefix = transactional_id_prefix("f")
    assert new_writer_id("f").startswith(prefix)
    assert writer_id("f", "orders", 3).startswith(prefix)


def test_the_acl_sync_grants_are_listed_only_for_flows_that_sync_acls():
    def cluster_grants(body: str) -> set[tuple[str, str, tuple[str, ...]]]:
        grants = required_grants(config.parse(body, env={"PW": "pw"}))
        return {(g.command, g.cluster, g.operations) for g in grants if g.resource.kind == "cluster"}

    assert cluster_grants(BODY % "true") == set()
    synced = (BODY % "true").replace("    sync_topic_configs: true\n", "    sync_acls: true\n")
    assert cluster_grants(synced) == {
        ("run", "nyc", ("Describe",)),
        ("run", "sf", ("Alter",)),  # Alter implies the Describe the target's listing needs
        ("topics", "nyc", ("Describe",)),
        ("topics", "sf", ("Describe",)),
        ("failover apply --promote", "nyc", ("Describe",)),
        ("failover apply --promote", "sf", ("Alter",)),
        ("failback --promote", "sf", ("Describe",)),  # the DR cluster's ACLs of the copies
        ("failback --promote", "nyc", ("Alter",)),  # created on the old primary
        ("failover import --backup", "sf", ("Alter",)),  # the undo of either promotion
        ("failover import --backup", "nyc", ("Alter",)),
    }
