package io.mirror.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One task: one source partition's slice of the batch produced to the same partition of its
 * target topic, as mirror.spark.task does it (same key, value, headers, CreateTime timestamp
 * and provenance header), in offset order on an idempotent producer.
 *
 * It never skips a record: the skip-what-the-target-holds rule stays on the Python path. A
 * task declines (produces nothing) wherever the target may already hold part of its slice: a
 * retried attempt, or a partition not settled in this query whose target's last record is not
 * clearly a copy of an earlier record of this source partition. The driver then runs the batch
 * on the Python path, which reads the target and skips what it proves is there.
 */
final class SliceWriter implements FlatMapFunction<Iterator<InternalRow>, String> {
    private static final long serialVersionUID = 1L;
    static final String HEADER_ORIGIN = "mirror.origin";
    private static final long TAIL_TIMEOUT_MS = 30_000;

    /** The Kafka source's columns the writer reads, in this order (their ordinals: {@link #at}). */
    static final String[] COLUMNS = {"topic", "partition", "offset", "timestamp", "key", "value", "headers"};
    private static final int TOPIC = 0, PARTITION = 1, OFFSET = 2, TIMESTAMP = 3, KEY = 4, VALUE = 5, HEADERS = 6;

    private final WriterPlan plan;
    private final int[] at;

    /** {@code at}: the ordinal of each of {@link #COLUMNS} in the batch's rows. */
    SliceWriter(WriterPlan plan, int[] at) {
        this.plan = plan;
        this.at = at.clone();
    }

    @Override
    public Iterator<String> call(Iterator<InternalRow> rows) {
        if (!rows.hasNext()) {
            return Collections.emptyIterator();
        }
        InternalRow head = rows.next();
        UTF8String topicName = head.getUTF8String(at[TOPIC]).clone(); // the row's bytes are reused by the next row
        String topic = topicName.toString();
        int partition = head.getInt(at[PARTITION]);
        long first = head.getLong(at[OFFSET]);
        ObjectNode out = new ObjectMapper().createObjectNode();
        out.put("topic", topic).put("partition", partition).put("first", first);
        String target = plan.targets.get(topic);
        String origin = plan.origins.get(topic);
        String declined = declined(topic, partition, first, target, origin);
        if (declined != null) {
            out.put("declined", declined);
            return Collections.singletonList(out.toString()).iterator();
        }
        out.put("target", target);
        byte[] prefix = origin == null ? null : (origin + partition + "/").getBytes(StandardCharsets.UTF_8);
        KafkaProducer<byte[], byte[]> producer = Clients.producer(plan.producer, plan.batchSize(target));
        Acks acks = new Acks(producer);
        List<long[]> changes = new ArrayList<>(); // (source offset, index) where index - offset changes
        long n = 0, bytes = 0, maxTs = -1, last = first, shift = Long.MIN_VALUE;
        String failure = null;
        try {
            for (InternalRow row = head; row != null; row = rows.hasNext() ? rows.next() : null) {
                if (row.getInt(at[PARTITION]) != partition || !row.getUTF8String(at[TOPIC]).equals(topicName)) {
                    // One Kafka partition per Spark partition is what keeps order.
                    throw new IllegalStateException("a Spark task got records of " + topic + "[" + partition
                            + "] and " + row.getUTF8String(at[TOPIC]) + "[" + row.getInt(at[PARTITION]) + "]");
                }
                long offset = row.getLong(at[OFFSET]);
                // Spark's timestamps are microseconds; the record's own milliseconds, as unix_millis().
                long ts = Math.floorDiv(row.getLong(at[TIMESTAMP]), 1000L);
                byte[] key = row.isNullAt(at[KEY]) ? null : row.getBinary(at[KEY]);
                byte[] value = row.isNullAt(at[VALUE]) ? null : row.getBinary(at[VALUE]);
                if (n - offset != shift) {
                    shift = n - offset;
                    changes.add(new long[] {offset, n});
                }
                if (ts < 0) {
                    // librdkafka copies a negative timestamp (-1: none) as it is; the Java client
                    // refuses it. Fail here, before sending it: the Python tasks produce the rest.
                    throw new IllegalStateException(topic + "[" + partition + "] offset " + offset + " has timestamp "
                            + ts + ", which the Java client cannot send");
                }
                // librdkafka stamps a record given timestamp 0 with the time of producing; so does
                // the Java client given none.
                producer.send(
                        new ProducerRecord<>(target, partition, ts > 0 ? ts : null, key, value, headers(row, prefix, offset)),
                        acks.callback(n));
                bytes += (key == null ? 0 : key.length) + (value == null ? 0 : value.length);
                maxTs = Math.max(maxTs, ts);
                last = offset;
                n++;
                if (acks.error() != null) {
                    break;
                }
            }
        } catch (RuntimeException e) {
            failure = "producing to " + target + "[" + partition + "] stopped: " + e;
        }
        String ackFailure = acks.await(n, plan.ackTimeoutMs);
        failure = failure != null ? failure : ackFailure;
        if (failure == null && n > 0 && !acks.contiguous()) {
            failure = target + "[" + partition + "] did not receive the batch contiguously (is another producer "
                    + "writing the target topic?)";
        }
        if (failure != null) {
            Clients.discard(producer);
            out.put("failed", failure);
            return Collections.singletonList(out.toString()).iterator();
        }
        out.put("next", last + 1).put("produced", n).put("bytes", bytes).put("max_ts", maxTs);
        boolean placed = acks.firstOffset() >= 0;
        out.put("placed", placed);
        ArrayNode syncs = out.putArray("syncs");
        if (placed) {
            for (long[] c : changes) {
                syncs.addArray().add(c[0]).add(acks.firstOffset() + c[1]);
            }
        }
        return Collections.singletonList(out.toString()).iterator();
    }

    /** Why this task must not produce its slice (null: it may). */
    private String declined(String topic, int partition, long first, String target, String origin) {
        TaskContext ctx = TaskContext.get();
        if (ctx != null && ctx.attemptNumber() > 0) {
            return "a retried task (attempt " + ctx.attemptNumber() + ") may find part of its slice on the target";
        }
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

    /** The row's own headers, in order, then its provenance (as mirror.domain.route.Route.headers). */
    private RecordHeaders headers(InternalRow row, byte[] prefix, long offset) {
        RecordHeaders out = new RecordHeaders();
        if (!row.isNullAt(at[HEADERS])) {
            ArrayData array = row.getArray(at[HEADERS]);
            for (int i = 0; i < array.numElements(); i++) {
                InternalRow h = array.getStruct(i, 2);
                out.add(h.getUTF8String(0).toString(), h.isNullAt(1) ? null : h.getBinary(1));
            }
        }
        if (prefix != null) {
            byte[] digits = Long.toString(offset).getBytes(StandardCharsets.US_ASCII);
            byte[] value = new byte[prefix.length + digits.length];
            System.arraycopy(prefix, 0, value, 0, prefix.length);
            System.arraycopy(digits, 0, value, prefix.length, digits.length);
            out.add(HEADER_ORIGIN, value);
        }
        return out;
    }
}
