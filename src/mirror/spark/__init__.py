"""The Spark engine: the one package that imports pyspark (see `mirror.spark.job`)."""
