#!/bin/sh
# The official image's configuration contract: every KAFKA_<NAME> variable (other than the
# JVM's) becomes the property <name> with '_' read as '.', '__' as '_' and '___' as '-';
# CLUSTER_ID formats the log directory on first start.
set -eu
props=/var/lib/kafka/server.properties
env | grep '^KAFKA_' | grep -v -E '^KAFKA_(HEAP_OPTS|JVM_PERFORMANCE_OPTS|OPTS|LOG4J_OPTS|GC_LOG_OPTS|JMX_OPTS)=' \
  | while IFS='=' read -r name value; do
      key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
      printf '%s=%s\n' "$key" "$value"
    done > "$props"
cat > /var/lib/kafka/log4j2.properties <<'LOG'
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
LOG
cp="/opt/kafka/libs/*"
log4j=-Dlog4j2.configurationFile=/var/lib/kafka/log4j2.properties
logdir=$(sed -n 's/^log\.dirs=//p' "$props" | cut -d, -f1)
if [ ! -f "${logdir:-/tmp/kraft-combined-logs}/meta.properties" ]; then
  java -Xmx256m "$log4j" -cp "$cp" kafka.tools.StorageTool format --cluster-id="${CLUSTER_ID:?}" -c "$props"
fi
# shellcheck disable=SC2086 # the heap options are a list
exec java ${KAFKA_HEAP_OPTS:--Xmx1g} -XX:+UseG1GC -Djava.awt.headless=true "$log4j" -cp "$cp" kafka.Kafka "$props"
