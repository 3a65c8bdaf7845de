"""Failover tooling: plans, apply with safety checks, export/import, failback."""
