package io.relaybus.store;

/**
 * {@link TimerConflict#FAIL}: a pending timer with the id exists for the handler. Not transient:
 * retrying the same call fails the same way until the timer fires or is cancelled. Nothing was
 * written by the call; the caller's transaction is still usable (PostgreSQL: no statement failed).
 */
public final class TimerExistsException extends OutboxStoreException {
  private final String handler;
  private final String timerId;

  public TimerExistsException(String handler, String timerId, String pendingEventId) {
    super(
        ("timer '%s' of handler '%s' is already pending (event '%s') and the conflict policy is"
                + " FAIL: nothing was published; use EXTEND, REPLACE or KEEP, or cancel it first")
            .formatted(timerId, handler, pendingEventId),
        false,
        null);
    this.handler = handler;
    this.timerId = timerId;
  }

  public String handler() {
    return handler;
  }

  public String timerId() {
    return timerId;
  }
}
