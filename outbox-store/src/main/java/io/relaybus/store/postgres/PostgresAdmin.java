package io.relaybus.store.postgres;

import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStatistics.HandlerCounts;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.XminHorizon;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Listings, statistics, requeue and retention. Admin work: these scan, and the schema keeps no
 * index for them on purpose (every index on deliveries is paid for on the hot path).
 */
final class PostgresAdmin {
  /** Rows deleted per purge statement, so a large purge never holds locks for long. */
  private static final int PURGE_BATCH = 5_000;

  private final PostgresTables tables;

  PostgresAdmin(PostgresTables tables) {
    this.tables = tables;
  }

  /**
   * The pending deliveries of the log (PostgresLog) as rows of their own, one per element of a log
   * row's {@code handlers}: id (the token id), event_id, handler, lane, key, sequence, created_at
   * (also their due time: attempts 0, due since published) and in_flight. {@code {filter}} is
   * replaced by further conditions on {@code g} (the log row) and {@code h.handler}.
   *
   * <p>A handler of a log row that left the happy path (failed, released, charged at a takeover,
   * parked behind its key) is a row of {deliveries} while the log row stays for its other handlers:
   * that row supersedes the log's copy, so each delivery is counted once. In flight are the rows a
   * lane's holder handed out, which only the claiming process knows exactly; from the database: the
   * rows of the window of the lane's latest cursor (visible in {@code hi}, above {@code start_pos}
   * or of a transaction {@code lo} saw in progress) up to its {@code handed}, while the lane still
   * has the cursor's epoch (a takeover or relinquish moves it; the takeover charges those rows).
   * Handlers of such a row already acknowledged while another is out count as in flight until the
   * row goes: after a crash they would be sent again.
   */
  static final String LOG_DELIVERIES =
      """
      SELECT 4611686018427387904 + g.id * 1024 + h.idx - 1 AS id, g.event_id, h.handler, g.lane,
             g.key, CASE WHEN g.key IS NULL THEN NULL ELSE g.id END AS sequence, g.created_at,
             -- what a takeover would charge (PostgresLog): handed out of the oldest window not
             -- done, of every window read after it, and of the newest one
             coalesce((pg_visible_in_snapshot(g.xid, c.hi) AND NOT pg_visible_in_snapshot(g.xid, c.lo)
                         AND g.id <= c.handed)
                      OR (pg_visible_in_snapshot(g.xid, c.lo2)
                          AND NOT pg_visible_in_snapshot(g.xid, c.hi))
                      OR (pg_visible_in_snapshot(g.xid, c.hi2)
                          AND NOT pg_visible_in_snapshot(g.xid, c.lo2) AND g.id <= c.handed2),
                      false) AS in_flight
      FROM {log} g
      CROSS JOIN LATERAL unnest(g.handlers) WITH ORDINALITY AS h(handler, idx)
      LEFT JOIN (
        SELECT l.lane, c.lo, c.hi, c.handed, c.lo2, c.hi2, c.handed2
        FROM {lanes} l CROSS JOIN LATERAL (
          SELECT * FROM {cursors} c WHERE c.lane = l.lane
          ORDER BY c.epoch DESC, c.version DESC LIMIT 1
        ) c
        WHERE c.epoch = l.epoch
      ) c ON c.lane = g.lane
      WHERE h.handler IS NOT NULL -- struck: done while the row's other handlers were out
        AND NOT EXISTS (
          SELECT 1 FROM {deliveries} d WHERE d.event_id = g.event_id AND d.handler = h.handler)
        {filter}""";

  /** {@link #LOG_DELIVERIES} with no further condition. */
  static String logDeliveries() {
    return LOG_DELIVERIES.replace("{filter}", "");
  }

  DeliveryPage list(Connection connection, DeliveryQuery query) throws SQLException {
    boolean history = query.status() == DeliveryStatus.COMPLETED;
    // Parameters of each branch: status x2, handler x2, key x2, event id x2, after id x2, limit.
    String filters =
        """
          AND (?::text IS NULL OR d.handler = ?::text)
          AND (?::text IS NULL OR d.key = ?::text)
          AND (?::text IS NULL OR d.event_id = ?::text)
          AND (?::bigint IS NULL OR d.id > ?::bigint)
        ORDER BY d.id LIMIT ?""";
    String sql;
    if (history) {
      sql =
          """
          SELECT id, event_id, handler, lane, key, sequence, 'completed', false, attempts,
                 completed_at, NULL, created_at, completed_at
          FROM {completed} d
          WHERE (?::text IS NULL OR ?::text = 'completed')
          """
              + filters;
    } else {
      // The log's branch narrows by lane for a key (its only index is (lane, id)) and by log id
      // for a page after a token id (ids are positive: a smaller one would overflow the
      // arithmetic); both branches are sorted and cut before the union.
      String log =
          LOG_DELIVERIES.replace(
              "{filter}",
              """
              AND (?::text IS NULL OR ?::text = 'pending')
                AND (?::text IS NULL OR h.handler = ?::text)
                AND (?::text IS NULL OR (g.lane = {lane_fn}(?::text) AND g.key = ?::text))
                AND (?::text IS NULL OR g.event_id = ?::text)
                AND (?::bigint IS NULL OR (g.id >= (greatest(?::bigint, 0) - 4611686018427387904) / 1024
                  AND 4611686018427387904 + g.id * 1024 + h.idx - 1 > ?::bigint))
              ORDER BY 1 LIMIT ?""");
      sql =
          """
          SELECT * FROM (
            (SELECT d.id, d.event_id, d.handler, d.lane, d.key, d.sequence, d.status,
                    d.status = 'pending' AND d.id = ANY (l.in_flight), d.attempts,
                    d.available_at, d.last_error, d.created_at, d.updated_at
             FROM {deliveries} d JOIN {lanes} l ON l.lane = d.lane
             WHERE (?::text IS NULL OR d.status = ?::text)
          """
              + filters
              + """
            )
            UNION ALL
            (SELECT x.id, x.event_id, x.handler, x.lane, x.key, x.sequence, 'pending',
                    x.in_flight, 0, x.created_at, NULL, x.created_at, x.created_at
             FROM (
          """
              + log
              + """
             ) x)
          ) u ORDER BY 1 LIMIT ?""";
    }
    List<DeliveryView> items = new ArrayList<>();
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      String status = query.status() == null ? null : query.status().label();
      int next = 1;
      for (int branch = 0; branch < (history ? 1 : 2); branch++) {
        statement.setString(next++, status);
        statement.setString(next++, status);
        statement.setString(next++, query.handler());
        statement.setString(next++, query.handler());
        statement.setString(next++, query.key());
        statement.setString(next++, query.key());
        if (branch == 1) {
          statement.setString(next++, query.key());
        }
        statement.setString(next++, query.eventId());
        statement.setString(next++, query.eventId());
        Jdbc.setLong(statement, next++, query.afterId());
        Jdbc.setLong(statement, next++, query.afterId());
        if (branch == 1) {
          Jdbc.setLong(statement, next++, query.afterId());
        }
        statement.setInt(next++, query.limit() + 1);
      }
      if (!history) {
        statement.setInt(next, query.limit() + 1);
      }
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          long sequence = rs.getLong(6);
          Long seq = rs.wasNull() ? null : sequence;
          items.add(
              new DeliveryView(
                  rs.getLong(1),
                  rs.getString(2),
                  rs.getString(3),
                  rs.getShort(4),
                  rs.getString(5),
                  seq,
                  DeliveryStatus.parse(rs.getString(7)),
                  rs.getBoolean(8),
                  rs.getInt(9),
                  Jdbc.instant(rs.getTimestamp(10)),
                  rs.getString(11),
                  Jdbc.instant(rs.getTimestamp(12)),
                  Jdbc.instant(rs.getTimestamp(13))));
        }
      }
    }
    boolean more = items.size() > query.limit();
    if (more) {
      items.remove(items.size() - 1);
    }
    return new DeliveryPage(items, more ? items.get(items.size() - 1).id() : null);
  }

  /**
   * The ids of {@code ids} that {@code lane} still holds: a row of {deliveries} (pending or dead; a
   * log delivery off the happy path keeps its id there), or a handler of a log row not struck. One
   * statement, so a delivery moving from the log to {deliveries} meanwhile is seen in one of the
   * two. A handler completed while the row's others are out may still count (the row goes with its
   * last handler): kept, never dropped wrongly. Each id is one lookup of the primary key of
   * {deliveries} and at most one of the log's (lane, id).
   */
  java.util.Set<Long> remaining(Connection connection, int lane, Collection<Long> ids)
      throws SQLException {
    String sql =
        """
        SELECT t.id FROM unnest(?::bigint[]) AS t(id)
        WHERE EXISTS (SELECT 1 FROM {deliveries} d WHERE d.id = t.id AND d.lane = ?::smallint)
           OR (t.id >= 4611686018427387904 AND EXISTS (
                SELECT 1 FROM {log} g
                WHERE g.lane = ?::smallint AND g.id = (t.id - 4611686018427387904) / 1024
                  AND g.handlers[(t.id - 4611686018427387904) % 1024 + 1] IS NOT NULL))""";
    java.util.Set<Long> held = new java.util.HashSet<>();
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      statement.setArray(1, connection.createArrayOf("int8", ids.toArray()));
      statement.setInt(2, lane);
      statement.setInt(3, lane);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          held.add(rs.getLong(1));
        }
      }
    }
    return held;
  }

  /**
   * Oldest holder of the xmin horizon in this database: sessions with a snapshot or transaction id
   * (but this one, and autovacuum, whose snapshot does not hold the horizon back), prepared
   * transactions, and replication slots (any database; they have no start time).
   */
  XminHorizon xminHorizon(Connection connection) throws SQLException {
    String sql =
        """
        WITH holders (since, xids) AS (
          SELECT xact_start, greatest(age(backend_xmin), age(backend_xid))
          FROM pg_stat_activity
          WHERE pid <> pg_backend_pid() AND datname = current_database()
            AND backend_type <> 'autovacuum worker'
            AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
          UNION ALL
          SELECT prepared, age(transaction) FROM pg_prepared_xacts
          WHERE database = current_database()
          UNION ALL
          SELECT NULL, age(xmin) FROM pg_replication_slots WHERE xmin IS NOT NULL)
        SELECT coalesce(max((extract(epoch FROM clock_timestamp() - since) * 1000)::bigint), 0),
               coalesce(max(xids), 0)
        FROM holders""";
    try (PreparedStatement statement = connection.prepareStatement(sql);
        ResultSet rs = statement.executeQuery()) {
      rs.next();
      return new XminHorizon(Duration.ofMillis(Math.max(0, rs.getLong(1))), rs.getLong(2));
    }
  }

  /**
   * Per handler: pending, due, dead and completed; per lane: the backlog; and the oldest pending
   * delivery's age. One statement, so one snapshot: in two, a delivery published, completed or
   * moved between them was counted in one and not the other (totals and backlog disagreed). Each of
   * {deliveries} and the log is read once, grouped by handler and by lane together.
   */
  OutboxStatistics statistics(Connection connection) throws SQLException {
    Map<String, long[]> counts = new TreeMap<>();
    Long[] backlog = new Long[Lanes.COUNT];
    java.util.Arrays.fill(backlog, 0L);
    Duration oldest = Duration.ZERO;
    try (PreparedStatement statement =
            connection.prepareStatement(
                tables.sql(
                    """
                SELECT handler, lane, GROUPING(handler) = 0,
                       count(*) FILTER (WHERE status = 'pending'),
                       count(*) FILTER (WHERE status = 'pending' AND {due_or_held}),
                       count(*) FILTER (WHERE status = 'dead'),
                       0,
                       extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'pending'))
                         * 1000
                FROM {deliveries} d GROUP BY GROUPING SETS ((handler), (lane))
                UNION ALL
                SELECT handler, lane, GROUPING(handler) = 0, count(*), count(*), 0, 0,
                       extract(epoch FROM now() - min(created_at)) * 1000
                FROM ({log_deliveries}) x GROUP BY GROUPING SETS ((handler), (lane))
                UNION ALL
                SELECT handler, NULL, true, 0, 0, 0, count(*), NULL FROM {completed}
                GROUP BY handler"""
                        .replace("{log_deliveries}", logDeliveries())
                        .replace("{due_or_held}", PostgresOperatorQueries.DUE_OR_HELD)));
        ResultSet rs = statement.executeQuery()) {
      while (rs.next()) {
        if (rs.getBoolean(3)) {
          long[] c = counts.computeIfAbsent(rs.getString(1), h -> new long[4]);
          for (int i = 0; i < 4; i++) {
            c[i] += rs.getLong(i + 4);
          }
          continue;
        }
        backlog[rs.getShort(2)] += rs.getLong(4);
        double ageMillis = rs.getDouble(8);
        if (!rs.wasNull()) {
          Duration age = Duration.ofMillis(Math.max(0, Math.round(ageMillis)));
          if (age.compareTo(oldest) > 0) {
            oldest = age;
          }
        }
      }
    }
    Map<String, HandlerCounts> handlers = new TreeMap<>();
    counts.forEach((h, c) -> handlers.put(h, new HandlerCounts(c[0], c[1], c[2], c[3])));
    return new OutboxStatistics(handlers, oldest, List.of(backlog));
  }

  /**
   * A requeued dead timer goes out as a plain delivery: its timer id may be taken again by now. A
   * requeued delivery is due at its requeue, and that is its own due time ({@code fire_at}, as a
   * timer's deadline and a retry's backoff are): held behind its key's retry it counts as due, held
   * by its key, not as a timer (until 2026-12-07 a requeued dead timer, its {@code fire_at}
   * cleared, counted among the timers waiting for a deadline; reliability row 133).
   */
  int requeue(Connection connection, Collection<Long> ids, String handler, boolean byHandler)
      throws SQLException {
    String sql =
        """
        UPDATE {deliveries} SET status = 'pending', attempts = 0, claims = claims + 1,
               available_at = now(), last_error = NULL, updated_at = now(),
               timer_id = NULL, fire_at = now()
        WHERE status = 'dead'"""
            + (byHandler
                ? " AND (?::text IS NULL OR handler = ?::text)"
                : " AND id = ANY (?::bigint[])");
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      if (byHandler) {
        statement.setString(1, handler);
        statement.setString(2, handler);
      } else {
        statement.setArray(1, connection.createArrayOf("int8", ids.toArray()));
      }
      return statement.executeUpdate();
    }
  }

  /**
   * Purges in batches. Each batch re-checks what it deletes against the rows as they are once it
   * holds their locks, never against the snapshot it found them in: a dead letter requeued, an
   * event given a delivery or a key given a sequence while the purge ran stays (issue 13, item 2).
   */
  PurgeResult purge(Connection connection, RetentionPolicy retention) throws SQLException {
    // The outer WHERE repeats the subquery's conditions: when the delete waited for a row lock,
    // PostgreSQL re-evaluates the outer WHERE, and only it, on the row's newest version.
    long dead =
        purgeInBatches(
            connection,
            """
            DELETE FROM {deliveries} WHERE id IN (
              SELECT id FROM {deliveries}
              WHERE status = 'dead' AND updated_at < now() - ? * interval '1 millisecond'
              LIMIT ?)
            AND status = 'dead' AND updated_at < now() - ? * interval '1 millisecond'""",
            retention.deadLetters());
    // An event is deleted only with its row locked and no delivery (a row of {deliveries} or of
    // the log) seen by a statement that began after the lock was taken. A publisher adds a
    // delivery to an existing event only while holding the event's row lock (PostgresPublisher
    // locks it FOR UPDATE): either it committed before the purge locked the row, and the delete's
    // snapshot sees its delivery, or it waits for the purge, finds the event gone and publishes it
    // as new. Rows a publisher holds are skipped. The log has no index on event_id on purpose (it
    // would cost every publish a random btree insert): each of the two statements reads the log
    // once, as a hash anti-join (PostgreSQL 17, 100,000 log rows: 40 ms of a 48 ms batch), so a
    // batch costs one pass over the log.
    long events =
        lockThenDelete(
            connection,
            """
            SELECT e.id FROM {events} e
            WHERE e.created_at < now() - ? * interval '1 millisecond'
              AND NOT EXISTS (SELECT 1 FROM {deliveries} d WHERE d.event_id = e.id)
              AND NOT EXISTS (SELECT 1 FROM {log} g WHERE g.event_id = e.id)
            LIMIT ? FOR UPDATE OF e SKIP LOCKED""",
            """
            DELETE FROM {events} e WHERE e.id = ANY (?::text[])
              AND NOT EXISTS (SELECT 1 FROM {deliveries} d WHERE d.event_id = e.id)
              AND NOT EXISTS (SELECT 1 FROM {log} g WHERE g.event_id = e.id)""",
            retention.events(),
            false);
    long history =
        purgeInBatches(
            connection,
            """
            DELETE FROM {completed} WHERE id IN (
              SELECT id FROM {completed}
              WHERE completed_at < now() - ? * interval '1 millisecond' LIMIT ?)""",
            retention.completionHistory());
    // A key's counter may go once no delivery of the key is pending: its sequence then restarts,
    // which is safe because nothing pending remains to be ordered against. (A dead letter of the
    // key requeued later keeps its old sequence.) A publisher holds the key's row from taking a
    // sequence until its deliveries commit, so, as for events, the counter is locked first and
    // the pending deliveries are looked for by a later statement: a counter advanced meanwhile is
    // kept, however old the advancing transaction's now() is.
    long keys =
        lockThenDelete(
            connection,
            """
            SELECT k.key FROM {keys} k
            WHERE k.updated_at < now() - ? * interval '1 millisecond'
              AND NOT EXISTS (
                SELECT 1 FROM {deliveries} d
                WHERE d.lane = {lane_fn}(k.key) AND d.key = k.key AND d.status = 'pending')
            LIMIT ? FOR UPDATE OF k SKIP LOCKED""",
            """
            DELETE FROM {keys} k WHERE k.key = ANY (?::text[])
              AND k.updated_at < now() - ? * interval '1 millisecond'
              AND NOT EXISTS (
                SELECT 1 FROM {deliveries} d
                WHERE d.lane = {lane_fn}(k.key) AND d.key = k.key AND d.status = 'pending')""",
            retention.events(),
            true);
    purgeCursors(connection);
    return new PurgeResult(events, dead, history, keys);
  }

  /**
   * Deletes the cursor rows (PostgresLog) that are not the latest of their lane, in batches: only
   * the latest row (highest epoch, then version) of a lane is ever read. A claim appending a row
   * meanwhile only adds a newer one; a row is deleted only below one that is committed, so the
   * latest stays, whatever runs alongside. Returns the rows deleted.
   */
  long purgeCursors(Connection connection) throws SQLException {
    String sql =
        """
        DELETE FROM {cursors} c WHERE c.ctid = ANY (ARRAY(
          SELECT o.ctid FROM {lanes} l
          CROSS JOIN LATERAL (
            SELECT t.epoch, t.version FROM {cursors} t WHERE t.lane = l.lane
            ORDER BY t.epoch DESC, t.version DESC LIMIT 1
          ) latest
          JOIN {cursors} o ON o.lane = l.lane
            AND (o.epoch, o.version) < (latest.epoch, latest.version)
          LIMIT ?))""";
    long total = 0;
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      statement.setInt(1, PURGE_BATCH);
      int deleted;
      do {
        deleted = statement.executeUpdate();
        total += deleted;
      } while (deleted == PURGE_BATCH);
    }
    return total;
  }

  /** Runs a delete whose parameters are the age, the batch size, then the age again if any. */
  private long purgeInBatches(Connection connection, String sql, Duration age) throws SQLException {
    long total = 0;
    try (PreparedStatement statement = connection.prepareStatement(tables.sql(sql))) {
      statement.setLong(1, age.toMillis());
      statement.setInt(2, PURGE_BATCH);
      if (sql.chars().filter(c -> c == '?').count() > 2) {
        statement.setLong(3, age.toMillis());
      }
      int deleted;
      do {
        deleted = statement.executeUpdate();
        total += deleted;
      } while (deleted == PURGE_BATCH);
    }
    return total;
  }

  /**
   * Batches of one transaction each: {@code lock} (age, batch size) locks candidate rows and
   * returns their ids; {@code delete} (ids, and the age when {@code deleteTakesAge}) re-checks them
   * in a new snapshot, taken after the locks, and deletes.
   */
  private long lockThenDelete(
      Connection connection, String lock, String delete, Duration age, boolean deleteTakesAge)
      throws SQLException {
    long total = 0;
    connection.setAutoCommit(false);
    try (PreparedStatement select = connection.prepareStatement(tables.sql(lock));
        PreparedStatement remove = connection.prepareStatement(tables.sql(delete))) {
      select.setLong(1, age.toMillis());
      select.setInt(2, PURGE_BATCH);
      int locked;
      do {
        List<String> ids = new ArrayList<>();
        try (ResultSet rs = select.executeQuery()) {
          while (rs.next()) {
            ids.add(rs.getString(1));
          }
        }
        locked = ids.size();
        if (locked > 0) {
          remove.setArray(1, connection.createArrayOf("text", ids.toArray()));
          if (deleteTakesAge) {
            remove.setLong(2, age.toMillis());
          }
          total += remove.executeUpdate();
        }
        connection.commit();
      } while (locked == PURGE_BATCH);
    } catch (SQLException | RuntimeException e) {
      Jdbc.rollbackQuietly(connection, e);
      throw e;
    } finally {
      connection.setAutoCommit(true);
    }
    return total;
  }
}
