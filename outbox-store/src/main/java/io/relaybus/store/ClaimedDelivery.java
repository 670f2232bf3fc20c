package io.relaybus.store;

import java.time.Instant;
import java.util.Map;

/**
 * A delivery handed out by {@link OutboxStore#claim}: one (event, handler) pair with everything
 * needed to send it, and the {@link DeliveryToken} to complete or fail it with.
 *
 * @param token the fencing token of this claim
 * @param eventId the event's id
 * @param handler the route
 * @param key the ordering key or {@code null}
 * @param sequence the key's sequence number (commit order), or {@code null} without a key
 * @param attempts failed attempts so far (0 on the first try)
 * @param type the event type
 * @param payload the payload
 * @param contentType the payload's media type
 * @param headers the event's own headers
 * @param eventTime when the event was published
 */
public record ClaimedDelivery(
    DeliveryToken token,
    String eventId,
    String handler,
    String key,
    Long sequence,
    int attempts,
    String type,
    byte[] payload,
    String contentType,
    Map<String, String> headers,
    Instant eventTime) {

  public long deliveryId() {
    return token.deliveryId();
  }

  public int lane() {
    return token.lane();
  }

  @Override
  public String toString() {
    return "ClaimedDelivery[id=%d, event=%s, handler=%s, key=%s, seq=%s, attempts=%d]"
        .formatted(token.deliveryId(), eventId, handler, key, sequence, attempts);
  }
}
