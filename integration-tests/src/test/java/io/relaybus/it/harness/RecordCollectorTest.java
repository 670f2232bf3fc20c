package io.relaybus.it.harness;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

class RecordCollectorTest {
  private static final TopicPartition BILLING = new TopicPartition("billing", 0);

  /**
   * Regression: the fault suite's exactly-once kill -9 scenario reported one duplicate that Kafka's
   * log held once: the verifier's consumer had read it twice, its position reset to the earliest
   * offset by a rebalance of its own group. A re-read record is not a duplicate.
   */
  @Test
  void aRecordReadAgainAfterThePositionWasResetIsCountedOnce() {
    MockConsumer<String, byte[]> consumer = new MockConsumer<>("earliest");
    try (RecordCollector collector = new RecordCollector(consumer, List.of("billing"))) {
      consumer.rebalance(List.of(BILLING));
      consumer.updateBeginningOffsets(Map.of(BILLING, 0L));
      consumer.addRecord(record(0, "e-1"));
      consumer.addRecord(record(1, "e-2"));
      assertThat(collector.drain(Duration.ZERO)).hasSize(2);

      // The same records again (a reset position), then a real second copy at a new offset.
      consumer.seek(BILLING, 0);
      consumer.addRecord(record(0, "e-1"));
      consumer.addRecord(record(1, "e-2"));
      consumer.addRecord(record(2, "e-1"));
      List<Received> received = collector.drain(Duration.ZERO);

      assertThat(received).extracting(Received::offset).containsExactly(0L, 1L, 2L);
      assertThat(collector.reread()).isEqualTo(2);
      assertThat(RecordCollector.duplicates(received))
          .singleElement()
          .extracting(Received::offset)
          .isEqualTo(2L);
    }
  }

  private static ConsumerRecord<String, byte[]> record(long offset, String eventId) {
    ConsumerRecord<String, byte[]> record =
        new ConsumerRecord<>(
            BILLING.topic(),
            BILLING.partition(),
            offset,
            "key-1",
            "{}".getBytes(StandardCharsets.UTF_8));
    record.headers().add("relaybus-event-id", eventId.getBytes(StandardCharsets.UTF_8));
    record.headers().add("relaybus-handler", "billing".getBytes(StandardCharsets.UTF_8));
    record.headers().add("relaybus-sequence", "1".getBytes(StandardCharsets.UTF_8));
    record.headers().add("relaybus-attempt", "1".getBytes(StandardCharsets.UTF_8));
    return record;
  }
}
