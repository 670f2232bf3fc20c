package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.in;

import com.mongodb.client.MongoCollection;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.bson.Document;

/**
 * Which entries of some lanes' {@code inFlight} and {@code lost} lists still count: the delivery
 * exists, is pending and has the claim counter the entry recorded (see {@link LaneDoc}). One query
 * for all lanes.
 */
final class InFlight {
  private final Map<Integer, List<LaneDoc.Entry>> liveByLane = new HashMap<>();
  private final Set<Long> excluded = new HashSet<>();

  /** The deliveries in flight on the lanes, with the claim counter their entry recorded. */
  private final Map<Long, Integer> claimsInFlight = new HashMap<>();

  private InFlight() {}

  static InFlight resolve(MongoCollection<Document> deliveries, Collection<LaneDoc> lanes) {
    InFlight result = new InFlight();
    Set<Long> ids = new HashSet<>();
    for (LaneDoc lane : lanes) {
      lane.inFlight().forEach(e -> ids.add(e.id()));
      lane.lost().forEach(e -> ids.add(e.id()));
    }
    if (ids.isEmpty()) {
      return result;
    }
    Map<Long, Integer> claimsOfPending = new HashMap<>();
    for (Document d :
        deliveries
            .find(and(in(Fields.ID, ids), eq(Fields.STATUS, Fields.PENDING)))
            .projection(new Document(Fields.CLAIMS, 1))) {
      claimsOfPending.put(((Number) d.get(Fields.ID)).longValue(), d.getInteger(Fields.CLAIMS));
    }
    for (LaneDoc lane : lanes) {
      List<LaneDoc.Entry> live = new ArrayList<>();
      for (LaneDoc.Entry e : lane.inFlight()) {
        if (Integer.valueOf(e.claims()).equals(claimsOfPending.get(e.id()))) {
          live.add(e);
          result.claimsInFlight.put(e.id(), e.claims());
        }
      }
      result.liveByLane.put(lane.lane(), live);
      result.excluded.addAll(result.claimsInFlight.keySet());
      // Lost and not charged yet (the taker died): not claimable until the charge.
      for (LaneDoc.Entry e : lane.lost()) {
        if (Integer.valueOf(e.claims()).equals(claimsOfPending.get(e.id()))) {
          result.excluded.add(e.id());
        }
      }
    }
    return result;
  }

  /** The entries of {@code lane} that still count as in flight. */
  List<LaneDoc.Entry> live(int lane) {
    return liveByLane.getOrDefault(lane, List.of());
  }

  /** Whether the delivery is in flight on one of the lanes. */
  boolean contains(long deliveryId) {
    return claimsInFlight.containsKey(deliveryId);
  }

  /**
   * Whether {@code delivery}, as read now, is still in flight: one of the lanes' live entries names
   * it with the claim counter it still has. Every write that ends a claim moves the counter on, so
   * a delivery in flight when the lanes were resolved and failed, buried, released or requeued
   * since is not (it is pending again, or dead).
   */
  boolean stillInFlight(Document delivery) {
    Integer claims = claimsInFlight.get(((Number) delivery.get(Fields.ID)).longValue());
    return claims != null && claims.equals(delivery.getInteger(Fields.CLAIMS));
  }

  /** The ids in flight on the lanes (as resolved: see {@link #stillInFlight}). */
  Set<Long> inFlightIds() {
    return claimsInFlight.keySet();
  }

  /** Ids a claim must not hand out: in flight, or lost and not charged yet. */
  Set<Long> excluded() {
    return excluded;
  }
}
