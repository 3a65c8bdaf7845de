package io.mirror.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.apache.spark.SparkContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;

/**
 * A small job, run while the driver plans a query's first batch, that gets the executors'
 * Kafka clients ready for {@link DirectWriter}: the writer's classes loaded, its cached producers
 * created with the batch's settings (the same cache and keys, so the first batch finds them),
 * the target topics' metadata asked for, and the tail reader created (which also loads the
 * consumer classes Spark's Kafka source needs on the executor). Without it the first batch's
 * tasks do all of this themselves, after the planning, on the path to the first record.
 *
 * It never produces a record, and nothing waits for it: the job runs on a thread of its own in
 * its own job group, a task that fails only says so in {@link #outcome()}, and {@link #cancel()}
 * ends what has not run yet. Its tasks do no network I/O on the task's thread (the metadata is
 * asked for on a daemon thread bounded by the producer's max.block.ms), so they hold an
 * executor's slot only for the clients' construction.
 */
public final class Warmup {
    private final SparkContext sc;
    private final String group;
    private final Thread thread;
    private volatile String outcome;

    private Warmup(SparkContext sc, String group, Thread thread) {
        this.sc = sc;
        this.group = group;
        this.thread = thread;
    }

    /**
     * Start warming for the batch plan {@code planJson} (mirror.spark.jvm.batch_plan): one task
     * per slot the cluster has now ({@code defaultParallelism}), so each executor likely gets one;
     * an executor that gets none only misses the head start.
     */
    public static Warmup start(SparkSession spark, String planJson) {
        WriterPlan plan = WriterPlan.parse(planJson);
        SparkContext sc = spark.sparkContext();
        String group = "mirror-warm-" + plan.flow + "-" + UUID.randomUUID();
        int tasks = Math.max(1, sc.defaultParallelism());
        Warmup[] self = new Warmup[1];
        Thread t = new Thread(() -> self[0].run(plan, tasks), "mirror-warm-" + plan.flow);
        self[0] = new Warmup(sc, group, t);
        t.setDaemon(true);
        t.start();
        return self[0];
    }

    private void run(WriterPlan plan, int tasks) {
        try {
            sc.setJobGroup(group, "mirror: warm the executors' Kafka clients (produces nothing)", false);
            List<Integer> slots = new ArrayList<>();
            for (int i = 0; i < tasks; i++) {
                slots.add(i);
            }
            JavaSparkContext.fromSparkContext(sc).parallelize(slots, tasks).foreachPartition(rows -> Clients.warm(plan));
            outcome = "";
        } catch (Throwable e) { // a cancelled or failed warm-up only costs the head start
            outcome = e.toString();
        } finally {
            sc.clearJobGroup();
        }
    }

    /** Cancel the job's tasks that have not run yet (those running end on their own, quickly). */
    public void cancel() {
        sc.cancelJobGroup(group);
    }

    /** Wait up to {@code timeoutMs} for the job to end; whether it did. */
    public boolean waitFor(long timeoutMs) throws InterruptedException {
        thread.join(Math.max(1, timeoutMs));
        return !thread.isAlive();
    }

    /** Null while the job runs; empty once it ran; else why it did not. */
    public String outcome() {
        return outcome;
    }
}
