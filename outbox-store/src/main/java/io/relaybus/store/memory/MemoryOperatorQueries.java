package io.relaybus.store.memory;

import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.Lanes;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * Backlog, lane map and filtered dead letters, as the PostgreSQL store computes them. Callers hold
 * the store's lock.
 */
final class MemoryOperatorQueries {
  private final MemoryTables tables;

  MemoryOperatorQueries(MemoryTables tables) {
    this.tables = tables;
  }

  /** Due: both the due time and a timer's (extended) deadline have come. */
  static Instant dueAt(StoredDelivery d) {
    return d.fireAt != null && d.fireAt.isAfter(d.availableAt) ? d.fireAt : d.availableAt;
  }

  List<HandlerBacklog> backlog(Instant now) {
    Map<String, long[]> counts = new TreeMap<>();
    Map<String, Instant[]> oldest = new TreeMap<>();
    for (StoredDelivery d : tables.deliveries.values()) {
      long[] c = counts.computeIfAbsent(d.handler, h -> new long[6]);
      Instant[] o = oldest.computeIfAbsent(d.handler, h -> new Instant[2]);
      if (!d.isPending()) {
        c[5]++;
        continue;
      }
      c[0]++;
      Instant dueAt = dueAt(d);
      if (!dueAt.isAfter(now)) {
        c[1]++;
        o[1] = o[1] == null || dueAt.isBefore(o[1]) ? dueAt : o[1];
      } else if (d.attempts == 0) {
        c[3]++;
      } else {
        c[4]++;
      }
      c[2] += tables.isInFlight(d) ? 1 : 0;
      o[0] = o[0] == null || d.createdAt.isBefore(o[0]) ? d.createdAt : o[0];
    }
    List<HandlerBacklog> result = new ArrayList<>();
    counts.forEach(
        (h, c) -> {
          Instant[] o = oldest.get(h);
          result.add(
              new HandlerBacklog(
                  h, c[0], c[1], c[2], c[3], c[4], c[5], age(o[0], now), age(o[1], now)));
        });
    return result;
  }

  List<LaneStatus> lanes(Instant now) {
    List<LaneStatus> result = new ArrayList<>(Lanes.COUNT);
    for (LaneState lane : tables.lanes) {
      long inFlight =
          lane.inFlight.stream()
              .map(tables.deliveries::get)
              .filter(d -> d != null && d.isPending())
              .count();
      long pending = lane.deliveries.values().stream().filter(StoredDelivery::isPending).count();
      result.add(
          new LaneStatus(
              lane.lane,
              lane.epoch,
              lane.owner,
              lane.group,
              lane.expiresAt,
              lane.isLive(now),
              inFlight,
              pending));
    }
    return result;
  }

  DeadLetterPage deadLetters(DeadLetterFilter filter, Long afterId, int limit, Instant now) {
    List<DeadLetter> items =
        matching(filter, afterId, now).limit(limit + 1L).map(this::deadLetter).toList();
    if (items.size() <= limit) {
      return new DeadLetterPage(items, null);
    }
    List<DeadLetter> page = items.subList(0, limit);
    return new DeadLetterPage(page, page.get(page.size() - 1).id());
  }

  long count(DeadLetterFilter filter, Instant now) {
    return matching(filter, null, now).count();
  }

  List<StoredDelivery> all(DeadLetterFilter filter, Instant now) {
    return matching(filter, null, now).toList();
  }

  private Stream<StoredDelivery> matching(DeadLetterFilter filter, Long afterId, Instant now) {
    long after = afterId == null ? Long.MIN_VALUE : afterId;
    String reason =
        filter.reasonContains() == null ? null : filter.reasonContains().toLowerCase(Locale.ROOT);
    return tables.deliveries.tailMap(after, false).values().stream()
        .filter(d -> !d.isPending())
        .filter(d -> filter.handler() == null || d.handler.equals(filter.handler()))
        .filter(
            d ->
                reason == null
                    || (d.lastError != null
                        && d.lastError.toLowerCase(Locale.ROOT).contains(reason)))
        .filter(
            d -> filter.olderThan() == null || !d.updatedAt.isAfter(now.minus(filter.olderThan())))
        .filter(
            d -> filter.newerThan() == null || d.updatedAt.isAfter(now.minus(filter.newerThan())));
  }

  private DeadLetter deadLetter(StoredDelivery d) {
    StoredEvent event = tables.events.get(d.eventId);
    return new DeadLetter(
        d.id,
        d.eventId,
        event == null ? null : event.type,
        d.handler,
        d.lane,
        d.key,
        d.sequence,
        d.attempts,
        d.lastError,
        d.createdAt,
        d.updatedAt);
  }

  private static Duration age(Instant since, Instant now) {
    if (since == null) {
      return Duration.ZERO;
    }
    Duration age = Duration.between(since, now);
    return age.isNegative() ? Duration.ZERO : age;
  }
}
