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
