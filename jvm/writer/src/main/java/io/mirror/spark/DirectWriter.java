package io.mirror.spark;

import java.util.Collections;
import java.util.Iterator;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.kafka010.KafkaBatchInputPartition;
import org.apache.spark.sql.kafka010.KafkaOffsetRange;

/**
 * One task: one source partition's offset range of the batch, as Spark's Kafka source planned
 * it ({@link BatchRanges}), read by the executor's own consumer ({@link SourceReader}) and
 * produced as a {@link Slice}: each record's key, value and headers go from the fetched
 * record to the producer as they are, with no row in between.
 *
 * A range that holds no record to copy (aborted transactions, markers) answers nothing, as a
 * Spark partition without rows did; one whose records retention deleted answers the warning
 * only (the driver logs it).
 */
final class DirectWriter implements FlatMapFunction<Iterator<KafkaBatchInputPartition>, String> {
    private static final long serialVersionUID = 1L;

    private final WriterPlan plan;

    DirectWriter(WriterPlan plan) {
        this.plan = plan;
    }

    @Override
    public Iterator<String> call(Iterator<KafkaBatchInputPartition> parts) {
        if (!parts.hasNext()) {
            return Collections.emptyIterator();
        }
        KafkaBatchInputPartition part = parts.next();
        KafkaOffsetRange range = part.offsetRange();
        String topic = range.topic();
        int partition = range.partition();
        String declined = Slice.declined(plan, topic, partition, range.fromOffset());
        if (declined != null) {
            return one(Slice.answer(topic, partition, range.fromOffset()).put("declined", declined).toString());
        }
        SourceReader reader = SourceReaders.borrow(part.executorKafkaParams(), range.topicPartition(), range.fromOffset());
        Slice slice = null;
        boolean clean = false;
        String lost = null;
        try {
            reader.start(range.topicPartition(), range.fromOffset(), range.untilOffset(), part.pollTimeoutMs(),
                    part.failOnDataLoss());
            for (ConsumerRecord<byte[], byte[]> r = reader.next(); r != null; r = reader.next()) {
                slice = slice == null ? new Slice(plan, topic, partition) : slice;
                if (!slice.send(r)) {
                    break;
                }
            }
            // Read before the reader goes back: another task may borrow it at once.
            lost = reader.lost();
            clean = true;
        } catch (RuntimeException e) {
            String why = "reading " + range.topicPartition() + " [" + range.fromOffset() + ", " + range.untilOffset()
                    + ") stopped: " + e;
            if (slice == null) {
                return one(Slice.answer(topic, partition, range.fromOffset()).put("failed", why).toString());
            }
            slice.fail(why);
        } finally {
            if (clean) {
                // A slice stopped by a failed send left its range unfinished: the reader's next range seeks.
                SourceReaders.release(reader);
            } else {
                reader.close();
            }
        }
        if (slice != null) {
            return one(slice.finish(lost).toString());
        }
        // Nothing to copy. Where retention deleted the range's records, say so: no result carries it.
        return lost == null
                ? Collections.emptyIterator()
                : one(Slice.answer(topic, partition, range.fromOffset()).put("warning", lost).toString());
    }

    private static Iterator<String> one(String answer) {
        return Collections.singletonList(answer).iterator();
    }
}
