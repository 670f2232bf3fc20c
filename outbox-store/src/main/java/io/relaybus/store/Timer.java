package io.relaybus.store;

import java.time.Duration;
import java.time.Instant;

/**
 * When an event fires, and optionally the timer id it fires under. Build one with {@link
 * #at(Instant)} or {@link #in(Duration)}, then {@link #named(String, TimerConflict)}:
 *
 * <pre>{@code
 * // a session expires 6 s after its last heartbeat: every heartbeat moves the deadline
 * store.schedule(tx, OutboxEvent.builder("session.expired").key(sessionId).handlers("sessions").build(),
 *     Timer.in(Duration.ofSeconds(6)).named("session-" + sessionId, TimerConflict.EXTEND));
 * }</pre>
 *
 * <p>An id is unique per handler among pending timers, so a named timer's event has exactly one
 * handler. A timer without an id is a plain delayed event (any number of handlers); it cannot be
 * extended or cancelled.
 *
 * @param at the deadline as an instant, or {@code null} when {@code in} is given; {@link #MIN_AT}
 *     to {@link #MAX_AT}
 * @param in the deadline relative to the store's clock (PostgreSQL: {@code now()}, the start of the
 *     caller's transaction), or {@code null} when {@code at} is given; zero to {@link #MAX_IN}
 * @param id the timer id, {@code null} for none; 1 to 200 characters without surrounding space and
 *     without U+0000 (no PostgreSQL text holds it)
 * @param onConflict what to do when a pending timer has the id; {@code null} exactly when {@code
 *     id} is
 */
public record Timer(Instant at, Duration in, String id, TimerConflict onConflict) {
  public static final int MAX_ID_LENGTH = 200;

  /**
   * The earliest and latest {@code at}: the years 1 to 9999, which every store holds and computes
   * with (Instant's ends are beyond PostgreSQL's timestamps and MongoDB's dates). A deadline in the
   * past fires at the next claim however far back it is, so a lower bound takes nothing away.
   */
  public static final Instant MIN_AT = Instant.parse("0001-01-01T00:00:00Z");

  public static final Instant MAX_AT = Instant.parse("9999-12-31T23:59:59.999999Z");

  /**
   * The longest {@code in}: 1,000 years (365,250 days). Longer ones overflowed the stores' time
   * arithmetic (PostgreSQL's microseconds wrapped negative and the timer fired at once; Java's
   * instants and dates threw); a timer that should never fire is no timer.
   */
  public static final Duration MAX_IN = Validation.MAX_AGE;

  public Timer {
    if ((at == null) == (in == null)) {
      throw new IllegalArgumentException(
          "exactly one of timer at and timer in must be set, but at was %s and in was %s"
              .formatted(at, in));
    }
    if (in != null && in.isNegative()) {
      throw new IllegalArgumentException("timer in must not be negative, but was " + in);
    }
    if (at != null && (at.isBefore(MIN_AT) || at.isAfter(MAX_AT))) {
      throw new IllegalArgumentException(
          "timer at must be between %s and %s, but was %s".formatted(MIN_AT, MAX_AT, at));
    }
    if (in != null && in.compareTo(MAX_IN) > 0) {
      throw new IllegalArgumentException(
          "timer in must be at most 1,000 years (%s), but was %s".formatted(MAX_IN, in));
    }
    if (id != null) {
      Validation.identifierLike("timer id", id, MAX_ID_LENGTH);
      Validation.storable("timer id", id);
      Validation.notNull("timer onConflict", onConflict);
    } else if (onConflict != null) {
      throw new IllegalArgumentException(
          "timer onConflict must be null for a timer without an id, but was " + onConflict);
    }
  }

  /** Fires at {@code at}; a deadline in the past fires at the next claim. */
  public static Timer at(Instant at) {
    return new Timer(Validation.notNull("timer at", at), null, null, null);
  }

  /** Fires {@code in} after the store's clock (PostgreSQL: the caller's transaction start). */
  public static Timer in(Duration in) {
    return new Timer(null, Validation.notNull("timer in", in), null, null);
  }

  /** The same deadline under timer id {@code id}, with {@code onConflict} for a pending one. */
  public Timer named(String id, TimerConflict onConflict) {
    return new Timer(at, in, Validation.notNull("timer id", id), onConflict);
  }

  /** The deadline, given the store's clock reading {@code now}. */
  public Instant deadline(Instant now) {
    return at != null ? at : now.plus(in);
  }

  /**
   * Checks a timer id given to {@code cancelTimer} ({@code argument} names it): not blank, no
   * U+0000, no unpaired surrogate. Every store checks it so, before it reads anything.
   */
  public static String checkCancelId(String argument, String timerId) {
    Validation.notBlank(argument, timerId);
    return Validation.storable(argument, timerId);
  }

  /** Checks that {@code event} can be published under this timer. */
  public void check(OutboxEvent event) {
    Validation.notNull("event", event);
    if (id != null && event.handlers().size() != 1) {
      throw new IllegalArgumentException(
          "a named timer's event must have exactly one handler (timer ids are unique per handler),"
              + " but timer '%s' has handlers %s".formatted(id, event.handlers()));
    }
  }
}
