package io.mirror.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import scala.Tuple2;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * `mirror spark run`'s JVM writer: one micro-batch's records read from the source and produced
 * to the target by the executors' Java clients, called by the driver through py4j
 * (mirror.spark.jvm).
 *
 * Spark's Kafka source plans the batch; its offset ranges ({@link BatchRanges}) are read by
 * one job of one task per source partition ({@link DirectWriter}), each placed where Spark
 * would place that partition's scan task (its consumer is cached there). The job never throws
 * for what a task declines or fails: each task answers with a result, and the job ends only
 * once every task has ended with all of its sends settled, so the driver can run the batch
 * again on the Python path without a task of this job still producing.
 */
public final class MirrorWriter {
    private MirrorWriter() {}

    /**
     * Produce batch {@code batchId}, whose DataFrame foreachBatch gave as {@code df}, as
     * {@code planJson} says. Returns {"tasks": [the tasks' results]}, or {"unread": why} when
     * the batch's ranges cannot be found (nothing was produced: the batch goes the Python way).
     */
    public static String write(Dataset<Row> df, String planJson, long batchId) {
        WriterPlan plan = WriterPlan.parse(planJson);
        ObjectMapper json = new ObjectMapper();
        ObjectNode out = json.createObjectNode();
        BatchRanges ranges = BatchRanges.of(df, plan.query, batchId);
        if (ranges.unread != null) {
            return out.put("unread", ranges.unread).toString();
        }
        List<Tuple2<KafkaBatchInputPartition, scala.collection.immutable.Seq<String>>> placed = new ArrayList<>();
        for (KafkaBatchInputPartition p : ranges.parts) {
            placed.add(new Tuple2<>(p, CollectionConverters.asScala(List.of(p.preferredLocations())).toSeq()));
        }
        ClassTag<KafkaBatchInputPartition> tag = ClassTag$.MODULE$.apply(KafkaBatchInputPartition.class);
        SparkContext sc = df.queryExecution().sparkSession().sparkContext();
        List<String> results = placed.isEmpty()
                ? List.of()
                : sc.makeRDD(CollectionConverters.asScala(placed).toSeq(), tag)
                        .toJavaRDD()
                        .mapPartitions(new DirectWriter(plan))
                        .collect();
        ArrayNode tasks = out.putArray("tasks");
        try {
            for (String r : results) {
                tasks.add(json.readTree(r));
            }
        } catch (IOException e) {
            throw new IllegalStateException("a task's answer is not JSON: " + e.getMessage(), e);
        }
        ranges.read(inputRows(tasks));
        return out.toString();
    }

    /**
     * The records the batch's {@code tasks} (their answers) add to the query's numInputRows:
     * none where a task declined or failed. The Python tasks then read the rest through the
     * batch's own scan (foreachBatch's DataFrame), which reads every range, filters the rows, and
     * counts each record it read, those of the ranges produced here too.
     */
    static long inputRows(Iterable<JsonNode> tasks) {
        long read = 0;
        for (JsonNode task : tasks) {
            if (task.has("declined") || task.has("failed")) {
                return 0;
            }
            read += task.path("produced").asLong(0);
        }
        return read;
    }
}
