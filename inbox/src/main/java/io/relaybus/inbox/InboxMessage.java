package io.relaybus.inbox;

import io.relaybus.store.OutboxEvent;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A message as a consumer received it, whatever the broker: the event id (the inbox key), what the
 * event is, and where it came from. The broker adapters build these from the connector's headers
 * ({@link io.relaybus.store.RecordHeaders}); code on another transport builds them itself.
 *
 * <p>The fields follow the outbox's rules for an event (id, type and key length, header sizes), so
 * the message can be recorded as an event; a message that breaks them is rejected at construction
 * with a {@link PoisonMessageException} naming the field, since no retry can fix it.
 *
 * @param eventId the event's id, the same through every broker
 * @param type what happened, e.g. {@code order.placed}
 * @param key the ordering key, or {@code null}
 * @param payload the body as received, never {@code null}
 * @param contentType media type of the payload
 * @param headers the event's own headers (not the connector's, not the broker's), in order
 * @param origin where the message was read, for logs: {@code kafka billing-2@17}, {@code rabbitmq
 *     queue billing-in}; never the payload
 */
public record InboxMessage(
    String eventId,
    String type,
    String key,
    byte[] payload,
    String contentType,
    Map<String, String> headers,
    String origin) {

  /** Type recorded for a message that does not say what it is. */
  public static final String UNKNOWN_TYPE = "unknown";

  /** Content type recorded for a message that does not say. */
  public static final String DEFAULT_CONTENT_TYPE = "application/octet-stream";

  public InboxMessage {
    Objects.requireNonNull(origin, "origin must not be null");
    Objects.requireNonNull(payload, "payload must not be null (use an empty array)");
    headers = Collections.unmodifiableMap(new LinkedHashMap<>(headers));
    payload = payload.clone();
    try {
      new OutboxEvent(eventId, type, key, payload, contentType, headers, List.of("inbox"));
    } catch (IllegalArgumentException | NullPointerException e) {
      throw new PoisonMessageException(
          "message from " + origin + " cannot be recorded in the inbox: " + e.getMessage(), e);
    }
  }

  /** The payload; a copy, so the message stays immutable. */
  @Override
  public byte[] payload() {
    return payload.clone();
  }

  /** The payload decoded as UTF-8. */
  public String payloadAsString() {
    return new String(payload, StandardCharsets.UTF_8);
  }

  /** This message as an outbox event for {@code handlers}: same id, type, key, payload, headers. */
  public OutboxEvent toEvent(List<String> handlers) {
    return new OutboxEvent(eventId, type, key, payload, contentType, headers, handlers);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof InboxMessage m
        && eventId.equals(m.eventId)
        && type.equals(m.type)
        && Objects.equals(key, m.key)
        && Arrays.equals(payload, m.payload)
        && contentType.equals(m.contentType)
        && headers.equals(m.headers)
        && origin.equals(m.origin);
  }

  @Override
  public int hashCode() {
    return eventId.hashCode();
  }

  @Override
  public String toString() {
    // No payload: payloads never reach logs.
    return "InboxMessage[eventId=%s, type=%s, key=%s, from %s, %d bytes %s]"
        .formatted(eventId, type, key, origin, payload.length, contentType);
  }
}
