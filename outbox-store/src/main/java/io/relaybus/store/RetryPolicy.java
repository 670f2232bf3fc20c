package io.relaybus.store;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How failed attempts are retried: exponential backoff {@code min(cap, base * 2^(n-1))} after the
 * n-th failure, spread by {@code +/- jitter} (a fraction, 0 to 1), and dead-lettered once {@code
 * maxAttempts} attempts have failed. A takeover of a lane counts as a failed attempt for each
 * delivery that was in flight there (a crash is a lost attempt).
 *
 * @param maxAttempts attempts before a delivery is dead, at least 1
 * @param base first backoff
 * @param cap longest backoff
 * @param jitter relative spread of each backoff, 0 to 1
 */
public record RetryPolicy(int maxAttempts, Duration base, Duration cap, double jitter) {
  public RetryPolicy {
    Validation.positive("maxAttempts", maxAttempts);
    if (base == null || base.isNegative()) {
      throw new IllegalArgumentException("backoff base must be zero or positive, but was " + base);
    }
    if (cap == null || cap.compareTo(base) < 0) {
      throw new IllegalArgumentException(
          "backoff cap must be at least the base (" + base + "), but was " + cap);
    }
    if (!(jitter >= 0 && jitter <= 1)) {
      throw new IllegalArgumentException(
          "backoff jitter must be between 0 and 1, but was " + jitter);
    }
  }

  /** 10 attempts, backoff 1 s doubling up to 5 min, 20% jitter. */
  public static RetryPolicy defaults() {
    return new RetryPolicy(10, Duration.ofSeconds(1), Duration.ofMinutes(5), 0.2);
  }

  /** The backoff after the {@code failures}-th failed attempt (1-based). */
  public Duration backoff(int failures) {
    double exponential = base.toMillis() * Math.pow(2, Math.max(0, failures - 1));
    double capped = Math.min(cap.toMillis(), exponential);
    double spread = jitter == 0 ? 0 : ThreadLocalRandom.current().nextDouble(-jitter, jitter);
    return Duration.ofMillis(Math.max(0, Math.round(capped * (1 + spread))));
  }
}
