package io.relaybus.inbox;

import java.sql.Connection;
import java.sql.SQLException;
import javax.sql.DataSource;

/** {@link Transactions} on a JDBC pool. */
final class JdbcTransactions implements Transactions<Connection> {
  private final DataSource dataSource;

  JdbcTransactions(DataSource dataSource) {
    if (dataSource == null) {
      throw new IllegalArgumentException("dataSource must not be null");
    }
    this.dataSource = dataSource;
  }

  @Override
  public <R> R inTransaction(Work<Connection, R> work) {
    try (Connection connection = dataSource.getConnection()) {
      boolean autoCommit = connection.getAutoCommit();
      connection.setAutoCommit(false);
      R result;
      try {
        result = work.run(connection);
        failIfAborted(connection);
        connection.commit();
      } catch (SQLException | RuntimeException | Error e) {
        rollbackQuietly(connection, e);
        restoreQuietly(connection, autoCommit, e);
        throw e;
      }
      connection.setAutoCommit(autoCommit);
      return result;
    } catch (SQLException e) {
      throw new InboxException(
          "the inbox transaction failed and was rolled back (SQLState " + e.getSQLState() + ")", e);
    }
  }

  /**
   * A PostgreSQL transaction in which a statement failed is aborted: its COMMIT rolls back, and
   * pgjdbc returns from commit() without a word. A work that caught such a failure and went on (an
   * insert whose unique violation it took for "already there") would be reported handled, and its
   * message acknowledged, with nothing committed: it fails here instead, and the message is tried
   * again.
   */
  private static void failIfAborted(Connection connection) throws SQLException {
    if (connection.isWrapperFor(org.postgresql.core.BaseConnection.class)
        && connection.unwrap(org.postgresql.core.BaseConnection.class).getTransactionState()
            == org.postgresql.core.TransactionState.FAILED) {
      throw new SQLException(
          "a statement of the work failed and PostgreSQL aborted its transaction, so nothing of it"
              + " can commit (a failure the work caught and went on from: use a savepoint to go on"
              + " after one)",
          "25P02");
    }
  }

  /** A broken connection cannot be reset; the pool discards it, and the first failure counts. */
  private static void restoreQuietly(Connection connection, boolean autoCommit, Throwable cause) {
    try {
      connection.setAutoCommit(autoCommit);
    } catch (SQLException resetFailure) {
      suppress(cause, resetFailure);
    }
  }

  private static void rollbackQuietly(Connection connection, Throwable cause) {
    try {
      connection.rollback();
    } catch (SQLException rollbackFailure) {
      suppress(cause, rollbackFailure);
    }
  }

  /** A broken connection may rethrow the cause itself; adding it to itself would throw. */
  private static void suppress(Throwable cause, Throwable later) {
    if (later != cause) {
      cause.addSuppressed(later);
    }
  }
}
