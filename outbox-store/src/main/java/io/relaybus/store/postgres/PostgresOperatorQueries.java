package io.relaybus.store.postgres;

import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.LaneStatus;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * What the operator's tools ask beyond {@link PostgresAdmin}: backlog split by why deliveries wait,
 * the lane map, and filtered dead letters. Admin work: these scan, like the rest of the admin API.
 *
 * <p>A pending delivery is due when both its due time and its timer deadline (an extend moves only
 * {@code fire_at}, see PostgresSchema) have come.
 */
final class PostgresOperatorQueries {
  /** Dead letters requeued per transaction by {@link #requeueBatch}. */
  static final int REQUEUE_BATCH = 1_000;

  private static final String DUE =
      "d.available_at <= now() AND (d.fire_at IS NULL OR d.fire_at <= now())";

  /**
   * Due, or held back only by its key: a delivery of the log (a token id) never attempted and no
   * timer was due when published, and a delivery whose own due time ({@code fire_at}) has come: a
   * timer's deadline, which only an extend moves (named or not since 2026-12-07), a retry's end of
   * backoff (row 131), a requeue's time (row 133), a takeover's charge (row 134). The claim moves
   * the {@code available_at} of any of them behind its key's blocker (a retry, a timer) without its
   * time being any later. Counted due, as every store does (until 2026-12-07 such a timer was
   * counted among the timers waiting for their deadline, row 115, and such a retry or charged
   * delivery among the retries, row 134). A timer rescheduled before row 131 still has its deadline
   * there and counts as due while it waits out that backoff (at most the policy's cap). Never NULL:
   * its negation counts the timers and retries ({@code fire_at <= now()} alone is NULL for a
   * delivery with no timer deadline).
   */
  static final String DUE_OR_HELD =
      "("
          + DUE
          + " OR (d.attempts = 0 AND d.fire_at IS NULL AND d.id >= "
          + PostgresLog.TOKEN_BASE
          + ") OR (d.fire_at IS NOT NULL AND d.fire_at <= now()))";

  /**
   * Since when a delivery counted by {@link #DUE_OR_HELD} has been due: its due time, or, held back
   * by its key, its timer's deadline or its publication.
   */
  private static final String DUE_SINCE =
      "CASE WHEN {due} THEN greatest(d.available_at, d.fire_at)"
          + " ELSE coalesce(d.fire_at, d.created_at) END";

  /** Parameters: handler x2, reason x2, olderThan ms x2, newerThan ms x2. */
  private static final String DEAD_FILTER =
      """
      d.status = 'dead'
        AND (?::text IS NULL OR d.handler = ?::text)
        AND (?::text IS NULL OR strpos(lower(coalesce(d.last_error, '')), lower(?::text)) > 0)
        AND (?::bigint IS NULL OR d.updated_at <= now() - ?::bigint * interval '1 millisecond')
        AND (?::bigint IS NULL OR d.updated_at > now() - ?::bigint * interval '1 millisecond')
      """;

  private final PostgresTables tables;

  PostgresOperatorQueries(PostgresTables tables) {
    this.tables = tables;
  }

  List<HandlerBacklog> backlog(Connection connection) throws SQLException {
    // A delivery of the log is pending with no attempt yet and due since it was published.
    String sql =
        """
        SELECT handler, sum(pending), sum(due), sum(in_flight), sum(timers), sum(retries),
               sum(dead), extract(epoch FROM now() - min(oldest_pending)) * 1000,
               extract(epoch FROM now() - min(oldest_due)) * 1000
        FROM (
          SELECT d.handler,
                 count(*) FILTER (WHERE d.status = 'pending') AS pending,
                 count(*) FILTER (WHERE d.status = 'pending' AND {due_or_held}) AS due,
                 count(*) FILTER (WHERE d.status = 'pending' AND d.id = ANY (l.in_flight))
                   AS in_flight,
                 count(*) FILTER (WHERE d.status = 'pending' AND NOT {due_or_held}
                                    AND d.attempts = 0) AS timers,
                 count(*) FILTER (WHERE d.status = 'pending' AND NOT {due_or_held}
                                    AND d.attempts > 0) AS retries,
                 count(*) FILTER (WHERE d.status = 'dead') AS dead,
                 min(d.created_at) FILTER (WHERE d.status = 'pending') AS oldest_pending,
                 -- held back by its key: due since its deadline, or since it was published
                 min({due_since}) FILTER (WHERE d.status = 'pending' AND {due_or_held})
                   AS oldest_due
          FROM {deliveries} d JOIN {lanes} l ON l.lane = d.lane
          GROUP BY d.handler
          UNION ALL
          SELECT handler, count(*), count(*), count(*) FILTER (WHERE in_flight), 0, 0, 0,
                 min(created_at), min(created_at)
          FROM ({log_deliveries}) x
          GROUP BY handler
        ) b
        GROUP BY handler ORDER BY handler"""
            .replace("{due_since}", DUE_SINCE)
            .replace("{due_or_held}", DUE_OR_HELD)
            .replace("{due}", DUE)
            .replace("{log_deliveries}", PostgresAdmin.logDeliveries())
            .replace("{expires}", PostgresLanes.EXPIRES);
    List<HandlerBacklog> result = new ArrayList<>();
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql));
        ResultSet rs = statement.executeQuery()) {
      while (rs.next()) {
        result.add(
            new HandlerBacklog(
                rs.getString(1),
                rs.getLong(2),
                rs.getLong(3),
                rs.getLong(4),
                rs.getLong(5),
                rs.getLong(6),
                rs.getLong(7),
                millis(rs.getDouble(8)),
                millis(rs.getDouble(9))));
      }
    }
    return result;
  }

  List<LaneStatus> lanes(Connection connection) throws SQLException {
    String sql =
        """
        SELECT l.lane, l.epoch, l.lease_owner, l.lease_group, {expires},
               l.lease_owner IS NOT NULL AND {expires} > now(),
               (SELECT count(*) FROM {deliveries} d
                WHERE d.id = ANY (l.in_flight) AND d.lane = l.lane AND d.status = 'pending')
                 + coalesce(g.in_flight, 0),
               coalesce(p.n, 0) + coalesce(g.n, 0)
        FROM {lanes} l
        LEFT JOIN {holders} h ON h.owner = l.lease_owner
        LEFT JOIN (SELECT lane, count(*) AS n FROM {deliveries} WHERE status = 'pending'
                   GROUP BY lane) p ON p.lane = l.lane
        LEFT JOIN (SELECT lane, count(*) AS n, count(*) FILTER (WHERE in_flight) AS in_flight
                   FROM ({log_deliveries}) x GROUP BY lane) g ON g.lane = l.lane
        ORDER BY l.lane"""
            .replace("{log_deliveries}", PostgresAdmin.logDeliveries())
            .replace("{expires}", PostgresLanes.EXPIRES);
    List<LaneStatus> result = new ArrayList<>();
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql));
        ResultSet rs = statement.executeQuery()) {
      while (rs.next()) {
        result.add(
            new LaneStatus(
                rs.getShort(1),
                rs.getLong(2),
                rs.getString(3),
                rs.getString(4),
                Jdbc.instant(rs.getTimestamp(5)),
                rs.getBoolean(6),
                rs.getLong(7),
                rs.getLong(8)));
      }
    }
    return result;
  }

  DeadLetterPage deadLetters(
      Connection connection, DeadLetterFilter filter, Long afterId, int limit) throws SQLException {
    String sql =
        """
        SELECT d.id, d.event_id, e.type, d.handler, d.lane, d.key, d.sequence, d.attempts,
               d.last_error, d.created_at, d.updated_at
        FROM {deliveries} d LEFT JOIN {events} e ON e.id = d.event_id
        WHERE\s"""
            + DEAD_FILTER
            + " AND (?::bigint IS NULL OR d.id > ?::bigint) ORDER BY d.id LIMIT ?";
    List<DeadLetter> items = new ArrayList<>();
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      int next = bindFilter(statement, filter);
      Jdbc.setLong(statement, next, afterId);
      Jdbc.setLong(statement, next + 1, afterId);
      statement.setInt(next + 2, limit + 1);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          long sequence = rs.getLong(7);
          Long seq = rs.wasNull() ? null : sequence;
          items.add(
              new DeadLetter(
                  rs.getLong(1),
                  rs.getString(2),
                  rs.getString(3),
                  rs.getString(4),
                  rs.getShort(5),
                  rs.getString(6),
                  seq,
                  rs.getInt(8),
                  rs.getString(9),
                  Jdbc.instant(rs.getTimestamp(10)),
                  Jdbc.instant(rs.getTimestamp(11))));
        }
      }
    }
    boolean more = items.size() > limit;
    if (more) {
      items.remove(items.size() - 1);
    }
    return new DeadLetterPage(items, more ? items.get(items.size() - 1).id() : null);
  }

  long countDeadLetters(Connection connection, DeadLetterFilter filter) throws SQLException {
    try (PreparedStatement statement =
        connection.prepareStatement(
            tables.sql("SELECT count(*) FROM {deliveries} d WHERE " + DEAD_FILTER))) {
      bindFilter(statement, filter);
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        return rs.getLong(1);
      }
    }
  }

  /**
   * Locks the next batch of matching dead letters after {@code afterId} (in the caller's
   * transaction) and returns their ids; the caller requeues exactly these through {@link
   * PostgresAdmin#requeue}, so a concurrent requeue or purge of one of them waits or finds it gone.
   */
  List<Long> lockBatch(Connection connection, DeadLetterFilter filter, long afterId)
      throws SQLException {
    String sql =
        "SELECT d.id FROM {deliveries} d WHERE "
            + DEAD_FILTER
            + " AND d.id > ? ORDER BY d.id LIMIT ? FOR UPDATE";
    List<Long> ids = new ArrayList<>();
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      int next = bindFilter(statement, filter);
      statement.setLong(next, afterId);
      statement.setInt(next + 1, REQUEUE_BATCH);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          ids.add(rs.getLong(1));
        }
      }
    }
    return ids;
  }

  private static int bindFilter(PreparedStatement statement, DeadLetterFilter filter)
      throws SQLException {
    statement.setString(1, filter.handler());
    statement.setString(2, filter.handler());
    statement.setString(3, filter.reasonContains());
    statement.setString(4, filter.reasonContains());
    Long older = filter.olderThan() == null ? null : filter.olderThan().toMillis();
    Long newer = filter.newerThan() == null ? null : filter.newerThan().toMillis();
    Jdbc.setLong(statement, 5, older);
    Jdbc.setLong(statement, 6, older);
    Jdbc.setLong(statement, 7, newer);
    Jdbc.setLong(statement, 8, newer);
    return 9;
  }

  private static Duration millis(double value) {
    return Duration.ofMillis(Math.max(0, Math.round(value)));
  }
}
