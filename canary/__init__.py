"""Canary prober: sequence-numbered probes through the mirror, latency, loss, duplicates.

`prober` writes probes into the source's canary topic and reads them back from the target;
`ledger` accounts for them (sent, arrived, lost, late, doubled).
"""
