package io.relaybus.inbox;

import java.sql.SQLException;

/**
 * The consumer's own work for one message, run by {@link Inbox#handle} only the first time its
 * handler sees the event, inside the transaction that records it. Write through {@code transaction}
 * so the work commits exactly when the inbox record does.
 *
 * <p>Throw to roll both back: the message then counts as not handled and its broker delivers it
 * again. Throw {@link PoisonMessageException} when the message can never succeed, so the adapters
 * do not retry it. {@link SQLException} is allowed because the work usually writes through JDBC.
 *
 * @param <T> the transaction handle ({@code java.sql.Connection} for PostgreSQL)
 */
@FunctionalInterface
public interface InboxWork<T> {
  void run(T transaction, InboxMessage message) throws SQLException;
}
