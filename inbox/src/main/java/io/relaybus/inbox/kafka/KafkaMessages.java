package io.relaybus.inbox.kafka;

import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.store.RecordHeaders;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * Reads an {@link InboxMessage} from a record the connector wrote: event id and type from its
 * headers, key and value as the bytes Kafka holds (the key decoded as UTF-8, as the connector's
 * string key format writes it), the event's own headers (those without the connector's prefix). Id,
 * type, key and content type must be well-formed UTF-8; the event's own headers are decoded with
 * replacement.
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
    String eventId = header(record, names.eventId(), origin);
    if (eventId == null) {
      throw new PoisonMessageException(
          ("record %s has no '%s' header, so the inbox cannot tell which event it is: it was not"
                  + " written by the relaybus connector, or the connector's header.prefix is not"
                  + " '%s'")
              .formatted(origin, names.eventId(), names.prefix()));
    }
    String type = header(record, names.eventType(), origin);
    Map<String, String> own = new LinkedHashMap<>();
    for (Header header : record.headers()) {
      if (!names.isConnectorHeader(header.key()) && header.value() != null) {
        own.put(header.key(), new String(header.value(), StandardCharsets.UTF_8));
      }
    }
    // The connector's header (the event's content type as published), else the event's own.
    String contentType = header(record, names.contentType(), origin);
    if (contentType == null) {
      contentType = header(record, CONTENT_TYPE_HEADER, origin);
    }
    byte[] key = record.key();
    return new InboxMessage(
        eventId,
        type == null ? InboxMessage.UNKNOWN_TYPE : type,
        key == null || key.length == 0 ? null : utf8(key, "key", origin),
        record.value() == null ? new byte[0] : record.value(),
        contentType == null ? InboxMessage.DEFAULT_CONTENT_TYPE : contentType,
        own,
        origin);
  }

  private static String header(ConsumerRecord<?, ?> record, String name, String origin) {
    Header header = record.headers().lastHeader(name);
    return header == null || header.value() == null
        ? null
        : utf8(header.value(), "'" + name + "' header", origin);
  }

  /**
   * Strict UTF-8: decoding with replacement would make different ids one (two events merged, the
   * second skipped as a redelivery), so bytes that are not UTF-8 make the record poison.
   */
  static String utf8(byte[] bytes, String what, String origin) {
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes))
          .toString();
    } catch (CharacterCodingException e) {
      throw new PoisonMessageException(
          "record %s has a %s that is not well-formed UTF-8 (%s)".formatted(origin, what, e), e);
    }
  }
}
