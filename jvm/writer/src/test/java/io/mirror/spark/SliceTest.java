package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

class SliceTest {
    private static MockProducer<byte[], byte[]> acking() {
        return new MockProducer<>(true, new ByteArraySerializer(), new ByteArraySerializer());
    }

    private static ConsumerRecord<byte[], byte[]> source(String topic, int partition, long offset, long ts, String key,
            String value, Header... headers) {
        return new ConsumerRecord<>(topic, partition, offset, ts, TimestampType.CREATE_TIME, -1, -1,
                key == null ? null : key.getBytes(StandardCharsets.UTF_8),
                value == null ? null : value.getBytes(StandardCharsets.UTF_8),
                new RecordHeaders(headers), Optional.empty());
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    @Test
    void copiesKeyValueHeadersAndCreateTimeToTheSamePartitionWithProvenanceLast() {
        MockProducer<byte[], byte[]> producer = acking();
        Slice slice = new Slice(Plans.plan(), "orders", 2, producer);
        Header own = new RecordHeaders().add("trace", "t1".getBytes(StandardCharsets.UTF_8)).lastHeader("trace");
        assertTrue(slice.send(source("orders", 2, 40, 1_700_000_000_000L, "k", "v", own)));
        assertTrue(slice.send(source("orders", 2, 41, 1_700_000_000_001L, null, null)));

        List<ProducerRecord<byte[], byte[]>> sent = producer.history();
        assertEquals(2, sent.size());
        ProducerRecord<byte[], byte[]> first = sent.get(0);
        assertEquals("src.orders", first.topic());
        assertEquals(2, first.partition());
        assertEquals(1_700_000_000_000L, first.timestamp());
        assertEquals("k", text(first.key()));
        assertEquals("v", text(first.value()));
        Header[] headers = first.headers().toArray();
        assertEquals(2, headers.length);
        assertEquals("trace", headers[0].key());
        assertEquals(Slice.HEADER_ORIGIN, headers[1].key());
        assertEquals("src/orders/2/40", text(headers[1].value()));
        assertNull(sent.get(1).key());
        assertNull(sent.get(1).value());

        ObjectNode answer = slice.finish(null);
        assertEquals("orders", answer.get("topic").asText());
        assertEquals(40, answer.get("first").asLong());
        assertEquals(42, answer.get("next").asLong());
        assertEquals(2, answer.get("produced").asLong());
        assertEquals(2, answer.get("bytes").asLong());
        assertEquals(1_700_000_000_001L, answer.get("max_ts").asLong());
        assertTrue(answer.get("placed").asBoolean());
        assertEquals("[[40,0]]", answer.get("syncs").toString()); // MockProducer numbers from 0
        assertFalse(answer.has("warning"));
        assertFalse(producer.closed());
    }

    @Test
    void theOffsetMapGetsAPairWhereverSourceAndTargetOffsetsStopMovingTogether() {
        Slice slice = new Slice(Plans.plan(), "orders", 0, acking());
        for (long offset : new long[] {10, 11, 12, 15, 16, 20}) { // 13-14, 17-19: markers, aborted records
            assertTrue(slice.send(source("orders", 0, offset, 1L, "k", "v")));
        }
        ObjectNode answer = slice.finish("orders-0 offsets 0 to 9 were deleted before they were read");
        assertEquals("[[10,0],[15,3],[20,5]]", answer.get("syncs").toString());
        assertEquals(21, answer.get("next").asLong());
        assertEquals("orders-0 offsets 0 to 9 were deleted before they were read", answer.get("warning").asText());
    }

    @Test
    void withoutProvenanceTheHeadersAreTheRecordsOwn() {
        MockProducer<byte[], byte[]> producer = acking();
        Slice slice = new Slice(Plans.withoutProvenance(), "orders", 0, producer);
        assertTrue(slice.send(source("orders", 0, 0, 5L, "k", "v")));
        assertEquals(0, producer.history().get(0).headers().toArray().length);
        assertEquals(1, slice.finish(null).get("produced").asLong());
    }

    @Test
    void timestampZeroIsLeftToTheProducerAsLibrdkafkaDoes() {
        MockProducer<byte[], byte[]> producer = acking();
        Slice slice = new Slice(Plans.plan(), "orders", 0, producer);
        assertTrue(slice.send(source("orders", 0, 0, 0L, "k", "v")));
        assertNull(producer.history().get(0).timestamp());
    }

    @Test
    void aNegativeTimestampFailsTheSliceBeforeItIsSent() {
        MockProducer<byte[], byte[]> producer = acking();
        Slice slice = new Slice(Plans.plan(), "orders", 0, producer);
        assertTrue(slice.send(source("orders", 0, 0, 5L, "k", "v")));
        assertFalse(slice.send(source("orders", 0, 1, -1L, "k", "v")));
        assertEquals(1, producer.history().size());
        ObjectNode answer = slice.finish(null);
        assertEquals("orders[0] offset 1 has timestamp -1, which the Java client cannot send", answer.get("failed").asText());
        assertFalse(answer.has("next"));
    }

    // The answer names the first error (the one the driver logs), not the closed producer's
    // refusal of the next send that it caused.
    @Test
    void aFailedSendStopsTheSliceAndItsAnswerNamesTheFirstError() {
        MockProducer<byte[], byte[]> producer = new MockProducer<>(false, new ByteArraySerializer(), new ByteArraySerializer());
        Slice slice = new Slice(Plans.plan(), "orders", 0, producer);
        assertTrue(slice.send(source("orders", 0, 0, 5L, "k", "v")));
        producer.errorNext(new IllegalStateException("NOT_LEADER"));
        assertFalse(slice.send(source("orders", 0, 1, 5L, "k", "v")), "the producer was closed at the first error");
        ObjectNode answer = slice.finish(null);
        assertEquals("java.lang.IllegalStateException: NOT_LEADER", answer.get("failed").asText());
        assertTrue(producer.closed());
    }

    @Test
    void anotherWriterOnTheTargetPartitionFailsTheSlice() {
        MockProducer<byte[], byte[]> producer = acking();
        Slice slice = new Slice(Plans.plan(), "orders", 0, producer);
        assertTrue(slice.send(source("orders", 0, 0, 5L, "k", "v")));
        producer.send(new ProducerRecord<>("src.orders", 0, null, new byte[0])); // not the slice's
        assertTrue(slice.send(source("orders", 0, 1, 5L, "k", "v")));
        ObjectNode answer = slice.finish(null);
        assertTrue(answer.get("failed").asText().contains("did not receive the batch contiguously"),
                answer.toString());
    }

    @Test
    void aSettledPartitionOrAFlowWithoutProvenanceIsProducedWithoutReadingTheTarget() {
        // A tail read would fail here: nothing listens at the plan's bootstrap address.
        assertNull(Slice.declined(Plans.plan(), "orders", 1, 500));
        assertNull(Slice.declined(Plans.withoutProvenance(), "orders", 0, 500));
    }

    @Test
    void aTopicWithoutARouteIsDeclined() {
        assertEquals("no route for source topic payments", Slice.declined(Plans.plan(), "payments", 0, 0));
    }

    private static ConsumerRecord<byte[], byte[]> tail(String provenance) {
        RecordHeaders headers = new RecordHeaders();
        if (provenance != null) {
            headers.add(Slice.HEADER_ORIGIN, provenance.getBytes(StandardCharsets.UTF_8));
        }
        return new ConsumerRecord<>("src.orders", 0, 99, 1L, TimestampType.CREATE_TIME, -1, -1, null, null, headers,
                Optional.empty());
    }

    @Test
    void anEmptyTargetOrOneEndingInAnEarlierRecordsCopyLetsTheSliceProduce() {
        assertNull(Slice.declinedAfter(null, "src.orders", "src/orders/", 0, 500));
        assertNull(Slice.declinedAfter(tail("src/orders/0/499"), "src.orders", "src/orders/", 0, 500));
    }

    @Test
    void aTargetThatMayHoldPartOfTheSliceDeclinesIt() {
        String[] tails = {"src/orders/0/500", "src/orders/0/900", "src/orders/1/10", "src/users/0/10", "src/orders/0/x", null};
        for (String provenance : tails) {
            String why = Slice.declinedAfter(tail(provenance), "src.orders", "src/orders/", 0, 500);
            assertEquals("the last record of src.orders[0] (provenance " + provenance
                    + ") may be a copy of this slice, which starts at offset 500", why);
        }
    }

    @Test
    void theProvenanceValueIsClusterTopicPartitionOffset() {
        MockProducer<byte[], byte[]> producer = acking();
        new Slice(Plans.plan(), "users", 7, producer).send(source("users", 7, 123456789012L, 5L, "k", "v"));
        assertArrayEquals("src/users/7/123456789012".getBytes(StandardCharsets.UTF_8),
                producer.history().get(0).headers().lastHeader(Slice.HEADER_ORIGIN).value());
    }
}
