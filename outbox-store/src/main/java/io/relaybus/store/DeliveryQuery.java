package io.relaybus.store;

/**
 * Filters and page of an admin listing. Every filter is optional ({@code null} = any). Pages are
 * keyset pages in delivery id order: pass the last id of a page as {@code afterId} to get the next.
 *
 * @param status only this status ({@link DeliveryStatus#COMPLETED} lists the completion history)
 * @param handler only this handler
 * @param key only this ordering key
 * @param eventId only this event
 * @param afterId only ids greater than this, or {@code null} from the start
 * @param limit page size, 1 to 10,000
 */
public record DeliveryQuery(
    DeliveryStatus status, String handler, String key, String eventId, Long afterId, int limit) {

  public static final int MAX_LIMIT = 10_000;

  public DeliveryQuery {
    if (limit < 1 || limit > MAX_LIMIT) {
      throw new IllegalArgumentException(
          "limit must be between 1 and " + MAX_LIMIT + ", but was " + limit);
    }
    if (handler != null) {
      Validation.handler(handler);
    }
    if (key != null) {
      Validation.storable("delivery query key", key);
    }
    if (eventId != null) {
      Validation.storable("delivery query eventId", eventId);
    }
  }

  public static DeliveryQuery all() {
    return new DeliveryQuery(null, null, null, null, null, 100);
  }

  public DeliveryQuery withStatus(DeliveryStatus status) {
    return new DeliveryQuery(status, handler, key, eventId, afterId, limit);
  }

  public DeliveryQuery withHandler(String handler) {
    return new DeliveryQuery(status, handler, key, eventId, afterId, limit);
  }

  public DeliveryQuery withKey(String key) {
    return new DeliveryQuery(status, handler, key, eventId, afterId, limit);
  }

  public DeliveryQuery withEventId(String eventId) {
    return new DeliveryQuery(status, handler, key, eventId, afterId, limit);
  }

  public DeliveryQuery after(Long afterId) {
    return new DeliveryQuery(status, handler, key, eventId, afterId, limit);
  }

  public DeliveryQuery withLimit(int limit) {
    return new DeliveryQuery(status, handler, key, eventId, afterId, limit);
  }
}
