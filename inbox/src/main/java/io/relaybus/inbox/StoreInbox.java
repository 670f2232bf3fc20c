package io.relaybus.inbox;

import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.TransactionalPublisher;
import io.relaybus.store.Validation;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** The {@link Inbox} on a store's {@link TransactionalPublisher#recordHandled}. */
final class StoreInbox<T> implements Inbox<T> {
  private static final Logger log = LoggerFactory.getLogger(StoreInbox.class);

  private final TransactionalPublisher<T> store;
  private final Transactions<T> transactions;

  StoreInbox(TransactionalPublisher<T> store, Transactions<T> transactions) {
    if (store == null || transactions == null) {
      throw new IllegalArgumentException("store and transactions must not be null");
    }
    this.store = store;
    this.transactions = transactions;
  }

  /** The guard of a work's transaction: these stores fix T to Connection or ClientSession. */
  private TransactionGuard guard(T transaction) {
    if (store instanceof PostgresOutboxStore) {
      return TransactionGuard.connection((Connection) transaction);
    }
    if (store instanceof MongoOutboxStore) {
      return TransactionGuard.session((com.mongodb.client.ClientSession) transaction);
    }
    return null; // other stores: the work gets the transaction as it is
  }

  @Override
  public HandleOutcome handle(
      T transaction, InboxMessage message, String handler, InboxWork<T> work) {
    requireArguments(message, handler, work);
    if (transaction == null) {
      throw new IllegalArgumentException("transaction must not be null");
    }
    try {
      return handleIn(transaction, message, handler, work);
    } catch (SQLException e) {
      throw new InboxException(
          "handler '%s' failed on %s (SQLState %s); roll the transaction back"
              .formatted(handler, message, e.getSQLState()),
          e);
    }
  }

  @Override
  public List<HandleOutcome> handleAll(
      T transaction, List<InboxMessage> messages, String handler, InboxWork<T> work) {
    if (transaction == null
        || messages == null
        || messages.stream().anyMatch(Objects::isNull)
        || work == null) {
      throw new IllegalArgumentException(
          "transaction, messages, the messages in it and work must not be null");
    }
    Validation.handler(handler);
    // The rows in one order for every transaction, whatever order the messages came in: ids
    // sorted, a repeated id in the list's order (so its first place is the one recorded first).
    Integer[] byId = new Integer[messages.size()];
    Arrays.setAll(byId, i -> i);
    Arrays.sort(byId, Comparator.comparing(i -> messages.get(i).eventId()));
    InboxOutcome[] recorded = new InboxOutcome[messages.size()];
    InboxMessage current = null;
    try {
      for (int i : byId) {
        current = messages.get(i);
        recorded[i] = record(transaction, current, handler);
      }
      List<HandleOutcome> outcomes = new ArrayList<>(messages.size());
      for (int i = 0; i < messages.size(); i++) {
        current = messages.get(i);
        outcomes.add(
            recorded[i] == InboxOutcome.REDELIVERY
                ? skip(current, handler)
                : runWork(transaction, current, handler, work));
      }
      return outcomes;
    } catch (SQLException e) {
      throw new InboxException(
          "handler '%s' failed on %s (SQLState %s); roll the transaction back"
              .formatted(handler, current, e.getSQLState()),
          e);
    }
  }

  @Override
  public HandleOutcome handle(InboxMessage message, String handler, InboxWork<T> work) {
    requireArguments(message, handler, work);
    return transactions.inTransaction(tx -> handleIn(tx, message, handler, work));
  }

  @Override
  public Transactions<T> transactions() {
    return transactions;
  }

  private HandleOutcome handleIn(
      T transaction, InboxMessage message, String handler, InboxWork<T> work) throws SQLException {
    return record(transaction, message, handler) == InboxOutcome.REDELIVERY
        ? skip(message, handler)
        : runWork(transaction, message, handler, work);
  }

  private InboxOutcome record(T transaction, InboxMessage message, String handler) {
    try {
      return store.recordHandled(transaction, message.toEvent(List.of(handler)), handler);
    } catch (OutboxStoreException e) {
      throw heldIfWaitedOut(poisonIfDataException(e, message), message, handler);
    }
  }

  /**
   * The record's statement waited for a lock past the session's {@code lock_timeout} (SQLState
   * 55P03) or ran past its {@code statement_timeout} (57014): another open transaction holds the
   * event's row (handling the same event) or its table. Not a failure of the message: {@link
   * InboxRecordHeldException}, which the adapters try again without counting. Anything else stays
   * as it is.
   */
  private static RuntimeException heldIfWaitedOut(
      RuntimeException e, InboxMessage message, String handler) {
    if (!(e instanceof OutboxStoreException)) {
      return e;
    }
    String state = sqlState(e);
    if ("55P03".equals(state) || "57014".equals(state)) {
      return new InboxRecordHeldException(
          ("the inbox record of %s for handler '%s' is held by another open transaction (one"
                  + " that handles or records the same event, or locks the table), and the"
                  + " wait ran out (SQLState %s, lock_timeout or statement_timeout): not a"
                  + " failure of the message, try again once that transaction ended")
              .formatted(message, handler, state),
          e);
    }
    return e;
  }

  /** The SQLState of the first {@link SQLException} among the causes of {@code e}, or null. */
  private static String sqlState(Throwable e) {
    for (Throwable t = e.getCause(); t != null; t = t.getCause()) {
      if (t instanceof SQLException sql) {
        return sql.getSQLState();
      }
    }
    return null;
  }

  private static HandleOutcome skip(InboxMessage message, String handler) {
    log.trace("{} skips {}: it had the event already", handler, message);
    return HandleOutcome.SKIPPED_REDELIVERY;
  }

  /** Runs the work of a message just recorded as first, guarded where the store allows. */
  private HandleOutcome runWork(
      T transaction, InboxMessage message, String handler, InboxWork<T> work) throws SQLException {
    TransactionGuard guard = guard(transaction);
    if (guard == null) {
      work.run(transaction, message);
    } else {
      try {
        work.run(guard.proxy(), message);
      } catch (SQLException | RuntimeException | Error e) {
        failIfRuleBroken(guard, handler, message, e);
        throw e;
      }
      guard.checkStillOpen();
      failIfRuleBroken(guard, handler, message, null);
    }
    log.trace("{} handled {}", handler, message);
    return HandleOutcome.HANDLED;
  }

  /**
   * The database refused the message's own content for good (SQLState class 22, a data exception:
   * e.g. 22P05, a character the database's encoding cannot store): no retry can succeed, so it is
   * poison. Anything else stays a failure.
   */
  private static RuntimeException poisonIfDataException(
      OutboxStoreException e, InboxMessage message) {
    if (e.isTransient()) {
      return e;
    }
    String state = sqlState(e);
    if (state != null && state.startsWith("22")) {
      return new PoisonMessageException(
          "message from %s cannot be recorded in the inbox: the database refuses its content (%s)"
              .formatted(message.origin(), e.getMessage()),
          e);
    }
    return e;
  }

  /**
   * A work that tried to end the transaction fails even if it caught the refusal: what it meant to
   * commit or undo did not happen, so reporting it handled would be wrong.
   */
  private static void failIfRuleBroken(
      TransactionGuard guard, String handler, InboxMessage message, Throwable thrown) {
    IllegalStateException violation = guard.violation();
    if (violation == null) {
      return;
    }
    InboxException e =
        new InboxException(
            "handler '%s' failed on %s: %s".formatted(handler, message, violation.getMessage()),
            violation);
    if (thrown != null && thrown != violation) {
      e.addSuppressed(thrown);
    }
    throw e;
  }

  @Override
  public PublishResult forward(T transaction, InboxMessage message, Collection<String> routes) {
    if (transaction == null || message == null || routes == null) {
      throw new IllegalArgumentException("transaction, message and routes must not be null");
    }
    Validation.notEmpty("routes", routes);
    PublishResult result = store.publish(transaction, message.toEvent(List.copyOf(routes)));
    log.trace("forwarded {} to {} (new routes: {})", message, routes, result.addedHandlers());
    return result;
  }

  private static void requireArguments(InboxMessage message, String handler, Object work) {
    if (message == null || work == null) {
      throw new IllegalArgumentException("message and work must not be null");
    }
    Validation.handler(handler);
  }
}
