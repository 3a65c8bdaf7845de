"""`mirror drill`: executable runbooks, the drill's own workload, and the report.

`runner` reads a runbook (`mirror.domain.runbook`) and plays it against real clusters,
driving `workload` (a sequence-numbered producer and consumer group) or, for a site drill,
`site` (several groups over several flows); `report` renders what it measured.
"""
