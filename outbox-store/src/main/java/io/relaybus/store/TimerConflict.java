package io.relaybus.store;

/**
 * What {@link TransactionalPublisher#schedule} does when a pending timer with the same id exists
 * for the handler (one that is not already firing: that one is always left to its task).
 */
public enum TimerConflict {
  /**
   * Move the pending timer's deadline to the new one and keep its event (payload, headers, id). The
   * cheap path: on PostgreSQL a later deadline is one HOT update of an unindexed column.
   */
  EXTEND,
  /** Drop the pending timer and arm the new event with the new deadline. */
  REPLACE,
  /** Leave the pending timer as it is; the new event is not published. */
  KEEP,
  /** Throw {@link TimerExistsException} naming the handler and the timer id. */
  FAIL
}
