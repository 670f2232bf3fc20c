package io.relaybus.inbox.kafka;

import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * Reads an {@link InboxMessage} from a record the connector wrote: event id and type from its
 * headers, key and value as the bytes Kafka holds (the key decoded as UTF-8, as the connector's
 * string key format writes it), the event's own headers (those without the connector's prefix).
 */
final class KafkaMessages {
  /** The event's own header a producer may set to say what its payload is. */
  static final String CONTENT_TYPE_HEADER = "content-type";

  private final RecordHeaders names;

  KafkaMessages(RecordHeaders names) {
    this.names = names;
  }

  static String origin(ConsumerRecord<?, ?> record) {
    return "kafka " + record.topic() + "-" + record.partition() + "@" + record.offset();
  }

  /**
   * @throws PoisonMessageException when the record has no event id header, or what it carries
   *     breaks the outbox's rules
   */
  InboxMessage read(ConsumerRecord<byte[], byte[]> record) {
    String origin = origin(record);
    String eventId = header(record, names.eventId());
    if (eventId == null) {
      throw new PoisonMessageException(
          ("record %s has no '%s' header, so the inbox cannot tell which event it is: it was not"
                  + " written by the relaybus connector, or the connector's header.prefix is not"
                  + " '%s'")
              .formatted(origin, names.eventId(), names.prefix()));
    }
    String type = header(record, names.eventType());
    Map<String, String> own = new LinkedHashMap<>();
    for (Header header : record.headers()) {
      if (!names.isConnectorHeader(header.key()) && header.value() != null) {
        own.put(header.key(), new String(header.value(), StandardCharsets.UTF_8));
      }
    }
    // The connector's header (the event's content type as published), else the event's own.
    String contentType = header(record, names.contentType());
    if (contentType == null) {
      contentType = own.get(CONTENT_TYPE_HEADER);
    }
    byte[] key = record.key();
    return new InboxMessage(
        eventId,
        type == null ? InboxMessage.UNKNOWN_TYPE : type,
        key == null || key.length == 0 ? null : new String(key, StandardCharsets.UTF_8),
        record.value() == null ? new byte[0] : record.value(),
        contentType == null ? InboxMessage.DEFAULT_CONTENT_TYPE : contentType,
        own,
        origin);
  }

  private static String header(ConsumerRecord<?, ?> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null || header.value() == null
        ? null
        : new String(header.value(), StandardCharsets.UTF_8);
  }
}
