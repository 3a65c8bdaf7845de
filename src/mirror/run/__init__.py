"""The `mirror run` process, in the order a start and then a record pass through it:
`supervisor` (`--workers N`: N processes in one group), `daemon` (a process's flows and what
listens to them; the canary topic made at start), then beside the engine's workers:
`topicsync` (target topics follow their sources), `recorder` (the offset-map rows of
acknowledged records made durable) and `checkpointer` (the flows' groups translated)."""
