package io.mirror.spark;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.datasources.v2.MicroBatchScanExec;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.streaming.runtime.IncrementalExecution;
import org.apache.spark.sql.execution.streaming.runtime.StreamExecution;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A micro-batch's offset ranges as Spark's Kafka source planned them (driver side): the input
 * partitions of the Kafka scan in the query's execution of this batch, each one source
 * partition's [from, until) with the executor's consumer parameters, the poll timeout and
 * failOnDataLoss. Spark still plans the batch (maxOffsetsPerTrigger, new or deleted partitions),
 * logs and checkpoints its offsets; the writer's tasks read the ranges instead of the scan.
 *
 * Taken from the running query's own execution of the batch (the one foreachBatch's DataFrame
 * was built from, checked by its batch id), not from the offset log: the planned partitions are
 * exactly what Spark's tasks would read, with the parameters Spark would read them with, and
 * the scan's row count (the query's numInputRows) is found there too.
 */
final class BatchRanges {
    final List<KafkaBatchInputPartition> parts;
    private final SQLMetric rows;
    /** Null when the ranges were found; else why not (the batch then goes the Python way). */
    final String unread;

    private BatchRanges(List<KafkaBatchInputPartition> parts, SQLMetric rows, String unread) {
        this.parts = parts;
        this.rows = rows;
        this.unread = unread;
    }

    /** The ranges of batch {@code batchId} of the query named {@code query} that {@code df} is a batch of. */
    static BatchRanges of(Dataset<Row> df, String query, long batchId) {
        SparkSession session = df.queryExecution().sparkSession();
        StreamExecution stream = null;
        for (StreamExecution s : session.sharedState().activeStreamingQueries().values()) {
            if (query.equals(s.name())) {
                stream = s;
            }
        }
        IncrementalExecution execution = stream == null ? null : stream.lastExecution();
        if (execution == null || execution.currentBatchId() != batchId) {
            return none("no running query " + query + " executing batch " + batchId);
        }
        List<MicroBatchScanExec> scans = new ArrayList<>();
        collect(execution.executedPlan(), scans);
        if (scans.size() != 1) {
            return none("the batch's plan has " + scans.size() + " micro-batch scans, not one");
        }
        List<KafkaBatchInputPartition> parts = new ArrayList<>();
        Set<TopicPartition> seen = new HashSet<>();
        for (InputPartition p : CollectionConverters.asJava(scans.get(0).inputPartitions())) {
            if (!(p instanceof KafkaBatchInputPartition)) {
                return none("an input partition is not a Kafka offset range: " + p.getClass().getName());
            }
            KafkaBatchInputPartition k = (KafkaBatchInputPartition) p;
            if (!seen.add(k.offsetRange().topicPartition())) {
                // One task per source partition is what keeps its order on the target.
                return none(k.offsetRange().topicPartition() + " is split into several ranges");
            }
            if (k.offsetRange().untilOffset() > k.offsetRange().fromOffset()) {
                parts.add(k);
            }
        }
        return new BatchRanges(parts, scans.get(0).metrics().get("numOutputRows").getOrElse(() -> null), null);
    }

    /** Count {@code records} read into the scan's rows (the query's progress: numInputRows). */
    void read(long records) {
        if (rows != null) {
            rows.add(records);
        }
    }

    private static BatchRanges none(String why) {
        return new BatchRanges(List.of(), null, why);
    }

    private static void collect(SparkPlan plan, List<MicroBatchScanExec> out) {
        if (plan instanceof MicroBatchScanExec) {
            out.add((MicroBatchScanExec) plan);
        }
        for (SparkPlan child : CollectionConverters.asJava(plan.children())) {
            collect(child, out);
        }
    }
}
