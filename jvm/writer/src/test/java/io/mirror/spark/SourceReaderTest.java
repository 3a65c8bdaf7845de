package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The reader on kafka-clients' MockConsumer, with the reset policy Spark's executor consumer
 * has ("none") and a clock that moves 250 ms each time it is read, so a stall is seen after a
 * few empty polls without waiting for it.
 */
class SourceReaderTest {
    static final TopicPartition TP = new TopicPartition("orders", 0);
    private static final long POLL_TIMEOUT_MS = 120_000;

    static LongSupplier steppingClock() {
        long[] now = {0};
        return () -> now[0] += 250;
    }

    static MockConsumer<byte[], byte[]> consumer(long start, long end) {
        MockConsumer<byte[], byte[]> c = new MockConsumer<>(OffsetResetStrategy.NONE);
        c.updateBeginningOffsets(Map.of(TP, start));
        c.updateEndOffsets(Map.of(TP, end));
        return c;
    }

    static void add(MockConsumer<byte[], byte[]> c, long... offsets) {
        for (long o : offsets) {
            c.addRecord(new ConsumerRecord<>(TP.topic(), TP.partition(), o, null, new byte[] {(byte) o}));
        }
    }

    static List<Long> readAll(SourceReader reader) {
        List<Long> out = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> r = reader.next(); r != null; r = reader.next()) {
            out.add(r.offset());
        }
        return out;
    }

    private static long[] range(long from, long until) {
        long[] out = new long[(int) (until - from)];
        for (int i = 0; i < out.length; i++) {
            out[i] = from + i;
        }
        return out;
    }

    @Test
    void readsExactlyItsRangeAndTheNextRangeContinuesWithoutASeek() {
        MockConsumer<byte[], byte[]> c = consumer(0, 10);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 2, 6, POLL_TIMEOUT_MS, false);
        add(c, range(0, 10)); // one poll fetches past the range's end
        assertEquals(List.of(2L, 3L, 4L, 5L), readAll(reader));
        assertNull(reader.lost());
        assertTrue(reader.continues(TP, 6));
        assertFalse(reader.continues(TP, 7));
        assertFalse(reader.continues(new TopicPartition("orders", 1), 6));

        // The consumer stands at 10 now: 6-9 come from what it already fetched.
        reader.start(TP, 6, 10, POLL_TIMEOUT_MS, false);
        assertEquals(10, c.position(TP));
        assertEquals(List.of(6L, 7L, 8L, 9L), readAll(reader));
    }

    @Test
    void aRangeThatDoesNotContinueSeeksToItsStart() {
        MockConsumer<byte[], byte[]> c = consumer(0, 10);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 3, POLL_TIMEOUT_MS, false);
        add(c, range(0, 10));
        assertEquals(List.of(0L, 1L, 2L), readAll(reader));
        reader.start(TP, 5, 8, POLL_TIMEOUT_MS, false); // 3-4 read by someone else: the buffer is dropped
        assertEquals(5, c.position(TP));
        add(c, range(5, 10));
        assertEquals(List.of(5L, 6L, 7L), readAll(reader));
    }

    @Test
    void offsetsWithoutARecordAtTheRangesEndAreNotWaitedFor() {
        // read_committed: 3-4 an aborted batch, 7 a commit marker; the consumer's position passes them.
        MockConsumer<byte[], byte[]> c = consumer(0, 8);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 8, POLL_TIMEOUT_MS, false);
        add(c, 0, 1, 2, 5, 6);
        c.seek(TP, 0);
        List<Long> got = new ArrayList<>();
        ConsumerRecord<byte[], byte[]> r;
        while ((r = reader.next()) != null) {
            got.add(r.offset());
            if (r.offset() == 6) {
                c.seek(TP, 8); // the marker at 7 fetched and skipped by the client
            }
        }
        assertEquals(List.of(0L, 1L, 2L, 5L, 6L), got);
        assertNull(reader.lost());
    }

    @Test
    void recordsRetentionDeletedBeforeTheReadAreSkippedAndNamed() {
        MockConsumer<byte[], byte[]> c = consumer(5, 10);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, POLL_TIMEOUT_MS, false);
        add(c, range(5, 10));
        assertEquals(List.of(5L, 6L, 7L, 8L, 9L), readAll(reader));
        assertEquals("orders-0 offsets 0 to 4 were deleted before they were read", reader.lost());
    }

    @Test
    void aRangeWithNoRecordForLongerThanThePollTimeoutFails() {
        MockConsumer<byte[], byte[]> c = consumer(0, 10); // the log has the records, the fetch never brings them
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, 5_000, false);
        IllegalStateException e = assertThrows(IllegalStateException.class, reader::next);
        assertEquals("no record of orders-0 from offset 0 within 5000 ms (the range ends at 10)", e.getMessage());
    }

    @Test
    void closingTwiceNeverThrows() {
        MockConsumer<byte[], byte[]> c = consumer(0, 10);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.close();
        assertTrue(c.closed());
        reader.close(); // MockConsumer refuses a second close: logged, not thrown
    }
    // Carried gap (a): failOnDataLoss=true is never exercised (the query sets it false). With it
    // true the reader fails the range instead of skipping, before handing out any record past
    // the loss; the task then answers failed and the Python path's Spark reader fails the query.
    @Test
    void withFailOnDataLossRecordsRetentionDeletedFailTheRead() {
        MockConsumer<byte[], byte[]> c = consumer(5, 10);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, POLL_TIMEOUT_MS, true);
        add(c, range(5, 10));
        IllegalStateException e = assertThrows(IllegalStateException.class, reader::next);
        assertEquals("orders-0 offsets 0 to 4 were deleted before they were read (failOnDataLoss)", e.getMessage());
        assertFalse(reader.continues(TP, 10));
    }

    @Test
    void withFailOnDataLossARangeWholeInTheLogIsReadAsWithout() {
        MockConsumer<byte[], byte[]> c = consumer(0, 10);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, POLL_TIMEOUT_MS, true);
        add(c, range(0, 10));
        assertEquals(10, readAll(reader).size());
        assertNull(reader.lost());
    }

    // Carried gap (d): an unclean leader election truncates the log below the range's end after
    // Spark planned it. Spark's own reader skips such offsets as lost (or fails with
    // failOnDataLoss), and so does this one; what it says must name a truncation, not retention.
    @Test
    void aLogTruncatedBelowTheRangesEndIsSkippedAndNamedATruncation() {
        MockConsumer<byte[], byte[]> c = consumer(0, 6); // the new leader's log ends at 6
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, POLL_TIMEOUT_MS, false);
        add(c, range(0, 6));
        assertEquals(List.of(0L, 1L, 2L, 3L, 4L, 5L), readAll(reader));
        assertEquals("orders-0 offsets 6 to 9 are past the log's end, 6: it was truncated after the batch was "
                + "planned (an unclean leader election?)", reader.lost());
    }

    @Test
    void aRangeWhollyPastATruncatedLogsEndIsSkippedAndNamedATruncation() {
        MockConsumer<byte[], byte[]> c = consumer(0, 6);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 8, 10, POLL_TIMEOUT_MS, false);
        // What the broker answers a fetch past the log's end (reset policy none).
        c.setPollException(new OffsetOutOfRangeException("past the end", java.util.Map.of(TP, 8L)));
        assertEquals(List.of(), readAll(reader));
        assertEquals("orders-0 offsets 8 to 9 are past the log's end, 6: it was truncated after the batch was "
                + "planned (an unclean leader election?)", reader.lost());
    }

    @Test
    void withFailOnDataLossATruncatedRangeFailsTheRead() {
        MockConsumer<byte[], byte[]> c = consumer(0, 6);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, POLL_TIMEOUT_MS, true);
        add(c, range(0, 6));
        for (int i = 0; i < 6; i++) {
            assertEquals(i, reader.next().offset());
        }
        IllegalStateException e = assertThrows(IllegalStateException.class, reader::next);
        assertTrue(e.getMessage().startsWith("orders-0 offsets 6 to 9 are past the log's end, 6"), e.getMessage());
        assertTrue(e.getMessage().endsWith("(failOnDataLoss)"), e.getMessage());
    }

    @Test
    void offsetsATruncatedLogWroteAgainAreReadAsSparksReaderReadsThem() {
        // Truncated to 6, then the new leader took records 6-11: the range's offsets hold records again.
        MockConsumer<byte[], byte[]> c = consumer(0, 12);
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 0, 10, POLL_TIMEOUT_MS, false);
        add(c, range(0, 12));
        assertEquals(10, readAll(reader).size());
        assertNull(reader.lost());
    }

    // Spark's KafkaDataConsumer.getEarliestAvailableOffsetBetween (4.2.0), after an
    // OffsetOutOfRangeException at `offset`, skips the rest only when offset >= latest (or
    // earliest >= until); when the log holds `offset` again by the time it asks (a new leader
    // after an unclean election took more records meanwhile), it reads on from `offset`.
    @Test
    void offsetsTheLogHoldsAgainWhenAskedAfterAnOutOfRangeFetchAreRead() {
        MockConsumer<byte[], byte[]> c = consumer(0, 12); // the new leader's log has grown to 12
        SourceReader reader = new SourceReader("k", c, steppingClock());
        reader.start(TP, 8, 10, 120_000, false);
        // The fetch at 8 reached the new leader while its log still ended at 6.
        c.setPollException(new OffsetOutOfRangeException("past the end", Map.of(TP, 8L)));
        add(c, 8, 9, 10, 11);
        assertEquals(List.of(8L, 9L), readAll(reader));
        assertNull(reader.lost());
    }
}
