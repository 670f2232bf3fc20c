package io.relaybus.it.benchmark;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;

/**
 * A session that holds the xmin horizon back, as a long report, a forgotten {@code BEGIN} in psql
 * or a logical-replication snapshot export does: a REPEATABLE READ transaction that has read
 * something and stays open. Until it ends, VACUUM cannot remove any row version deleted after its
 * snapshot, so every dead tuple of the outbox stays in the tables and their indexes.
 */
final class SnapshotHolder implements AutoCloseable {
  /** What the holder showed in pg_stat_activity: its xmin was set and its age grew. */
  record Horizon(long ageAtStart, long ageAtEnd) {
    boolean held() {
      return ageAtEnd > ageAtStart;
    }
  }

  private final Connection holder;
  private final DataSource admin;
  private final int pid;
  private final long ageAtStart;

  /** Opens the transaction and reads one row of {@code table} (any table will do). */
  SnapshotHolder(DataSource admin, String table) throws SQLException {
    this.admin = admin;
    holder = admin.getConnection();
    holder.setAutoCommit(false);
    holder.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
    try (Statement s = holder.createStatement()) {
      s.executeQuery("SELECT 1 FROM " + table + " LIMIT 1").close();
      try (ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
        rs.next();
        pid = rs.getInt(1);
      }
    }
    ageAtStart = age();
  }

  /** age(backend_xmin) of the holder now; throws if the session holds no horizon. */
  long age() throws SQLException {
    try (Connection c = admin.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT age(backend_xmin) FROM pg_stat_activity WHERE pid = ?"
                    + " AND backend_xmin IS NOT NULL")) {
      s.setInt(1, pid);
      try (ResultSet rs = s.executeQuery()) {
        if (!rs.next()) {
          throw new IllegalStateException(
              "the snapshot holder (pid " + pid + ") shows no backend_xmin: it holds nothing");
        }
        return rs.getLong(1);
      }
    }
  }

  /** The horizon it held, read before it ends; then ends the transaction. */
  Horizon release() throws SQLException {
    Horizon h = new Horizon(ageAtStart, age());
    close();
    return h;
  }

  @Override
  public void close() throws SQLException {
    if (!holder.isClosed()) {
      holder.rollback();
      holder.close();
    }
  }
}
