package io.relaybus.store;

/** What a timer call did. */
public enum TimerOutcome {
  /** No pending timer had the id (or the timer has no id): the event was published to fire. */
  ARMED,
  /** The pending timer's deadline was moved; its event is unchanged. */
  EXTENDED,
  /** The pending timer was dropped and the new event armed in its place. */
  REPLACED,
  /** The pending timer was left as it was ({@link TimerConflict#KEEP}). */
  KEPT,
  /** The pending timer was removed; it will not fire. */
  CANCELLED,
  /** No pending timer has the id: nothing to cancel. */
  NOT_FOUND,
  /**
   * The timer's deadline passed and its delivery is in flight (claimed, being sent): it is left to
   * its task and nothing was changed or armed. It fires (or fails and retries) as it is.
   */
  ALREADY_FIRING
}
