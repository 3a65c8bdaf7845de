"""Benchmark harness: `mirror run` vs MirrorMaker 2 vs a raw confluent-kafka copy loop (see README.md)."""
