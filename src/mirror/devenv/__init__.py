"""Dev servers (Kafka, Cassandra) and the demo: for `mirror dev`, tests and bench only."""
