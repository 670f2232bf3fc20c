package io.relaybus.it.harness;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/** What a consumer saw of one record: where, the key, and the connector's headers. */
public record Received(
    String topic,
    int partition,
    long offset,
    String key,
    String eventId,
    String handler,
    Long sequence,
    int attempt,
    long timestamp) {

  public static Received of(ConsumerRecord<String, byte[]> record) {
    String sequence = header(record, "relaybus-sequence");
    return new Received(
        record.topic(),
        record.partition(),
        record.offset(),
        record.key(),
        header(record, "relaybus-event-id"),
        header(record, "relaybus-handler"),
        sequence == null ? null : Long.parseLong(sequence),
        Integer.parseInt(header(record, "relaybus-attempt")),
        record.timestamp());
  }

  /** The (event, handler) pair: what must arrive exactly once. */
  public String pair() {
    return eventId + "/" + handler;
  }

  private static String header(ConsumerRecord<String, byte[]> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
  }
}
