package io.mirror.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.spark.TaskContext;

/**
 * One task's slice: one source partition's records of the batch produced to the same
 * partition of its target topic, as mirror.spark.task does it (same key, value, headers,
 * CreateTime timestamp and provenance header), in offset order on an idempotent producer, and
 * the task's answer for the driver (one JSON object: mirror.spark.jvm.results_of).
 *
 * It never skips a record: the skip-what-the-target-holds rule stays on the Python path. A
 * task declines (produces nothing) wherever the target may already hold part of its slice: a
 * retried attempt, or a partition not settled in this query whose target's last record is not
 * clearly a copy of an earlier record of this source partition ({@link #declined}). The driver
 * then runs those partitions on the Python path, which reads the target and skips what it
 * proves is there.
 */
final class Slice {
    static final String HEADER_ORIGIN = "mirror.origin";
    private static final long TAIL_TIMEOUT_MS = 30_000;

    private final WriterPlan plan;
    private final String topic;
    private final int partition;
    private final String target;
    private final byte[] prefix;
    private final Producer<byte[], byte[]> producer;
    private final Acks acks;
    private final List<long[]> changes = new ArrayList<>(); // (source offset, index) where index - offset changes
    private long n, bytes, maxTs = -1, first = -1, last, shift = Long.MIN_VALUE;
    private String failure;

    /** A slice of {@code topic[partition]} that {@link #declined} let produce. */
    Slice(WriterPlan plan, String topic, int partition) {
        this(plan, topic, partition, Clients.producer(plan.producer, plan.batchSize(plan.targets.get(topic))));
    }

    /** The same, producing on {@code producer} (the executor's cached one, or a test's). */
    Slice(WriterPlan plan, String topic, int partition, Producer<byte[], byte[]> producer) {
        this.plan = plan;
        this.topic = topic;
        this.partition = partition;
        this.target = plan.targets.get(topic);
        String origin = plan.origins.get(topic);
        this.prefix = origin == null ? null : (origin + partition + "/").getBytes(StandardCharsets.UTF_8);
        this.producer = producer;
        this.acks = new Acks(producer);
    }

    /**
     * Send the source record {@code r} (its headers get the provenance header appended: the
     * record is the task's own, read for this copy only). False once the slice must stop: a
     * send failed, or this record cannot be sent ({@link #failure}).
     */
    boolean send(ConsumerRecord<byte[], byte[]> r) {
        long offset = r.offset();
        long ts = r.timestamp();
        if (ts < 0) {
            // librdkafka copies a negative timestamp (-1: none) as it is; the Java client refuses
            // it. Fail here, before sending it: the Python tasks produce the rest.
            fail(topic + "[" + partition + "] offset " + offset + " has timestamp " + ts
                    + ", which the Java client cannot send");
            return false;
        }
        if (n - offset != shift) {
            shift = n - offset;
            changes.add(new long[] {offset, n});
        }
        if (n == 0) {
            first = offset;
        }
        try {
            // librdkafka stamps a record given timestamp 0 with the time of producing; so does the
            // Java client given none.
            producer.send(
                    new ProducerRecord<>(target, partition, ts > 0 ? ts : null, r.key(), r.value(), provenance(r.headers(), offset)),
                    acks.callback(n));
        } catch (RuntimeException e) {
            // After a failed send the producer is closed and refuses this one: the first error says why.
            String first = acks.error();
            fail(first != null ? first : "producing to " + target + "[" + partition + "] stopped: " + e);
            return false;
        }
        bytes += (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
        maxTs = Math.max(maxTs, ts);
        last = offset;
        n++;
        return acks.error() == null;
    }

    /** The slice stops here: what was sent is settled, then the task answers failed. */
    void fail(String why) {
        if (failure == null) {
            failure = why;
        }
    }

    long produced() {
        return n;
    }

    /**
     * Wait for every send to settle, then the task's answer: failed, or what it produced with
     * the offset map's pairs (source offset, target offset) wherever their delta changes.
     * {@code warning}: for the driver's log (null: none).
     */
    ObjectNode finish(String warning) {
        String ackFailure = acks.await(n, plan.ackTimeoutMs);
        String failed = failure != null ? failure : ackFailure;
        if (failed == null && n > 0 && !acks.contiguous()) {
            failed = target + "[" + partition + "] did not receive the batch contiguously (is another producer "
                    + "writing the target topic?)";
        }
        ObjectNode out = answer(topic, partition, first);
        if (failed != null) {
            Clients.discard(producer);
            return out.put("failed", failed);
        }
        out.put("target", target).put("next", last + 1).put("produced", n).put("bytes", bytes).put("max_ts", maxTs);
        boolean placed = acks.firstOffset() >= 0;
        out.put("placed", placed);
        ArrayNode syncs = out.putArray("syncs");
        if (placed) {
            for (long[] c : changes) {
                syncs.addArray().add(c[0]).add(acks.firstOffset() + c[1]);
            }
        }
        if (warning != null) {
            out.put("warning", warning);
        }
        return out;
    }

    static ObjectNode answer(String topic, int partition, long first) {
        ObjectNode out = new ObjectMapper().createObjectNode();
        return out.put("topic", topic).put("partition", partition).put("first", first);
    }

    /** Why the slice of {@code topic[partition]} starting at {@code first} must not be produced (null: it may). */
    static String declined(WriterPlan plan, String topic, int partition, long first) {
        TaskContext ctx = TaskContext.get();
        if (ctx != null && ctx.attemptNumber() > 0) {
            return "a retried task (attempt " + ctx.attemptNumber() + ") may find part of its slice on the target";
        }
        String target = plan.targets.get(topic);
        String origin = plan.origins.get(topic);
        if (target == null) {
            return "no route for source topic " + topic;
        }
        if (origin == null || plan.settled.contains(WriterPlan.key(topic, partition))) {
            return null; // no provenance: the Python path never skips either
        }
        ConsumerRecord<byte[], byte[]> tail;
        try {
            tail = Clients.last(plan.consumer, new TopicPartition(target, partition), TAIL_TIMEOUT_MS);
        } catch (RuntimeException e) {
            return "cannot read the last record of " + target + "[" + partition + "]: " + e;
        }
        return declinedAfter(tail, target, origin, partition, first);
    }

    /**
     * Why a slice of {@code partition} starting at {@code first} must not be produced after
     * {@code tail}, its target partition's last record (null: the partition is empty), given the
     * source's provenance prefix {@code origin}; null when the tail is an earlier record's copy.
     */
    static String declinedAfter(ConsumerRecord<byte[], byte[]> tail, String target, String origin, int partition, long first) {
        if (tail == null) {
            return null;
        }
        Header h = tail.headers().lastHeader(HEADER_ORIGIN);
        String named = h == null || h.value() == null ? null : new String(h.value(), StandardCharsets.UTF_8);
        String mine = origin + partition + "/";
        if (named != null && named.startsWith(mine)) {
            try {
                long at = Long.parseLong(named.substring(mine.length()));
                if (at < first) {
                    return null; // an earlier record's copy: the target holds nothing of this slice
                }
            } catch (NumberFormatException e) {
                // not a copy this engine wrote: declined below
            }
        }
        return "the last record of " + target + "[" + partition + "] (provenance " + named
                + ") may be a copy of this slice, which starts at offset " + first;
    }

    /** The record's own headers, in order, then its provenance (as mirror.domain.route.Route.headers). */
    private Headers provenance(Headers headers, long offset) {
        if (prefix != null) {
            byte[] digits = Long.toString(offset).getBytes(StandardCharsets.US_ASCII);
            byte[] value = new byte[prefix.length + digits.length];
            System.arraycopy(prefix, 0, value, 0, prefix.length);
            System.arraycopy(digits, 0, value, prefix.length, digits.length);
            headers.add(HEADER_ORIGIN, value);
        }
        return headers;
    }
}
