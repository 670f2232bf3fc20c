package io.relaybus.store;

/** The result of {@link OutboxStore#reschedule}. */
public enum FailOutcome {
  /** Pending again, due after the backoff. */
  RESCHEDULED,
  /** The attempt budget is spent: the delivery is dead with the reason. */
  DEAD,
  /** The token no longer holds (lane taken over, claim already ended): nothing changed. */
  LOST
}
