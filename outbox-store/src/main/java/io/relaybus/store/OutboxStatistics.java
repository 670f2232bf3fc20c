package io.relaybus.store;

import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * A snapshot of the outbox.
 *
 * @param handlers counts per handler, sorted by handler name
 * @param oldestPendingAge age of the oldest pending delivery (by creation), {@link Duration#ZERO}
 *     when nothing is pending
 * @param laneBacklog pending deliveries per lane, index = lane (256 entries)
 */
public record OutboxStatistics(
    Map<String, HandlerCounts> handlers, Duration oldestPendingAge, List<Long> laneBacklog) {

  /**
   * @param pending pending deliveries (due, in flight or waiting for a retry)
   * @param due pending deliveries whose time has come
   * @param dead dead letters
   * @param completed completion history rows (0 without history)
   */
  public record HandlerCounts(long pending, long due, long dead, long completed) {}

  public OutboxStatistics {
    handlers = java.util.Collections.unmodifiableMap(new java.util.TreeMap<>(handlers));
    laneBacklog = List.copyOf(laneBacklog);
  }

  public long totalPending() {
    return handlers.values().stream().mapToLong(HandlerCounts::pending).sum();
  }

  public long totalDead() {
    return handlers.values().stream().mapToLong(HandlerCounts::dead).sum();
  }
}
