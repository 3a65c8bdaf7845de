"""Failover tooling: plans, apply with safety checks, export/import, failback.

A group's failover, in order: `gather` (the facts, I/O) -> `plan` (where the group starts
on the target, pure) -> `apply` (committed on the target, safely); `offsets_file` is the
export/import format. A site's: `sitegather` -> `site` (one reviewed plan) -> `siteapply`
(committed as written, resumably). Afterwards `failback` shows the way back.
"""
