package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.gt;
import static com.mongodb.client.model.Filters.in;
import static com.mongodb.client.model.Filters.lte;

import com.mongodb.client.model.Accumulators;
import com.mongodb.client.model.Aggregates;
import com.mongodb.client.model.Facet;
import com.mongodb.client.model.Projections;
import com.mongodb.client.model.Sorts;
import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.Lanes;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.IntStream;
import org.bson.Document;
import org.bson.conversions.Bson;

/**
 * Backlog, lane map and filtered dead letters, as the PostgreSQL store computes them. The backlog
 * reads the pending deliveries' due fields and counts in the client (a timer's due time is the
 * later of its due time and its extended deadline, which not every server's aggregation computes
 * alike).
 */
final class MongoOperatorQueries {
  /** Dead letters requeued per update by {@link #requeueMatching}. */
  static final int REQUEUE_BATCH = 1_000;

  private final MongoCollections c;
  private final MongoLanes lanes;
  private final MongoAdmin admin;
  private final Clock clock;

  MongoOperatorQueries(MongoCollections c, MongoLanes lanes, MongoAdmin admin, Clock clock) {
    this.c = c;
    this.lanes = lanes;
    this.admin = admin;
    this.clock = clock;
  }

  List<HandlerBacklog> backlog() {
    Instant now = now();
    InFlight inFlight = InFlight.resolve(c.deliveries, allLanes());
    Map<String, long[]> counts = new TreeMap<>();
    Map<String, Instant[]> oldest = new HashMap<>();
    for (Document d :
        c.deliveries
            .find()
            .projection(
                Projections.include(
                    Fields.HANDLER,
                    Fields.STATUS,
                    Fields.AVAILABLE_AT,
                    Fields.FIRE_AT,
                    Fields.ATTEMPTS,
                    Fields.CREATED_AT))) {
      String handler = d.getString(Fields.HANDLER);
      long[] n = counts.computeIfAbsent(handler, h -> new long[6]);
      Instant[] o = oldest.computeIfAbsent(handler, h -> new Instant[2]);
      if (Fields.DEAD.equals(d.getString(Fields.STATUS))) {
        n[5]++;
        continue;
      }
      n[0]++;
      Instant dueAt = d.getDate(Fields.AVAILABLE_AT).toInstant();
      Date fireAt = d.getDate(Fields.FIRE_AT);
      if (fireAt != null && fireAt.toInstant().isAfter(dueAt)) {
        dueAt = fireAt.toInstant();
      }
      if (!dueAt.isAfter(now)) {
        n[1]++;
        o[1] = o[1] == null || dueAt.isBefore(o[1]) ? dueAt : o[1];
      } else if (d.getInteger(Fields.ATTEMPTS, 0) == 0) {
        n[3]++;
      } else {
        n[4]++;
      }
      n[2] += inFlight.contains(((Number) d.get(Fields.ID)).longValue()) ? 1 : 0;
      Instant created = d.getDate(Fields.CREATED_AT).toInstant();
      o[0] = o[0] == null || created.isBefore(o[0]) ? created : o[0];
    }
    List<HandlerBacklog> result = new ArrayList<>();
    counts.forEach(
        (h, n) -> {
          Instant[] o = oldest.get(h);
          result.add(
              new HandlerBacklog(
                  h, n[0], n[1], n[2], n[3], n[4], n[5], age(o[0], now), age(o[1], now)));
        });
    return result;
  }

  List<LaneStatus> laneStatus() {
    Instant now = now();
    List<LaneDoc> docs = allLanes();
    InFlight inFlight = InFlight.resolve(c.deliveries, docs);
    // counted by the server: one document per lane comes back, not one per pending delivery (a
    // starting task reads this to decide which lanes it may take over). In flight is counted in the
    // same pass ($facet: each pending delivery read feeds both groupings), among the pending
    // deliveries it reads: what the lanes' lists name and was pending when resolved, and is still
    // pending in the pass. Taken from the resolve alone, a delivery completed between the two reads
    // was counted in flight on a lane with nothing pending (reliability row 119a). The ids are
    // matched with the query operator $in (a set lookup per delivery, not a scan of the list).
    long[] pending = new long[Lanes.COUNT];
    long[] flying = new long[Lanes.COUNT];
    Document counts =
        c.deliveries
            .aggregate(
                List.of(
                    Aggregates.match(eq(Fields.STATUS, Fields.PENDING)),
                    Aggregates.facet(
                        new Facet(
                            "pending",
                            Aggregates.group("$" + Fields.LANE_ID, Accumulators.sum("n", 1))),
                        new Facet(
                            "inFlight",
                            Aggregates.match(
                                in(Fields.ID, new ArrayList<>(inFlight.inFlightIds()))),
                            Aggregates.group("$" + Fields.LANE_ID, Accumulators.sum("n", 1))))))
            .first();
    if (counts != null) { // $facet answers one document even for no input; to be safe
      for (Document d : counts.getList("pending", Document.class, List.of())) {
        pending[((Number) d.get(Fields.ID)).intValue()] = ((Number) d.get("n")).longValue();
      }
      for (Document d : counts.getList("inFlight", Document.class, List.of())) {
        flying[((Number) d.get(Fields.ID)).intValue()] = ((Number) d.get("n")).longValue();
      }
    }
    List<LaneStatus> result = new ArrayList<>();
    for (LaneDoc lane : docs) {
      result.add(
          new LaneStatus(
              lane.lane(),
              lane.epoch(),
              lane.owner(),
              lane.group(),
              lane.owner() == null ? null : lane.expiresAt(),
              lane.owner() != null && lane.expiresAt() != null && lane.expiresAt().isAfter(now),
              flying[lane.lane()],
              pending[lane.lane()]));
    }
    return result;
  }

  DeadLetterPage deadLetters(DeadLetterFilter filter, Long afterId, int limit) {
    Bson match = filter(filter, now());
    if (afterId != null) {
      match = and(match, gt(Fields.ID, afterId));
    }
    List<Document> docs =
        c.deliveries
            .find(match)
            .sort(Sorts.ascending(Fields.ID))
            .limit(limit + 1)
            .into(new ArrayList<>());
    boolean more = docs.size() > limit;
    if (more) {
      docs.remove(docs.size() - 1);
    }
    Set<String> eventIds = new HashSet<>();
    docs.forEach(d -> eventIds.add(d.getString(Fields.EVENT_ID)));
    Map<String, String> types = new HashMap<>();
    if (!eventIds.isEmpty()) {
      c.events
          .find(in(Fields.ID, eventIds))
          .projection(Projections.include(Fields.TYPE))
          .forEach(e -> types.put(e.getString(Fields.ID), e.getString(Fields.TYPE)));
    }
    List<DeadLetter> items = new ArrayList<>();
    for (Document d : docs) {
      Object sequence = d.get(Fields.SEQUENCE);
      items.add(
          new DeadLetter(
              ((Number) d.get(Fields.ID)).longValue(),
              d.getString(Fields.EVENT_ID),
              types.get(d.getString(Fields.EVENT_ID)),
              d.getString(Fields.HANDLER),
              d.getInteger(Fields.LANE_ID),
              d.getString(Fields.KEY),
              sequence == null ? null : ((Number) sequence).longValue(),
              d.getInteger(Fields.ATTEMPTS),
              d.getString(Fields.LAST_ERROR),
              d.getDate(Fields.CREATED_AT).toInstant(),
              d.getDate(Fields.UPDATED_AT).toInstant()));
    }
    return new DeadLetterPage(items, more ? items.get(items.size() - 1).id() : null);
  }

  long count(DeadLetterFilter filter) {
    return c.deliveries.countDocuments(filter(filter, now()));
  }

  /**
   * In batches: read the next matching ids, then requeue those that still match (the update repeats
   * the filter with the same clock reading), so a dead letter requeued or purged meanwhile is left
   * alone.
   */
  long requeueMatching(DeadLetterFilter filter) {
    Bson match = filter(filter, now());
    long total = 0;
    long afterId = Long.MIN_VALUE;
    while (true) {
      List<Long> ids = new ArrayList<>();
      c.deliveries
          .find(and(match, gt(Fields.ID, afterId)))
          .sort(Sorts.ascending(Fields.ID))
          .limit(REQUEUE_BATCH)
          .projection(Projections.include(Fields.ID))
          .forEach(d -> ids.add(((Number) d.get(Fields.ID)).longValue()));
      if (ids.isEmpty()) {
        return total;
      }
      total += admin.requeue(and(in(Fields.ID, ids), match));
      afterId = ids.get(ids.size() - 1);
      if (ids.size() < REQUEUE_BATCH) {
        return total;
      }
    }
  }

  private static Bson filter(DeadLetterFilter filter, Instant now) {
    List<Bson> filters = new ArrayList<>();
    filters.add(eq(Fields.STATUS, Fields.DEAD));
    if (filter.handler() != null) {
      filters.add(eq(Fields.HANDLER, filter.handler()));
    }
    if (filter.reasonContains() != null) {
      filters.add(
          com.mongodb.client.model.Filters.regex(
              Fields.LAST_ERROR, literal(filter.reasonContains()), "i"));
    }
    if (filter.olderThan() != null) {
      filters.add(lte(Fields.UPDATED_AT, Date.from(now.minus(filter.olderThan()))));
    }
    if (filter.newerThan() != null) {
      filters.add(gt(Fields.UPDATED_AT, Date.from(now.minus(filter.newerThan()))));
    }
    return and(filters);
  }

  /** The text as a regular expression matching it literally (every non-alphanumeric escaped). */
  static String literal(String text) {
    StringBuilder regex = new StringBuilder();
    text.codePoints()
        .forEach(
            cp -> {
              if (!Character.isLetterOrDigit(cp) && cp < 128) {
                regex.append('\\');
              }
              regex.appendCodePoint(cp);
            });
    return regex.toString();
  }

  private List<LaneDoc> allLanes() {
    Map<Integer, LaneDoc> byLane = lanes.read(IntStream.range(0, Lanes.COUNT).boxed().toList());
    return new ArrayList<>(new TreeMap<>(byLane).values());
  }

  private static Duration age(Instant since, Instant now) {
    if (since == null) {
      return Duration.ZERO;
    }
    Duration age = Duration.between(since, now);
    return age.isNegative() ? Duration.ZERO : age;
  }

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MILLIS);
  }
}
