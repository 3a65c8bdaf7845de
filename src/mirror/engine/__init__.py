"""The native data path (`mirror run`); engine/worker.py's docstring draws it.

The modules in the order a record passes through them:

1. `flow_threads`: the selected flows, one `worker` (`FlowWorker`) thread each; the worker
   wires the units below and runs the loop (open, loop, close). `status`: what it is doing.
2. `targets` and `target_watch`: target topics made to match their source topics before a
   topic is subscribed; `admins` holds the two clusters' admin clients.
3. `assignment`: the group's rebalance callbacks take partitions on (with exactly_once,
   `claims` fences and reads the progress first); each is a `partition.AssignedPartition`,
   the type every unit shares.
4. `gate`: reading paused, records waiting for queue room; `forwarder`: a run of records
   produced on `producers`' pool.
5. `delivery`: the target's answers acknowledge records; `failures`: what stops a flow.
6. `committer` (when: `commit_schedule`): the source group's commit, up to what the target
   acknowledged; with exactly_once, `transactions` commits the copies and their progress in
   one transaction (`unsettled`: one whose outcome is unknown).
7. `fence`: after a freeze nothing counts until the group confirms; `resync`: partitions
   started over when their target topic is deleted under the worker.

Dependencies point from `worker` and `assignment` down to the units, and from the units to
`partition` only (tests/unit/test_layers.py forbids any cycle).
"""
