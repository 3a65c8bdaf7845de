package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

class AcksTest {
    private static final TopicPartition TP = new TopicPartition("src.orders", 0);

    private static MockProducer<byte[], byte[]> manual() {
        return new MockProducer<>(false, new ByteArraySerializer(), new ByteArraySerializer());
    }

    private static RecordMetadata at(long offset) {
        return new RecordMetadata(TP, offset, 0, 0L, 0, 0);
    }

    private static void send(MockProducer<byte[], byte[]> producer, Acks acks, long index) {
        producer.send(new ProducerRecord<>(TP.topic(), TP.partition(), null, new byte[] {(byte) index}), acks.callback(index));
    }

    @Test
    void waitsForItsOwnRecordsAndPlacesTheSliceAtTheFirstOnesOffset() {
        MockProducer<byte[], byte[]> producer = manual();
        Acks acks = new Acks(producer);
        // Another task's record on the same shared producer, acknowledged first.
        producer.send(new ProducerRecord<>("src.users", 0, null, new byte[0]));
        for (long i = 0; i < 3; i++) {
            send(producer, acks, i);
        }
        while (producer.completeNext()) {
            // every send acknowledged, in order
        }
        assertNull(acks.await(3, 5_000));
        assertEquals(0, acks.firstOffset()); // MockProducer numbers each partition from 0
        assertTrue(acks.contiguous());
        assertFalse(producer.closed());
    }

    @Test
    void aSliceWhoseOffsetsAreNotConsecutiveIsNotContiguous() {
        Acks acks = new Acks(manual());
        acks.callback(0).onCompletion(at(100), null);
        acks.callback(1).onCompletion(at(101), null);
        acks.callback(2).onCompletion(at(105), null); // another producer wrote in between
        assertNull(acks.await(3, 5_000));
        assertEquals(100, acks.firstOffset());
        assertFalse(acks.contiguous());
    }

    @Test
    void anAcknowledgementWithoutAnOffsetLeavesTheSliceUnplaced() {
        Acks acks = new Acks(manual());
        acks.callback(0).onCompletion(at(7), null);
        acks.callback(1).onCompletion(at(-1), null);
        assertNull(acks.await(2, 5_000));
        assertEquals(-1, acks.firstOffset());
        assertTrue(acks.contiguous());
    }

    @Test
    void theFirstErrorIsKeptAndDiscardsTheSharedProducerAtOnce() {
        MockProducer<byte[], byte[]> producer = manual();
        Acks acks = new Acks(producer);
        send(producer, acks, 0);
        send(producer, acks, 1);
        producer.errorNext(new IllegalStateException("first"));
        assertTrue(producer.closed(), "closed from the callback, before it could send the successors again");
        acks.callback(1).onCompletion(null, new IllegalStateException("second"));
        assertEquals("java.lang.IllegalStateException: first", acks.await(2, 5_000));
        assertEquals("java.lang.IllegalStateException: first", acks.error());
    }

    @Test
    void recordsNeverAcknowledgedTimeOutWithTheirCount() {
        MockProducer<byte[], byte[]> producer = manual();
        Acks acks = new Acks(producer);
        send(producer, acks, 0);
        send(producer, acks, 1);
        producer.completeNext();
        assertEquals("the target did not acknowledge 1 records within 20 ms", acks.await(2, 20));
    }
}
