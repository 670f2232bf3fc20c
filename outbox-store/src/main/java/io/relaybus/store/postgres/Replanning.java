package io.relaybus.store.postgres;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;
import org.postgresql.PGConnection;

/**
 * Has a connection plan the store's statements again once the log has grown well past the size it
 * had when they may have been planned.
 *
 * <p>The statements are prepared, and PostgreSQL keeps a prepared statement's generic plan until
 * the statistics of its tables change (ANALYZE; autovacuum's comes a minute or more after a burst).
 * The planner prices a sequential scan by the table's size at planning time, so a plan made on a
 * log of a few pages may scan it where it should look up a few rows, and keeps doing so as the log
 * grows to millions of rows. The claim learns the log's size in its first statement; a connection
 * whose statements may have been planned on a log of half that size or less discards its plans
 * ({@code DISCARD PLANS}: the prepared statements stay, each is planned again at its next run).
 * Sizes only grow here until vacuum truncates, so this happens about once per doubling.
 */
final class Replanning {
  /** Below this a scan of the whole log costs next to nothing: no discard for it. */
  static final long SMALL_BYTES = 256 * 1024;

  /** Per physical connection: the smallest log size seen since its plans were last discarded. */
  private final Map<PGConnection, Long> plannedAt =
      Collections.synchronizedMap(new WeakHashMap<>());

  private volatile long logBytes;

  /** The log's size in bytes, as the latest claim read it. */
  void logSize(long bytes) {
    logBytes = bytes;
  }

  /** Discards the plans of {@code connection} if the log doubled since they may have been made. */
  void check(Connection connection) throws SQLException {
    long now = logBytes;
    PGConnection physical = connection.unwrap(PGConnection.class);
    // the smallest size seen: plans may have been made again (after an ANALYZE) at any of them
    Long planned = plannedAt.merge(physical, now, Math::min);
    if (now < SMALL_BYTES || now < 2 * planned) {
      return;
    }
    try (Statement statement = connection.createStatement()) {
      statement.execute("DISCARD PLANS");
    }
    plannedAt.put(physical, now);
  }
}
