package io.relaybus.store.memory;

import io.relaybus.store.DeliveryToken;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.Lanes;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * The tables of the in-memory store, mirroring the SQL schema: events, deliveries, the 256 lanes,
 * the key counters and the completion history. Not thread-safe: {@link InMemoryOutboxStore} holds
 * its lock around every use.
 */
final class MemoryTables {
  final Map<String, StoredEvent> events = new HashMap<>();
  final TreeMap<Long, StoredDelivery> deliveries = new TreeMap<>();
  final LaneState[] lanes = new LaneState[Lanes.COUNT];
  final Map<String, KeyCounter> keyCounters = new HashMap<>();

  /** Completed deliveries by id, as they were when completed; only filled when enabled. */
  final TreeMap<Long, DeliveryView> history = new TreeMap<>();

  private long lastDeliveryId;

  /** The last sequence taken for a key, and when (retention removes counters of idle keys). */
  static final class KeyCounter {
    long lastSequence;
    Instant lastUsedAt;
  }

  MemoryTables() {
    for (int lane = 0; lane < Lanes.COUNT; lane++) {
      lanes[lane] = new LaneState(lane);
    }
  }

  long nextSequence(String key, Instant now) {
    KeyCounter counter = keyCounters.computeIfAbsent(key, k -> new KeyCounter());
    counter.lastSequence++;
    counter.lastUsedAt = now;
    return counter.lastSequence;
  }

  StoredDelivery insertDelivery(StoredEvent event, String handler, Long sequence, Instant now) {
    StoredDelivery delivery =
        new StoredDelivery(
            ++lastDeliveryId,
            event.id,
            handler,
            Lanes.laneOf(event.key, event.id),
            event.key,
            sequence,
            now);
    deliveries.put(delivery.id, delivery);
    lanes[delivery.lane].deliveries.put(delivery.id, delivery);
    return delivery;
  }

  void deleteDelivery(StoredDelivery delivery) {
    deliveries.remove(delivery.id);
    LaneState lane = lanes[delivery.lane];
    lane.deliveries.remove(delivery.id);
    lane.inFlight.remove(delivery.id);
  }

  /**
   * The delivery a token was issued for, if the token still holds: the lane has the token's epoch,
   * still lists the delivery in flight, the delivery's claim counter is unchanged and it delivers
   * the token's event. Else null.
   */
  StoredDelivery heldBy(DeliveryToken token) {
    if (token.lane() < 0 || token.lane() >= Lanes.COUNT) {
      return null;
    }
    LaneState lane = lanes[token.lane()];
    if (lane.epoch != token.epoch() || !lane.inFlight.contains(token.deliveryId())) {
      return null;
    }
    StoredDelivery delivery = deliveries.get(token.deliveryId());
    return delivery != null
            && delivery.claims == token.claims()
            && delivery.eventId.equals(token.eventId())
        ? delivery
        : null;
  }

  boolean isInFlight(StoredDelivery delivery) {
    return delivery.isPending() && lanes[delivery.lane].inFlight.contains(delivery.id);
  }
}
