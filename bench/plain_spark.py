"""The anchor of the Spark rows: the Kafka -> Kafka job a PySpark user writes instead of
`mirror spark run` (Spark's own Kafka source and sink, `Trigger.AvailableNow`).

What it cannot do, and `mirror spark run` does: keep each record's timestamp (Spark's Kafka
sink sets none, so the target broker stamps its own time), feed the offset map (the sink
discards the offsets it produced to) or commit the flow's group, and skip what the target
already holds when a batch is replayed (duplicates). Its producer runs with the Java
client's defaults, as such a job would.

Run as `python -m bench.plain_spark …`; the harness samples its process tree (the driver JVM
is a child of this process) like any contender.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.plain_spark")
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--target-topic", required=True)
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args(argv)

    import pyspark
    from pyspark.sql import SparkSession

    from mirror.spark.session import connector_jars  # only to find the jars `make setup` fetched

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("plain-spark")
        .config("spark.jars", ",".join(connector_jars(pyspark.__version__)))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="plain-spark-") as checkpoint:
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.src)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .load()
        )
        query = (
            source.selectExpr("key", "value", "headers", "partition")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", args.dst)
            .option("topic", args.target_topic)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
