package io.mirror.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.kafka010.KafkaConfigUpdater;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The executor JVM's source readers, kept across tasks and batches as Spark's Kafka source
 * keeps its consumers: a task borrows one (preferably the one whose last range its own range
 * continues, so nothing is fetched twice) and gives it back once its range is read cleanly;
 * a reader whose task failed is closed. At most {@link #IDLE_MAX} wait idle (Spark's own
 * consumer cache capacity), none longer than {@link #IDLE_MS}.
 */
final class SourceReaders {
    private static final int IDLE_MAX = 64;
    private static final long IDLE_MS = 5 * 60_000;
    /** Records per poll: the engine's consume batch (the Java client's default is 500). */
    private static final String MAX_POLL_RECORDS = "2000";
    private static final LinkedList<SourceReader> IDLE = new LinkedList<>();

    private SourceReaders() {}

    /** A reader for {@code tp} built from the batch's executor parameters {@code params}. */
    static SourceReader borrow(Map<String, Object> params, TopicPartition tp, long from) {
        Map<String, Object> props = new TreeMap<>(params);
        props.putIfAbsent("max.poll.records", MAX_POLL_RECORDS);
        String key = props.toString();
        synchronized (IDLE) {
            SourceReader any = null;
            for (SourceReader r : IDLE) {
                if (r.key.equals(key)) {
                    if (r.continues(tp, from)) {
                        any = r;
                        break;
                    }
                    any = any == null ? r : any;
                }
            }
            if (any != null) {
                IDLE.remove(any);
                return any;
            }
        }
        return new SourceReader(key, withAuthentication(props));
    }

    /** Back to the idle readers, after its range was read cleanly. */
    static void release(SourceReader reader) {
        List<SourceReader> expired = new ArrayList<>();
        long now = System.currentTimeMillis();
        reader.idleSince = now;
        synchronized (IDLE) {
            IDLE.addFirst(reader);
            for (Iterator<SourceReader> it = IDLE.iterator(); it.hasNext(); ) {
                SourceReader r = it.next();
                if (now - r.idleSince > IDLE_MS) {
                    it.remove();
                    expired.add(r);
                }
            }
            while (IDLE.size() > IDLE_MAX) {
                expired.add(IDLE.removeLast());
            }
        }
        expired.forEach(SourceReader::close);
    }

    /**
     * The parameters as Spark's own executor consumer gets them: with the delegation token's
     * login when the cluster is configured for one (spark.kafka.clusters.*), else as given.
     */
    private static Map<String, Object> withAuthentication(Map<String, Object> props) {
        scala.collection.immutable.Map<String, Object> given =
                scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(props));
        return KafkaConfigUpdater.apply("executor", given).setAuthenticationConfigIfNeeded().build();
    }
}
