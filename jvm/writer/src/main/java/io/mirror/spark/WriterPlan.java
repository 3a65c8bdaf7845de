package io.mirror.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * What every task of one batch needs, built by the driver from the plan's JSON
 * (mirror.spark.jvm.writer_plan) and shipped to the executors with the task.
 *
 * The Python driver decided everything that needs the flow's config (routes, provenance,
 * producer settings in the Java client's names, batch sizes per target topic): the tasks only
 * copy records, so the two paths cannot drift apart on policy.
 */
final class WriterPlan implements Serializable {
    private static final long serialVersionUID = 1L;

    final String flow;
    /** The name of the flow's streaming query (its batches' ranges are found by it). */
    final String query;
    /** Java producer settings (bootstrap, security, tuning), without batch.size. */
    final Map<String, String> producer;
    /** Java consumer settings for reading a target partition's last record. */
    final Map<String, String> consumer;
    /** Source topic -> target topic. */
    final Map<String, String> targets;
    /** Source topic -> "cluster/topic/" (provenance on), absent when provenance is off. */
    final Map<String, String> origins;
    /** Target topic -> batch.size fitting its max.message.bytes. */
    final Map<String, Integer> batchSizes;
    final int defaultBatchSize;
    /** "topic\0partition" of the partitions whose earlier batch in this query completed. */
    final Set<String> settled;
    final long ackTimeoutMs;

    private WriterPlan(JsonNode n) {
        flow = n.get("flow").asText();
        query = n.get("query").asText();
        producer = strings(n.get("producer"));
        consumer = strings(n.get("consumer"));
        targets = strings(n.get("targets"));
        origins = strings(n.get("origins"));
        batchSizes = new HashMap<>();
        for (Map.Entry<String, JsonNode> e : n.get("batch_sizes").properties()) {
            batchSizes.put(e.getKey(), e.getValue().asInt());
        }
        defaultBatchSize = n.get("batch_size").asInt();
        settled = new HashSet<>();
        for (JsonNode p : n.get("settled")) {
            settled.add(key(p.get(0).asText(), p.get(1).asInt()));
        }
        ackTimeoutMs = n.get("ack_timeout_ms").asLong();
    }

    static WriterPlan parse(String json) {
        try {
            return new WriterPlan(new ObjectMapper().readTree(json));
        } catch (IOException e) {
            throw new IllegalArgumentException("unreadable writer plan: " + e.getMessage(), e);
        }
    }

    static String key(String topic, int partition) {
        return topic + "\0" + partition;
    }

    int batchSize(String targetTopic) {
        return batchSizes.getOrDefault(targetTopic, defaultBatchSize);
    }

    private static Map<String, String> strings(JsonNode n) {
        Map<String, String> out = new HashMap<>();
        if (n != null) {
            for (Map.Entry<String, JsonNode> e : n.properties()) {
                out.put(e.getKey(), e.getValue().asText());
            }
        }
        return out;
    }
}
