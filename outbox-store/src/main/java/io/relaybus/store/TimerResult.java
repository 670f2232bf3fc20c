package io.relaybus.store;

/**
 * What a timer call did, and to which event.
 *
 * @param outcome what happened
 * @param eventId the event that now fires under the timer ({@link TimerOutcome#ARMED}, {@link
 *     TimerOutcome#REPLACED}: the new one; {@link TimerOutcome#EXTENDED}, {@link
 *     TimerOutcome#KEPT}, {@link TimerOutcome#ALREADY_FIRING}: the existing one), the one removed
 *     ({@link TimerOutcome#CANCELLED}), or {@code null} ({@link TimerOutcome#NOT_FOUND})
 */
public record TimerResult(TimerOutcome outcome, String eventId) {
  public TimerResult {
    Validation.notNull("outcome", outcome);
  }
}
