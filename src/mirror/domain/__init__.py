"""Pure domain logic: no I/O; imports no client library, no CLI, no YAML.

In the order a record meets it: `flow` (what the domain reads of a topology), `topics` and
`naming` (which source topics a flow mirrors and their target names, loop detection),
`route` (source partition to target partition), `acks` (what the target acknowledged),
`ledger` (what is safe to commit), `offsetmap` (source offset to target offset). Then what
reads the result: `lag` and `lag_status` (lag math, Burrow-style status), `runbook` (what
`mirror drill` runs), `acls` (least privilege per command), and `mm2_config` and
`mm2_offsets` (a MirrorMaker 2 setup taken over).
"""
