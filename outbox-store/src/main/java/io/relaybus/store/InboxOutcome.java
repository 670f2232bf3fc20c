package io.relaybus.store;

/**
 * What {@link TransactionalPublisher#recordHandled} found: whether the calling transaction is the
 * first to record the handler for the event.
 */
public enum InboxOutcome {
  /**
   * The handler was not listed and now is, in the caller's transaction: do the handler's work in
   * the same transaction. If it rolls back, the record goes with it and the next delivery is first.
   */
  FIRST,

  /**
   * The handler was listed already (a broker redelivered the message, another broker brought the
   * same event, or a publish routed the event to this handler): skip the work. Nothing was written.
   */
  REDELIVERY
}
