#!/bin/sh
# One node: gossip on the container's address, CQL on every address (the health check's
# cqlsh uses 127.0.0.1, other containers the service name), data under /var/lib/cassandra.
set -eu
d=/var/lib/cassandra
ip=$(hostname -i | cut -d' ' -f1)
mkdir -p "$d/data" "$d/commitlog" "$d/saved_caches" "$d/hints" "$d/cdc_raw" "$d/triggers"
cat > "$d/cassandra.yaml" <<YAML
cluster_name: '${CASSANDRA_CLUSTER_NAME:-Test Cluster}'
num_tokens: 16
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "$ip:7000"
listen_address: $ip
rpc_address: 0.0.0.0
broadcast_rpc_address: $ip
start_native_transport: true
native_transport_port: 9042
data_file_directories: [$d/data]
commitlog_directory: $d/commitlog
saved_caches_directory: $d/saved_caches
hints_directory: $d/hints
cdc_raw_directory: $d/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
YAML
cat > "$d/logback.xml" <<'XML'
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %-5level [%thread] %logger{20}: %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
XML
heap=${MAX_HEAP_SIZE:-1G}
libs=/opt/cassandra/libs
# The JDK 17 exports and opens of Cassandra's conf/jvm17-server.options: it reaches into
# JDK internals and refuses to start without them.
exec java -Xms"$heap" -Xmx"$heap" -Xmn"${HEAP_NEWSIZE:-200M}" -Xss512k -XX:+UseG1GC \
  -Djava.awt.headless=true -Djdk.attach.allowAttachSelf=true \
  --add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
  --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
  --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
  --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
  --add-exports java.sql/java.sql=ALL-UNNAMED \
  --add-exports java.base/java.lang.ref=ALL-UNNAMED \
  --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
  --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
  --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED \
  --add-opens java.base/java.lang.module=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.math=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.module=ALL-UNNAMED \
  --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
  --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
  --add-opens java.base/java.io=ALL-UNNAMED \
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED \
  --add-opens java.base/java.lang=ALL-UNNAMED \
  --add-opens java.base/java.util=ALL-UNNAMED \
  --add-opens java.base/java.nio=ALL-UNNAMED \
  --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
  -Dio.netty.tryReflectionSetAccessible=true \
  -Dcassandra.skip_wait_for_gossip_to_settle=0 -Dcassandra-foreground=yes \
  -javaagent:"$libs/jamm-0.4.0.jar" \
  -Dcassandra.config=file://"$d/cassandra.yaml" -Dcassandra.storagedir="$d" -Dcassandra.logdir="$d" \
  -Dcassandra.triggers_dir="$d/triggers" -Dlogback.configurationFile="$d/logback.xml" \
  -cp "$libs/*" org.apache.cassandra.service.CassandraDaemon
