package io.relaybus.store.postgres;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * An application and a connector of relaybus version 1 (schema version 1, commit 84bef51), for
 * tests of a rolling upgrade: its SQL verbatim from that commit, so what it writes and reads is
 * what a running old instance writes and reads. Publishing: PostgresPublisher's {@code insertNew}
 * and {@code insertOne} (new events only: the tests that use it never republish). The consumer:
 * PostgresLanes' acquire (without takeover) and relinquish, PostgresClaims' claim (lanes and epochs
 * only) and complete (without history). Nothing here may change with the store: it is what the
 * field runs.
 */
final class VersionOneClient {
  private static final int MAX_ROUNDS = 3; // PostgresClaims.MAX_ROUNDS of version 1
  private static final int MAX_ATTEMPTS = io.relaybus.store.RetryPolicy.defaults().maxAttempts();

  private final String insertNew;
  private final String insertOne;
  private final String claim;
  private final String complete;
  private final String lockCandidates;
  private final String charge;
  private final String grant;
  private final String relinquish;

  VersionOneClient(PostgresTables tables) {
    insertNew = tables.sql(INSERT_NEW);
    insertOne = tables.sql(INSERT_ONE);
    claim = tables.sql(CLAIM);
    complete = tables.sql(COMPLETE_BASE.formatted(""));
    lockCandidates = tables.sql(LOCK_CANDIDATES);
    charge = tables.sql(CHARGE);
    grant = tables.sql(GRANT);
    relinquish = tables.sql(RELINQUISH);
  }

  private static final String INSERT_NEW =
      """
      WITH input AS (
        SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::bytea[], ?::text[], ?::text[], ?::text[], ?::smallint[])
          WITH ORDINALITY AS i(id, type, key, payload, content_type, headers, handlers, lane, ord)
      ), ev AS (
        INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
        SELECT id, type, key, payload, content_type, headers::json,
               ARRAY(SELECT jsonb_array_elements_text(i.handlers::jsonb))
        FROM input i ORDER BY id
        ON CONFLICT (id) DO NOTHING
        RETURNING id
      ), fresh AS (
        SELECT i.* FROM input i JOIN ev USING (id)
      ), counted AS (
        SELECT key, count(*) AS n FROM fresh WHERE key IS NOT NULL GROUP BY key
      ), seq AS (
        INSERT INTO {keys} AS k (key, sequence)
        SELECT key, n FROM counted ORDER BY key
        ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + excluded.sequence, updated_at = now()
        RETURNING key, sequence
      ), numbered AS (
        SELECT f.id, f.key, f.lane, f.handlers,
               s.sequence - count(*) OVER (PARTITION BY f.key)
                 + row_number() OVER (PARTITION BY f.key ORDER BY f.ord) AS seq
        FROM fresh f LEFT JOIN seq s ON s.key = f.key
      ), inserted AS (
        INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
        SELECT n.id, h.handler, n.lane, n.key, CASE WHEN n.key IS NULL THEN NULL ELSE n.seq END
        FROM numbered n CROSS JOIN LATERAL jsonb_array_elements_text(n.handlers::jsonb) AS h(handler)
        RETURNING 1
      )
      SELECT id FROM ev""";

  private static final String INSERT_ONE =
      """
      WITH ev AS (
        INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
        VALUES (?, ?, ?, ?, ?, ?::json, ?::text[])
        ON CONFLICT (id) DO NOTHING
        RETURNING id
      ), seq AS (
        INSERT INTO {keys} AS k (key, sequence)
        SELECT ?::text, 1 FROM ev WHERE ?::text IS NOT NULL
        ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + 1, updated_at = now()
        RETURNING sequence
      ), inserted AS (
        INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
        SELECT ev.id, h, ?, ?, (SELECT sequence FROM seq)
        FROM ev CROSS JOIN unnest(?::text[]) AS h
        RETURNING 1
      )
      SELECT id FROM ev""";

  private static final String CLAIM =
      """
      WITH req AS (
        SELECT * FROM unnest(?::smallint[], ?::bigint[]) WITH ORDINALITY AS r(lane, epoch, ord)
      ), held AS MATERIALIZED (
        SELECT l.lane, l.epoch, l.in_flight, r.ord
        FROM req r JOIN {lanes} l ON l.lane = r.lane AND l.epoch = r.epoch AND l.lease_owner = ?
      ), cand AS MATERIALIZED (
        SELECT c.*, h.epoch, h.ord FROM (SELECT * FROM held ORDER BY ord) h CROSS JOIN LATERAL (
          SELECT d.id, d.lane, d.handler, d.key, d.sequence, d.available_at,
                 d.event_id, d.claims, d.attempts, d.fire_at
          FROM {deliveries} d
          WHERE d.lane = h.lane AND d.status = 'pending' AND d.available_at <= now()
            AND d.id <> ALL (h.in_flight)
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
        SELECT g.lane, g.handler, g.key, b.sequence AS first_blocked, b.blocked_at
        FROM groups g JOIN held h ON h.lane = g.lane
        CROSS JOIN LATERAL (
          SELECT p.sequence, greatest(p.available_at, p.fire_at) AS blocked_at
          FROM {deliveries} p
          WHERE p.lane = g.lane AND p.handler = g.handler AND p.key = g.key
            AND p.key IS NOT NULL AND p.status = 'pending' AND p.sequence < g.last
            AND p.id <> ALL (g.ids) AND p.id <> ALL (h.in_flight)
          ORDER BY p.sequence
          LIMIT 1
        ) b
      ), to_defer AS MATERIALIZED (
        SELECT f.id, f.at FROM blocked b JOIN held h ON h.lane = b.lane
        CROSS JOIN LATERAL (
          SELECT p.id, b.blocked_at
                   + (p.sequence - b.first_blocked) * interval '1 microsecond' AS at
          FROM {deliveries} p
          WHERE p.lane = b.lane AND p.handler = b.handler AND p.key = b.key
            AND p.key IS NOT NULL AND p.status = 'pending' AND p.sequence > b.first_blocked
            AND p.available_at
                < b.blocked_at + (p.sequence - b.first_blocked) * interval '1 microsecond'
            AND p.id <> ALL (h.in_flight)
          FOR UPDATE OF p SKIP LOCKED
        ) f
        WHERE NOT EXISTS (SELECT 1 FROM timers t WHERE t.id = f.id AND t.fire_at > now())
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
        FROM handed p JOIN {events} e ON e.id = p.event_id
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               NULL, NULL, NULL
        WHERE EXISTS (SELECT 1 FROM deferred)
      ) r
      ORDER BY r.ord NULLS LAST, r.available_at, r.id""";

  private static final String COMPLETE_BASE =
      """
      WITH t AS (
        SELECT * FROM unnest(?::bigint[], ?::smallint[], ?::bigint[], ?::int[]) AS t(id, lane, epoch, claims)
      ), done AS (
        DELETE FROM {deliveries} d USING t, {lanes} l
        WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims
          AND l.lane = t.lane AND l.epoch = t.epoch
        RETURNING d.id, d.event_id, d.handler, d.lane, d.key, d.sequence, d.attempts, d.created_at
      )%s
      SELECT id FROM done""";

  private static final String LOCK_CANDIDATES =
      """
      SELECT lane, epoch, lease_owner, lease_group, lease_expires_at <= now() AS expired, in_flight
      FROM {lanes} WHERE lane = ANY(?::smallint[]) ORDER BY lane FOR UPDATE SKIP LOCKED""";

  private static final String CHARGE =
      """
      WITH charged AS (
        UPDATE {deliveries} SET
          attempts = attempts + 1,
          claims = claims + 1,
          status = CASE WHEN attempts + 1 >= ? THEN 'dead' ELSE status END,
          last_error = format(
            CASE WHEN attempts + 1 >= ?
              THEN 'attempts exhausted (%s of %s): lane %s was taken over while this delivery was in flight'
              ELSE 'attempt %s of %s lost: lane %s was taken over while this delivery was in flight' END,
            attempts + 1, ?, lane),
          updated_at = now()
        WHERE id = ANY(?::bigint[]) AND status = 'pending'
        RETURNING lane)
      SELECT lane, count(*) FROM charged GROUP BY lane""";

  private static final String GRANT =
      """
      UPDATE {lanes} AS l SET
        epoch = t.epoch, lease_owner = ?, lease_group = ?,
        lease_expires_at = now() + ? * interval '1 millisecond',
        in_flight = CASE WHEN t.keep THEN l.in_flight ELSE '{}' END
      FROM unnest(?::smallint[], ?::bigint[], ?::boolean[]) AS t(lane, epoch, keep)
      WHERE l.lane = t.lane
      RETURNING l.lane, l.epoch, l.lease_expires_at""";

  private static final String RELINQUISH =
      """
      UPDATE {lanes} AS l SET
        epoch = l.epoch + 1, lease_owner = NULL, lease_group = NULL, lease_expires_at = NULL,
        in_flight = '{}'
      FROM unnest(?::smallint[], ?::bigint[]) AS t(lane, epoch)
      WHERE l.lane = t.lane AND l.epoch = t.epoch AND l.lease_owner = ?""";

  /** Publishes new events in the caller's transaction; fails if an id existed. */
  void publishAll(Connection connection, List<OutboxEvent> events) throws SQLException {
    Set<String> inserted = new HashSet<>();
    if (events.size() == 1) {
      OutboxEvent event = events.get(0);
      try (PreparedStatement statement = connection.prepareStatement(insertOne)) {
        statement.setString(1, event.id());
        statement.setString(2, event.type());
        statement.setString(3, event.key());
        statement.setBytes(4, event.payload());
        statement.setString(5, event.contentType());
        statement.setString(6, PostgresPublisher.json(event.headers()));
        statement.setArray(7, connection.createArrayOf("text", event.handlers().toArray()));
        statement.setString(8, event.key());
        statement.setString(9, event.key());
        statement.setShort(10, (short) event.lane());
        statement.setString(11, event.key());
        statement.setArray(12, connection.createArrayOf("text", event.handlers().toArray()));
        try (ResultSet rs = statement.executeQuery()) {
          while (rs.next()) {
            inserted.add(rs.getString(1));
          }
        }
      }
    } else {
      int n = events.size();
      try (PreparedStatement statement = connection.prepareStatement(insertNew)) {
        statement.setArray(1, array(connection, "text", events, OutboxEvent::id));
        statement.setArray(2, array(connection, "text", events, OutboxEvent::type));
        statement.setArray(3, array(connection, "text", events, OutboxEvent::key));
        statement.setArray(
            4,
            connection.createArrayOf(
                "bytea", events.stream().map(OutboxEvent::payload).toArray(byte[][]::new)));
        statement.setArray(5, array(connection, "text", events, OutboxEvent::contentType));
        statement.setArray(
            6, array(connection, "text", events, e -> PostgresPublisher.json(e.headers())));
        statement.setArray(
            7, array(connection, "text", events, e -> PostgresPublisher.json(e.handlers())));
        statement.setArray(
            8,
            connection.createArrayOf("int2", events.stream().map(e -> (short) e.lane()).toArray()));
        try (ResultSet rs = statement.executeQuery()) {
          while (rs.next()) {
            inserted.add(rs.getString(1));
          }
        }
      }
    }
    if (inserted.size() != events.size()) {
      throw new IllegalStateException(
          "version 1 publishes only new events here, but inserted " + inserted + " of " + events);
    }
  }

  private static java.sql.Array array(
      Connection connection,
      String type,
      List<OutboxEvent> events,
      java.util.function.Function<OutboxEvent, String> field)
      throws SQLException {
    return connection.createArrayOf(type, events.stream().map(field).toArray());
  }

  /** Version 1's acquire without takeover: free or expired lanes get the next epoch. */
  List<LaneLease> acquire(
      Connection connection,
      String owner,
      String group,
      Collection<Integer> lanes,
      Duration duration)
      throws SQLException {
    List<Short> granted = new ArrayList<>();
    List<Long> epochs = new ArrayList<>();
    List<Long> inFlight = new ArrayList<>();
    try (PreparedStatement select = connection.prepareStatement(lockCandidates)) {
      select.setArray(
          1, connection.createArrayOf("int2", lanes.stream().map(Integer::shortValue).toArray()));
      try (ResultSet rs = select.executeQuery()) {
        while (rs.next()) {
          String holder = rs.getString(3);
          boolean expired = rs.getBoolean(5);
          if (holder == null || expired) {
            granted.add(rs.getShort(1));
            epochs.add(rs.getLong(2) + 1);
            for (Long id : (Long[]) rs.getArray(6).getArray()) {
              inFlight.add(id);
            }
          }
        }
      }
    }
    if (granted.isEmpty()) {
      return List.of();
    }
    if (!inFlight.isEmpty()) {
      try (PreparedStatement statement = connection.prepareStatement(charge)) {
        statement.setInt(1, MAX_ATTEMPTS);
        statement.setInt(2, MAX_ATTEMPTS);
        statement.setInt(3, MAX_ATTEMPTS);
        statement.setArray(4, connection.createArrayOf("int8", inFlight.toArray()));
        statement.executeQuery().close();
      }
    }
    List<LaneLease> leases = new ArrayList<>();
    try (PreparedStatement update = connection.prepareStatement(grant)) {
      update.setString(1, owner);
      update.setString(2, group);
      update.setLong(3, duration.toMillis());
      update.setArray(4, connection.createArrayOf("int2", granted.toArray()));
      update.setArray(5, connection.createArrayOf("int8", epochs.toArray()));
      update.setArray(
          6, connection.createArrayOf("bool", granted.stream().map(l -> false).toArray()));
      try (ResultSet rs = update.executeQuery()) {
        while (rs.next()) {
          leases.add(
              new LaneLease(
                  rs.getShort(1), rs.getLong(2), rs.getTimestamp(3).toInstant(), false, 0));
        }
      }
    }
    leases.sort((a, b) -> Integer.compare(a.lane(), b.lane()));
    return leases;
  }

  /** Version 1's claim: up to three rounds of its statement, in the caller's transaction. */
  List<ClaimedDelivery> claim(
      Connection connection, String owner, List<LaneLease> leases, int limit) throws SQLException {
    List<ClaimedDelivery> batch = new ArrayList<>();
    for (int round = 0; round < MAX_ROUNDS; round++) {
      int room = limit - batch.size();
      if (room <= 0 || !claimRound(connection, owner, leases, room, batch)) {
        break;
      }
    }
    return ClaimedDelivery.inKeyOrder(batch);
  }

  private boolean claimRound(
      Connection connection,
      String owner,
      List<LaneLease> leases,
      int limit,
      List<ClaimedDelivery> batch)
      throws SQLException {
    boolean deferred = false;
    try (PreparedStatement statement = connection.prepareStatement(claim)) {
      PostgresLanes.bindLeases(connection, statement, 1, leases);
      statement.setString(3, owner);
      statement.setInt(4, limit);
      statement.setInt(5, limit);
      statement.setString(6, owner);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          long id = rs.getLong(1);
          if (rs.wasNull()) {
            deferred = true; // the marker row
            continue;
          }
          DeliveryToken token =
              new DeliveryToken(id, rs.getShort(2), rs.getLong(3), rs.getInt(4), rs.getString(5));
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
                  PostgresPublisher.headers(rs.getString(13)),
                  rs.getTimestamp(14).toInstant()));
        }
      }
    }
    return deferred;
  }

  /** Version 1's complete: the ids deleted (fenced by lane epoch and claims). */
  Set<Long> complete(Connection connection, Collection<DeliveryToken> tokens) throws SQLException {
    Set<Long> done = new HashSet<>();
    try (PreparedStatement statement = connection.prepareStatement(complete)) {
      statement.setArray(
          1,
          connection.createArrayOf(
              "int8", tokens.stream().map(DeliveryToken::deliveryId).toArray()));
      statement.setArray(
          2,
          connection.createArrayOf("int2", tokens.stream().map(t -> (short) t.lane()).toArray()));
      statement.setArray(
          3, connection.createArrayOf("int8", tokens.stream().map(DeliveryToken::epoch).toArray()));
      statement.setArray(
          4,
          connection.createArrayOf("int4", tokens.stream().map(DeliveryToken::claims).toArray()));
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          done.add(rs.getLong(1));
        }
      }
    }
    return done;
  }

  /** Version 1's relinquish: the epoch moves, in-flight deliveries are pending again. */
  int relinquish(Connection connection, String owner, Collection<LaneLease> leases)
      throws SQLException {
    try (PreparedStatement update = connection.prepareStatement(relinquish)) {
      PostgresLanes.bindLeases(
          connection,
          update,
          1,
          leases.stream().sorted((a, b) -> Integer.compare(a.lane(), b.lane())).toList());
      update.setString(3, owner);
      return update.executeUpdate();
    }
  }
}
