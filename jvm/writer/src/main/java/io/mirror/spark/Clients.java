package io.mirror.spark;

import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
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
    private static final Set<String> WARMED = ConcurrentHashMap.newKeySet();

    private Clients() {}

    static KafkaProducer<byte[], byte[]> producer(Map<String, String> settings, int batchSize) {
        Map<String, Object> props = new TreeMap<>(settings);
        props.put("batch.size", Integer.toString(batchSize));
        String key = props.toString();
        return PRODUCERS.computeIfAbsent(key, k -> Producers.create(props));
    }

    /**
     * What {@link Warmup}'s tasks do on an executor: the producers {@code plan}'s batches will
     * take from the cache created now, the target topics' metadata asked for on a daemon thread
     * (so no task waits on the network here), and the tail reader created. Once per executor JVM
     * and plan settings: a second warm task there does nothing.
     */
    static void warm(WriterPlan plan) {
        if (!WARMED.add(plan.producer.toString() + plan.batchSizes + plan.defaultBatchSize)) {
            return;
        }
        Map<String, KafkaProducer<byte[], byte[]>> byTarget = new TreeMap<>();
        for (String target : new TreeSet<>(plan.targets.values())) {
            byTarget.put(target, producer(plan.producer, plan.batchSize(target)));
        }
        Thread metadata = new Thread(() -> {
            for (Map.Entry<String, KafkaProducer<byte[], byte[]>> e : byTarget.entrySet()) {
                try {
                    e.getValue().partitionsFor(e.getKey());
                } catch (RuntimeException ignored) {
                    // A discarded producer or a slow topic: the first batch asks again itself.
                }
            }
        }, "mirror-warm-metadata");
        metadata.setDaemon(true);
        metadata.start();
        tailReader(plan.consumer);
    }

    /** Drop a producer that failed: no later task may use it, and what it holds is failed now. */
    static void discard(Producer<byte[], byte[]> producer) {
        PRODUCERS.values().removeIf(p -> p == producer);
        producer.close(Duration.ZERO);
    }

    /**
     * The last record of a target partition, or null when the partition holds none. Throws
     * when it cannot be read within {@code timeoutMs} (a control record last, an unreachable
     * target): the caller then declines the slice.
     */
    static ConsumerRecord<byte[], byte[]> last(Map<String, String> settings, TopicPartition tp, long timeoutMs) {
        String key = tailKey(settings);
        KafkaConsumer<byte[], byte[]> c = tailReader(settings);
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

    /** The cached tail reader for {@code settings}, created (not connected) if there is none. */
    static KafkaConsumer<byte[], byte[]> tailReader(Map<String, String> settings) {
        Map<String, Object> props = tailProps(settings);
        return CONSUMERS.computeIfAbsent(
                props.toString(), k -> new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer()));
    }

    private static String tailKey(Map<String, String> settings) {
        return tailProps(settings).toString();
    }

    private static Map<String, Object> tailProps(Map<String, String> settings) {
        Map<String, Object> props = new TreeMap<>(settings);
        props.put("enable.auto.commit", "false");
        props.put("isolation.level", "read_uncommitted");
        // Reading a target partition must not create its topic (deleted meanwhile) with the
        // broker's defaults: the consumer's own setting, as for the Python tasks' readers.
        props.put("allow.auto.create.topics", "false");
        return props;
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
