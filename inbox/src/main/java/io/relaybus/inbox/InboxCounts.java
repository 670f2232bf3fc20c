package io.relaybus.inbox;

import java.util.concurrent.atomic.AtomicLong;

/**
 * What a broker adapter did with the messages it received, since it started: handled (the work ran
 * and committed), skipped as redeliveries, failed attempts, and messages it could not handle at all
 * (dead-lettered or skipped as invalid). For health checks and metrics; thread-safe.
 */
public final class InboxCounts {
  private final AtomicLong handled = new AtomicLong();
  private final AtomicLong skipped = new AtomicLong();
  private final AtomicLong failures = new AtomicLong();
  private final AtomicLong rejected = new AtomicLong();

  /** Counts the outcome of a message that was handled or skipped (called by the adapters). */
  public void count(HandleOutcome outcome) {
    (outcome == HandleOutcome.HANDLED ? handled : skipped).incrementAndGet();
  }

  /** Counts a failed attempt (called by the adapters). */
  public void countFailure() {
    failures.incrementAndGet();
  }

  /** Counts a message that could never be handled (called by the adapters). */
  public void countRejected() {
    rejected.incrementAndGet();
  }

  /** Messages whose work ran and committed. */
  public long handled() {
    return handled.get();
  }

  /** Messages skipped because their handler had the event already. */
  public long skipped() {
    return skipped.get();
  }

  /** Failed attempts (each retry of a message counts). */
  public long failures() {
    return failures.get();
  }

  /**
   * Messages that could never be handled: dead-lettered (RabbitMQ, Kafka) or skipped as invalid
   * (Kafka).
   */
  public long rejected() {
    return rejected.get();
  }

  @Override
  public String toString() {
    return "InboxCounts[handled=%d, skipped=%d, failures=%d, rejected=%d]"
        .formatted(handled(), skipped(), failures(), rejected());
  }
}
