package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.junit.jupiter.api.Test;

/** Review of the jvm branch: cases where the reader parts from Spark's KafkaDataConsumer. */
class SourceReaderReviewTest {
    private static final long POLL_TIMEOUT_MS = 120_000;

    // Spark's KafkaDataConsumer.getEarliestAvailableOffsetBetween (4.2.0), after an
    // OffsetOutOfRangeException at `offset`: skips the rest only when offset >= latest (or
    // earliest >= until); when the log holds `offset` again by the time it asks (a new leader
    // after an unclean election took more records meanwhile), it reads on from `offset`.
    // SourceReader.poll skips [position, until) whenever position >= the log start, without
    // looking at the end it then names: offsets 8-9 hold records and are lost, and the
    // warning says they are "past the log's end, 12".
    @Test
    void offsetsTheLogHoldsAgainWhenAskedAfterAnOutOfRangeFetchAreRead() {
        MockConsumer<byte[], byte[]> c = SourceReaderTest.consumer(0, 12); // the new leader's log has grown to 12
        SourceReader reader = new SourceReader("k", c, SourceReaderTest.steppingClock());
        reader.start(SourceReaderTest.TP, 8, 10, POLL_TIMEOUT_MS, false);
        // The fetch at 8 reached the new leader while its log still ended at 6.
        c.setPollException(new OffsetOutOfRangeException("past the end", Map.of(SourceReaderTest.TP, 8L)));
        SourceReaderTest.add(c, 8, 9, 10, 11);
        assertEquals(List.of(8L, 9L), SourceReaderTest.readAll(reader));
        assertNull(reader.lost());
    }
}
