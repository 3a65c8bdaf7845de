"""Dev servers (Kafka, Cassandra, Spark) and the demo: for `mirror dev`, tests and bench only.

`common` (the cache folder, processes, ports, readiness waits) under all of them; `security`
(a dev CA, certificates, passwords) for secured clusters; then the servers, `kafka` (which
also starts a Cassandra node from `cassandra` on request) and `spark` (a standalone
cluster); `demo` (`make demo`) runs them with a workload and the mirror.
"""
