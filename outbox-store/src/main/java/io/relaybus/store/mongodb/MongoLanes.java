package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.in;
import static com.mongodb.client.model.Filters.lte;
import static com.mongodb.client.model.Filters.or;

import com.mongodb.bulk.BulkWriteResult;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.UpdateOneModel;
import com.mongodb.client.model.Updates;
import com.mongodb.client.model.WriteModel;
import io.relaybus.store.LaneLease;
import io.relaybus.store.RetryPolicy;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.Date;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.bson.Document;
import org.bson.conversions.Bson;

/**
 * Lane leases: acquire (with takeover and its charge), renew, relinquish. Each is one conditional
 * {@code bulkWrite} on the lane documents, no transaction: a lane write lands only if the document
 * is still as read (a takeover: {@code rev}, epoch and owner, with the lease still free, expired or
 * of the taker's group; the holder's own writes: epoch and owner), so two acquirers never both get
 * a lane and a lease renewed meanwhile is not taken.
 *
 * <p>Lease times come from this process's clock (MongoDB has no server time for a plain update):
 * keep the clocks of the workers in sync (NTP); a skew of S lengthens or shortens the leases others
 * see by S, and leases are fenced by epoch either way.
 */
final class MongoLanes {
  private final MongoCollections c;
  private final Clock clock;

  MongoLanes(MongoCollections collections, Clock clock) {
    this.c = collections;
    this.clock = clock;
  }

  private record Grant(LaneDoc before, long epoch, boolean takenOver) {
    boolean keep() {
      return epoch == before.epoch();
    }

    /**
     * What the lane must charge once granted: left over from a crash, plus what it had in flight.
     */
    List<LaneDoc.Entry> toCharge() {
      List<LaneDoc.Entry> entries = new ArrayList<>(before.lost());
      if (!keep()) {
        entries.addAll(before.inFlight());
      }
      return entries;
    }
  }

  /** Returns the leases granted, in lane order; {@code changedHands} receives lanes newly taken. */
  List<LaneLease> acquire(
      String owner,
      String group,
      Collection<Integer> lanes,
      Duration duration,
      boolean takeOver,
      RetryPolicy policy,
      Collection<Integer> changedHands) {
    Instant now = now();
    Date expires = Date.from(now.plus(duration));
    List<Grant> grants = new ArrayList<>();
    for (Document d : c.lanes.find(in(Fields.ID, lanes))) {
      LaneDoc lane = LaneDoc.of(d);
      if (owner.equals(lane.owner())) {
        grants.add(new Grant(lane, lane.epoch(), false));
      } else if (lane.owner() == null
          || !lane.expiresAt().isAfter(now)
          || (takeOver && group.equals(lane.group()))) {
        grants.add(new Grant(lane, lane.epoch() + 1, lane.owner() != null));
      }
    }
    if (grants.isEmpty()) {
      return List.of();
    }
    List<WriteModel<Document>> writes = new ArrayList<>();
    for (Grant g : grants) {
      LaneDoc before = g.before();
      Bson filter =
          g.keep()
              ? and(
                  eq(Fields.ID, before.lane()),
                  eq(Fields.EPOCH, before.epoch()),
                  eq(Fields.OWNER, owner))
              : stillAsRead(before, group, takeOver, now);
      Bson update =
          g.keep()
              ? Updates.combine(
                  Updates.set(Fields.LEASE_EXPIRES_AT, expires), Updates.set(Fields.GROUP, group))
              : Updates.combine(
                  Updates.set(Fields.EPOCH, g.epoch()),
                  Updates.set(Fields.OWNER, owner),
                  Updates.set(Fields.GROUP, group),
                  Updates.set(Fields.LEASE_EXPIRES_AT, expires),
                  Updates.set(Fields.IN_FLIGHT, List.of()),
                  // The lost ids move in the very write that bumps the epoch: if we die before
                  // charging them, the next holder finds them here.
                  Updates.set(Fields.LOST, LaneDoc.documents(g.toCharge())),
                  Updates.inc(Fields.REV, 1L));
      writes.add(new UpdateOneModel<>(filter, update));
    }
    BulkWriteResult result = c.lanes.bulkWrite(writes, new BulkWriteOptions().ordered(false));
    if (result.getMatchedCount() < grants.size()) {
      grants = landed(owner, grants);
    }
    Map<Integer, Integer> charged = charge(grants, policy);
    List<LaneLease> leases = new ArrayList<>();
    for (Grant g : grants) {
      int lane = g.before().lane();
      if (!g.keep()) {
        changedHands.add(lane);
      }
      leases.add(
          new LaneLease(
              lane, g.epoch(), expires.toInstant(), g.takenOver(), charged.getOrDefault(lane, 0)));
    }
    leases.sort(Comparator.comparingInt(LaneLease::lane));
    return leases;
  }

  /**
   * The filter of a takeover: the lane as read ({@code rev}, epoch, owner), and still free, expired
   * or of our group (when taking over). The {@code rev} alone does not do: a renewal, and the
   * holder's own acquisition keeping its lane, extend the lease without moving it (a claim's write,
   * conditioned on {@code rev}, must not fail at every renewal), so a takeover decided on an expiry
   * would land over a lease renewed since the read, while its holder was told it was renewed. Epoch
   * and owner move with {@code rev} on a real server; mongo-java-server can return a document half
   * updated (the new {@code rev} with the old owner), which {@code rev} alone let through.
   */
  private static Bson stillAsRead(LaneDoc before, String group, boolean takeOver, Instant now) {
    List<Bson> filter =
        new ArrayList<>(
            List.of(
                eq(Fields.ID, before.lane()),
                eq(Fields.REV, before.rev()),
                eq(Fields.EPOCH, before.epoch()),
                eq(Fields.OWNER, before.owner())));
    if (before.owner() != null) {
      Bson expired = lte(Fields.LEASE_EXPIRES_AT, Date.from(now));
      filter.add(takeOver ? or(expired, eq(Fields.GROUP, group)) : expired);
    }
    return and(filter);
  }

  /** The grants whose write landed: the lane is ours under the epoch we wrote. */
  private List<Grant> landed(String owner, List<Grant> grants) {
    Map<Integer, LaneDoc> now = read(grants.stream().map(g -> g.before().lane()).toList());
    return grants.stream()
        .filter(g -> now.containsKey(g.before().lane()))
        .filter(g -> now.get(g.before().lane()).heldBy(owner, g.epoch()))
        .toList();
  }

  /**
   * Charges one attempt to each lost delivery that still has the claim counter it was claimed with
   * (a crash is a lost attempt), then empties the lanes' {@code lost}. Idempotent: the charge bumps
   * the counter, so charging the same entry twice changes nothing the second time; an entry the
   * same takeover charged in a call whose reply was lost is counted again on the retry (by its
   * {@code chargedEpoch}).
   */
  private Map<Integer, Integer> charge(List<Grant> grants, RetryPolicy policy) {
    Map<Integer, Integer> charged = new HashMap<>();
    Map<Long, LaneDoc.Entry> entries = new HashMap<>();
    Map<Integer, Long> epochOfLane = new HashMap<>();
    List<Grant> withLost = new ArrayList<>();
    for (Grant g : grants) {
      if (!g.toCharge().isEmpty()) {
        withLost.add(g);
        g.toCharge().forEach(e -> entries.put(e.id(), e));
        epochOfLane.put(g.before().lane(), g.epoch());
      }
    }
    if (withLost.isEmpty()) {
      return charged;
    }
    Date now = Date.from(now());
    List<WriteModel<Document>> writes = new ArrayList<>();
    Map<Long, Integer> laneOfWrite = new HashMap<>();
    Document projection =
        new Document(Fields.CLAIMS, 1)
            .append(Fields.ATTEMPTS, 1)
            .append(Fields.LANE_ID, 1)
            .append(Fields.STATUS, 1)
            .append(Fields.CHARGED_EPOCH, 1);
    for (Document d : c.deliveries.find(in(Fields.ID, entries.keySet())).projection(projection)) {
      long id = ((Number) d.get(Fields.ID)).longValue();
      int claims = d.getInteger(Fields.CLAIMS);
      int lane = d.getInteger(Fields.LANE_ID);
      if (!Fields.PENDING.equals(d.getString(Fields.STATUS))
          || claims != entries.get(id).claims()) {
        // Completed, failed or released under that claim already; or charged (to death, maybe) by
        // this very takeover in a call whose caller never heard (a lost reply), now retried: the
        // epoch says, which names this takeover alone.
        Object chargedEpoch = d.get(Fields.CHARGED_EPOCH);
        if (chargedEpoch != null
            && epochOfLane.containsKey(lane)
            && ((Number) chargedEpoch).longValue() == epochOfLane.get(lane)) {
          charged.merge(lane, 1, Integer::sum);
        }
        continue;
      }
      int attempts = d.getInteger(Fields.ATTEMPTS) + 1;
      boolean dead = attempts >= policy.maxAttempts();
      String reason =
          dead
              ? "attempts exhausted (%d of %d): lane %d was taken over while this delivery was in flight"
              : "attempt %d of %d lost: lane %d was taken over while this delivery was in flight";
      String lastError = reason.formatted(attempts, policy.maxAttempts(), lane);
      List<Bson> update =
          new ArrayList<>(
              List.of(
                  Updates.set(Fields.ATTEMPTS, attempts),
                  Updates.set(Fields.CLAIMS, claims + 1),
                  Updates.set(Fields.STATUS, dead ? Fields.DEAD : Fields.PENDING),
                  Updates.set(Fields.PARKED, false),
                  Updates.set(Fields.LAST_ERROR, lastError),
                  Updates.set(Fields.CHARGED_EPOCH, epochOfLane.get(lane)),
                  Updates.set(Fields.UPDATED_AT, now)));
      if (dead) {
        update.add(Updates.unset(Fields.TIMER)); // a dead timer frees its id, as a burial does
      }
      writes.add(
          new UpdateOneModel<>(
              and(eq(Fields.ID, id), eq(Fields.CLAIMS, claims), eq(Fields.STATUS, Fields.PENDING)),
              Updates.combine(update)));
      laneOfWrite.put(id, lane);
    }
    if (!writes.isEmpty()) {
      BulkWriteResult result =
          c.deliveries.bulkWrite(writes, new BulkWriteOptions().ordered(false));
      Collection<Long> done = laneOfWrite.keySet();
      if (result.getMatchedCount() < writes.size()) {
        // The old holder's completion, reschedule, burial or release (or its relinquish), or a
        // later takeover's charge of the same lost entry, raced the charge and won some: count
        // only what carries our charge. The counter alone does not tell: every one of those moves
        // it one on, as the charge does; nor does the last error: a later takeover's charge
        // writes the very reason we would have (the attempt and the lane). The epoch does: it
        // names our takeover, and only a charge writes it.
        done = new ArrayList<>();
        for (Document d :
            c.deliveries
                .find(in(Fields.ID, laneOfWrite.keySet()))
                .projection(new Document(Fields.CHARGED_EPOCH, 1))) {
          long id = ((Number) d.get(Fields.ID)).longValue();
          Object epoch = d.get(Fields.CHARGED_EPOCH);
          if (epoch != null
              && ((Number) epoch).longValue() == epochOfLane.get(laneOfWrite.get(id))) {
            done.add(id);
          }
        }
      }
      done.forEach(id -> charged.merge(laneOfWrite.get(id), 1, Integer::sum));
    }
    List<WriteModel<Document>> clear = new ArrayList<>();
    for (Grant g : withLost) {
      clear.add(
          new UpdateOneModel<>(
              and(eq(Fields.ID, g.before().lane()), eq(Fields.EPOCH, g.epoch())),
              Updates.combine(Updates.set(Fields.LOST, List.of()), Updates.inc(Fields.REV, 1L))));
    }
    c.lanes.bulkWrite(clear, new BulkWriteOptions().ordered(false));
    return charged;
  }

  /** Extends leases still held by {@code owner} under their epoch. */
  List<LaneLease> renew(String owner, Collection<LaneLease> leases, Duration d) {
    Date expires = Date.from(now().plus(d));
    List<WriteModel<Document>> writes = new ArrayList<>();
    for (LaneLease lease : leases) {
      writes.add(
          new UpdateOneModel<>(held(owner, lease), Updates.set(Fields.LEASE_EXPIRES_AT, expires)));
    }
    BulkWriteResult result = c.lanes.bulkWrite(writes, new BulkWriteOptions().ordered(false));
    Collection<LaneLease> renewed = leases;
    if (result.getMatchedCount() < leases.size()) {
      // (owner, epoch) is unique to one lease: held now means our update matched.
      Map<Integer, LaneDoc> now = read(leases.stream().map(LaneLease::lane).toList());
      renewed =
          leases.stream()
              .filter(l -> now.containsKey(l.lane()))
              .filter(l -> now.get(l.lane()).heldBy(owner, l.epoch()))
              .toList();
    }
    return renewed.stream()
        .map(l -> new LaneLease(l.lane(), l.epoch(), expires.toInstant(), false, 0))
        .sorted(Comparator.comparingInt(LaneLease::lane))
        .toList();
  }

  /**
   * Hands lanes back: free at once under a new epoch (the old tokens die), in-flight list emptied,
   * nothing charged. Returns how many were still held.
   */
  int relinquish(String owner, Collection<LaneLease> leases) {
    // First the claim counter of each delivery in flight moves on (no attempt charged), so a
    // token of this holder that lands later (a reschedule or completion the client gave up on)
    // matches nothing once another holder claimed the delivery under the same counter.
    Map<Integer, LaneDoc> before = read(leases.stream().map(LaneLease::lane).toList());
    List<WriteModel<Document>> bumps = new ArrayList<>();
    for (LaneLease lease : leases) {
      LaneDoc lane = before.get(lease.lane());
      if (lane == null || !lane.heldBy(owner, lease.epoch())) {
        continue;
      }
      for (LaneDoc.Entry entry : lane.inFlight()) {
        bumps.add(
            new UpdateOneModel<>(
                and(eq(Fields.ID, entry.id()), eq(Fields.CLAIMS, entry.claims())),
                Updates.inc(Fields.CLAIMS, 1)));
      }
    }
    if (!bumps.isEmpty()) {
      c.deliveries.bulkWrite(bumps, new BulkWriteOptions().ordered(false));
    }
    List<WriteModel<Document>> writes = new ArrayList<>();
    for (LaneLease lease : leases) {
      writes.add(
          new UpdateOneModel<>(
              held(owner, lease),
              Updates.combine(
                  Updates.set(Fields.OWNER, null),
                  Updates.set(Fields.GROUP, null),
                  Updates.set(Fields.LEASE_EXPIRES_AT, null),
                  Updates.set(Fields.IN_FLIGHT, List.of()),
                  Updates.inc(Fields.EPOCH, 1L),
                  Updates.inc(Fields.REV, 1L))));
    }
    return c.lanes.bulkWrite(writes, new BulkWriteOptions().ordered(false)).getMatchedCount();
  }

  static Bson held(String owner, LaneLease lease) {
    return and(
        eq(Fields.ID, lease.lane()), eq(Fields.EPOCH, lease.epoch()), eq(Fields.OWNER, owner));
  }

  Map<Integer, LaneDoc> read(Collection<Integer> lanes) {
    Map<Integer, LaneDoc> result = new HashMap<>();
    for (Document d : c.lanes.find(in(Fields.ID, lanes))) {
      LaneDoc lane = LaneDoc.of(d);
      result.put(lane.lane(), lane);
    }
    return result;
  }

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MILLIS);
  }
}
