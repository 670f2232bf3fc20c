package io.relaybus.admin;

import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import javax.sql.DataSource;

/**
 * Where the outbox meets the rest of a PostgreSQL database: vacuum of the outbox tables, and who
 * holds the xmin horizon back. A queue table lives on deletes; its dead rows can only be vacuumed
 * away once no snapshot, replication slot or prepared transaction still needs them, so one
 * forgotten {@code idle in transaction} session makes every claim scan more dead rows. Reads the
 * statistics views only (no extension, no superuser needed; another role's query text shows as
 * {@code <insufficient privilege>}).
 */
final class PostgresHealth {
  /** Vacuum is behind when a table has more dead rows than this and than 20% of its live ones. */
  static final long DEAD_TUPLES_WARNING = 10_000;

  // log: the happy path of storage v2 (a row per published event, deleted once done); cursors:
  // appended by claims, thinned out by purge
  private static final List<String> TABLES =
      List.of("log", "deliveries", "lanes", "cursors", "events", "keys", "completed");

  private final DataSource dataSource;
  private final PostgresOutboxStore store;

  PostgresHealth(PostgresOutboxStore store) {
    this.store = store;
    this.dataSource = store.dataSource();
  }

  /** Vacuum state of one outbox table. */
  record TableHealth(
      String table,
      long liveTuples,
      long deadTuples,
      Instant lastVacuum,
      Instant lastAutovacuum,
      long autovacuumCount,
      long deletes) {}

  /**
   * Something that holds the xmin horizon back.
   *
   * @param kind backend, replication slot, or prepared transaction
   * @param name the backend's pid, the slot's name, or the prepared transaction's gid
   * @param detail user, application and client of a backend; type and activity of a slot
   * @param state a backend's state (e.g. idle in transaction), else null
   * @param since when its transaction started (or was prepared); null for a slot
   * @param xidAge how many transactions old its xmin is
   * @param query a backend's current or last query, shortened
   * @param advice what to do about it
   */
  record HorizonHolder(
      String kind,
      String name,
      String detail,
      String state,
      Instant since,
      long xidAge,
      String query,
      String advice) {}

  /**
   * @param horizonAge how long the oldest holder has held it (backends and prepared transactions)
   * @param horizonXidAge the oldest holder's xmin age in transactions
   * @param warnings what is wrong, each with what to do; empty when healthy
   */
  record Report(
      Instant checkedAt,
      List<TableHealth> tables,
      List<HorizonHolder> holders,
      Duration horizonAge,
      long horizonXidAge,
      List<String> warnings) {
    boolean healthy() {
      return warnings.isEmpty();
    }
  }

  Report check(Duration warnAfter, long warnXidAge) {
    try (java.sql.Connection c = dataSource.getConnection()) {
      Instant now;
      try (PreparedStatement s = c.prepareStatement("SELECT now()");
          ResultSet rs = s.executeQuery()) {
        rs.next();
        now = rs.getTimestamp(1).toInstant();
      }
      List<TableHealth> tables = tables(c);
      List<HorizonHolder> holders = new ArrayList<>();
      backends(c, holders);
      slots(c, holders);
      prepared(c, holders);
      holders.sort((a, b) -> Long.compare(b.xidAge(), a.xidAge()));
      Duration horizonAge = Duration.ZERO;
      long xidAge = 0;
      List<String> warnings = new ArrayList<>();
      for (HorizonHolder h : holders) {
        Duration held = h.since() == null ? Duration.ZERO : Duration.between(h.since(), now);
        horizonAge = held.compareTo(horizonAge) > 0 ? held : horizonAge;
        xidAge = Math.max(xidAge, h.xidAge());
        boolean tooOld = h.since() != null && held.compareTo(warnAfter) >= 0;
        if (tooOld || h.xidAge() >= warnXidAge) {
          warnings.add(
              "xmin horizon held by %s %s for %s (%d transactions): %s"
                  .formatted(h.kind(), h.name(), Text.age(held), h.xidAge(), h.advice()));
        }
      }
      for (TableHealth t : tables) {
        if (t.deadTuples() > DEAD_TUPLES_WARNING && t.deadTuples() > t.liveTuples() / 5) {
          warnings.add(
              ("%s has %d dead rows against %d live: vacuum is behind. If the horizon is held (see"
                      + " above) end the holder first; then VACUUM (VERBOSE) %s, and lower"
                      + " autovacuum_vacuum_cost_delay or raise autovacuum_max_workers if it keeps"
                      + " falling behind")
                  .formatted(t.table(), t.deadTuples(), t.liveTuples(), t.table()));
        }
      }
      return new Report(now, tables, holders, horizonAge, xidAge, warnings);
    } catch (SQLException e) {
      throw new IllegalStateException(
          "reading PostgreSQL health failed (SQLState " + e.getSQLState() + "): " + e.getMessage(),
          e);
    }
  }

  /**
   * Rows deleted from the log and the deliveries table since the statistics were reset: events
   * whose deliveries are all done (a log row goes once every handler of it finished or left the
   * log), completed retries and purged dead letters. A finished-work counter, not an exact count of
   * deliveries: a log row of several handlers counts once.
   */
  long deliveriesDeleted() {
    try (java.sql.Connection c = dataSource.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                """
                SELECT coalesce(sum(n_tup_del), 0) FROM pg_stat_user_tables
                WHERE relid IN (to_regclass(?), to_regclass(?))""")) {
      s.setString(1, store.tableName("deliveries"));
      s.setString(2, store.tableName("log"));
      try (ResultSet rs = s.executeQuery()) {
        return rs.next() ? rs.getLong(1) : 0;
      }
    } catch (SQLException e) {
      throw new IllegalStateException("reading pg_stat_user_tables failed: " + e.getMessage(), e);
    }
  }

  private List<TableHealth> tables(java.sql.Connection c) throws SQLException {
    List<TableHealth> result = new ArrayList<>();
    try (PreparedStatement s =
        c.prepareStatement(
            """
            SELECT n_live_tup, n_dead_tup, last_vacuum, last_autovacuum, autovacuum_count, n_tup_del
            FROM pg_stat_user_tables WHERE relid = to_regclass(?)""")) {
      for (String table : TABLES) {
        String name = store.tableName(table);
        s.setString(1, name);
        try (ResultSet rs = s.executeQuery()) {
          if (rs.next()) {
            result.add(
                new TableHealth(
                    name,
                    rs.getLong(1),
                    rs.getLong(2),
                    instant(rs.getTimestamp(3)),
                    instant(rs.getTimestamp(4)),
                    rs.getLong(5),
                    rs.getLong(6)));
          }
        }
      }
    }
    return result;
  }

  private static void backends(java.sql.Connection c, List<HorizonHolder> holders)
      throws SQLException {
    try (PreparedStatement s =
            c.prepareStatement(
                """
                SELECT pid, usename, application_name, client_addr::text, state,
                       coalesce(xact_start, query_start, backend_start), held.age,
                       left(query, 200)
                FROM pg_stat_activity
                -- a writer's own xid holds the horizon too (READ COMMITTED, idle in its
                -- transaction: no snapshot, so no backend_xmin); only this database's sessions
                -- and no autovacuum worker hold back what vacuum may remove here
                CROSS JOIN LATERAL (
                  SELECT greatest(age(backend_xmin), age(backend_xid)) AS age) held
                WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
                  AND datname = current_database() AND backend_type <> 'autovacuum worker'
                  AND pid <> pg_backend_pid()
                ORDER BY held.age DESC LIMIT 10""");
        ResultSet rs = s.executeQuery()) {
      while (rs.next()) {
        int pid = rs.getInt(1);
        String state = rs.getString(5);
        String advice =
            ("idle in transaction".equals(state)
                    ? "the session is idle inside a transaction: have its client commit or roll"
                        + " back, set idle_in_transaction_session_timeout, or end it with"
                    : "a long transaction or query: let it finish, or end it with")
                + " SELECT pg_terminate_backend(%d)".formatted(pid);
        holders.add(
            new HorizonHolder(
                "backend",
                "pid " + pid,
                "user %s, application '%s', client %s"
                    .formatted(rs.getString(2), rs.getString(3), rs.getString(4)),
                state,
                instant(rs.getTimestamp(6)),
                rs.getLong(7),
                rs.getString(8),
                advice));
      }
    }
  }

  private static void slots(java.sql.Connection c, List<HorizonHolder> holders)
      throws SQLException {
    try (PreparedStatement s =
            c.prepareStatement(
                """
                SELECT slot_name, slot_type, active,
                       greatest(coalesce(age(xmin), 0), coalesce(age(catalog_xmin), 0))
                FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL""");
        ResultSet rs = s.executeQuery()) {
      while (rs.next()) {
        String name = rs.getString(1);
        boolean active = rs.getBoolean(3);
        holders.add(
            new HorizonHolder(
                "replication slot",
                name,
                "%s slot, %s".formatted(rs.getString(2), active ? "active" : "inactive"),
                null,
                null,
                rs.getLong(4),
                null,
                active
                    ? "its consumer is behind: check it (a stopped CDC connector, a lagging"
                        + " standby with hot_standby_feedback)"
                    : "no consumer is attached: if it is no longer used, SELECT"
                        + " pg_drop_replication_slot('%s')".formatted(name)));
      }
    }
  }

  private static void prepared(java.sql.Connection c, List<HorizonHolder> holders)
      throws SQLException {
    try (PreparedStatement s =
            c.prepareStatement(
                "SELECT gid, prepared, owner, database, age(transaction) FROM pg_prepared_xacts");
        ResultSet rs = s.executeQuery()) {
      while (rs.next()) {
        String gid = rs.getString(1);
        holders.add(
            new HorizonHolder(
                "prepared transaction",
                gid,
                "owner %s, database %s".formatted(rs.getString(3), rs.getString(4)),
                null,
                instant(rs.getTimestamp(2)),
                rs.getLong(5),
                null,
                "a two-phase commit its coordinator never finished: COMMIT PREPARED '%s' or"
                        .formatted(gid)
                    + " ROLLBACK PREPARED '%s', as the coordinator's log says".formatted(gid)));
      }
    }
  }

  private static Instant instant(Timestamp timestamp) {
    return timestamp == null ? null : timestamp.toInstant();
  }
}
