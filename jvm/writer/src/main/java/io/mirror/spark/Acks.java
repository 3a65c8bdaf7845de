package io.mirror.spark;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.Producer;

/**
 * One task's acknowledgements on a producer other tasks share: it waits for its own records
 * only. The first error discards the producer at once, from the callback (the producer's I/O
 * thread, before it sends again): the broker refuses the failed batch's successors already in
 * flight as out of sequence (idempotence), and the closed producer never sends them again
 * re-sequenced, so what landed is a prefix of the slice (librdkafka's gapless guarantee).
 */
final class Acks {
    private final Producer<byte[], byte[]> producer;
    private long done;
    private long firstOffset = Long.MIN_VALUE;
    private boolean contiguous = true;
    private volatile String error;

    Acks(Producer<byte[], byte[]> producer) {
        this.producer = producer;
    }

    Callback callback(long index) {
        return (metadata, exception) -> {
            boolean discard = false;
            synchronized (this) {
                if (exception != null) {
                    discard = error == null;
                    if (discard) {
                        error = exception.toString();
                    }
                } else if (index == 0) {
                    firstOffset = metadata.hasOffset() ? metadata.offset() : -1;
                } else if (firstOffset >= 0 && (!metadata.hasOffset() || metadata.offset() != firstOffset + index)) {
                    contiguous = metadata.hasOffset() ? false : contiguous;
                    if (!metadata.hasOffset()) {
                        firstOffset = -1; // delivered, its offset unknown: the slice is not placed
                    }
                }
                done++;
                notifyAll();
            }
            if (discard) {
                Clients.discard(producer);
            }
        };
    }

    String error() {
        return error;
    }

    /** Wait until the first {@code sent} records are acknowledged; the failure, or null. */
    synchronized String await(long sent, long timeoutMs) {
        long deadline = System.currentTimeMillis() + timeoutMs;
        try {
            while (done < sent) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) {
                    return "the target did not acknowledge " + (sent - done) + " records within " + timeoutMs + " ms";
                }
                wait(left);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "interrupted while waiting for acknowledgements";
        }
        return error;
    }

    synchronized long firstOffset() {
        return firstOffset == Long.MIN_VALUE ? -1 : firstOffset;
    }

    synchronized boolean contiguous() {
        return contiguous;
    }
}
