"""The Spark engine: the one package that imports pyspark.

`mirror spark run` (`mirror.cli.spark`) mirrors a flow with one Structured Streaming query.
Its modules, in the order a run and then a record pass through them:

Driver, starting (before the first batch):

* `session`: the jars, the checks, the settings; `startup` starts the session in the
  background while the flow's checks run. `class_archive` is the driver JVM's class-data
  archive that a session maps (`cds` builds it at `make setup`).
* `clients`: librdkafka client settings as the Java options Spark's Kafka source takes.
* `job`: the driver, one `SparkFlow` per flow: the query, its restarts, its stop. It asks
  `checkpoint` (and `checkpoint_lock`, one driver per checkpoint) whether to resume,
  `starts` (with `commits`' tags) where each partition starts, and `trigger` how large a
  batch may be; `watch` restarts the query when the matched topics change.

Driver, per micro-batch (`foreachBatch`):

* `batches`: plan the batch's tasks, store the offset-map rows, then commit the group
  (`commits`). `warmup` readies the executors' clients while batch 0 is planned.

Executors, one task per source partition's slice, on one of two paths (`batches` tries
the JVM path first; a batch or partition it declines goes to the Python path):

* JVM path: `jvm` (driver side) hands the batch's offset ranges to the Java writer in
  jvm/writer (`io.mirror.spark.MirrorWriter`, over py4j), which reads and produces on the
  executors; never with exactly_once.
* Python path: `arrow` takes the Kafka rows as Arrow batches, `task` produces them with
  confluent-kafka and returns a `TaskResult` (the JVM path's results take that shape too);
  with exactly_once, `exactly_once` wraps a task attempt in one target transaction.

Around a run:

* `progress`: the query's progress as Prometheus metrics (`--metrics-port`).
* `audit`: `mirror audit`, a batch job comparing a flow's source and target.
* `submit` and `package`: `mirror spark submit`, the flow as a spark-submit application
  with mirror shipped to the executors as a PEX.
"""
