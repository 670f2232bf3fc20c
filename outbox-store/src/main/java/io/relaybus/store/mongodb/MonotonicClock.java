package io.relaybus.store.mongodb;

import java.time.Clock;
import java.time.Instant;
import java.time.ZoneId;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The store's clock, never going back: after the process clock steps back (NTP, a VM resumed from a
 * snapshot) it stays at the latest instant it gave until the clock passes it again. Due times are
 * written and compared on this process's clock; read from a stepped-back clock, everything
 * published before the step would wait for the clock to catch up, and its key with it.
 */
final class MonotonicClock extends Clock {
  private final Clock clock;
  private final AtomicReference<Instant> latest = new AtomicReference<>(Instant.MIN);

  MonotonicClock(Clock clock) {
    this.clock = clock;
  }

  @Override
  public Instant instant() {
    Instant now = clock.instant();
    return latest.accumulateAndGet(now, (a, b) -> a.isAfter(b) ? a : b);
  }

  @Override
  public ZoneId getZone() {
    return clock.getZone();
  }

  @Override
  public Clock withZone(ZoneId zone) {
    return new MonotonicClock(clock.withZone(zone));
  }
}
