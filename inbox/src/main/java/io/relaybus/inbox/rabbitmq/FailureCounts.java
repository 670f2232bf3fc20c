package io.relaybus.inbox.rabbitmq;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * How often each message failed in this consumer, by event id. A classic queue does not count
 * redeliveries, so the consumer does; a quorum queue's {@code x-delivery-count} header is used when
 * it says more. The count lives in memory: a restarted consumer starts again from zero (or from the
 * quorum queue's count). Bounded, oldest first out, so a flood of failing ids cannot grow it.
 */
final class FailureCounts {
  static final int MAX_TRACKED = 10_000;

  private final Map<String, Integer> failures =
      new LinkedHashMap<>(16, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Integer> eldest) {
          return size() > MAX_TRACKED;
        }
      };

  /**
   * Records one more failure of {@code eventId}; returns its failures so far.
   *
   * @param deliveryCount the queue's {@code x-delivery-count} (deliveries before this one), or null
   */
  synchronized int failed(String eventId, Long deliveryCount) {
    int counted = failures.merge(eventId, 1, Integer::sum);
    if (deliveryCount != null && deliveryCount + 1 > counted) {
      counted = (int) Math.min(Integer.MAX_VALUE, deliveryCount + 1);
      failures.put(eventId, counted);
    }
    return counted;
  }

  /** The failures of {@code eventId} so far, 0 when none is counted. */
  synchronized int failures(String eventId) {
    return failures.getOrDefault(eventId, 0);
  }

  /**
   * Counts {@code eventId} as failed {@code spent} times at least: a poison message whose reject
   * may not have reached the broker is rejected when it comes back, without its work.
   */
  synchronized void spend(String eventId, int spent) {
    failures.merge(eventId, spent, Math::max);
  }

  synchronized void forget(String eventId) {
    failures.remove(eventId);
  }
}
