package io.mirror.spark;

import java.lang.reflect.Constructor;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.ClientUtils;
import org.apache.kafka.clients.KafkaClient;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.internals.ProducerInterceptors;
import org.apache.kafka.clients.producer.internals.ProducerMetadata;
import org.apache.kafka.common.internals.ClusterResourceListeners;
import org.apache.kafka.common.requests.MetadataRequest;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.LogContext;
import org.apache.kafka.common.utils.Time;

/**
 * Java producers that never ask a broker to create a topic, as the Python tasks' producers
 * (librdkafka's allow.auto.create.topics=false).
 *
 * The Java producer has no such setting (kafka-clients 3.9: its metadata requests always allow
 * auto-creation), so on a broker with auto.create.topics.enable (Kafka's default) a target topic
 * deleted while a task sends to it would come back at once with the broker's default partition
 * count and configs, before the driver saw it gone and created it as the mirror does. These
 * producers keep the client's own metadata handling and only send its requests with
 * auto-creation off: a deleted topic stays unknown, the task's records wait or fail, and the
 * driver recreates the topic from the source's. Built through the client's own constructor
 * that takes the metadata (package-private, so by reflection: the writer's jar may be loaded
 * apart from kafka-clients'); the build compiles against the kafka-clients Spark ships.
 */
final class Producers {
    private Producers() {}

    static KafkaProducer<byte[], byte[]> create(Map<String, Object> settings) {
        Map<String, Object> props = new TreeMap<>(settings);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        ProducerConfig config = new ProducerConfig(props);
        ProducerMetadata metadata = new NoTopicCreation(
                config.getLong(ProducerConfig.RETRY_BACKOFF_MS_CONFIG),
                config.getLong(ProducerConfig.RETRY_BACKOFF_MAX_MS_CONFIG),
                config.getLong(ProducerConfig.METADATA_MAX_AGE_CONFIG),
                config.getLong(ProducerConfig.METADATA_MAX_IDLE_CONFIG),
                new LogContext("[mirror writer producer] "),
                new ClusterResourceListeners(),
                Time.SYSTEM);
        metadata.bootstrap(ClientUtils.parseAndValidateAddresses(config));
        try {
            @SuppressWarnings({"unchecked", "rawtypes"})
            Constructor<KafkaProducer<byte[], byte[]>> make = (Constructor) KafkaProducer.class.getDeclaredConstructor(
                    ProducerConfig.class, Serializer.class, Serializer.class, ProducerMetadata.class,
                    KafkaClient.class, ProducerInterceptors.class, Time.class);
            make.setAccessible(true);
            return make.newInstance(
                    config, new ByteArraySerializer(), new ByteArraySerializer(), metadata, null, null, Time.SYSTEM);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("cannot build a Java producer that never creates topics "
                    + "(a kafka-clients other than the one the writer was built against?): " + e, e);
        }
    }

    /** The producer's metadata, asked for with auto-creation off. */
    static final class NoTopicCreation extends ProducerMetadata {
        NoTopicCreation(long backoffMs, long backoffMaxMs, long maxAgeMs, long maxIdleMs, LogContext log,
                ClusterResourceListeners listeners, Time time) {
            super(backoffMs, backoffMaxMs, maxAgeMs, maxIdleMs, log, listeners, time);
        }

        @Override
        public synchronized MetadataRequest.Builder newMetadataRequestBuilder() {
            return new MetadataRequest.Builder(super.newMetadataRequestBuilder().topics(), false);
        }

        @Override
        public synchronized MetadataRequest.Builder newMetadataRequestBuilderForNewTopics() {
            return new MetadataRequest.Builder(super.newMetadataRequestBuilderForNewTopics().topics(), false);
        }
    }
}
