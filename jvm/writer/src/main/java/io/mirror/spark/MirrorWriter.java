package io.mirror.spark;

import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

/**
 * `mirror spark run`'s JVM writer: one micro-batch's records produced to the target by the
 * executors' Java producers, called by the driver through py4j (mirror.spark.jvm).
 *
 * The batch's job is one stage (Kafka scan, {@link SliceWriter}, collect), one task per source
 * partition. It never throws for what a task declines or fails: each task answers with a result
 * row, and the job ends only once every task has ended with all of its sends settled, so the
 * driver can run the batch again on the Python path without a task of this job still producing.
 */
public final class MirrorWriter {
    private MirrorWriter() {}

    /**
     * Produce the batch {@code df} (the Kafka source's rows as foreachBatch gives them) as
     * {@code planJson} says; returns the tasks' results as one JSON array.
     *
     * The rows are read as the source made them, by column ordinal: no projection to plan,
     * analyse and compile on the driver between the batch's start and its first task.
     */
    public static String write(Dataset<Row> df, String planJson) {
        WriterPlan plan = WriterPlan.parse(planJson);
        int[] at = new int[SliceWriter.COLUMNS.length];
        for (int i = 0; i < at.length; i++) {
            at[i] = df.schema().fieldIndex(SliceWriter.COLUMNS[i]);
        }
        List<String> results =
                df.queryExecution().toRdd().toJavaRDD().mapPartitions(new SliceWriter(plan, at)).collect();
        return "[" + String.join(",", results) + "]";
    }
}
