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
 * or payload adds routes, it does not rewrite what happened. Deliveries added by a republish take
 * the key's next sequence (they are ordered by the republish's commit).
 *
 * <p><b>Order</b>: events with an ordering key get the key's next sequence number; a publisher
 * holds the key until it commits, so sequence order is commit order.
 *
 * @param <T> the store's transaction handle: {@code java.sql.Connection} for PostgreSQL, {@code
 *     ClientSession} for MongoDB
 */
public interface TransactionalPublisher<T> {

  PublishResult publish(T transaction, OutboxEvent event);

  /** Publishes a batch with one statement per table; results in the order of {@code events}. */
  List<PublishResult> publishAll(T transaction, List<OutboxEvent> events);
}
