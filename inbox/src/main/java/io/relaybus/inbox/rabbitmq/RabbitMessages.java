package io.relaybus.inbox.rabbitmq;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.LongString;
import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.store.RecordHeaders;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Reads an {@link InboxMessage} from an AMQP delivery. The event id comes from the connector's
 * header ({@code relaybus-event-id}), else from the AMQP {@code message-id} property; the type from
 * the {@code relaybus-event-type} header, else the AMQP {@code type}. The event's own headers are
 * the message headers without the connector's prefix and without the broker's {@code x-} headers;
 * nested tables and arrays are left out.
 */
final class RabbitMessages {
  private final RecordHeaders names;

  RabbitMessages(RecordHeaders names) {
    this.names = names;
  }

  InboxMessage read(String queue, Envelope envelope, AMQP.BasicProperties properties, byte[] body) {
    String origin = "rabbitmq queue " + queue + " delivery " + envelope.getDeliveryTag();
    Map<String, Object> headers =
        properties.getHeaders() == null ? Map.of() : properties.getHeaders();
    String eventId = strictText(headers.get(names.eventId()), names.eventId(), origin);
    if (eventId == null) {
      eventId = properties.getMessageId();
    }
    if (eventId == null) {
      throw new PoisonMessageException(
          ("message from %s has neither a '%s' header nor a message-id property, so the inbox"
                  + " cannot tell which event it is")
              .formatted(origin, names.eventId()));
    }
    String type = strictText(headers.get(names.eventType()), names.eventType(), origin);
    if (type == null) {
      type = properties.getType();
    }
    Map<String, String> own = new LinkedHashMap<>();
    headers.forEach(
        (name, value) -> {
          String text = text(value);
          if (text != null && !names.isConnectorHeader(name) && !name.startsWith("x-")) {
            own.put(name, text);
          }
        });
    return new InboxMessage(
        eventId,
        type == null ? InboxMessage.UNKNOWN_TYPE : type,
        null,
        body == null ? new byte[0] : body,
        properties.getContentType() == null
            ? InboxMessage.DEFAULT_CONTENT_TYPE
            : properties.getContentType(),
        own,
        origin);
  }

  /**
   * {@link #text}, but a LongString (AMQP carries header text as bytes) must be well-formed UTF-8:
   * its {@code toString()} decodes with replacement, which would make different ids one.
   */
  private static String strictText(Object value, String name, String origin) {
    if (!(value instanceof LongString bytes)) {
      return text(value);
    }
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(bytes.getBytes()))
          .toString();
    } catch (CharacterCodingException e) {
      throw new PoisonMessageException(
          "message from %s has a '%s' header that is not well-formed UTF-8 (%s)"
              .formatted(origin, name, e),
          e);
    }
  }

  /** Scalar header values as text; tables, arrays and absent values as null. */
  private static String text(Object value) {
    if (value instanceof LongString || value instanceof String) {
      return value.toString();
    }
    if (value instanceof Number || value instanceof Boolean) {
      return String.valueOf(value);
    }
    return null;
  }
}
