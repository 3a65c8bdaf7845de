package io.mirror.spark;

import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The executor JVM's Kafka clients, kept across tasks and batches (as Spark's own Kafka sink
 * keeps its producers), none of which creates a topic ({@link Producers}): one producer per
 * settings and batch size, shared by the tasks running
 * at once, each of which waits only for its own records; and one consumer reading target
 * partitions' last records for the first batches of a query.
 *
 * A producer that failed a send is dropped at once and closed without waiting: records it still
 * holds are failed, never delivered after the ones a retry produces.
 */
final class Clients {
    private static final Map<String, KafkaProducer<byte[], byte[]>> PRODUCERS = new ConcurrentHashMap<>();
    private static final Map<String, KafkaConsumer<byte[], byte[]>> CONSUMERS = new ConcurrentHashMap<>();

    private Clients() {}

    static KafkaProducer<byte[], byte[]> producer(Map<String, String> settings, int batchSize) {
        Map<String, Object> props = new TreeMap<>(settings);
        props.put("batch.size", Integer.toString(batchSize));
        String key = props.toString();
        return PRODUCERS.computeIfAbsent(key, k -> Producers.create(props));
    }

    /** Drop a producer that failed: no later task may use it, and what it holds is failed now. */
    static void discard(KafkaProducer<byte[], byte[]> producer) {
        PRODUCERS.values().removeIf(p -> p == producer);
        producer.close(Duration.ZERO);
    }

    /**
     * The last record of a target partition, or null when the partition holds none. Throws
     * when it cannot be read within {@code timeoutMs} (a control record last, an unreachable
     * target): the caller then declines the slice.
     */
    static ConsumerRecord<byte[], byte[]> last(Map<String, String> settings, TopicPartition tp, long timeoutMs) {
        Map<String, Object> props = new TreeMap<>(settings);
        props.put("enable.auto.commit", "false");
        props.put("isolation.level", "read_uncommitted");
        // Reading a target partition must not create its topic (deleted meanwhile) with the
        // broker's defaults: the consumer's own setting, as for the Python tasks' readers.
        props.put("allow.auto.create.topics", "false");
        String key = props.toString();
        KafkaConsumer<byte[], byte[]> c = CONSUMERS.computeIfAbsent(
                key, k -> new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
        // A consumer is one thread's at a time: the tasks of an executor take turns (first batches only).
        synchronized (c) {
            try {
                return last(c, tp, timeoutMs);
            } catch (RuntimeException e) {
                CONSUMERS.remove(key, c);
                c.close(Duration.ZERO);
                throw e;
            }
        }
    }

    private static ConsumerRecord<byte[], byte[]> last(
            KafkaConsumer<byte[], byte[]> c, TopicPartition tp, long timeoutMs) {
        try {
            List<TopicPartition> one = Collections.singletonList(tp);
            Duration wait = Duration.ofMillis(timeoutMs);
            long low = c.beginningOffsets(one, wait).get(tp);
            long high = c.endOffsets(one, wait).get(tp);
            if (high <= low) {
                return null;
            }
            c.assign(one);
            c.seek(tp, high - 1);
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200)).records(tp)) {
                    if (r.offset() == high - 1) {
                        return r;
                    }
                }
                if (c.position(tp) >= high) {
                    break;
                }
            }
            throw new IllegalStateException("no record read at " + tp + " offset " + (high - 1));
        } finally {
            c.assign(Collections.emptyList());
        }
    }
}
