package io.relaybus.bench;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import javax.sql.DataSource;

/** Reads PostgreSQL's own counters: WAL position, statement calls, tuple counters of a table. */
final class PgProbe {
  private final DataSource admin;

  PgProbe(DataSource admin) {
    this.admin = admin;
  }

  /** Table counters; only complete once the backends that wrote them have flushed (or exited). */
  record TableStats(long inserted, long updated, long hotUpdated, long deleted, long dead) {
    TableStats minus(TableStats before) {
      return new TableStats(
          inserted - before.inserted,
          updated - before.updated,
          hotUpdated - before.hotUpdated,
          deleted - before.deleted,
          dead);
    }

    String hotPercent() {
      return updated == 0 ? "n/a" : "%.1f".formatted(100.0 * hotUpdated / updated);
    }
  }

  long walLsn() throws SQLException {
    return queryLong("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint");
  }

  void resetStatements() throws SQLException {
    queryLong("SELECT count(*) FROM (SELECT pg_stat_statements_reset()) r");
  }

  /** Calls of every statement except the probe's own since the last reset. */
  long statementCalls() throws SQLException {
    return queryLong(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements"
            + " WHERE query NOT ILIKE '%pg_stat%' AND query NOT ILIKE '%pg_wal_lsn_diff%'"
            + " AND query NOT ILIKE 'BEGIN%' AND query NOT ILIKE 'COMMIT%' AND query NOT ILIKE 'SET %'"
            + " AND query NOT ILIKE 'SHOW %' AND query NOT ILIKE 'select 1%'");
  }

  /** Calls and mean server time (ms) of the statements whose text contains {@code marker}. */
  String statementTime(String marker) throws SQLException {
    try (Connection c = admin.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time) / nullif(sum(calls), 0), 0)"
                    + " FROM pg_stat_statements WHERE query LIKE '%' || ? || '%'")) {
      s.setString(1, marker);
      try (ResultSet rs = s.executeQuery()) {
        rs.next();
        return "%,d × %.2f ms".formatted(rs.getLong(1), rs.getDouble(2));
      }
    }
  }

  /**
   * The completion's statements: the delete where the claim read the rows, and the whole statement
   * (struck handlers, moved rows, history).
   */
  static final List<String> COMPLETION = List.of("WITH fenced AS", "WITH t AS");

  /**
   * Calls, mean server time (ms) and mean buffer reads of the statements whose text starts with
   * {@code start} and contains {@code contains} (a table's name), since the last reset.
   */
  double[] statementCost(String start, String contains) throws SQLException {
    return statementCost(List.of(start), contains);
  }

  /**
   * {@link #statementCost(String, String)} over the statements starting with any of {@code starts}.
   */
  double[] statementCost(List<String> starts, String contains) throws SQLException {
    try (Connection c = admin.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0),"
                    + " coalesce(sum(shared_blks_hit + shared_blks_read), 0)"
                    + " FROM pg_stat_statements WHERE query LIKE ANY (?)"
                    + " AND query LIKE '%' || ? || '%'")) {
      s.setArray(1, c.createArrayOf("text", starts.stream().map(start -> start + "%").toArray()));
      s.setString(2, contains);
      try (ResultSet rs = s.executeQuery()) {
        rs.next();
        double calls = rs.getDouble(1);
        return calls == 0
            ? new double[] {0, 0, 0}
            : new double[] {calls, rs.getDouble(2) / calls, rs.getDouble(3) / calls};
      }
    }
  }

  TableStats table(String schema, String table) throws SQLException {
    try (Connection c = admin.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup"
                    + " FROM pg_stat_user_tables WHERE schemaname = ? AND relname = ?")) {
      s.setString(1, schema);
      s.setString(2, table);
      try (ResultSet rs = s.executeQuery()) {
        if (!rs.next()) {
          return new TableStats(0, 0, 0, 0, 0);
        }
        return new TableStats(
            rs.getLong(1), rs.getLong(2), rs.getLong(3), rs.getLong(4), rs.getLong(5));
      }
    }
  }

  /** How many times autovacuum has vacuumed the table. */
  long autovacuums(String schema, String table) throws SQLException {
    try (Connection c = admin.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT autovacuum_count FROM pg_stat_user_tables WHERE schemaname = ? AND relname = ?")) {
      s.setString(1, schema);
      s.setString(2, table);
      try (ResultSet rs = s.executeQuery()) {
        return rs.next() ? rs.getLong(1) : 0;
      }
    }
  }

  void execute(String sql) throws SQLException {
    try (Connection c = admin.getConnection();
        Statement s = c.createStatement()) {
      s.execute(sql);
    }
  }

  long queryLong(String sql) throws SQLException {
    try (Connection c = admin.getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      rs.next();
      return rs.getLong(1);
    }
  }

  /** Lets backends that went idle push their pending table statistics. */
  void awaitStatsFlush() throws InterruptedException {
    Thread.sleep(1500);
  }
}
