package io.mirror.spark;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.LongSupplier;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.kafka010.KafkaConfigUpdater;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The executor JVM's source readers, kept across tasks and batches as Spark's Kafka source
 * keeps its consumers: a task borrows one (preferably the one whose last range its own range
 * continues, so nothing is fetched twice) and gives it back once its range is read cleanly;
 * a reader whose task failed is closed. At most {@link #IDLE_MAX} wait idle (Spark's own
 * consumer cache capacity), none longer than {@link #IDLE_MS}: an evictor thread closes the
 * expired ones every fifth of that (Spark's cache: 5 minutes, checked every minute), so
 * readers idle after a query's last batch do not hold their connections for the executor's life.
 *
 * The tasks use the executor's one pool through the static methods; a pool of its own (a
 * test's) opens its consumers and reads the time as it is given.
 */
final class SourceReaders {
    static final int IDLE_MAX = 64;
    static final long IDLE_MS = 5 * 60_000;
    /** Records per poll: the engine's consume batch (the Java client's default is 500). */
    private static final String MAX_POLL_RECORDS = "2000";
    private static final SourceReaders SHARED =
            new SourceReaders(SourceReaders::open, System::currentTimeMillis, IDLE_MS, IDLE_MAX);
    /** One daemon thread runs every pool's evictor. */
    private static final ScheduledExecutorService EVICTOR = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "mirror-source-reader-evictor");
        t.setDaemon(true);
        return t;
    });

    private final Function<Map<String, Object>, Consumer<byte[], byte[]>> opener;
    private final LongSupplier clock;
    private final long idleMs;
    private final int idleMax;
    private final LinkedList<SourceReader> idle = new LinkedList<>();
    private boolean evicting;

    SourceReaders(Function<Map<String, Object>, Consumer<byte[], byte[]>> opener, LongSupplier clock, long idleMs,
            int idleMax) {
        this.opener = opener;
        this.clock = clock;
        this.idleMs = idleMs;
        this.idleMax = idleMax;
    }

    /** A reader for {@code tp} built from the batch's executor parameters {@code params}. */
    static SourceReader borrow(Map<String, Object> params, TopicPartition tp, long from) {
        return SHARED.take(params, tp, from);
    }

    /** Back to the idle readers, after its range was read cleanly. */
    static void release(SourceReader reader) {
        SHARED.giveBack(reader);
    }

    /** {@link #borrow} from this pool. */
    SourceReader take(Map<String, Object> params, TopicPartition tp, long from) {
        Map<String, Object> props = new TreeMap<>(params);
        props.putIfAbsent("max.poll.records", MAX_POLL_RECORDS);
        String key = props.toString();
        synchronized (idle) {
            SourceReader any = null;
            for (SourceReader r : idle) {
                if (r.key.equals(key)) {
                    if (r.continues(tp, from)) {
                        any = r;
                        break;
                    }
                    any = any == null ? r : any;
                }
            }
            if (any != null) {
                idle.remove(any);
                return any;
            }
        }
        return new SourceReader(key, opener.apply(props), clock);
    }

    /** {@link #release} to this pool. */
    void giveBack(SourceReader reader) {
        List<SourceReader> expired = new ArrayList<>();
        long now = clock.getAsLong();
        reader.idleSince = now;
        synchronized (idle) {
            idle.addFirst(reader);
            expired(now, expired);
            while (idle.size() > idleMax) {
                expired.add(idle.removeLast());
            }
            if (!evicting) {
                long every = Math.max(1, idleMs / 5);
                EVICTOR.scheduleWithFixedDelay(this::evictIdle, every, every, TimeUnit.MILLISECONDS);
                evicting = true;
            }
        }
        expired.forEach(SourceReader::close);
    }

    /** Close the readers idle longer than the limit (the evictor's round; never throws). */
    void evictIdle() {
        List<SourceReader> expired = new ArrayList<>();
        synchronized (idle) {
            expired(clock.getAsLong(), expired);
        }
        expired.forEach(SourceReader::close);
    }

    /** Moves the readers idle longer than the limit at {@code now} to {@code out}; holding the lock. */
    private void expired(long now, List<SourceReader> out) {
        for (Iterator<SourceReader> it = idle.iterator(); it.hasNext(); ) {
            SourceReader r = it.next();
            if (now - r.idleSince > idleMs) {
                it.remove();
                out.add(r);
            }
        }
    }

    /** How many readers wait idle. */
    int idle() {
        synchronized (idle) {
            return idle.size();
        }
    }

    /** A consumer as Spark's own executor consumer gets its parameters. */
    private static Consumer<byte[], byte[]> open(Map<String, Object> props) {
        return new KafkaConsumer<>(withAuthentication(props), new ByteArrayDeserializer(), new ByteArrayDeserializer());
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
