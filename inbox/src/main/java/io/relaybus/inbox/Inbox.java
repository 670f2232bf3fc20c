package io.relaybus.inbox;

import com.mongodb.client.ClientSession;
import io.relaybus.store.PublishResult;
import io.relaybus.store.TransactionalPublisher;
import io.relaybus.store.memory.InMemoryOutboxStore;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.Connection;
import java.util.Collection;
import java.util.List;
import javax.sql.DataSource;

/**
 * Consumer-side deduplication: runs a handler's work for a message once per (event, handler), in
 * the consumer's own database transaction, however often and through whichever broker the message
 * arrives.
 *
 * <p>{@code handle} adds the handler to the event's {@code handlers} in the outbox tables
 * (inserting the event row when the service has not seen the id) and runs the work in the same
 * transaction only when the handler was not listed; both commit together. A redelivery finds the
 * handler listed and skips the work. Of consumers racing on one event, exactly one runs the work:
 * PostgreSQL makes the others wait for its commit, then they skip. The event id is the key: Kafka
 * records and RabbitMQ messages carry it in the same header ({@link
 * io.relaybus.store.RecordHeaders}), so an event that reaches a service through both runs once.
 *
 * <pre>{@code
 * Inbox<Connection> inbox = Inbox.postgres(store, appDataSource);
 * HandleOutcome outcome = inbox.handle(message, "billing.charge-card", (tx, m) -> {
 *   chargeCard(tx, m.payloadAsString());          // the consumer's writes, same transaction
 * });
 * // outcome: HANDLED (ran and committed) or SKIPPED_REDELIVERY (did nothing)
 * }</pre>
 *
 * <p><b>Handler names</b> share one list with the outbox's routes (an event's {@code handlers}):
 * when consumer and producer use the same outbox tables, give inbox handlers names that no publish
 * routes to, e.g. {@code billing.charge-card} next to the route {@code billing}.
 *
 * <p><b>Retention</b>: inbox records are events without deliveries, purged by {@link
 * io.relaybus.store.OutboxStore#purge} once older than {@link
 * io.relaybus.store.RetentionPolicy#events()} (counted from the first time the service saw the id).
 * Keep that longer than the longest redelivery window of every broker and consumer: after the purge
 * a late redelivery counts as new and runs again.
 *
 * <p>Implementations are thread-safe.
 *
 * @param <T> the transaction handle: {@code java.sql.Connection} for PostgreSQL
 */
public interface Inbox<T> {

  /**
   * An inbox on PostgreSQL whose transactions come from {@code dataSource}, the consumer's pool;
   * {@code store} names the outbox tables (schema, prefix) and must be set up.
   */
  static Inbox<Connection> postgres(PostgresOutboxStore store, DataSource dataSource) {
    return of(store, Transactions.jdbc(dataSource));
  }

  /** An inbox on PostgreSQL that takes its transactions from the store's own pool. */
  static Inbox<Connection> postgres(PostgresOutboxStore store) {
    return postgres(store, store.dataSource());
  }

  /**
   * An inbox on MongoDB whose transactions are sessions of the store's client (build the store on
   * the consumer's {@code MongoClient}); needs a replica set or sharded cluster.
   */
  static Inbox<ClientSession> mongodb(MongoOutboxStore store) {
    return of(store, Transactions.mongo(store.client()));
  }

  /** An inbox on an in-memory store, for unit tests of consumers. */
  static Inbox<InMemoryOutboxStore.Transaction> inMemory(InMemoryOutboxStore store) {
    return of(store, Transactions.inMemory(store));
  }

  /** An inbox on any store, with transactions from {@code transactions}. */
  static <T> Inbox<T> of(TransactionalPublisher<T> store, Transactions<T> transactions) {
    return new StoreInbox<>(store, transactions);
  }

  /**
   * Handles {@code message} for {@code handler} inside the caller's open transaction: records the
   * handler, and runs {@code work} in the same transaction if it is the first time. The caller
   * commits (and acknowledges the message only after that) or rolls back; a rollback undoes the
   * record too, so the next delivery is handled again.
   *
   * @throws InboxException when the work fails with a checked exception; its runtime exceptions,
   *     {@link PoisonMessageException} among them, pass through as they are
   */
  HandleOutcome handle(T transaction, InboxMessage message, String handler, InboxWork<T> work);

  /**
   * Handles {@code messages} for {@code handler} inside the caller's open transaction, as {@link
   * #handle(Object, InboxMessage, String, InboxWork)} for each in turn would, but records all of
   * them first, in event id order, and only then runs the work of each message recorded first, in
   * the list's order. Two transactions that handle overlapping events (two consumers' polls, one
   * read again after a rebalance, the same event on two topics, two handlers of one event) so take
   * the events' rows in the same order: one waits for the other instead of both waiting for each
   * other until the database breaks the deadlock by failing one. A message whose event id comes
   * again later in the list runs once, at its first place; the later one is a redelivery.
   *
   * <p>All or nothing: when one record or work fails, the exception passes through as in {@code
   * handle}, and the caller rolls the transaction back. The rows stay locked until the caller
   * commits; works that lock rows of their own can still deadlock with other transactions.
   *
   * @return the outcome of each message, in the list's order
   * @throws InboxException when a work fails with a checked exception
   */
  List<HandleOutcome> handleAll(
      T transaction, List<InboxMessage> messages, String handler, InboxWork<T> work);

  /**
   * Handles {@code message} for {@code handler} in a transaction of its own, and returns once it
   * committed. A failed work rolls everything back and throws.
   */
  HandleOutcome handle(InboxMessage message, String handler, InboxWork<T> work);

  /**
   * The transactions {@link #handle(InboxMessage, String, InboxWork)} opens, for a caller that
   * handles several messages in one with {@link #handle(Object, InboxMessage, String, InboxWork)}.
   */
  Transactions<T> transactions();

  /**
   * Forwards {@code message} into the outbox for further handlers, in the caller's transaction:
   * publishes it under its own event id to {@code routes} (for example Kafka topics, through the
   * connector), adding deliveries only for routes the event never had. Call it from an {@link
   * InboxWork} so that receiving and forwarding commit together:
   *
   * <pre>{@code
   * inbox.handle(message, "orders.forwarder", (tx, m) -> inbox.forward(tx, m, List.of("billing")));
   * }</pre>
   *
   * @return what the publish added; {@code addedHandlers} is empty when every route had it already
   */
  PublishResult forward(T transaction, InboxMessage message, Collection<String> routes);
}
