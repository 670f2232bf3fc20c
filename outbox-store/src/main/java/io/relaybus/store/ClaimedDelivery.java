package io.relaybus.store;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
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

  /**
   * Puts each (lane, handler, key) run into sequence order while keeping the slots the run
   * occupies: candidates are read in due-time order, which after a retry is not sequence order.
   * Every store ends its claim with it.
   */
  public static List<ClaimedDelivery> inKeyOrder(List<ClaimedDelivery> batch) {
    Map<List<Object>, List<Integer>> slots = new LinkedHashMap<>();
    for (int i = 0; i < batch.size(); i++) {
      ClaimedDelivery d = batch.get(i);
      if (d.key() != null) {
        slots
            .computeIfAbsent(List.of(d.lane(), d.handler(), d.key()), k -> new ArrayList<>())
            .add(i);
      }
    }
    List<ClaimedDelivery> ordered = new ArrayList<>(batch);
    for (List<Integer> positions : slots.values()) {
      List<ClaimedDelivery> run = new ArrayList<>();
      positions.forEach(p -> run.add(batch.get(p)));
      run.sort(Comparator.comparing(ClaimedDelivery::sequence));
      for (int i = 0; i < positions.size(); i++) {
        ordered.set(positions.get(i), run.get(i));
      }
    }
    return ordered;
  }
}
