"""Canary prober: sequence-numbered probes through the mirror, latency, loss, duplicates."""
