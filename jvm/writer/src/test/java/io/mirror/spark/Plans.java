package io.mirror.spark;

/** Writer plans as mirror.spark.jvm.batch_plan writes them, for the tests. */
final class Plans {
    private Plans() {}

    /** Flow "f" from cluster "src": orders -> src.orders (provenance on), settled: orders[1]. */
    static final String JSON = "{\"flow\": \"f\", \"query\": \"mirror-f\","
            + " \"producer\": {\"bootstrap.servers\": \"127.0.0.1:9\", \"enable.idempotence\": \"true\", \"linger.ms\": \"5\"},"
            + " \"consumer\": {\"bootstrap.servers\": \"127.0.0.1:9\", \"client.id\": \"mirror-spark-f-tail\"},"
            + " \"targets\": {\"orders\": \"src.orders\", \"users\": \"src.users\"},"
            + " \"origins\": {\"orders\": \"src/orders/\", \"users\": \"src/users/\"},"
            + " \"batch_size\": 1048576, \"batch_sizes\": {\"src.orders\": 65536},"
            + " \"settled\": [[\"orders\", 1]], \"ack_timeout_ms\": 30000}";

    static WriterPlan plan() {
        return WriterPlan.parse(JSON);
    }

    /** The same flow with provenance headers off (no origins). */
    static WriterPlan withoutProvenance() {
        return WriterPlan.parse(JSON.replace("\"origins\": {\"orders\": \"src/orders/\", \"users\": \"src/users/\"}",
                "\"origins\": {}"));
    }
}
