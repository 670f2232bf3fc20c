package io.relaybus.inbox;

/** What {@link Inbox#handle} did with a message. */
public enum HandleOutcome {
  /** First time for this handler: the work ran and committed with the inbox record. */
  HANDLED,

  /**
   * The handler already had this event (a broker redelivery, the same event through another broker,
   * or a publish that routed it here): the work did not run and nothing was written.
   */
  SKIPPED_REDELIVERY
}
