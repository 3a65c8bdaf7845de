"""`mirror drill`: executable runbooks, the drill's own workload, and the report."""
