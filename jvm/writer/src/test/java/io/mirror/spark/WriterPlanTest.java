package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.Map;
import org.junit.jupiter.api.Test;

class WriterPlanTest {
    @Test
    void parsesWhatTheDriverDecided() {
        WriterPlan plan = Plans.plan();
        assertEquals("f", plan.flow);
        assertEquals("mirror-f", plan.query);
        assertEquals(Map.of("bootstrap.servers", "127.0.0.1:9", "enable.idempotence", "true", "linger.ms", "5"),
                plan.producer);
        assertEquals("mirror-spark-f-tail", plan.consumer.get("client.id"));
        assertEquals(Map.of("orders", "src.orders", "users", "src.users"), plan.targets);
        assertEquals("src/orders/", plan.origins.get("orders"));
        assertEquals(30_000, plan.ackTimeoutMs);
    }

    @Test
    void aTargetTopicWithoutItsOwnBatchSizeGetsTheFlowsDefault() {
        WriterPlan plan = Plans.plan();
        assertEquals(65_536, plan.batchSize("src.orders"));
        assertEquals(1_048_576, plan.batchSize("src.users"));
    }

    @Test
    void settledPartitionsAreKeyedByTopicAndPartition() {
        WriterPlan plan = Plans.plan();
        assertTrue(plan.settled.contains(WriterPlan.key("orders", 1)));
        assertEquals(1, plan.settled.size());
        // The key cannot be confused across a topic name that ends in digits.
        assertTrue(!WriterPlan.key("orders1", 1).equals(WriterPlan.key("orders", 11)));
    }

    @Test
    void provenanceOffMeansNoOrigins() {
        assertTrue(Plans.withoutProvenance().origins.isEmpty());
    }

    @Test
    void survivesJavaSerializationAsItIsShippedWithEachTask() throws Exception {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
            out.writeObject(Plans.plan());
        }
        WriterPlan back;
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray()))) {
            back = (WriterPlan) in.readObject();
        }
        assertEquals(Plans.plan().targets, back.targets);
        assertEquals(Plans.plan().settled, back.settled);
        assertEquals(65_536, back.batchSize("src.orders"));
    }

    @Test
    void anUnreadablePlanIsRefusedWithTheParsersReason() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> WriterPlan.parse("{not json"));
        assertTrue(e.getMessage().startsWith("unreadable writer plan: "), e.getMessage());
    }
}
