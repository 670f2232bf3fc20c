package io.relaybus.store;

import java.time.Duration;

/**
 * Which dead letters an admin listing, count or requeue selects. Every filter is optional ({@code
 * null} = any). Ages count from the time of death (the same clock dead-letter retention uses); an
 * age longer than {@link Validation#MAX_AGE} (1,000 years) counts as that.
 *
 * @param handler only this handler
 * @param reasonContains only reasons that contain this text, ignoring case
 * @param olderThan only dead letters that died at least this long ago
 * @param newerThan only dead letters that died less than this long ago
 */
public record DeadLetterFilter(
    String handler, String reasonContains, Duration olderThan, Duration newerThan) {

  public DeadLetterFilter {
    if (handler != null) {
      Validation.handler(handler);
    }
    if (reasonContains != null && reasonContains.isEmpty()) {
      reasonContains = null;
    }
    if (reasonContains != null) {
      Validation.storable("dead letter filter reasonContains", reasonContains);
    }
    requireNotNegative("olderThan", olderThan);
    requireNotNegative("newerThan", newerThan);
    olderThan = Validation.capped(olderThan);
    newerThan = Validation.capped(newerThan);
  }

  /** Every dead letter. */
  public static DeadLetterFilter all() {
    return new DeadLetterFilter(null, null, null, null);
  }

  public DeadLetterFilter withHandler(String handler) {
    return new DeadLetterFilter(handler, reasonContains, olderThan, newerThan);
  }

  public DeadLetterFilter withReasonContaining(String text) {
    return new DeadLetterFilter(handler, text, olderThan, newerThan);
  }

  public DeadLetterFilter diedBefore(Duration olderThan) {
    return new DeadLetterFilter(handler, reasonContains, olderThan, newerThan);
  }

  public DeadLetterFilter diedWithin(Duration newerThan) {
    return new DeadLetterFilter(handler, reasonContains, olderThan, newerThan);
  }

  private static void requireNotNegative(String name, Duration value) {
    if (value != null && value.isNegative()) {
      throw new IllegalArgumentException(
          "dead letter filter " + name + " must be zero or positive, but was " + value);
    }
  }
}
