package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/** A pool of its own over MockConsumers, on a clock the test moves. */
class SourceReadersTest {
    private static final Map<String, Object> PARAMS = Map.of("bootstrap.servers", "127.0.0.1:9");
    private static final TopicPartition TP0 = SourceReaderTest.TP;
    private static final TopicPartition TP1 = new TopicPartition("orders", 1);

    private final List<MockConsumer<byte[], byte[]>> opened = new ArrayList<>();
    private final List<Map<String, Object>> openedWith = new ArrayList<>();
    private final long[] now = {0};

    private SourceReaders pool(long idleMs, int idleMax) {
        return new SourceReaders(props -> {
            MockConsumer<byte[], byte[]> c = SourceReaderTest.consumer(0, 10);
            c.updateBeginningOffsets(Map.of(TP1, 0L));
            c.updateEndOffsets(Map.of(TP1, 10L));
            opened.add(c);
            openedWith.add(props);
            return c;
        }, () -> now[0], idleMs, idleMax);
    }

    /** A reader that read [from, until) of {@code tp} to its end. */
    private static SourceReader readTo(SourceReaders pool, TopicPartition tp, long from, long until) {
        SourceReader r = pool.take(PARAMS, tp, from);
        r.start(tp, from, until, 120_000, false);
        // The MockConsumer's position is the range's start: past it, nothing is left to read.
        while (r.next() != null) {
            // no records were added
        }
        return r;
    }

    @Test
    void aConsumerGetsTheEnginesPollSizeUnlessTheSourceSetsOne() {
        SourceReaders pool = pool(60_000, 4);
        pool.take(PARAMS, TP0, 0);
        pool.take(Map.of("bootstrap.servers", "127.0.0.1:9", "max.poll.records", "10"), TP0, 0);
        assertEquals("2000", openedWith.get(0).get("max.poll.records"));
        assertEquals("10", openedWith.get(1).get("max.poll.records"));
    }

    @Test
    void aTaskGetsTheIdleReaderWhoseLastRangeItsOwnContinues() {
        SourceReaders pool = pool(60_000, 4);
        SourceReader a = readTo(pool, TP0, 0, 0);
        SourceReader b = readTo(pool, TP1, 7, 7);
        pool.giveBack(a);
        pool.giveBack(b);
        assertEquals(2, pool.idle());
        assertSame(a, pool.take(PARAMS, TP0, 0));
        assertSame(b, pool.take(PARAMS, TP1, 7));
        assertEquals(2, opened.size());
    }

    @Test
    void anyIdleReaderOfTheSameParametersServesOtherwiseAndOthersAreNotShared() {
        SourceReaders pool = pool(60_000, 4);
        SourceReader a = readTo(pool, TP0, 0, 0);
        pool.giveBack(a);
        assertNotSame(a, pool.take(Map.of("bootstrap.servers", "127.0.0.1:10"), TP0, 0));
        assertSame(a, pool.take(PARAMS, TP1, 3));
        assertEquals(0, pool.idle());
    }

    @Test
    void pastItsCapacityThePoolClosesTheReaderIdleLongest() {
        SourceReaders pool = pool(60_000, 2);
        List<SourceReader> readers = List.of(pool.take(PARAMS, TP0, 0), pool.take(PARAMS, TP0, 0), pool.take(PARAMS, TP0, 0));
        readers.forEach(pool::giveBack);
        assertEquals(2, pool.idle());
        assertTrue(opened.get(0).closed());
        assertFalse(opened.get(1).closed());
        assertFalse(opened.get(2).closed());
    }

    @Test
    void aReaderIdleLongerThanTheLimitIsClosedWhenAnotherComesBack() {
        SourceReaders pool = pool(60_000, 4);
        SourceReader a = pool.take(PARAMS, TP0, 0);
        SourceReader b = pool.take(PARAMS, TP0, 0);
        pool.giveBack(a);
        now[0] = 60_001;
        pool.giveBack(b);
        assertTrue(opened.get(0).closed());
        assertFalse(opened.get(1).closed());
        assertEquals(1, pool.idle());
    }

    // Carried gap (c): idle readers were closed only when another reader came back, so after
    // the last batch (a stopped query, a flow moved away) they held their connections for the
    // executor's life. The pool's evictor closes them once expired, as Spark's consumer cache does.
    @Test
    void anIdleReaderIsClosedOnceExpiredThoughNoTaskComesBack() throws InterruptedException {
        SourceReaders pool = pool(50, 4);
        pool.giveBack(pool.take(PARAMS, TP0, 0));
        now[0] = 51;
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!opened.get(0).closed() && System.nanoTime() < deadline) {
            Thread.sleep(5); // the evictor runs on a thread of its own
        }
        assertTrue(opened.get(0).closed(), "an expired idle reader is closed by the evictor");
        assertEquals(0, pool.idle());
    }

    @Test
    void theEvictorLeavesReadersNotYetExpired() {
        SourceReaders pool = pool(60_000, 4);
        pool.giveBack(pool.take(PARAMS, TP0, 0));
        now[0] = 60_000;
        pool.evictIdle();
        assertFalse(opened.get(0).closed());
        assertEquals(1, pool.idle());
    }
}
