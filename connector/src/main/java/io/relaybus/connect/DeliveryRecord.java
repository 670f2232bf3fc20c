package io.relaybus.connect;

import io.relaybus.store.DeliveryToken;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.header.Headers;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * A record that remembers the claim it came from. Connect hands {@code commitRecord} the record
 * exactly as {@code poll()} returned it (before transforms), so the acknowledgement finds its
 * {@link DeliveryToken} without a lookup table.
 */
final class DeliveryRecord extends SourceRecord {
  private final DeliveryToken token;

  DeliveryRecord(
      DeliveryToken token,
      Map<String, ?> sourcePartition,
      Map<String, ?> sourceOffset,
      String topic,
      Schema keySchema,
      Object key,
      Schema valueSchema,
      Object value,
      Long timestamp,
      Headers headers) {
    super(
        sourcePartition,
        sourceOffset,
        topic,
        null,
        keySchema,
        key,
        valueSchema,
        value,
        timestamp,
        headers);
    this.token = token;
  }

  /** The same record with another source offset. */
  DeliveryRecord withOffset(Map<String, ?> sourceOffset) {
    return new DeliveryRecord(
        token,
        sourcePartition(),
        sourceOffset,
        topic(),
        keySchema(),
        key(),
        valueSchema(),
        value(),
        timestamp(),
        headers());
  }

  DeliveryToken token() {
    return token;
  }

  @Override
  public boolean equals(Object o) {
    return super.equals(o) && o instanceof DeliveryRecord r && token.equals(r.token);
  }

  @Override
  public int hashCode() {
    return 31 * super.hashCode() + token.hashCode();
  }
}
