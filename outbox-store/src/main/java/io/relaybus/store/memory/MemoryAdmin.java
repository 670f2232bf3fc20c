package io.relaybus.store.memory;

import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStatistics.HandlerCounts;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import java.time.Duration;
import java.time.Instant;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Predicate;
import java.util.stream.Stream;

/** Listings, statistics, requeue and retention over the tables. Callers hold the store's lock. */
final class MemoryAdmin {
  private final MemoryTables tables;

  MemoryAdmin(MemoryTables tables) {
    this.tables = tables;
  }

  /**
   * Brings the dead ones among these back, due now with a fresh attempt budget and no last error;
   * skips nulls (unknown ids) and pending ones.
   */
  int requeue(List<StoredDelivery> deliveries, Instant now) {
    int requeued = 0;
    for (StoredDelivery delivery : deliveries) {
      if (delivery == null || delivery.isPending()) {
        continue;
      }
      delivery.status = DeliveryStatus.PENDING;
      delivery.attempts = 0;
      delivery.claims++;
      delivery.availableAt = now;
      delivery.lastError = null;
      delivery.updatedAt = now;
      // A requeued dead timer goes out as a plain delivery: its id may be taken again by now.
      delivery.timerId = null;
      delivery.fireAt = null;
      requeued++;
    }
    return requeued;
  }

  /**
   * Keyset page in id order. Without a status filter only live deliveries (pending and dead) are
   * listed; the completion history is listed with {@link DeliveryStatus#COMPLETED} only.
   */
  DeliveryPage list(DeliveryQuery query) {
    long afterId = query.afterId() == null ? Long.MIN_VALUE : query.afterId();
    Stream<DeliveryView> rows =
        query.status() == DeliveryStatus.COMPLETED
            ? tables.history.tailMap(afterId, false).values().stream()
            : tables.deliveries.tailMap(afterId, false).values().stream()
                .filter(d -> query.status() == null || d.status == query.status())
                .map(d -> d.view(tables.isInFlight(d)));
    List<DeliveryView> items =
        rows.filter(v -> query.handler() == null || v.handler().equals(query.handler()))
            .filter(v -> query.key() == null || query.key().equals(v.key()))
            .filter(v -> query.eventId() == null || v.eventId().equals(query.eventId()))
            .limit(query.limit() + 1L)
            .toList();
    if (items.size() <= query.limit()) {
      return new DeliveryPage(items, null);
    }
    List<DeliveryView> page = items.subList(0, query.limit());
    return new DeliveryPage(page, page.get(page.size() - 1).id());
  }

  /**
   * "Due" counts in-flight deliveries too: it is a count over due times, as in the SQL store. A
   * timer extended past its first deadline is due at its new one ({@code fireAt}), as in {@link
   * MemoryOperatorQueries#backlog}, also before a claim re-armed it (reliability row 116).
   */
  OutboxStatistics statistics(Instant now) {
    Map<String, Counts> counts = new TreeMap<>();
    Long[] backlog = new Long[Lanes.COUNT];
    Arrays.fill(backlog, 0L);
    Instant oldest = null;
    for (StoredDelivery d : tables.deliveries.values()) {
      Counts c = counts.computeIfAbsent(d.handler, h -> new Counts());
      if (d.isPending()) {
        c.pending++;
        c.due += MemoryOperatorQueries.dueAt(d).isAfter(now) ? 0 : 1;
        backlog[d.lane]++;
        oldest = oldest == null || d.createdAt.isBefore(oldest) ? d.createdAt : oldest;
      } else {
        c.dead++;
      }
    }
    for (DeliveryView completed : tables.history.values()) {
      counts.computeIfAbsent(completed.handler(), h -> new Counts()).completed++;
    }
    Map<String, HandlerCounts> handlers = new TreeMap<>();
    counts.forEach(
        (h, c) -> handlers.put(h, new HandlerCounts(c.pending, c.due, c.dead, c.completed)));
    Duration age = oldest == null ? Duration.ZERO : Duration.between(oldest, now);
    return new OutboxStatistics(
        handlers, age.isNegative() ? Duration.ZERO : age, Arrays.asList(backlog));
  }

  private static final class Counts {
    long pending;
    long due;
    long dead;
    long completed;
  }

  /**
   * Removes, in this order: dead letters older than {@code deadLetters} (by time of death), history
   * rows older than {@code completionHistory}, events older than {@code events} that have no
   * delivery left, and counters of keys that have no delivery left (pending or dead) and were last
   * used before {@code events} ago. Dead letters go first so their events can go in the same purge.
   * A dead letter keeps its key's counter: requeued, it is pending again with its sequence, and the
   * key's next event must get a later one (reliability row 117).
   */
  PurgeResult purge(RetentionPolicy retention, Instant now) {
    Instant deadCutoff = now.minus(retention.deadLetters());
    List<StoredDelivery> expiredDead =
        tables.deliveries.values().stream()
            .filter(d -> !d.isPending() && d.updatedAt.isBefore(deadCutoff))
            .toList();
    expiredDead.forEach(tables::deleteDelivery);

    Instant historyCutoff = now.minus(retention.completionHistory());
    long history = removeIf(tables.history.values(), v -> v.updatedAt().isBefore(historyCutoff));

    Instant eventCutoff = now.minus(retention.events());
    Set<String> withDeliveries = new HashSet<>();
    Set<String> keysInUse = new HashSet<>();
    for (StoredDelivery d : tables.deliveries.values()) {
      withDeliveries.add(d.eventId);
      if (d.key != null) {
        keysInUse.add(d.key);
      }
    }
    long events =
        removeIf(
            tables.events.values(),
            e -> e.createdAt.isBefore(eventCutoff) && !withDeliveries.contains(e.id));
    long counters =
        removeIf(
            tables.keyCounters.entrySet(),
            e -> e.getValue().lastUsedAt.isBefore(eventCutoff) && !keysInUse.contains(e.getKey()));
    return new PurgeResult(events, expiredDead.size(), history, counters);
  }

  private static <T> long removeIf(Collection<T> rows, Predicate<T> old) {
    int before = rows.size();
    rows.removeIf(old);
    return before - rows.size();
  }
}
