package io.relaybus.inbox;

import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoClient;
import io.relaybus.store.memory.InMemoryOutboxStore;
import java.sql.Connection;
import java.sql.SQLException;
import javax.sql.DataSource;

/**
 * Opens the consumer's database transactions for {@link Inbox#handle(InboxMessage, String,
 * InboxWork)}: begin, run, commit, or roll back when the work throws. The broker adapters
 * acknowledge a message only after {@link #inTransaction} returned, that is after the commit.
 *
 * @param <T> the transaction handle
 */
public interface Transactions<T> {

  /** Work run inside a transaction; {@link SQLException} is allowed for JDBC work. */
  @FunctionalInterface
  interface Work<T, R> {
    R run(T transaction) throws SQLException;
  }

  /**
   * Runs {@code work} in a new transaction and commits it. A {@link RuntimeException} of the work
   * is rethrown as is after the rollback; a checked one, or a failure to begin or commit, as an
   * {@link InboxException}.
   */
  <R> R inTransaction(Work<T, R> work);

  /**
   * Transactions on JDBC connections of {@code dataSource}: {@code autoCommit} off for the work,
   * restored before the connection goes back to the pool. Use the consumer's own pool (whose
   * isolation level should be {@code READ COMMITTED}, PostgreSQL's default).
   */
  static Transactions<Connection> jdbc(DataSource dataSource) {
    return new JdbcTransactions(dataSource);
  }

  /**
   * Transactions on sessions of {@code client}, which must reach a replica set or sharded cluster
   * (MongoDB has no transactions on a standalone server). A transaction that fails transiently (a
   * write conflict with a concurrent one) runs again from the start, work included, like {@code
   * ClientSession.withTransaction}; see {@link MongoTransactions}.
   */
  static Transactions<ClientSession> mongo(MongoClient client) {
    return new MongoTransactions(client);
  }

  /** Transactions of an {@link InMemoryOutboxStore}, for unit tests of consumers. */
  static Transactions<InMemoryOutboxStore.Transaction> inMemory(InMemoryOutboxStore store) {
    return new Transactions<>() {
      @Override
      public <R> R inTransaction(Work<InMemoryOutboxStore.Transaction, R> work) {
        try (InMemoryOutboxStore.Transaction transaction = store.begin()) {
          R result = work.run(transaction);
          transaction.commit();
          return result;
        } catch (SQLException e) {
          throw new InboxException("the work failed; the transaction was rolled back", e);
        }
      }
    };
  }
}
