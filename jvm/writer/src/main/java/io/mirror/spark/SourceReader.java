package io.mirror.spark;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Collections;
import java.util.List;
import java.util.function.LongSupplier;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.TopicPartition;

/**
 * One source partition's offset range [from, until) read by a raw Java consumer, as Spark's
 * Kafka source would read it for the same batch: the consumer is built from the batch's own
 * executor parameters (bootstrap, security, isolation level: read_committed skips aborted
 * records and transaction markers), and a record retention deleted before it was read, or
 * that a truncated log (an unclean leader election) no longer has, is skipped with
 * failOnDataLoss false, or fails the slice with it true (the Python path's Spark reader then
 * fails the query as the option says).
 *
 * A reader is kept between batches ({@link SourceReaders}): the next batch of the same
 * partition usually starts where this range ended, and then continues with the records the
 * consumer already fetched past it, without a seek (which would drop them).
 */
final class SourceReader {
    private static final long POLL_MS = 100;
    /** With no record for this long, ask whether the range can still be read (its end may be gone). */
    private static final long STALL_CHECK_MS = 1_000;
    /** Why offsets below the log's start are gone. */
    private static final String DELETED = " were deleted before they were read";

    final String key;
    private final Consumer<byte[], byte[]> consumer;
    private final LongSupplier clock;
    private TopicPartition tp;
    /** Records fetched but not yet handed out, in offset order. */
    private final ArrayDeque<ConsumerRecord<byte[], byte[]>> buffered = new ArrayDeque<>();
    /** Where the last range ended cleanly (the consumer and the buffer continue from there); -1: nowhere. */
    private long endedAt = -1;
    private long next, until, pollTimeoutMs, lastProgress;
    private boolean failOnDataLoss;
    private String lost;
    long idleSince;

    /** A reader on {@code consumer}, timing its stalls by {@code clock} (ms). */
    SourceReader(String key, Consumer<byte[], byte[]> consumer, LongSupplier clock) {
        this.key = key;
        this.consumer = consumer;
        this.clock = clock;
    }

    /** Whether the range of {@code tp} starting at {@code from} continues this reader's last range. */
    boolean continues(TopicPartition tp, long from) {
        return tp.equals(this.tp) && endedAt == from;
    }

    /** Start reading [from, until) of {@code tp}. */
    void start(TopicPartition tp, long from, long until, long pollTimeoutMs, boolean failOnDataLoss) {
        if (!continues(tp, from)) {
            buffered.clear();
            if (!tp.equals(this.tp)) {
                consumer.assign(Collections.singletonList(tp));
                this.tp = tp;
            }
            consumer.seek(tp, from);
        }
        endedAt = -1;
        this.next = from;
        this.until = until;
        this.pollTimeoutMs = pollTimeoutMs;
        this.failOnDataLoss = failOnDataLoss;
        this.lost = null;
        this.lastProgress = clock.getAsLong();
    }

    /**
     * The range's next record, or null once it is read. Throws when it cannot be read as
     * Spark's source would (data lost with failOnDataLoss, no progress within the source's
     * poll timeout, the task killed).
     */
    ConsumerRecord<byte[], byte[]> next() {
        while (true) {
            ConsumerRecord<byte[], byte[]> r = buffered.peekFirst();
            if (r != null) {
                if (r.offset() >= until) {
                    return done();
                }
                buffered.pollFirst();
                if (r.offset() < next) {
                    continue; // not expected: the consumer gave an offset twice
                }
                next = r.offset() + 1;
                return r;
            }
            // Nothing buffered: the consumer's position is past everything handed out or
            // skipped (transaction markers, aborted records under read_committed).
            if (next >= until || consumer.position(tp) >= until) {
                return done();
            }
            if (Thread.currentThread().isInterrupted() || killed()) {
                throw new IllegalStateException("the task was killed");
            }
            List<ConsumerRecord<byte[], byte[]>> got = poll();
            if (!got.isEmpty()) {
                buffered.addAll(got);
                lastProgress = clock.getAsLong();
            } else if (stalled()) {
                return done();
            }
        }
    }

    /** What the range lost to retention (or a truncated log) before it was read; null: nothing. */
    String lost() {
        return lost;
    }

    private ConsumerRecord<byte[], byte[]> done() {
        endedAt = until;
        return null;
    }

    private List<ConsumerRecord<byte[], byte[]>> poll() {
        try {
            return consumer.poll(Duration.ofMillis(POLL_MS)).records(tp);
        } catch (OffsetOutOfRangeException e) {
            // The consumer's reset policy is "none" (Spark's executor parameters): its
            // position is below the log start (retention deleted it) or past the log end.
            // As Spark's KafkaDataConsumer (getEarliestAvailableOffsetBetween): what lies past
            // the end is skipped only when the log, asked now, still ends at or below the
            // position; a log that holds it again (a new leader after an unclean election took
            // more records meanwhile) is read on from there.
            long position = consumer.position(tp);
            long start = consumer.beginningOffsets(Collections.singletonList(tp)).get(tp);
            if (position < start) {
                skipLost(position, Math.min(start, until), DELETED);
                return Collections.emptyList();
            }
            long end = consumer.endOffsets(Collections.singletonList(tp)).get(tp);
            if (position >= end) {
                skipLost(position, until, truncated(end));
            } else {
                consumer.seek(tp, position);
            }
            return Collections.emptyList();
        }
    }

    /**
     * After a poll with nothing: whether the range's rest is gone (the log ends before it, as
     * read at this isolation level). True once skipped; throws after the poll timeout.
     */
    private boolean stalled() {
        long quiet = clock.getAsLong() - lastProgress;
        if (quiet < STALL_CHECK_MS) {
            return false;
        }
        long position = consumer.position(tp);
        long end = consumer.endOffsets(Collections.singletonList(tp)).get(tp);
        if (end <= position && end < until) {
            skipLost(position, until, truncated(end));
            return true;
        }
        if (quiet >= pollTimeoutMs) {
            throw new IllegalStateException("no record of " + tp + " from offset " + position + " within "
                    + pollTimeoutMs + " ms (the range ends at " + until + ")");
        }
        return false;
    }

    /**
     * Offsets [from, to) are no longer in the log ({@code why}: {@link #DELETED} or
     * {@link #truncated}): skipped, or fail as failOnDataLoss says, as Spark's reader treats
     * both. Only the part within this range is named: a reader continuing from a range that
     * ended in lost offsets still has its consumer there, below this range's start.
     */
    private void skipLost(long from, long to, String why) {
        long first = Math.max(from, next);
        if (first < to) {
            String what = tp + " offsets " + first + " to " + (to - 1) + why;
            if (failOnDataLoss) {
                throw new IllegalStateException(what + " (failOnDataLoss)");
            }
            lost = lost == null ? what : lost + "; " + what;
        }
        long resume = Math.max(to, next);
        if (resume < until) {
            consumer.seek(tp, resume);
        }
        next = resume;
        lastProgress = clock.getAsLong();
    }

    /**
     * Why offsets past the log's {@code end} are gone: the log ended past them when Spark planned
     * the range, so it was truncated since (a leader elected uncleanly, without them). Offsets the
     * new leader wrote again meanwhile are read as they are now, as Spark's reader reads them.
     */
    private static String truncated(long end) {
        return " are past the log's end, " + end + ": it was truncated after the batch was planned"
                + " (an unclean leader election?)";
    }

    private static boolean killed() {
        org.apache.spark.TaskContext ctx = org.apache.spark.TaskContext.get();
        return ctx != null && ctx.isInterrupted();
    }

    /**
     * Closes the consumer, never throwing: it is called in a task's {@code finally} and by the
     * idle cache, and an exception here (kafka-clients rethrows an interrupt from close) would
     * leave the task before its slice's sends are awaited, so a retried attempt could hand the
     * partition to the Python path while those sends still land.
     */
    void close() {
        try {
            consumer.close(Duration.ZERO);
        } catch (RuntimeException e) {
            org.slf4j.LoggerFactory.getLogger(SourceReader.class).warn("closing a source reader: " + e); // not its key: that holds the credentials
        }
    }
}
