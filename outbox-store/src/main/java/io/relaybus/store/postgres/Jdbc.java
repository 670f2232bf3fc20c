package io.relaybus.store.postgres;

import io.relaybus.store.OutboxStoreException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.sql.Timestamp;
import java.sql.Types;
import java.time.Instant;
import javax.sql.DataSource;

/**
 * Runs store work on a pooled connection and turns {@link SQLException} into {@link
 * OutboxStoreException}, classified once, here, as transient or not. Work given to {@link
 * #inTransaction} commits as a whole or rolls back as a whole.
 */
final class Jdbc {
  @FunctionalInterface
  interface Work<T> {
    T run(Connection connection) throws SQLException;
  }

  private final DataSource dataSource;

  Jdbc(DataSource dataSource) {
    this.dataSource = dataSource;
  }

  /** Statements or reads in auto-commit mode, each committed on its own. */
  <T> T autoCommit(String what, Work<T> work) {
    try (Connection connection = dataSource.getConnection()) {
      if (!connection.getAutoCommit()) {
        connection.setAutoCommit(true);
      }
      return work.run(connection);
    } catch (SQLException e) {
      throw translate(what, e);
    }
  }

  /** Several statements in one transaction. */
  <T> T inTransaction(String what, Work<T> work) {
    try (Connection connection = dataSource.getConnection()) {
      connection.setAutoCommit(false);
      try {
        T result = work.run(connection);
        connection.commit();
        restoreAutoCommit(connection, true, null);
        return result;
      } catch (SQLException | RuntimeException e) {
        rollbackQuietly(connection, e);
        restoreAutoCommit(connection, true, e);
        throw e;
      }
    } catch (SQLException e) {
      throw translate(what, e);
    }
  }

  /**
   * Rolls back after {@code cause}; a failure to do so is kept with it. The driver may throw the
   * cause itself again (a broken connection's stored failure): adding it to itself would throw
   * IllegalArgumentException and hide both.
   */
  static void rollbackQuietly(Connection connection, Exception cause) {
    try {
      connection.rollback();
    } catch (SQLException rollbackFailure) {
      suppress(cause, rollbackFailure);
    }
  }

  /**
   * Puts the connection back in auto-commit after a transaction, never in place of what ended it:
   * once the server ended the connection (57P01, a network error) HikariCP has closed it, and
   * {@code setAutoCommit} fails with "Connection is closed" (no SQLState: permanent), which hid the
   * transient failure and killed a connector task. A closed connection is left alone (the pool
   * discards it); a failure to restore one that is open is kept with {@code cause}, or thrown when
   * the transaction succeeded.
   */
  static void restoreAutoCommit(Connection connection, boolean autoCommit, Throwable cause)
      throws SQLException {
    try {
      if (!connection.isClosed()) {
        connection.setAutoCommit(autoCommit);
      }
    } catch (SQLException e) {
      if (cause == null) {
        throw e;
      }
      suppress(cause, e);
    }
  }

  /** {@code later} kept with {@code cause}, unless it is {@code cause}. */
  static void suppress(Throwable cause, Throwable later) {
    if (later != cause) {
      cause.addSuppressed(later);
    }
  }

  /** A test of the server on a connection of its own (see {@link #onAStandby}). */
  @FunctionalInterface
  interface ServerCheck {
    boolean test(Connection connection) throws SQLException;
  }

  /**
   * {@code e}, or, when the server is in recovery (a standby), a read-only refusal (SQLState 25006,
   * transient) naming it. A claim on a standby fails on what takes a transaction id (XX000) or
   * reads an unlogged table (0A000) before anything says read-only; while the store runs, reaching
   * a standby means a failover in progress (an address that still reaches the old primary, now
   * following the new one), which retrying outlasts. A store that starts against one is refused for
   * good (verifySchema). One more statement, on a failure only. A standby promoted between the
   * failure and the question is no longer in recovery; {@code changedSince} then tells whether the
   * server is another than the one the store last claimed on (for the claim: its incarnation row),
   * and if so the failure is the failover's too.
   */
  static SQLException onAStandby(DataSource dataSource, SQLException e, ServerCheck changedSince) {
    if (isTransient(e)) {
      return e; // retried anyway; and a server that is down would hold the probe up
    }
    // a connection of its own: the pool closes one that failed so (HikariCP, for 0A000)
    try (Connection connection = dataSource.getConnection()) {
      boolean inRecovery;
      try (java.sql.Statement statement = connection.createStatement();
          java.sql.ResultSet rs = statement.executeQuery("SELECT pg_is_in_recovery()")) {
        inRecovery = rs.next() && rs.getBoolean(1);
      }
      if (inRecovery) {
        return new SQLException(
            "the server is a standby (in recovery), which takes no writes: a failover in"
                + " progress, or an address that reaches a standby ("
                + e.getMessage()
                + ")",
            "25006",
            e);
      }
      if (changedSince.test(connection)) {
        return new SQLException(
            "the server was promoted from a standby, or recovered from a crash, since this store's"
                + " last claim: a failover in progress ("
                + e.getMessage()
                + ")",
            "25006",
            e);
      }
    } catch (SQLException probeFailed) {
      suppress(e, probeFailed);
    }
    return e;
  }

  static OutboxStoreException translate(String what, SQLException e) {
    String refused = refusedStartupOptions(e);
    if (refused != null) {
      // trying again cannot help: every connection sends them
      return new OutboxStoreException(
          "%s failed: the server, or a connection pooler in front of it (PgBouncer refuses it),"
                  .formatted(what)
              + " does not take the startup parameter 'options' that the store sends its session"
              + " settings in (%s); build the store with startupOptions(false) (the connector:"
                  .formatted(refused)
              + " connection.startup.options=false) and give the role the settings instead:"
              + " ALTER ROLE <user> SET jit = off, and statement_timeout and"
              + " idle_in_transaction_session_timeout",
          false,
          e);
    }
    String state = e.getSQLState() == null ? "" : e.getSQLState();
    boolean transientFailure = isTransient(e);
    return new OutboxStoreException(
        "%s failed (SQLState %s, %s): %s"
            .formatted(what, state, transientFailure ? "transient" : "permanent", e.getMessage()),
        transientFailure,
        e);
  }

  /**
   * {@link #translate} for a call in the caller's transaction. A read-only refusal (25006) there
   * means a failover in progress (transient) unless the caller made the transaction read-only
   * itself ({@link Connection#isReadOnly()}: {@code Connection.setReadOnly(true)}, which Spring's
   * {@code @Transactional(readOnly = true)} sets, and pgjdbc then begins {@code READ ONLY}): no
   * retry makes that transaction write, so it is permanent and says so. (A transaction made
   * read-only in SQL, or by {@code default_transaction_read_only}, cannot be told from a fenced
   * server and stays transient.)
   */
  static OutboxStoreException translate(String what, Connection transaction, SQLException e) {
    if ("25006".equals(e.getSQLState()) && readOnly(transaction)) {
      return new OutboxStoreException(
          ("%s failed (SQLState 25006, permanent): the caller's transaction is read-only"
                  + " (Connection.isReadOnly() is true, as Spring's @Transactional(readOnly = true)"
                  + " makes it); call it in a read-write transaction: %s")
              .formatted(what, e.getMessage()),
          false,
          e);
    }
    return translate(what, e);
  }

  private static boolean readOnly(Connection connection) {
    try {
      return connection.isReadOnly();
    } catch (SQLException | RuntimeException e) {
      return false; // a broken connection: the failure is what it says
    }
  }

  /** The refusal of the startup parameter {@code options} among the causes, or null. */
  static String refusedStartupOptions(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      String message = t.getMessage();
      if (message != null && message.contains("unsupported startup parameter: options")) {
        return message;
      }
    }
    return null;
  }

  /** Whether trying again later may succeed. */
  static boolean isTransient(SQLException e) {
    String state = e.getSQLState() == null ? "" : e.getSQLState();
    if (state.startsWith("28")) {
      // invalid authorization (a wrong password, a role pg_hba.conf rejects): trying again does not
      // help, also when it comes as HikariCP's SQLTransientConnectionException after its timeout,
      // which carries the last connect's SQLSTATE
      return false;
    }
    return e instanceof SQLTransientException
        || e instanceof SQLRecoverableException
        || state.startsWith("08") // connection exception
        || state.startsWith("40") // serialization failure, deadlock
        || state.startsWith("53") // insufficient resources
        || state.startsWith("57P") // admin shutdown, crash shutdown, cannot connect now
        || state.equals("57014") // statement timeout / query canceled
        // read-only transaction: a failover in progress (a read-only server at start is
        // refused for good by verifySchema, and by the connector's validate())
        || state.equals("25006")
        || state.equals("55P03"); // lock not available
  }

  /** Binds a nullable bigint. */
  static void setLong(PreparedStatement statement, int index, Long value) throws SQLException {
    if (value == null) {
      statement.setNull(index, Types.BIGINT);
    } else {
      statement.setLong(index, value);
    }
  }

  static Instant instant(Timestamp timestamp) {
    return timestamp == null ? null : timestamp.toInstant();
  }
}
