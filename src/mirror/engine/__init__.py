"""The native data path. `worker` wires one flow's units (the loop: open, loop, close):
`forwarder` (produce), `delivery` and `failures` (the target's answers, what stops a flow),
`committer`, `gate` (paused reading), `producers`, `fence` (after a freeze), `target_watch`
and `resync`, `assignment` (rebalance callbacks and commit tags); `targets` (target topics
made to match), `flow_threads` (flows in threads)."""
