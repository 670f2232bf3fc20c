package io.relaybus.store;

import java.time.Duration;

/**
 * How long finished things are kept before {@link OutboxStore#purge} removes them.
 *
 * <p>Keep {@code events} longer than the longest redelivery window of any broker or consumer that
 * relies on the inbox: an event's {@code handlers} list is what makes a redelivery a no-op, and
 * after the event is purged the same id counts as new.
 *
 * <p>An age longer than {@link Validation#MAX_AGE} (1,000 years, e.g. {@code
 * ChronoUnit.FOREVER.getDuration()} for "keep forever") counts as that: nothing is that old.
 *
 * @param events events that have no delivery left, by age of publication
 * @param deadLetters dead deliveries, by time of death
 * @param completionHistory completion history rows, by completion time
 */
public record RetentionPolicy(Duration events, Duration deadLetters, Duration completionHistory) {
  public RetentionPolicy {
    requireNotNegative("events", events);
    requireNotNegative("deadLetters", deadLetters);
    requireNotNegative("completionHistory", completionHistory);
    events = Validation.capped(events);
    deadLetters = Validation.capped(deadLetters);
    completionHistory = Validation.capped(completionHistory);
  }

  /** Seven days for everything. */
  public static RetentionPolicy defaults() {
    return new RetentionPolicy(Duration.ofDays(7), Duration.ofDays(7), Duration.ofDays(7));
  }

  private static void requireNotNegative(String name, Duration value) {
    if (value == null || value.isNegative()) {
      throw new IllegalArgumentException(
          "retention " + name + " must be zero or positive, but was " + value);
    }
  }
}
