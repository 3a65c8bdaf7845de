#!/bin/sh
exec java -Xmx64m -XX:TieredStopAtLevel=1 -cp "/opt/kafka/libs/*" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
