package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.gt;
import static com.mongodb.client.model.Filters.in;
import static com.mongodb.client.model.Filters.lt;
import static com.mongodb.client.model.Filters.nin;

import com.mongodb.MongoException;
import com.mongodb.client.model.Accumulators;
import com.mongodb.client.model.Aggregates;
import com.mongodb.client.model.Sorts;
import com.mongodb.client.model.Updates;
import io.relaybus.store.LaneLease;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.bson.Document;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps long backlogs of one key out of the claim index. Only MongoDB has this part: PostgreSQL's
 * claim statement moves a blocked key's followers behind their blocker itself (PostgresClaims), and
 * the in-memory store has no index to keep them out of. When a claim finds candidates of a key held
 * back by an earlier pending delivery (the blocker: waiting for a retry, say), it marks the blocker
 * {@code holdsParked} and sets {@code parked} on the key's followers, which takes them out of the
 * partial claim index: later claims do not read them again, however many there are. When a claim is
 * about to hand out a blocker that holds parked followers, it unparks them first and selects again,
 * so the key's run can go out in the same batch.
 *
 * <p><b>Only an optimization.</b> Parked deliveries are still pending and still block their key in
 * the per-key rule, so order never depends on parking. What depends on it is liveness: a parked
 * delivery with nothing pending ahead of it would wait. Parking is therefore best effort with a
 * safety net: a failure is logged and its lanes are swept at the next claim, and every claim sweeps
 * the lanes it newly holds (a previous holder may have died between recording a blocker and
 * unparking; the lanes of an acquisition that threw count as newly held, since its write may have
 * landed and its retry then keeps them) and, every {@link #SWEEP_INTERVAL}, all the lanes it holds.
 * A sweep unparks every key whose parked deliveries have no unparked pending delivery ahead, and
 * re-marks the blocker of the others. It reads the parked index only, which is empty when nothing
 * is parked.
 *
 * <p><b>A parker that lost its lane.</b> A claim decides what blocks a key from its own read of the
 * lane's in-flight list. A claim that runs on after its lane was taken over (a paused process) can
 * find the key held back by a delivery the new holder has in flight, and park the key's followers
 * behind it: that delivery's completion unparks nothing, and the followers would wait for the new
 * holder's minute's sweep (a stall). So whenever a claim or sweep parked anything, it reads its
 * lanes again afterwards and unparks the keys it parked in a lane it no longer holds under its
 * epoch. A takeover after that read comes after the parking: the blocker carries the mark, so the
 * new holder's claim of it unparks them, and its first claim sweeps the lane it took. (A condition
 * on the parking's own write cannot say it: the epoch is in the lane document, and the delivery
 * path has no transaction.) Nothing is read when nothing was parked.
 */
final class MongoParking {
  static final Duration SWEEP_INTERVAL = Duration.ofMinutes(1);
  private static final Logger log = LoggerFactory.getLogger(MongoParking.class);

  private final MongoCollections c;
  private final Clock clock;
  private final Set<Integer> toSweep = ConcurrentHashMap.newKeySet();
  private volatile Instant lastSweep;

  MongoParking(MongoCollections collections, Clock clock) {
    this.c = collections;
    this.clock = clock;
    this.lastSweep = clock.instant();
  }

  /** Lanes that changed hands: swept at the next claim that holds them. */
  void sweepSoon(Collection<Integer> lanes) {
    toSweep.addAll(lanes);
  }

  /**
   * Before a claim records a blocker that holds parked followers: unparks them and clears the mark.
   * If the claim then fails to record, the followers are simply unparked candidates again, parked
   * anew by the next claim that finds them blocked.
   */
  void unparkFollowers(List<Document> blockers) {
    for (Document blocker : blockers) {
      unpark(group(blocker));
      c.deliveries.updateOne(
          eq(Fields.ID, blocker.get(Fields.ID)), Updates.unset(Fields.HOLDS_PARKED));
    }
  }

  /**
   * Parks the followers of the keys held back, then unparks them again in the lanes {@code owner}
   * no longer holds under the epochs of {@code held} (see the class doc). Never throws: parking is
   * an optimization; a failure is logged, what this call parked is unparked (best effort) and the
   * lanes are swept at the next claim. Returns the lanes found no longer held.
   */
  Set<Integer> park(
      Map<MongoClaims.Group, Document> blockers, String owner, Map<Integer, LaneLease> held) {
    List<MongoClaims.Group> parked = new ArrayList<>();
    try {
      blockers.forEach(
          (group, blocker) -> {
            if (park(group, blocker)) {
              parked.add(group);
            }
          });
      return unparkWhereNoLongerHeld(parked, owner, held);
    } catch (MongoException e) {
      toSweep.addAll(held.keySet());
      unparkQuietly(parked);
      log.warn("Parking of blocked keys failed; the held lanes are swept at the next claim.", e);
      return Set.of();
    }
  }

  /**
   * Parks the group's followers of {@code blocker}, or heals a blocker that is parked itself.
   * Returns whether it left anything parked.
   */
  private boolean park(MongoClaims.Group group, Document blocker) {
    if (Boolean.TRUE.equals(blocker.getBoolean(Fields.PARKED))) {
      unpark(group); // nothing unparked ahead of it: the key must go on
      return false;
    }
    long sequence = ((Number) blocker.get(Fields.SEQUENCE)).longValue();
    // Mark first: if we die before parking, the mark only costs an empty unpark later.
    long marked =
        c.deliveries
            .updateOne(
                and(
                    eq(Fields.ID, blocker.get(Fields.ID)),
                    eq(Fields.CLAIMS, blocker.get(Fields.CLAIMS)),
                    eq(Fields.STATUS, Fields.PENDING)),
                Updates.set(Fields.HOLDS_PARKED, true))
            .getMatchedCount();
    if (marked == 1) {
      long parked =
          c.deliveries
              .updateMany(
                  and(
                      group.filter(),
                      eq(Fields.STATUS, Fields.PENDING),
                      eq(Fields.PARKED, false),
                      gt(Fields.SEQUENCE, sequence)),
                  Updates.set(Fields.PARKED, true))
              .getModifiedCount();
      // The blocker may have gone between the mark and the parking (a timer cancelled, which
      // unparks its key when it removes a marked timer, possibly before we parked): look again.
      if (parked > 0
          && c.deliveries
                  .find(
                      and(eq(Fields.ID, blocker.get(Fields.ID)), eq(Fields.STATUS, Fields.PENDING)))
                  .projection(new Document(Fields.ID, 1))
                  .first()
              == null) {
        unpark(group);
        return false;
      }
      return parked > 0;
    }
    return false;
  }

  /**
   * After parking: reads the lanes of the groups parked and unparks the groups of each lane that
   * {@code owner} no longer holds under its epoch in {@code held}. Returns those lanes.
   */
  private Set<Integer> unparkWhereNoLongerHeld(
      List<MongoClaims.Group> parked, String owner, Map<Integer, LaneLease> held) {
    if (parked.isEmpty()) {
      return Set.of();
    }
    Set<Integer> lost = new HashSet<>();
    parked.forEach(group -> lost.add(group.lane()));
    for (Document d : c.lanes.find(in(Fields.ID, new ArrayList<>(lost)))) {
      LaneDoc lane = LaneDoc.of(d);
      LaneLease lease = held.get(lane.lane());
      if (lease != null && lane.heldBy(owner, lease.epoch())) {
        lost.remove(lane.lane());
      }
    }
    for (MongoClaims.Group group : parked) {
      if (lost.contains(group.lane())) {
        unpark(group);
      }
    }
    if (!lost.isEmpty()) {
      log.debug("Unparked what a claim of {} parked in lanes {} it no longer holds.", owner, lost);
    }
    return lost;
  }

  private void unparkQuietly(List<MongoClaims.Group> groups) {
    try {
      groups.forEach(this::unpark);
    } catch (MongoException e) {
      log.debug("Unparking after a failed parking failed too; the sweep unparks them.", e);
    }
  }

  private void unpark(MongoClaims.Group group) {
    c.deliveries.updateMany(
        and(group.filter(), eq(Fields.PARKED, true)), Updates.set(Fields.PARKED, false));
  }

  /**
   * Before a claim selects: sweeps the lanes it newly holds, or all it holds when the interval is
   * up, and unparks again what it parked in a lane {@code owner} no longer holds. Never throws (a
   * failed sweep is tried again at the next claim). Returns the lanes found no longer held.
   */
  Set<Integer> sweepIfDue(String owner, Map<Integer, LaneLease> held, InFlight inFlight) {
    Set<Integer> lanes = new HashSet<>();
    Instant now = clock.instant();
    if (!now.isBefore(lastSweep.plus(SWEEP_INTERVAL))) {
      lanes.addAll(held.keySet());
      lastSweep = now;
    }
    for (Integer lane : held.keySet()) {
      if (toSweep.remove(lane)) {
        lanes.add(lane);
      }
    }
    if (lanes.isEmpty()) {
      return Set.of();
    }
    List<MongoClaims.Group> parked = new ArrayList<>();
    try {
      sweep(lanes, inFlight, parked);
      return unparkWhereNoLongerHeld(parked, owner, held);
    } catch (MongoException e) {
      toSweep.addAll(lanes);
      unparkQuietly(parked);
      log.warn("Sweeping parked keys failed; tried again at the next claim.", e);
      return Set.of();
    }
  }

  /**
   * Unparks keys with no unparked pending delivery ahead of their first parked one; adds to {@code
   * parked} the keys it parked more of.
   */
  private void sweep(Collection<Integer> lanes, InFlight inFlight, List<MongoClaims.Group> parked) {
    List<Document> parkedGroups =
        c.deliveries
            .aggregate(
                List.of(
                    Aggregates.match(and(in(Fields.LANE_ID, lanes), eq(Fields.PARKED, true))),
                    Aggregates.group(
                        new Document("lane", "$" + Fields.LANE_ID)
                            .append("handler", "$" + Fields.HANDLER)
                            .append("key", "$" + Fields.KEY),
                        Accumulators.min("from", "$" + Fields.SEQUENCE))))
            .into(new ArrayList<>());
    for (Document g : parkedGroups) {
      Document id = g.get(Fields.ID, Document.class);
      MongoClaims.Group group =
          new MongoClaims.Group(
              id.getInteger("lane"), id.getString("handler"), id.getString("key"));
      Document blocker =
          c.deliveries
              .find(
                  and(
                      group.filter(),
                      eq(Fields.STATUS, Fields.PENDING),
                      eq(Fields.PARKED, false),
                      lt(Fields.SEQUENCE, ((Number) g.get("from")).longValue()),
                      nin(Fields.ID, inFlight.inFlightIds())))
              .sort(Sorts.ascending(Fields.SEQUENCE))
              .limit(1)
              .first();
      if (blocker == null) {
        unpark(group);
      } else if (park(group, blocker)) {
        parked.add(group);
      }
    }
    if (!parkedGroups.isEmpty()) {
      log.debug("Swept {} parked keys in {} lanes.", parkedGroups.size(), lanes.size());
    }
  }

  private static MongoClaims.Group group(Document delivery) {
    return new MongoClaims.Group(
        delivery.getInteger(Fields.LANE_ID),
        delivery.getString(Fields.HANDLER),
        delivery.getString(Fields.KEY));
  }
}
