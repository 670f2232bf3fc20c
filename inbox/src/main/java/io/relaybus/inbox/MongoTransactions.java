package io.relaybus.inbox;

import com.mongodb.MongoException;
import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoClient;
import io.relaybus.store.OutboxStoreException;
import java.sql.SQLException;
import java.time.Duration;

/**
 * {@link Transactions} on MongoDB sessions, needing a replica set or sharded cluster. Like {@code
 * ClientSession.withTransaction}, a transaction that fails transiently (MongoDB fails the second of
 * two conflicting writes at once, rather than making it wait) is run again from the start, work
 * included, for up to {@link #RETRY_LIMIT}: the rerun reads what the winner committed, so an inbox
 * record that lost the race answers {@link io.relaybus.store.InboxOutcome#REDELIVERY} and the work
 * is skipped. The work must therefore be safe to run again after a rollback, as any work inside a
 * database transaction is.
 */
final class MongoTransactions implements Transactions<ClientSession> {
  static final Duration RETRY_LIMIT = Duration.ofSeconds(60);
  private static final long BACKOFF_MILLIS = 10;

  private final MongoClient client;

  MongoTransactions(MongoClient client) {
    if (client == null) {
      throw new IllegalArgumentException("client must not be null");
    }
    this.client = client;
  }

  @Override
  public <R> R inTransaction(Work<ClientSession, R> work) {
    long deadline = System.nanoTime() + RETRY_LIMIT.toNanos();
    for (int attempt = 1; ; attempt++) {
      try (ClientSession session = client.startSession()) {
        session.startTransaction();
        try {
          R result = work.run(session);
          commit(session, deadline);
          return result;
        } catch (RuntimeException | Error | SQLException e) {
          if (session.hasActiveTransaction()) {
            abortQuietly(session, e);
          }
          if (transientFailure(e) && System.nanoTime() < deadline) {
            pause(attempt);
            continue;
          }
          if (e instanceof SQLException sql) {
            throw new InboxException("the work failed; the transaction was rolled back", sql);
          }
          if (e instanceof MongoException mongo) {
            throw new InboxException(
                "the inbox transaction failed and was rolled back (MongoDB error "
                    + mongo.getCode()
                    + ")",
                mongo);
          }
          if (e instanceof RuntimeException runtime) {
            throw runtime;
          }
          throw (Error) e;
        }
      }
    }
  }

  /** Commits; an unknown commit result is retried as the driver's own helper does. */
  private static void commit(ClientSession session, long deadline) {
    while (true) {
      try {
        session.commitTransaction();
        return;
      } catch (MongoException e) {
        if (!e.hasErrorLabel(MongoException.UNKNOWN_TRANSACTION_COMMIT_RESULT_LABEL)
            || System.nanoTime() >= deadline) {
          throw e;
        }
      }
    }
  }

  private static boolean transientFailure(Throwable e) {
    if (e instanceof OutboxStoreException store) {
      return store.isTransient();
    }
    return e instanceof MongoException mongo
        && mongo.hasErrorLabel(MongoException.TRANSIENT_TRANSACTION_ERROR_LABEL);
  }

  private static void abortQuietly(ClientSession session, Throwable cause) {
    try {
      session.abortTransaction();
    } catch (MongoException abortFailure) {
      cause.addSuppressed(abortFailure);
    }
  }

  private static void pause(int attempt) {
    try {
      Thread.sleep(Math.min(500, BACKOFF_MILLIS * attempt));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InboxException("interrupted while retrying a transaction", e);
    }
  }
}
