package io.relaybus.store.postgres;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.RetryPolicy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * Claim, complete, fail and release of the deliveries that are rows of {@code {deliveries}}: the
 * statements of the hot path.
 *
 * <p>Where the other stores split the claim (MemoryClaims, MongoClaims) from how it ends
 * (MemoryCompletion, MongoCompletion), PostgreSQL splits by where a delivery lives: the rows of
 * {@code {deliveries}} here, the rows of the event log in {@link PostgresLog}. Each class claims
 * and ends its own rows, because a token's fencing is checked against its own table.
 *
 * <p><b>Fencing invariant.</b> A delivery leaves its lane's {@code in_flight} list only by being
 * deleted (completed), or through a write that also bumps its {@code claims} counter (reschedule,
 * bury, release, takeover charge) or the lane's epoch (takeover, relinquish). So "the lane has the
 * token's epoch and the delivery has the token's claims" implies "still in flight under this
 * token", and completion needs no array search: it stays one primary-key delete per delivery.
 */
final class PostgresClaims {
  /**
   * Statements per claim at most. A round that finds keys blocked defers all their due followers,
   * so the next round reads past them; a claim needs more than two rounds only when its first two
   * found blocked keys in different parts of the lanes.
   */
  static final int MAX_ROUNDS = 3;

  private final String claim;
  private final String complete;
  private final String completeWithHistory;
  private final String fail;
  private final String release;

  PostgresClaims(PostgresTables tables) {
    // One statement: read the held lanes, read up to `limit` due deliveries lane by lane (through
    // the lane_due index) that are not in flight, apply the per-key rule, lock only the lanes the
    // batch takes from (in lane order; a lane whose epoch or owner changed since is dropped with
    // its
    // deliveries: it was taken over), record the batch in their in_flight (pruning ids that were
    // completed meanwhile), and return the batch with its events. No delivery row is written.
    //
    // Held lanes are read, not locked: locking all of them wrote a row-lock WAL record per lane
    // per claim (14 KB for an empty claim over 256 lanes). The snapshot is enough: only this task
    // changes its lanes' in_flight, and a takeover moves the epoch, which the lock rechecks.
    //
    // Per-key rule: for each (lane, handler, key) among the candidates, first_blocked is the
    // lowest sequence of a pending delivery that is neither in flight nor a candidate (one index
    // range scan per key, stopping at the first hit); exactly the candidates below it may go, a
    // prefix of the key's queue. Dead rows are not pending, so they block nothing. The CTEs are
    // MATERIALIZED so each runs once per claim (inlined, the planner re-ran them per candidate).
    //
    // Deferral (no head-of-line blocking): the candidates are the oldest due rows, so a key whose
    // first_blocked row is not due (retry backoff, a keyed timer, a dead letter requeued) or not
    // among them (followers older than their head, from a transaction that started earlier) would
    // fill every claim with the same held-back rows, and no other key of the lane would go again.
    // So the claim moves each follower of a blocked key (pending, above first_blocked, not in
    // flight) to no earlier than the blocker's due time plus its rank in that run (1, 2, ...)
    // microseconds: a follower cannot go before its blocker anyway, and the offset keeps the key's
    // rows in sequence order by (available_at, id) behind it. (Until 2026-12-07 the offset was the
    // sequence gap; sequences are log ids shared by every key, so 100 million events of other keys
    // between a head and its follower held the follower 100 s after its head.) Each row is moved
    // once per blocking (the condition skips rows already far enough); later claims read none of
    // them until the blocker is due, however deep the backlog. Rows another transaction holds are
    // skipped (SKIP
    // LOCKED: never wait on an application), and a re-armed timer is left to the re-arm (one
    // write per row per statement). The statement then returns a marker row, and the caller runs
    // it again in the same transaction to fill the batch past what it deferred.
    //
    // The blocker is locked FOR SHARE SKIP LOCKED ("shared"; a timer this statement locked is held
    // already, "settled") and its due time read from the version locked, the latest committed: a
    // blocker another transaction holds (a cancel or an extend not committed yet, whose pull of the
    // key's followers is done) defers nothing, so no deferral outlives the blocker's state (it
    // stranded followers behind a cancelled timer's old deadline); its key's rows are still held
    // back by the per-key rule. A cancel or extend that waited for this lock pulls the followers
    // in a statement after it (PostgresTimers), which sees the deferral.
    //
    // Timers (fire_at set: every timer armed since 2026-12-07, named or not; a pull of a key's
    // followers behind a timer cancelled or moved earlier may have moved a follower timer's
    // available_at before its own deadline): the candidates that are timers are locked, skipping
    // any an uncommitted extend, replace or cancel holds (that call wins; the next claim sees its
    // result), and read again at their latest version. One whose fire_at is still ahead was
    // extended (or pulled): it is re-armed (available_at = fire_at) and not handed out, and it
    // blocks its key like any
    // pending delivery that is not due. A timer handed out is marked firing (firing_claims =
    // claims), so an extend's single UPDATE sees it on the row itself (see PostgresTimers). These
    // two HOT-or-index writes and the deferral of blocked followers are the only writes a claim
    // makes to deliveries.
    claim =
        tables.sql(
            """
            WITH req AS (
              SELECT * FROM unnest(?::smallint[], ?::bigint[], ?::text[])
                WITH ORDINALITY AS r(lane, epoch, covered, ord)
            ), held AS MATERIALIZED (
              SELECT l.lane, l.epoch, l.in_flight, r.ord, r.covered::pg_snapshot AS covered
              FROM req r JOIN {lanes} l ON l.lane = r.lane AND l.epoch = r.epoch AND l.lease_owner = ?
            ), cand AS MATERIALIZED (
              SELECT c.*, h.epoch, h.ord FROM (SELECT * FROM held ORDER BY ord) h CROSS JOIN LATERAL (
                SELECT d.id, d.lane, d.handler, d.key, d.sequence, d.available_at,
                       d.event_id, d.claims, d.attempts, d.fire_at
                FROM {deliveries} d
                WHERE d.lane = h.lane AND d.status = 'pending' AND d.available_at <= now()
                  AND d.id <> ALL (h.in_flight)
                  AND (d.xid IS NULL OR pg_visible_in_snapshot(d.xid, h.covered))
                ORDER BY d.available_at, d.id
                LIMIT ?
              ) c
              LIMIT ?
            ), timers AS MATERIALIZED (
              SELECT d.id, d.fire_at FROM cand c JOIN {deliveries} d ON d.id = c.id
              WHERE c.fire_at IS NOT NULL
              FOR UPDATE OF d SKIP LOCKED
            ), rearmed AS (
              UPDATE {deliveries} AS d SET available_at = t.fire_at
              FROM timers t WHERE d.id = t.id AND t.fire_at > now()
            ), due AS MATERIALIZED (
              SELECT c.* FROM cand c
              WHERE c.fire_at IS NULL
                 OR EXISTS (SELECT 1 FROM timers t WHERE t.id = c.id AND t.fire_at <= now())
            ), groups AS MATERIALIZED (
              SELECT lane, handler, key, max(sequence) AS last, array_agg(id) AS ids
              FROM due WHERE key IS NOT NULL GROUP BY lane, handler, key
            ), blocked AS MATERIALIZED (
              SELECT g.lane, g.handler, g.key, b.id AS blocker, b.sequence AS first_blocked
              FROM groups g JOIN held h ON h.lane = g.lane
              CROSS JOIN LATERAL (
                SELECT p.id, p.sequence
                FROM {deliveries} p
                WHERE p.lane = g.lane AND p.handler = g.handler AND p.key = g.key
                  AND p.key IS NOT NULL AND p.status = 'pending' AND p.sequence < g.last
                  AND p.id <> ALL (g.ids) AND p.id <> ALL (h.in_flight)
                ORDER BY p.sequence
                LIMIT 1
              ) b
            ), settled AS MATERIALIZED (
              -- the blockers a deferral may go behind, at their latest committed due time: a
              -- timer this statement locked, or a row it can lock FOR SHARE; one another
              -- transaction holds (a cancel, an extend) defers nothing
              SELECT t.id, t.fire_at AS blocked_at FROM timers t JOIN blocked b ON b.blocker = t.id
            ), shared AS MATERIALIZED (
              SELECT p.id, greatest(p.available_at, p.fire_at) AS blocked_at
              FROM blocked b JOIN {deliveries} p ON p.id = b.blocker
              WHERE NOT EXISTS (SELECT 1 FROM settled s WHERE s.id = p.id)
              FOR SHARE OF p SKIP LOCKED
            ), to_defer AS MATERIALIZED (
              SELECT d.id, f.at
              FROM (SELECT b.*, s.blocked_at FROM blocked b
                    JOIN (SELECT * FROM settled UNION ALL SELECT * FROM shared) s
                      ON s.id = b.blocker) b
              JOIN held h ON h.lane = b.lane
              CROSS JOIN LATERAL (
                -- by rank in the key's run, not by sequence gap (log ids, shared by all keys)
                SELECT p.id, p.available_at,
                       b.blocked_at
                         + row_number() OVER (ORDER BY p.sequence) * interval '1 microsecond' AS at
                FROM {deliveries} p
                WHERE p.lane = b.lane AND p.handler = b.handler AND p.key = b.key
                  AND p.key IS NOT NULL AND p.status = 'pending' AND p.sequence > b.first_blocked
                  AND p.id <> ALL (h.in_flight)
              ) f
              JOIN {deliveries} d ON d.id = f.id AND d.available_at < f.at
              WHERE f.available_at < f.at
                AND NOT EXISTS (SELECT 1 FROM timers t WHERE t.id = f.id AND t.fire_at > now())
              FOR UPDATE OF d SKIP LOCKED
            ), deferred AS (
              UPDATE {deliveries} AS d SET available_at = x.at
              FROM to_defer x WHERE d.id = x.id
              RETURNING d.id
            ), picked AS MATERIALIZED (
              SELECT c.* FROM due c
              LEFT JOIN blocked b ON b.lane = c.lane AND b.handler = c.handler AND b.key = c.key
              WHERE c.key IS NULL OR b.first_blocked IS NULL OR c.sequence < b.first_blocked
            ), locked AS MATERIALIZED (
              SELECT l.lane FROM {lanes} l
              JOIN (SELECT DISTINCT lane, epoch FROM picked) g ON l.lane = g.lane AND l.epoch = g.epoch
              WHERE l.lease_owner = ?
              ORDER BY l.lane
              FOR UPDATE OF l
            ), handed AS MATERIALIZED (
              SELECT p.* FROM picked p JOIN locked k ON k.lane = p.lane
            ), fired AS (
              UPDATE {deliveries} AS d SET firing_claims = d.claims
              FROM handed p WHERE d.id = p.id AND p.fire_at IS NOT NULL
            ), recorded AS (
              UPDATE {lanes} AS l SET in_flight = ARRAY(
                  SELECT x FROM unnest(l.in_flight) AS x
                  WHERE EXISTS (SELECT 1 FROM {deliveries} d WHERE d.id = x)) || g.ids
              FROM (SELECT lane, array_agg(id) AS ids FROM handed GROUP BY lane) g
              WHERE l.lane = g.lane
              RETURNING l.lane
            )
            SELECT * FROM (
              SELECT p.id, p.lane, p.epoch, p.claims, p.event_id, p.handler, p.key, p.sequence,
                     p.attempts, e.type, e.payload, e.content_type, e.headers, e.created_at,
                     p.ord, p.available_at
              -- a delivery whose event row is gone comes back without it and is dead-lettered
              -- (a join would leave it in flight, never returned)
              FROM handed p LEFT JOIN {events} e ON e.id = p.event_id
              UNION ALL
              SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                     NULL, NULL, NULL
              WHERE EXISTS (SELECT 1 FROM deferred)
            ) r
            ORDER BY r.ord NULLS LAST, r.available_at, r.id""");
    String completeBase =
        """
        WITH t AS (
          SELECT * FROM unnest(?::bigint[], ?::smallint[], ?::bigint[], ?::int[], ?::text[])
            AS t(id, lane, epoch, claims, event_id)
        ), done AS (
          DELETE FROM {deliveries} d USING t, {lanes} l
          WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.event_id = t.event_id
            AND l.lane = t.lane AND l.epoch = t.epoch
          RETURNING d.id, d.event_id, d.handler, d.lane, d.key, d.sequence, d.attempts, d.created_at
        )%s
        SELECT id FROM done""";
    complete = tables.sql(completeBase.formatted(""));
    completeWithHistory =
        tables.sql(
            completeBase.formatted(
                """
                , history AS (
                  INSERT INTO {completed} (id, event_id, handler, lane, key, sequence, attempts, created_at)
                  SELECT id, event_id, handler, lane, key, sequence, attempts, created_at FROM done
                )"""));
    // Ends a failed attempt: charged; due again after backoff, or dead when spent (or when
    // buried: the first parameter forces it). Rare path: these updates are not HOT.
    //
    // The lane row is locked first, then the delivery (as a takeover does: its lane, then the
    // deliveries its in_flight lists): updating the delivery first and the lane's in_flight after
    // deadlocked with a takeover of the lane in between (40P01), and the victim could be a task's
    // start. A takeover that commits while this waits moves the epoch: nothing is changed.
    //
    // A retry's due time goes into fire_at too, the row's own due time that nothing but a later
    // attempt moves: a keyed timer ahead of it cancelled or moved earlier pulls its key's followers
    // (available_at) back behind it, and the claim re-arms a row whose fire_at is still ahead, as
    // it re-arms a timer. Without it a retry behind such a timer went out before its backoff ended
    // (reliability row 131).
    fail =
        tables.sql(
            """
            WITH lane AS MATERIALIZED (
              SELECT l.lane FROM {lanes} l WHERE l.lane = ? AND l.epoch = ? FOR NO KEY UPDATE
            ), p AS MATERIALIZED (
              -- the policy, bound once; the jitter drawn once, so both due times get one time
              SELECT ?::boolean AS bury, ?::int AS max_attempts, ?::float8 AS cap,
                     ?::float8 AS base, 1 + ?::float8 * (2 * random() - 1) AS spread
            ), target AS (
              UPDATE {deliveries} AS d SET
                attempts = d.attempts + 1,
                claims = d.claims + 1,
                status = CASE WHEN {dies} THEN 'dead' ELSE 'pending' END,
                available_at = CASE WHEN {dies} THEN d.available_at ELSE {retry_at} END,
                fire_at = CASE WHEN {dies} THEN d.fire_at ELSE {retry_at} END,
                last_error = ?,
                updated_at = now()
              FROM lane l CROSS JOIN p
              WHERE d.id = ? AND d.lane = l.lane AND d.claims = ? AND d.event_id = ?
              RETURNING d.id, d.lane, d.status
            ), unlisted AS (
              UPDATE {lanes} AS l SET in_flight = array_remove(l.in_flight, t.id)
              FROM target t WHERE l.lane = t.lane
            )
            SELECT status FROM target"""
                .replace("{dies}", "p.bury OR d.attempts + 1 >= p.max_attempts")
                .replace(
                    "{retry_at}",
                    "now() + least(p.cap, p.base * power(2, least(d.attempts, 40)))"
                        + " * p.spread * interval '1 millisecond'"));
    release =
        tables.sql(
            """
            WITH t AS (
              SELECT * FROM unnest(?::bigint[], ?::smallint[], ?::bigint[], ?::int[], ?::text[])
            AS t(id, lane, epoch, claims, event_id)
            ), held AS MATERIALIZED (
              -- the lane rows first, in lane order, then the deliveries (see fail)
              SELECT l.lane, l.epoch FROM {lanes} l
              JOIN (SELECT DISTINCT lane, epoch FROM t) x ON l.lane = x.lane AND l.epoch = x.epoch
              ORDER BY l.lane
              FOR NO KEY UPDATE OF l
            ), released AS (
              UPDATE {deliveries} AS d SET claims = d.claims + 1
              FROM t, held l
              WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
                AND d.event_id = t.event_id AND l.lane = t.lane AND l.epoch = t.epoch
              RETURNING d.id, d.lane
            ), unlisted AS (
              UPDATE {lanes} AS l SET in_flight = ARRAY(
                  SELECT x FROM unnest(l.in_flight) AS x
                  WHERE x NOT IN (SELECT r.id FROM released r WHERE r.lane = l.lane))
              FROM (SELECT DISTINCT lane FROM released) g
              WHERE l.lane = g.lane
            )
            SELECT count(*) FROM released""");
  }

  /**
   * Runs the claim statement, again while a round deferred blocked followers and the batch has room
   * (at most {@link #MAX_ROUNDS}), and dead-letters unreadable events. The caller runs it in one
   * transaction: the batch and its dead letters commit together or not at all, and each round sees
   * the in_flight and deferrals of the rounds before it.
   */
  List<ClaimedDelivery> claim(
      Connection connection,
      String owner,
      List<LaneLease> leases,
      List<String> covered,
      int limit,
      RetryPolicy policy)
      throws SQLException {
    List<ClaimedDelivery> batch = new ArrayList<>();
    Map<DeliveryToken, String> unreadable = new LinkedHashMap<>();
    for (int round = 0; round < MAX_ROUNDS; round++) {
      int room = limit - batch.size() - unreadable.size();
      if (room <= 0 || !claimRound(connection, owner, leases, covered, room, batch, unreadable)) {
        break;
      }
    }
    // An event row a plain-SQL publisher wrote badly cannot be sent: dead-letter it with the
    // reason (fenced like any bury) rather than fail the claim, so the stream goes on. Same
    // transaction as the claim: if this fails, the claim rolls back and nothing stays in flight.
    for (Map.Entry<DeliveryToken, String> bad : unreadable.entrySet()) {
      fail(connection, bad.getKey(), "unreadable event: " + bad.getValue(), true, policy);
    }
    return batch;
  }

  /** One claim statement; returns whether it deferred blocked followers. */
  private boolean claimRound(
      Connection connection,
      String owner,
      List<LaneLease> leases,
      List<String> covered,
      int limit,
      List<ClaimedDelivery> batch,
      Map<DeliveryToken, String> unreadable)
      throws SQLException {
    boolean deferred = false;
    try (PreparedStatement statement = connection.prepareStatement(claim)) {
      PostgresLanes.bindLeases(connection, statement, 1, leases);
      statement.setArray(3, connection.createArrayOf("text", covered.toArray()));
      statement.setString(4, owner);
      statement.setInt(5, limit);
      statement.setInt(6, limit);
      statement.setString(7, owner);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          long id = rs.getLong(1);
          if (rs.wasNull()) {
            deferred = true; // the marker row
            continue;
          }
          DeliveryToken token =
              new DeliveryToken(id, rs.getShort(2), rs.getLong(3), rs.getInt(4), rs.getString(5));
          if (rs.getString(10) == null) {
            unreadable.put(token, "the event row is missing");
            continue;
          }
          Map<String, String> headers;
          try {
            headers = PostgresPublisher.headers(rs.getString(13));
          } catch (IllegalArgumentException e) {
            unreadable.put(token, e.getMessage());
            continue;
          }
          long sequence = rs.getLong(8);
          Long seq = rs.wasNull() ? null : sequence;
          batch.add(
              new ClaimedDelivery(
                  token,
                  rs.getString(5),
                  rs.getString(6),
                  rs.getString(7),
                  seq,
                  rs.getInt(9),
                  rs.getString(10),
                  rs.getBytes(11),
                  rs.getString(12),
                  headers,
                  rs.getTimestamp(14).toInstant()));
        }
      }
    }
    return deferred;
  }

  Set<Long> complete(Connection connection, Collection<DeliveryToken> tokens, boolean history)
      throws SQLException {
    Set<Long> done = new HashSet<>();
    try (PreparedStatement statement =
        connection.prepareStatement(history ? completeWithHistory : complete)) {
      bindTokens(connection, statement, tokens);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          done.add(rs.getLong(1));
        }
      }
    }
    return done;
  }

  FailOutcome fail(
      Connection connection, DeliveryToken token, String reason, boolean bury, RetryPolicy policy)
      throws SQLException {
    Objects.requireNonNull(reason, "reason");
    try (PreparedStatement statement = connection.prepareStatement(fail)) {
      statement.setShort(1, (short) token.lane());
      statement.setLong(2, token.epoch());
      statement.setBoolean(3, bury);
      statement.setInt(4, policy.maxAttempts());
      statement.setDouble(5, policy.cap().toMillis());
      statement.setDouble(6, policy.base().toMillis());
      statement.setDouble(7, policy.jitter());
      statement.setString(8, reason);
      statement.setLong(9, token.deliveryId());
      statement.setInt(10, token.claims());
      statement.setString(11, token.eventId());
      try (ResultSet rs = statement.executeQuery()) {
        if (!rs.next()) {
          return FailOutcome.LOST;
        }
        return "dead".equals(rs.getString(1)) ? FailOutcome.DEAD : FailOutcome.RESCHEDULED;
      }
    }
  }

  int release(Connection connection, Collection<DeliveryToken> tokens) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(release)) {
      bindTokens(connection, statement, tokens);
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        return rs.getInt(1);
      }
    }
  }

  private static void bindTokens(
      Connection connection, PreparedStatement statement, Collection<DeliveryToken> tokens)
      throws SQLException {
    statement.setArray(
        1,
        connection.createArrayOf("int8", tokens.stream().map(DeliveryToken::deliveryId).toArray()));
    statement.setArray(
        2, connection.createArrayOf("int2", tokens.stream().map(t -> (short) t.lane()).toArray()));
    statement.setArray(
        3, connection.createArrayOf("int8", tokens.stream().map(DeliveryToken::epoch).toArray()));
    statement.setArray(
        4, connection.createArrayOf("int4", tokens.stream().map(DeliveryToken::claims).toArray()));
    statement.setArray(
        5, connection.createArrayOf("text", tokens.stream().map(DeliveryToken::eventId).toArray()));
  }
}
