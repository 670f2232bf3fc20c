package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.in;
import static com.mongodb.client.model.Filters.or;

import com.mongodb.MongoBulkWriteException;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.InsertManyOptions;
import com.mongodb.client.model.UpdateOneModel;
import com.mongodb.client.model.Updates;
import com.mongodb.client.model.WriteModel;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.RetryPolicy;
import java.time.Clock;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.bson.Document;
import org.bson.conversions.Bson;

/**
 * Ends claims: complete (delete), reschedule, bury, release. None writes the lane document and none
 * needs a transaction.
 *
 * <p><b>Fencing.</b> Each checks the token's epoch against the lane, then writes the delivery only
 * if its claim counter still equals the token's. The two steps are not atomic, and need not be: a
 * takeover bumps the epoch and then charges the lost deliveries, a write conditional on the same
 * counter. A completion that passed the epoch check just before a takeover therefore either deletes
 * the delivery before the charge (the completion wins, the charge finds nothing) or finds the
 * counter moved (the takeover wins, the completion reports the delivery lost). Exactly one wins,
 * with no transaction. The one window left is a relinquish (which charges nothing) racing a
 * completion of the same owner: that owner completes what it had sent, which is harmless.
 */
final class MongoCompletion {
  private final MongoCollections c;
  private final MongoLanes lanes;
  private final Clock clock;

  MongoCompletion(MongoCollections collections, MongoLanes lanes, Clock clock) {
    this.c = collections;
    this.lanes = lanes;
    this.clock = clock;
  }

  /**
   * Deletes the deliveries whose token holds, in one {@code deleteMany}, and then (history on)
   * inserts their history documents. Without a transaction a crash between the two loses those
   * history documents, never a delivery: the history is an audit trail, not a delivery guarantee.
   * Returns only ids this call's delete removed: when the delete removed fewer than it read and the
   * count cannot tell which, it returns none of those gone (a completion racing a takeover whose
   * new holder completed a delivery again: the ones this call deleted then have no history
   * document).
   */
  Set<Long> complete(Collection<DeliveryToken> tokens, boolean history) {
    List<DeliveryToken> current = withCurrentEpoch(tokens);
    if (current.isEmpty()) {
      return Set.of();
    }
    Map<Long, DeliveryToken> tokenOf = new HashMap<>();
    current.forEach(t -> tokenOf.put(t.deliveryId(), t));
    Map<Long, Document> matching = new HashMap<>();
    for (Document d :
        c.deliveries.find(
            and(in(Fields.ID, tokenOf.keySet()), eq(Fields.STATUS, Fields.PENDING)))) {
      long id = ((Number) d.get(Fields.ID)).longValue();
      DeliveryToken token = tokenOf.get(id);
      if (Integer.valueOf(token.claims()).equals(d.getInteger(Fields.CLAIMS))
          && token.eventId().equals(d.getString(Fields.EVENT_ID))) {
        matching.put(id, d);
      }
    }
    if (matching.isEmpty()) {
      return Set.of();
    }
    List<Bson> exact = new ArrayList<>();
    matching.forEach(
        (id, d) ->
            exact.add(
                and(
                    eq(Fields.ID, id),
                    eq(Fields.CLAIMS, tokenOf.get(id).claims()),
                    eq(Fields.EVENT_ID, tokenOf.get(id).eventId()))));
    long deleted = c.deliveries.deleteMany(or(exact)).getDeletedCount();
    Set<Long> done = new HashSet<>(matching.keySet());
    if (deleted < matching.size()) {
      // A takeover charged some in between (or a release, a reschedule, a duplicate completion
      // took them): what is still there was not completed by us.
      for (Document left : c.deliveries.find(in(Fields.ID, matching.keySet()))) {
        done.remove(((Number) left.get(Fields.ID)).longValue());
      }
      if (done.size() > deleted) {
        // And some that are gone were deleted by another caller after their counter moved on (a
        // takeover's charge, then the new holder's claim and completion; or by a duplicate
        // completion): the count does not say which of them were ours, so none is reported
        // completed, nor given a history document. Reporting one that was not ours would say
        // done for a delivery another holder sent again and completed: completed twice.
        done.clear();
      }
    }
    if (history && !done.isEmpty()) {
      insertHistory(done, matching);
    }
    return done;
  }

  private void insertHistory(Set<Long> done, Map<Long, Document> deliveries) {
    Date now = Date.from(now());
    List<Document> rows = new ArrayList<>();
    for (Long id : done) {
      Document d = deliveries.get(id);
      Document row =
          new Document(Fields.ID, id)
              .append(Fields.EVENT_ID, d.get(Fields.EVENT_ID))
              .append(Fields.HANDLER, d.get(Fields.HANDLER))
              .append(Fields.LANE_ID, d.get(Fields.LANE_ID));
      if (d.get(Fields.KEY) != null) {
        row.append(Fields.KEY, d.get(Fields.KEY)).append(Fields.SEQUENCE, d.get(Fields.SEQUENCE));
      }
      rows.add(
          row.append(Fields.ATTEMPTS, d.get(Fields.ATTEMPTS))
              .append(Fields.CREATED_AT, d.get(Fields.CREATED_AT))
              .append(Fields.COMPLETED_AT, now));
    }
    try {
      c.completed.insertMany(rows, new InsertManyOptions().ordered(false));
    } catch (MongoBulkWriteException e) {
      if (!e.getWriteErrors().stream().allMatch(MongoErrors::isDuplicateKey)) {
        throw e;
      }
    }
  }

  /** Ends a failed attempt: charged, then due after the backoff, or dead. */
  FailOutcome fail(DeliveryToken token, String reason, boolean bury, RetryPolicy policy) {
    if (withCurrentEpoch(List.of(token)).isEmpty()) {
      return FailOutcome.LOST;
    }
    Bson claimed =
        and(
            eq(Fields.ID, token.deliveryId()),
            eq(Fields.LANE_ID, token.lane()),
            eq(Fields.CLAIMS, token.claims()),
            eq(Fields.EVENT_ID, token.eventId()),
            eq(Fields.STATUS, Fields.PENDING));
    Document delivery =
        c.deliveries.find(claimed).projection(new Document(Fields.ATTEMPTS, 1)).first();
    if (delivery == null) {
      return FailOutcome.LOST;
    }
    int attempts = delivery.getInteger(Fields.ATTEMPTS) + 1;
    boolean dead = bury || attempts >= policy.maxAttempts();
    Instant now = now();
    List<Bson> set = new ArrayList<>();
    set.add(Updates.set(Fields.ATTEMPTS, attempts));
    set.add(Updates.set(Fields.CLAIMS, token.claims() + 1));
    set.add(Updates.set(Fields.STATUS, dead ? Fields.DEAD : Fields.PENDING));
    set.add(Updates.set(Fields.PARKED, false));
    set.add(Updates.set(Fields.LAST_ERROR, reason));
    set.add(Updates.set(Fields.UPDATED_AT, Date.from(now)));
    if (!dead) {
      set.add(Updates.set(Fields.AVAILABLE_AT, Date.from(now.plus(policy.backoff(attempts)))));
    }
    if (dead) {
      set.add(Updates.unset(Fields.TIMER)); // a dead timer frees its id
    }
    // Conditional on the counter read above: a takeover charge in between makes this a no-op.
    long updated = c.deliveries.updateOne(claimed, Updates.combine(set)).getModifiedCount();
    if (updated == 0) {
      return FailOutcome.LOST;
    }
    return dead ? FailOutcome.DEAD : FailOutcome.RESCHEDULED;
  }

  /** Gives deliveries back without charging: only the claim counter moves. */
  int release(Collection<DeliveryToken> tokens) {
    List<DeliveryToken> current = withCurrentEpoch(tokens);
    if (current.isEmpty()) {
      return 0;
    }
    List<WriteModel<Document>> writes = new ArrayList<>();
    for (DeliveryToken t : current) {
      writes.add(
          new UpdateOneModel<>(
              and(
                  eq(Fields.ID, t.deliveryId()),
                  eq(Fields.LANE_ID, t.lane()),
                  eq(Fields.CLAIMS, t.claims()),
                  eq(Fields.EVENT_ID, t.eventId()),
                  eq(Fields.STATUS, Fields.PENDING)),
              Updates.combine(Updates.inc(Fields.CLAIMS, 1), Updates.set(Fields.PARKED, false))));
    }
    // Ordered: the same token twice releases once (the second finds the counter moved).
    return c.deliveries.bulkWrite(writes, new BulkWriteOptions().ordered(true)).getModifiedCount();
  }

  /** The tokens whose lane still has their epoch. */
  private List<DeliveryToken> withCurrentEpoch(Collection<DeliveryToken> tokens) {
    Set<Integer> laneNumbers = new HashSet<>();
    tokens.forEach(t -> laneNumbers.add(t.lane()));
    Map<Integer, LaneDoc> now = lanes.read(laneNumbers);
    return tokens.stream()
        .filter(t -> now.containsKey(t.lane()) && now.get(t.lane()).epoch() == t.epoch())
        .toList();
  }

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MILLIS);
  }
}
