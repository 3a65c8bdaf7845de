#!/bin/sh
# Compiles the JVM writer (io.mirror.spark.*) into one jar. The one compile command for both
# `make setup` (build/jvm/mirror-spark-writer.jar) and docker/Dockerfile.spark, so the two
# cannot drift: Java 17 bytecode (Spark 4 runs on 17 or 21), compiled against pyspark's own
# jars and the Kafka connector's (kafka-clients), which are on the classpath at run time.
#
#   jvm/writer/build.sh OUT.jar PYSPARK_JARS_DIR CONNECTOR_JARS_DIR
#
# The jar is written beside OUT.jar and moved in whole: a reader never sees half of it.
set -eu
[ $# = 3 ] || { echo "usage: $0 OUT.jar PYSPARK_JARS_DIR CONNECTOR_JARS_DIR" >&2; exit 2; }
out=$1 pyspark_jars=$2 connector_jars=$3
sources=$(cd "$(dirname "$0")" && pwd)/src/main/java
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/classes"
find "$sources" -name '*.java' > "$work/sources"
javac -nowarn --release 17 -d "$work/classes" -cp "$pyspark_jars/*:$connector_jars/*" "@$work/sources"
mkdir -p "$(dirname "$out")"
jar --create --file "$out.tmp" -C "$work/classes" .
mv "$out.tmp" "$out"
