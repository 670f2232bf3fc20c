package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.gt;
import static com.mongodb.client.model.Filters.in;
import static com.mongodb.client.model.Filters.lte;

import com.mongodb.client.MongoCollection;
import com.mongodb.client.MongoCursor;
import com.mongodb.client.model.Accumulators;
import com.mongodb.client.model.Aggregates;
import com.mongodb.client.model.Facet;
import com.mongodb.client.model.Filters;
import com.mongodb.client.model.Projections;
import com.mongodb.client.model.Sorts;
import com.mongodb.client.model.Updates;
import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStatistics.HandlerCounts;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.bson.Document;
import org.bson.conversions.Bson;

/**
 * Listings, statistics, requeue and retention. Admin work: listings and statistics scan, as in
 * PostgreSQL (every index on deliveries is paid for on the hot path); retention deletes in batches
 * through the dead-letter, event and history indexes.
 */
final class MongoAdmin {
  /** Documents deleted per statement, so a large purge never runs one huge delete. */
  static final int PURGE_BATCH = 1_000;

  private final MongoCollections c;
  private final MongoLanes lanes;
  private final Clock clock;

  MongoAdmin(MongoCollections collections, MongoLanes lanes, Clock clock) {
    this.c = collections;
    this.lanes = lanes;
    this.clock = clock;
  }

  /** The ids of {@code ids} that {@code lane} still holds, pending or dead (by _id). */
  Set<Long> remaining(int lane, Collection<Long> ids) {
    Set<Long> held = new HashSet<>();
    for (Document d :
        c.deliveries
            .find(and(in(Fields.ID, ids), eq(Fields.LANE_ID, lane)))
            .projection(Projections.include(Fields.ID))) {
      held.add(d.getLong(Fields.ID));
    }
    return held;
  }

  DeliveryPage list(DeliveryQuery query) {
    boolean history = query.status() == DeliveryStatus.COMPLETED;
    List<Bson> filters = new ArrayList<>();
    if (!history && query.status() != null) {
      filters.add(eq(Fields.STATUS, query.status().label()));
    }
    if (query.handler() != null) {
      filters.add(eq(Fields.HANDLER, query.handler()));
    }
    if (query.key() != null) {
      filters.add(eq(Fields.KEY, query.key()));
    }
    if (query.eventId() != null) {
      filters.add(eq(Fields.EVENT_ID, query.eventId()));
    }
    if (query.afterId() != null) {
      filters.add(gt(Fields.ID, query.afterId()));
    }
    MongoCollection<Document> source = history ? c.completed : c.deliveries;
    List<Document> docs =
        source
            .find(filters.isEmpty() ? Filters.empty() : and(filters))
            .sort(Sorts.ascending(Fields.ID))
            .limit(query.limit() + 1)
            .into(new ArrayList<>());
    boolean more = docs.size() > query.limit();
    if (more) {
      docs.remove(docs.size() - 1);
    }
    InFlight inFlight = null;
    if (!history && !docs.isEmpty()) {
      Set<Integer> laneNumbers = new HashSet<>();
      docs.forEach(d -> laneNumbers.add(d.getInteger(Fields.LANE_ID)));
      inFlight = InFlight.resolve(c.deliveries, lanes.read(laneNumbers).values());
    }
    List<DeliveryView> items = new ArrayList<>();
    for (Document d : docs) {
      items.add(history ? completedView(d) : view(d, inFlight));
    }
    return new DeliveryPage(items, more ? items.get(items.size() - 1).id() : null);
  }

  private static DeliveryView view(Document d, InFlight inFlight) {
    long id = ((Number) d.get(Fields.ID)).longValue();
    DeliveryStatus status = DeliveryStatus.parse(d.getString(Fields.STATUS));
    return new DeliveryView(
        id,
        d.getString(Fields.EVENT_ID),
        d.getString(Fields.HANDLER),
        d.getInteger(Fields.LANE_ID),
        d.getString(Fields.KEY),
        sequence(d),
        status,
        status == DeliveryStatus.PENDING && inFlight.contains(id),
        d.getInteger(Fields.ATTEMPTS),
        d.getDate(Fields.AVAILABLE_AT).toInstant(),
        d.getString(Fields.LAST_ERROR),
        d.getDate(Fields.CREATED_AT).toInstant(),
        d.getDate(Fields.UPDATED_AT).toInstant());
  }

  private static DeliveryView completedView(Document d) {
    Instant completedAt = d.getDate(Fields.COMPLETED_AT).toInstant();
    return new DeliveryView(
        ((Number) d.get(Fields.ID)).longValue(),
        d.getString(Fields.EVENT_ID),
        d.getString(Fields.HANDLER),
        d.getInteger(Fields.LANE_ID),
        d.getString(Fields.KEY),
        sequence(d),
        DeliveryStatus.COMPLETED,
        false,
        d.getInteger(Fields.ATTEMPTS),
        completedAt,
        null,
        d.getDate(Fields.CREATED_AT).toInstant(),
        completedAt);
  }

  /**
   * The per-handler counts and the lanes' backlog come from one aggregation of the deliveries: one
   * pass whose documents feed both groupings ({@code $facet}), so the two add up however deliveries
   * move during the call (two aggregations could each see a different outbox). The completion
   * history is read before it: a completion deletes the delivery, then writes its history, so a
   * delivery completed during the call is counted in neither, never both.
   */
  OutboxStatistics statistics() {
    Date now = Date.from(now());
    Map<String, long[]> counts = new TreeMap<>();
    for (Document d :
        c.completed.aggregate(
            List.of(Aggregates.group("$" + Fields.HANDLER, Accumulators.sum("n", 1))))) {
      counts.computeIfAbsent(d.getString(Fields.ID), h -> new long[4])[3] +=
          ((Number) d.get("n")).longValue();
    }
    Document pending = new Document("$eq", List.of("$" + Fields.STATUS, Fields.PENDING));
    // a timer extended past its first deadline is due at its new one (fireAt), as in the backlog,
    // also before a claim re-armed it (reliability row 116)
    Document due =
        new Document(
            "$and",
            List.of(
                pending,
                new Document("$lte", List.of("$" + Fields.AVAILABLE_AT, now)),
                new Document(
                    "$lte",
                    List.of(
                        new Document("$ifNull", List.of("$" + Fields.FIRE_AT, new Date(0))),
                        now))));
    Document dead = new Document("$eq", List.of("$" + Fields.STATUS, Fields.DEAD));
    Document deliveries =
        c.deliveries
            .aggregate(
                List.of(
                    Aggregates.facet(
                        new Facet(
                            "handlers",
                            Aggregates.group(
                                "$" + Fields.HANDLER,
                                Accumulators.sum("pending", countIf(pending)),
                                Accumulators.sum("due", countIf(due)),
                                Accumulators.sum("dead", countIf(dead)))),
                        new Facet(
                            "lanes",
                            Aggregates.match(eq(Fields.STATUS, Fields.PENDING)),
                            Aggregates.group(
                                "$" + Fields.LANE_ID,
                                Accumulators.sum("n", 1),
                                Accumulators.min("oldest", "$" + Fields.CREATED_AT))))))
            .first();
    if (deliveries == null) { // $facet answers one document even for no input; to be safe
      deliveries = new Document();
    }
    for (Document d : deliveries.getList("handlers", Document.class, List.of())) {
      long[] n = counts.computeIfAbsent(d.getString(Fields.ID), h -> new long[4]);
      n[0] = ((Number) d.get("pending")).longValue();
      n[1] = ((Number) d.get("due")).longValue();
      n[2] = ((Number) d.get("dead")).longValue();
    }
    Map<String, HandlerCounts> handlers = new TreeMap<>();
    counts.forEach((h, n) -> handlers.put(h, new HandlerCounts(n[0], n[1], n[2], n[3])));

    Long[] backlog = new Long[Lanes.COUNT];
    Arrays.fill(backlog, 0L);
    Date oldest = null;
    for (Document d : deliveries.getList("lanes", Document.class, List.of())) {
      backlog[((Number) d.get(Fields.ID)).intValue()] = ((Number) d.get("n")).longValue();
      Date laneOldest = d.getDate("oldest");
      if (oldest == null || laneOldest.before(oldest)) {
        oldest = laneOldest;
      }
    }
    Duration age =
        oldest == null
            ? Duration.ZERO
            : Duration.ofMillis(Math.max(0, now.getTime() - oldest.getTime()));
    return new OutboxStatistics(handlers, age, List.of(backlog));
  }

  /** Dead deliveries back to pending, due now, fresh budget; {@code filter} narrows the dead. */
  int requeue(Bson filter) {
    Date now = Date.from(now());
    return (int)
        c.deliveries
            .updateMany(
                and(eq(Fields.STATUS, Fields.DEAD), filter),
                Updates.combine(
                    Updates.set(Fields.STATUS, Fields.PENDING),
                    Updates.set(Fields.ATTEMPTS, 0),
                    Updates.inc(Fields.CLAIMS, 1),
                    Updates.set(Fields.PARKED, false),
                    Updates.set(Fields.AVAILABLE_AT, now),
                    Updates.set(Fields.UPDATED_AT, now),
                    Updates.unset(Fields.LAST_ERROR),
                    // a requeued dead timer goes out as a plain delivery
                    Updates.unset(Fields.TIMER_ID),
                    Updates.unset(Fields.FIRE_AT)))
            .getModifiedCount();
  }

  // Cut-offs are inclusive (lte): MongoDB dates have millisecond resolution, so with a zero
  // retention a row finished in the same millisecond as the purge must count as old enough (with
  // lt the contract test retentionPurgesOnlyWhatIsFinishedAndOldEnough failed now and then).
  PurgeResult purge(RetentionPolicy retention) {
    Instant now = now();
    Date deadBefore = Date.from(now.minus(retention.deadLetters()));
    long dead =
        deleteInBatches(
            c.deliveries, and(eq(Fields.STATUS, Fields.DEAD), lte(Fields.UPDATED_AT, deadBefore)));
    long events = purgeEvents(Date.from(now.minus(retention.events())));
    long history =
        deleteInBatches(
            c.completed,
            lte(Fields.COMPLETED_AT, Date.from(now.minus(retention.completionHistory()))));
    long keys = purgeKeys(Date.from(now.minus(retention.events())));
    return new PurgeResult(events, dead, history, keys);
  }

  private static long deleteInBatches(MongoCollection<Document> collection, Bson filter) {
    long total = 0;
    while (true) {
      List<Object> ids = new ArrayList<>();
      collection
          .find(filter)
          .projection(Projections.include(Fields.ID))
          .limit(PURGE_BATCH)
          .forEach(d -> ids.add(d.get(Fields.ID)));
      if (ids.isEmpty()) {
        return total;
      }
      total += collection.deleteMany(and(in(Fields.ID, ids), filter)).getDeletedCount();
      if (ids.size() < PURGE_BATCH) {
        return total;
      }
    }
  }

  /**
   * Events older than the retention with no delivery left. The delete re-checks each event's
   * handler count as read: a publisher adds a delivery to an existing event before it adds the
   * handler to the event's list, so a delivery the check did not see yet comes with a longer list
   * by the time of the delete (the event stays), or after it (the publisher finds the event gone
   * and publishes it as new, see MongoPublisher).
   */
  private long purgeEvents(Date before) {
    long total = 0;
    Bson old = lte(Fields.CREATED_AT, before);
    try (MongoCursor<Document> cursor =
        c.events.find(old).projection(Projections.include(Fields.ID, Fields.HANDLERS)).iterator()) {
      while (cursor.hasNext()) {
        Map<String, Integer> chunk = new HashMap<>();
        while (cursor.hasNext() && chunk.size() < PURGE_BATCH) {
          Document event = cursor.next();
          chunk.put(
              event.getString(Fields.ID),
              event.getList(Fields.HANDLERS, String.class, List.of()).size());
        }
        chunk
            .keySet()
            .removeAll(
                c.deliveries
                    .distinct(Fields.EVENT_ID, in(Fields.EVENT_ID, chunk.keySet()), String.class)
                    .into(new HashSet<>()));
        Map<Integer, List<String>> bySize = new TreeMap<>();
        chunk.forEach((id, size) -> bySize.computeIfAbsent(size, n -> new ArrayList<>()).add(id));
        for (Map.Entry<Integer, List<String>> group : bySize.entrySet()) {
          total +=
              c.events
                  .deleteMany(
                      and(
                          in(Fields.ID, group.getValue()),
                          Filters.size(Fields.HANDLERS, group.getKey()),
                          old))
                  .getDeletedCount();
        }
      }
    }
    return total;
  }

  /**
   * Counters of keys with no delivery left, pending or dead, untouched for the retention. The
   * delete re-checks the sequence as read, so a publisher that took a sequence after the read keeps
   * the counter (in a transaction its deliveries commit with the sequence, so one the check did not
   * see comes with a new sequence); once nothing of a key is left its sequence may restart safely.
   * A dead letter keeps it: requeued, it is pending again with its sequence, and the key's next
   * event must get a later one (until 2026-12-07 the counter went, the sequence restarted below the
   * dead letter's and the newer event went first; reliability row 117). Dead letters are few: they
   * are looked up through the dead-letter purge's index, which holds only them.
   *
   * <p>The looks are separate queries, not a snapshot: a delivery that is pending at the first and
   * dead at the second was seen; one that was dead at the first and requeued before the second is
   * pending at the third. Only a requeued delivery claimed and dead-lettered again within the
   * second look could slip through all three.
   *
   * <p>Without transactions a publisher takes the sequence, then writes its deliveries: a counter
   * carrying an unexpired reservation (a publish under way) is kept, whatever its age. The check is
   * on the counter as read; the delete's check of the sequence covers what comes after the read (a
   * reservation comes with a new sequence, and one released before the read was released after its
   * deliveries were written, which the looks below see). Until 2026-12-07 a purge between the two
   * writes, with an events retention shorter than that pause, removed the counter and the key's
   * next event, numbered from a restarted sequence, went before the one being written (reliability
   * row 152). Left: a publisher slower than its reservation's minute.
   */
  private long purgeKeys(Date before) {
    long total = 0;
    Bson old = lte(Fields.UPDATED_AT, before);
    Date now = Date.from(now());
    try (MongoCursor<Document> cursor =
        c.keys
            .find(old)
            .projection(Projections.include(Fields.ID, Fields.SEQUENCE, Fields.RESERVED))
            .iterator()) {
      while (cursor.hasNext()) {
        Map<String, Long> chunk = new HashMap<>();
        while (cursor.hasNext() && chunk.size() < PURGE_BATCH) {
          Document counter = cursor.next();
          if (!reservedAt(counter, now)) {
            chunk.put(counter.getString(Fields.ID), sequence(counter));
          }
        }
        Set<Integer> laneNumbers = new HashSet<>();
        chunk.keySet().forEach(k -> laneNumbers.add(Lanes.laneOf(k, k)));
        // Pending, dead, then pending again: a delivery leaves pending only to go (completed) or
        // to die, which the look for the dead after it sees; a dead letter requeued after the look
        // for the dead went through it is pending at the second look for the pending (until
        // 2026-12-07 there was none: its key's counter went; reliability row 137).
        for (String status : List.of(Fields.PENDING, Fields.DEAD, Fields.PENDING)) {
          if (chunk.isEmpty()) {
            break;
          }
          chunk
              .keySet()
              .removeAll(
                  c.deliveries
                      .distinct(
                          Fields.KEY,
                          and(
                              in(Fields.LANE_ID, laneNumbers),
                              in(Fields.KEY, chunk.keySet()),
                              eq(Fields.STATUS, status)),
                          String.class)
                      .into(new HashSet<>()));
        }
        if (!chunk.isEmpty()) {
          List<Bson> unchanged = new ArrayList<>();
          chunk.forEach((k, seq) -> unchanged.add(and(eq(Fields.ID, k), eq(Fields.SEQUENCE, seq))));
          total += c.keys.deleteMany(and(Filters.or(unchanged), old)).getDeletedCount();
        }
      }
    }
    return total;
  }

  /**
   * Whether a publisher without a transaction holds a sequence of the counter's key that it has not
   * written yet (an unexpired reservation, see MongoPublisher#nextSequence).
   */
  private static boolean reservedAt(Document counter, Date now) {
    for (Document r : counter.getList(Fields.RESERVED, Document.class, List.of())) {
      Date expires = r.getDate(Fields.RESERVATION_EXPIRES);
      if (expires != null && expires.after(now)) {
        return true;
      }
    }
    return false;
  }

  private static Document countIf(Document condition) {
    return new Document("$cond", List.of(condition, 1, 0));
  }

  static Bson requeueFilter(Collection<Long> ids) {
    return in(Fields.ID, ids);
  }

  private static Long sequence(Document d) {
    Object sequence = d.get(Fields.SEQUENCE);
    return sequence == null ? null : ((Number) sequence).longValue();
  }

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MILLIS);
  }
}
