"""The `mirror run` process: daemon wiring, the --workers supervisor, the offset-map recorder,
the group checkpointer, the canary topic it makes at start."""
