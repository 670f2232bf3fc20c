package io.relaybus.store.memory;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerExistsException;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import java.time.Instant;
import java.util.List;
import java.util.Objects;

/**
 * Timers on the tables. A call is decided against what is committed ({@link #decide}) and applied
 * at commit ({@link #apply}), which decides again: if the answer changed meanwhile (a claim took
 * the timer, another transaction armed, extended or cancelled it), the commit fails with a
 * transient {@link OutboxStoreException} and applies nothing, so the caller's answer is never
 * contradicted (optimistic, where PostgreSQL makes the claim skip the locked timer).
 */
final class MemoryTimers {

  /**
   * A timer call buffered until commit: {@code event} and {@code timer} for a schedule, null for a
   * cancel. {@code deadline} was computed at call time; {@code target} is the pending timer the
   * call found (its delivery id), or null.
   */
  record Op(
      OutboxEvent event,
      Timer timer,
      String handler,
      String timerId,
      Instant deadline,
      TimerResult told,
      Long target) {
    boolean sameTimer(Op other) {
      return timerId != null && timerId.equals(other.timerId) && handler.equals(other.handler);
    }
  }

  private final MemoryTables tables;

  MemoryTimers(MemoryTables tables) {
    this.tables = tables;
  }

  Op schedule(OutboxEvent event, Timer timer, Instant now) {
    String handler = event.handlers().get(0);
    Instant deadline = timer.deadline(now);
    if (tables.events.containsKey(event.id())) {
      throw eventIdExists(event.id());
    }
    if (timer.id() == null) {
      return new Op(event, timer, handler, null, deadline, armed(event), null);
    }
    StoredDelivery pending = pending(handler, timer.id());
    if (pending == null) {
      return new Op(event, timer, handler, timer.id(), deadline, armed(event), null);
    }
    TimerResult result;
    if (tables.isInFlight(pending)) {
      result = new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId);
    } else {
      result =
          switch (timer.onConflict()) {
            case EXTEND -> new TimerResult(TimerOutcome.EXTENDED, pending.eventId);
            case REPLACE -> new TimerResult(TimerOutcome.REPLACED, event.id());
            case KEEP -> new TimerResult(TimerOutcome.KEPT, pending.eventId);
            case FAIL -> throw new TimerExistsException(handler, timer.id(), pending.eventId);
          };
    }
    return new Op(event, timer, handler, timer.id(), deadline, result, pending.id);
  }

  Op cancel(String handler, String timerId) {
    StoredDelivery pending = pending(handler, timerId);
    TimerResult result =
        pending == null
            ? new TimerResult(TimerOutcome.NOT_FOUND, null)
            : tables.isInFlight(pending)
                ? new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId)
                : new TimerResult(TimerOutcome.CANCELLED, pending.eventId);
    return new Op(null, null, handler, timerId, null, result, pending == null ? null : pending.id);
  }

  /**
   * Decides {@code op} again on what is committed now; null when the answer is still the one told,
   * else why it is not.
   */
  String stale(Op op, Instant now) {
    Op again;
    try {
      again =
          op.event() == null
              ? cancel(op.handler(), op.timerId())
              : schedule(op.event(), op.timer(), now);
    } catch (TimerExistsException | IllegalArgumentException e) {
      return e.getMessage();
    }
    if (again.told().equals(op.told()) && Objects.equals(again.target(), op.target())) {
      return null;
    }
    return "timer '%s' of handler '%s' changed since the call answered %s (now: %s)"
        .formatted(op.timerId(), op.handler(), op.told().outcome(), again.told().outcome());
  }

  /** Applies a decided op (the caller checked it is not {@link #stale}). */
  void apply(Op op, Instant now) {
    StoredDelivery target = op.target() == null ? null : tables.deliveries.get(op.target());
    switch (op.told().outcome()) {
      case ARMED -> arm(op, now);
      case EXTENDED -> {
        target.fireAt = op.deadline();
        if (op.deadline().isBefore(target.availableAt)) {
          target.availableAt = op.deadline();
        }
      }
      case REPLACED -> {
        remove(target);
        arm(op, now);
      }
      case CANCELLED -> remove(target);
      case KEPT, NOT_FOUND, ALREADY_FIRING -> {}
    }
  }

  private void arm(Op op, Instant now) {
    OutboxEvent event = op.event();
    StoredEvent stored =
        new StoredEvent(
            event.id(),
            event.type(),
            event.key(),
            event.payload(),
            event.contentType(),
            event.headers(),
            now);
    tables.events.put(stored.id, stored);
    Long sequence = stored.key == null ? null : tables.nextSequence(stored.key, now);
    for (String handler : event.handlers()) {
      stored.handlers.add(handler);
      StoredDelivery delivery = tables.insertDelivery(stored, handler, sequence, now);
      delivery.availableAt = op.deadline();
      delivery.timerId = op.timerId();
      delivery.fireAt = op.timerId() == null ? null : op.deadline();
    }
  }

  /** Drops a timer; its event goes too when the timer was its only route (the id is free). */
  private void remove(StoredDelivery delivery) {
    tables.deleteDelivery(delivery);
    StoredEvent event = tables.events.get(delivery.eventId);
    if (event != null && event.handlers.equals(List.of(delivery.handler))) {
      tables.events.remove(event.id);
    }
  }

  static IllegalArgumentException eventIdExists(String eventId) {
    return new IllegalArgumentException(
        ("event id '%s' exists already: a timer arms a new event, so give it a new id (the"
                + " builder's default, a new time-ordered UUID)")
            .formatted(eventId));
  }

  private StoredDelivery pending(String handler, String timerId) {
    for (StoredDelivery delivery : tables.deliveries.values()) {
      if (delivery.isPending()
          && timerId.equals(delivery.timerId)
          && handler.equals(delivery.handler)) {
        return delivery;
      }
    }
    return null;
  }

  private static TimerResult armed(OutboxEvent event) {
    return new TimerResult(TimerOutcome.ARMED, event.id());
  }
}
