package io.mirror.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** What a batch's task answers add to the query's numInputRows (MirrorWriter.inputRows). */
class MirrorWriterTest {
    private static List<JsonNode> answers(String... json) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        List<JsonNode> out = new ArrayList<>();
        for (String j : json) {
            out.add(mapper.readTree(j));
        }
        return out;
    }

    @Test
    void aBatchTheWriterProducedWholeCountsTheRecordsItsTasksRead() throws Exception {
        assertEquals(1_500, MirrorWriter.inputRows(answers(
                "{\"topic\": \"orders\", \"partition\": 0, \"first\": 0, \"next\": 1000, \"produced\": 1000}",
                "{\"topic\": \"orders\", \"partition\": 1, \"first\": 0, \"next\": 500, \"produced\": 500}",
                // retention took this range whole: nothing read, nothing counted
                "{\"topic\": \"orders\", \"partition\": 2, \"first\": 0, \"warning\": \"orders-2 offsets 0 to 9 were deleted\"}")));
    }

    // Carried gap (b): on a mixed batch (a task declined or failed) the Python tasks read the
    // rest from the batch's own scan, which reads every range (a filter on the scan's rows) and
    // counts each record in numInputRows: the writer's count would count its records twice.
    @Test
    void aBatchPartlyLeftToThePythonTasksIsCountedByTheirScanAlone() throws Exception {
        assertEquals(0, MirrorWriter.inputRows(answers(
                "{\"topic\": \"orders\", \"partition\": 0, \"first\": 0, \"next\": 1000, \"produced\": 1000}",
                "{\"topic\": \"orders\", \"partition\": 1, \"first\": 0, \"declined\": \"a retried task\"}")));
        assertEquals(0, MirrorWriter.inputRows(answers(
                "{\"topic\": \"orders\", \"partition\": 0, \"first\": 0, \"next\": 1000, \"produced\": 1000}",
                "{\"topic\": \"orders\", \"partition\": 1, \"first\": 0, \"failed\": \"NOT_LEADER\"}")));
    }
}
