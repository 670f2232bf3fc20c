package io.relaybus.store;

import java.util.List;

/**
 * Publishes inside the caller's transaction: the events become visible, and deliverable, exactly
 * when the caller commits, and vanish if it rolls back. The publisher never commits, rolls back or
 * closes the caller's transaction.
 *
 * <p><b>Idempotent by event id</b>: publishing an id that exists adds deliveries only for handlers
 * the event never had ({@code events.handlers}), so a retried publish or a redelivered message
 * never runs a handler twice. The event as first published wins: a republish with another type, key
 * or payload adds routes, it does not rewrite what happened, and {@link
 * PublishResult#differingFields()} names what differed (a store built with {@code
 * strictRepublish(true)} throws {@link RepublishConflictException} instead). Deliveries added by a
 * republish take the key's next sequence (they are ordered by the republish's commit).
 *
 * <p><b>Order</b>: events with an ordering key get the key's next sequence number; a publisher
 * holds the key until it commits, so sequence order is commit order. Two transactions that publish
 * keys A and B in opposite orders in separate calls can therefore deadlock (PostgreSQL aborts one:
 * a transient {@link OutboxStoreException}); one {@link #publishAll} takes its keys in key order.
 *
 * @param <T> the store's transaction handle: {@code java.sql.Connection} for PostgreSQL, {@code
 *     ClientSession} for MongoDB
 */
public interface TransactionalPublisher<T> {

  PublishResult publish(T transaction, OutboxEvent event);

  /** Publishes a batch with one statement per table; results in the order of {@code events}. */
  List<PublishResult> publishAll(T transaction, List<OutboxEvent> events);

  /**
   * The inbox: records in the caller's transaction that {@code handler} has the event {@code
   * received}, and says whether this is the first time. A consumer does its work in the same
   * transaction only when the answer is {@link InboxOutcome#FIRST}, and commits both together, so a
   * redelivered message (or the same event through another broker) never runs a handler twice.
   *
   * <p>When the event id is new to this database, the event row is inserted with the received type,
   * key, payload, content type and headers, and {@code handler} as its only handler; {@code
   * received.handlers()} are not recorded and create no delivery. When the id exists, only the
   * handler is added to its {@code handlers}; the stored event wins, as for a publish. Handlers
   * recorded here and handlers published to share one list: a later publish of the same id adds no
   * delivery for {@code handler}, and recording a handler the event was published to answers {@link
   * InboxOutcome#REDELIVERY}. Use inbox handler names distinct from the routes when the consumer
   * shares the producer's outbox tables.
   *
   * <p><b>Concurrency</b>: of transactions recording the same (event, handler), exactly one that
   * commits was told {@link InboxOutcome#FIRST}. A store may make a racer wait until the first
   * commits or rolls back (PostgreSQL: the row lock), or fail the racer's commit with a transient
   * {@link OutboxStoreException} (the in-memory store); either way the racer's retry answers {@link
   * InboxOutcome#REDELIVERY}. Under PostgreSQL's {@code REPEATABLE READ} or {@code SERIALIZABLE}
   * the racer fails with a serialization error (transient) instead of waiting.
   *
   * <p>Records are events like any other: {@link OutboxStore#purge} removes them once they are
   * older than {@link RetentionPolicy#events()} and have no delivery left, after which the same id
   * counts as new. Keep that retention longer than any broker's redelivery window.
   *
   * @param transaction the caller's open transaction; never committed, rolled back or closed here
   * @param received the event as received; its id is the inbox key
   * @param handler the consumer's handler name, {@code [A-Za-z0-9._-]+}
   */
  InboxOutcome recordHandled(T transaction, OutboxEvent received, String handler);

  /**
   * Publishes {@code event} to fire at the timer's deadline, in the caller's transaction: its
   * deliveries are due then, and the connector emits them like any due delivery (per-key rule
   * included: a keyed timer holds back the later events of its (handler, key) until it fires, so
   * give timers a key only when that is what you want).
   *
   * <p>With a timer id: when a pending timer of the event's handler has the id, {@link
   * Timer#onConflict()} decides ({@link TimerConflict}); when that timer is already firing (its
   * delivery is in flight) nothing is changed or armed and the answer is {@link
   * TimerOutcome#ALREADY_FIRING}. A timer that fired or was cancelled frees its id.
   *
   * <p><b>Racing the firing</b>: of an extend (or replace, keep, cancel) and the claim of the same
   * due timer, exactly one wins: either the call answers {@link TimerOutcome#ALREADY_FIRING} and
   * the record goes out, or the call takes effect and the record does not go out (an extended timer
   * fires at its new deadline). PostgreSQL: the call holds the timer row's lock until the caller
   * commits, and a claim skips locked timer rows; use {@code READ COMMITTED}.
   *
   * <p>The event id must be new (the builder's default, a new time-ordered UUID, is): a timer arms
   * a new event. Replacing a timer frees the replaced event's id when the event had no other
   * handler.
   *
   * @throws TimerExistsException when {@link TimerConflict#FAIL} meets a pending timer
   * @throws IllegalArgumentException when the event id exists, or a named timer's event has more
   *     than one handler
   */
  TimerResult schedule(T transaction, OutboxEvent event, Timer timer);

  /**
   * Cancels the pending timer {@code timerId} of {@code handler} in the caller's transaction:
   * {@link TimerOutcome#CANCELLED}, {@link TimerOutcome#NOT_FOUND}, or {@link
   * TimerOutcome#ALREADY_FIRING} (left to its task; it fires).
   */
  TimerResult cancelTimer(T transaction, String handler, String timerId);
}
