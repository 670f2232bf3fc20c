package io.relaybus.store.postgres;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerExistsException;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;

/**
 * Timers in the caller's transaction: arm, extend, replace, keep, cancel.
 *
 * <p>A named timer is a delivery with {@code timer_id} (unique per handler among pending rows) and
 * {@code fire_at}, its deadline, in no index. Arming sets {@code available_at = fire_at}. An extend
 * to a later deadline writes {@code fire_at} only: a HOT update, no index entry, no dead index
 * tuple (the reference implementation rewrote the indexed deadline and paid one dead tuple, 0% HOT
 * and 550-650 B of WAL per extend). The claim re-arms a due row whose {@code fire_at} is later.
 *
 * <p><b>Extend, the common call</b>, is one UPDATE of the pending timer that is not firing (a claim
 * that hands a timer out marks it: {@code firing_claims = claims}). Waiting for a claim that holds
 * the row, it re-reads the row's latest version, so it never extends a timer the claim took. When
 * it finds nothing, the careful path below decides (arm, or say the timer is firing).
 *
 * <p><b>Racing the claim</b>: every other call first reads the pending timer and whether it is in
 * its lane's {@code in_flight}, without a lock: in flight, it answers {@link
 * TimerOutcome#ALREADY_FIRING} and holds nothing (the task completes, releases or reschedules it, a
 * takeover charges it, without waiting for the caller). Otherwise it locks the row version it read
 * ({@code FOR UPDATE ... xmin = ?}), which waits for a claim that locked it; a claim that handed
 * the timer out wrote the row, so the lock then finds nothing and the call reads again. The
 * statements that write re-check {@code in_flight}. A claim locks due timer rows with {@code SKIP
 * LOCKED}, so it never waits on an application transaction and never hands out a timer whose extend
 * is uncommitted. Either the claim committed first (ALREADY_FIRING) or the call holds the row until
 * its commit (the claim skips it, the next one sees the new deadline).
 */
final class PostgresTimers {
  private static final int ROUNDS = 3;

  /**
   * Reads of a pending timer whose row keeps changing before the call locks it (the SQL function
   * {@code lock_timer_} of migration 22 has its own ten, written out in {@link PostgresFunctions}).
   */
  static final int LOCK_ROUNDS = 10;

  // After "moved" (the timer rows a statement moved or removed, each with the base its followers
  // go behind, or null), the key's followers that a claim deferred behind such a timer (see
  // PostgresClaims) are pulled back to one microsecond apart after the base, in sequence order.
  // Only the SQL functions of schema version 2 use it (PostgresFunctions; frozen, do not edit;
  // version 21 replaces them with a pull by rank, version 22 with the pull the Java calls run in
  // a statement of their own, {@link #pull}).
  static final String PULL_FOLLOWERS =
      """
      pulled AS (
        UPDATE {deliveries} AS f
        SET available_at = m.base + (f.sequence - m.sequence) * interval '1 microsecond'
        FROM moved m
        WHERE m.key IS NOT NULL AND m.base IS NOT NULL
          AND f.lane = m.lane AND f.handler = m.handler AND f.key = m.key
          AND f.key IS NOT NULL AND f.status = 'pending' AND f.sequence > m.sequence
          AND f.available_at > m.base + (f.sequence - m.sequence) * interval '1 microsecond'
      )
      SELECT event_id FROM moved""";

  // Moves the deadline of the timer row that {timer} selects (parameters: the deadline as a time
  // or as microseconds from now, then those of {timer}): fire_at always, available_at only when
  // earlier; returns what pullFollowers needs.
  private static final String EXTEND =
      """
      WITH t AS (
        SELECT coalesce(?::timestamptz, now() + ?::bigint * interval '1 microsecond') AS deadline
      ), moved AS (
        UPDATE {deliveries} AS d SET fire_at = t.deadline,
          available_at = CASE WHEN t.deadline < d.available_at THEN t.deadline ELSE d.available_at END
        FROM t
        WHERE {timer}
        RETURNING d.event_id, d.lane, d.handler, d.key, d.sequence,
          CASE WHEN d.available_at = t.deadline THEN t.deadline END AS base
      )
      SELECT event_id, lane, handler, key, sequence, base FROM moved""";

  private final String find;
  private final String lock;
  private final String inFlight;
  private final String extend;
  private final String extendPending;
  private final String remove;
  private final String arm;
  private final String unarm;
  private final String pull;
  private final String eventExists;

  PostgresTimers(PostgresTables tables) {
    // The careful path reads the pending timer and whether it is in flight without a lock: a call
    // answered ALREADY_FIRING changes nothing, so it must hold up neither the task that completes,
    // releases or reschedules the timer nor a takeover that charges it. Otherwise it locks the row
    // version it read (xmin): a claim that hands the timer out writes the row (firing_claims), so
    // after waiting for such a claim the lock finds a newer version, locks nothing, and the call
    // reads again. A locked row is one no claim has handed out, and none can (SKIP LOCKED).
    find =
        tables.sql(
            """
            SELECT d.id, d.lane, d.event_id, d.xmin::text, EXISTS (
                SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
            FROM {deliveries} d
            WHERE d.handler = ? AND d.timer_id = ? AND d.status = 'pending'""");
    lock =
        tables.sql(
            """
            SELECT 1 FROM {deliveries}
            WHERE id = ? AND xmin = ?::xid AND status = 'pending'
            FOR UPDATE""");
    // The common extend in one statement: it waits for a claim that holds the row and then
    // re-reads the row (READ COMMITTED), so a timer the claim took (firing_claims = claims) is not
    // extended. When it finds nothing (no timer, or one firing) the careful path decides.
    extendPending =
        tables.sql(
            EXTEND.replace(
                "{timer}",
                """
                d.handler = ? AND d.timer_id = ? AND d.status = 'pending'
                  AND d.firing_claims IS DISTINCT FROM d.claims"""));
    inFlight =
        tables.sql("SELECT EXISTS (SELECT 1 FROM {lanes} WHERE lane = ? AND ? = ANY (in_flight))");
    // available_at moves only when the deadline moves earlier; assigned its own value it is not
    // "changed", so the common extend stays HOT. When it moves earlier, the key's followers that a
    // claim deferred behind the timer (see PostgresClaims) are pulled back behind the new deadline
    // ("pulled"; a follower timer pulled before its own deadline is re-armed by the claim).
    extend =
        tables.sql(
            EXTEND.replace(
                "{timer}",
                """
                d.id = ? AND NOT EXISTS (
                  SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))"""));
    // The replaced or cancelled timer's event goes too when the timer was its only route, so its
    // id is free again (nothing was delivered for it). Its key's followers that a claim deferred
    // behind it (see PostgresClaims) are pulled back to now, in sequence order (pullFollowers).
    remove =
        tables.sql(
            """
            WITH gone AS (
              DELETE FROM {deliveries} AS d
              WHERE d.id = ? AND NOT EXISTS (
                SELECT 1 FROM {lanes} l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
              RETURNING d.event_id, d.handler, d.lane, d.key, d.sequence, now() AS base
            ), ev AS (
              DELETE FROM {events} e USING gone g
              WHERE e.id = g.event_id AND e.handlers = ARRAY[g.handler]
            )
            SELECT event_id, lane, handler, key, sequence, base FROM gone""");
    // A keyed timer moved earlier or removed pulls back the key's followers that a claim deferred
    // behind it, to one microsecond apart after the base, by their rank in the key's run
    // (PostgresClaims; not by sequence gap: log ids are shared by all keys). Its own statement,
    // after the timer's: a claim that deferred them held the timer row (FOR SHARE) until it
    // committed, so the write on the timer waited for it, and only a later snapshot sees the
    // deferral (pulled in the same statement, they stayed behind the old deadline). Claims after
    // the write skip the timer the caller now holds and defer nothing behind it. The statement is
    // the SQL functions' (pull_followers_, schema version 22): one text for both.
    pull = tables.sql(PostgresFunctions.pullOneTimersFollowers("?", "?", "?", "?", "?", "?"));
    // One statement: the event, the key's next sequence, one delivery per handler due at the
    // deadline. A named timer's insert yields to a pending one with the id (a concurrent arm that
    // committed first): the caller then deletes the event it inserted and looks again.
    arm =
        tables.sql(
            """
            WITH t AS (
              SELECT coalesce(?::timestamptz, now() + ?::bigint * interval '1 microsecond') AS deadline
            ), ev AS (
              INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
              VALUES (?, ?, ?, ?, ?, ?::json, ?::text[])
              ON CONFLICT (id) DO NOTHING
              RETURNING id
            ), seq AS MATERIALIZED (
              -- the key's lock, then a log id: a keyed timer sorts among its key's events in
              -- commit order, as a publish does (see PostgresMigrations.LOG_STORAGE)
              SELECT nextval('{log_seq}') AS sequence
              FROM ev CROSS JOIN (SELECT ?::text AS key, ?::smallint AS lane) k
              CROSS JOIN LATERAL (SELECT {lock_keys}(ARRAY[k.lane], ARRAY[k.key])) l
              WHERE k.key IS NOT NULL
            ), inserted AS (
              -- xid: the claim hands the timer out once the lane's log handed out what committed
              -- before it
              INSERT INTO {deliveries}
                (event_id, handler, lane, key, sequence, available_at, timer_id, fire_at, xid)
              -- fire_at: every timer's own deadline, named or not (a pull of its key's followers
              -- may move available_at earlier; the claim then re-arms it, see PostgresClaims)
              SELECT ev.id, h, ?, ?, (SELECT sequence FROM seq), t.deadline, ?::text, t.deadline,
                     pg_current_xact_id()
              FROM ev CROSS JOIN t CROSS JOIN unnest(?::text[]) AS h
              ON CONFLICT (handler, timer_id) WHERE timer_id IS NOT NULL AND status = 'pending'
              DO NOTHING
              RETURNING 1
            )
            SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM inserted)""");
    unarm = tables.sql("DELETE FROM {events} WHERE id = ?");
    eventExists = tables.sql("SELECT 1 FROM {events} WHERE id = ?");
  }

  TimerResult schedule(Connection connection, OutboxEvent event, Timer timer) throws SQLException {
    requireTransaction(connection);
    if (timer.id() == null) {
      arm(connection, event, timer);
      return new TimerResult(TimerOutcome.ARMED, event.id());
    }
    String handler = event.handlers().get(0);
    if (timer.onConflict() == TimerConflict.EXTEND) {
      String extended = extendPending(connection, handler, timer);
      if (extended != null) {
        return new TimerResult(TimerOutcome.EXTENDED, extended);
      }
    }
    for (int round = 0; round < ROUNDS; round++) {
      Pending pending = find(connection, handler, timer.id());
      if (pending == null) {
        if (arm(connection, event, timer)) {
          return new TimerResult(TimerOutcome.ARMED, event.id());
        }
        continue; // a concurrent arm of the same id committed first: apply the policy to it
      }
      switch (timer.onConflict()) {
        case KEEP, FAIL -> {
          if (pending.inFlight() || isInFlight(connection, pending)) {
            return new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId());
          }
          if (timer.onConflict() == TimerConflict.FAIL) {
            throw new TimerExistsException(handler, timer.id(), pending.eventId());
          }
          return new TimerResult(TimerOutcome.KEPT, pending.eventId());
        }
        case EXTEND -> {
          return !pending.inFlight() && extend(connection, pending, timer)
              ? new TimerResult(TimerOutcome.EXTENDED, pending.eventId())
              : new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId());
        }
        case REPLACE -> {
          if (pending.inFlight()) {
            return new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId());
          }
          // refused before the pending timer goes: a caller that catches it and commits keeps it
          requireNewEventId(connection, event);
          if (!remove(connection, pending)) {
            return new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId());
          }
          if (!arm(connection, event, timer)) {
            throw new IllegalStateException("cannot happen: the replaced timer's row is locked");
          }
          return new TimerResult(TimerOutcome.REPLACED, event.id());
        }
      }
    }
    throw new IllegalStateException(
        "timer '%s' of handler '%s' kept being armed and removed concurrently; try again"
            .formatted(timer.id(), handler));
  }

  TimerResult cancel(Connection connection, String handler, String timerId) throws SQLException {
    requireTransaction(connection);
    Pending pending = find(connection, handler, timerId);
    if (pending == null) {
      return new TimerResult(TimerOutcome.NOT_FOUND, null);
    }
    return !pending.inFlight() && remove(connection, pending)
        ? new TimerResult(TimerOutcome.CANCELLED, pending.eventId())
        : new TimerResult(TimerOutcome.ALREADY_FIRING, pending.eventId());
  }

  /** A pending timer: locked by this transaction, or in flight (then not locked). */
  private record Pending(long id, short lane, String eventId, boolean inFlight) {}

  /** The pending timer with the id, or null; locked unless in flight (see {@link #find}). */
  private Pending find(Connection connection, String handler, String timerId) throws SQLException {
    for (int round = 0; round < LOCK_ROUNDS; round++) {
      Pending pending;
      String version;
      try (PreparedStatement statement = connection.prepareStatement(find)) {
        statement.setString(1, handler);
        statement.setString(2, timerId);
        try (ResultSet rs = statement.executeQuery()) {
          if (!rs.next()) {
            return null;
          }
          pending = new Pending(rs.getLong(1), rs.getShort(2), rs.getString(3), rs.getBoolean(5));
          version = rs.getString(4);
        }
      }
      if (pending.inFlight()) {
        return pending;
      }
      try (PreparedStatement statement = connection.prepareStatement(lock)) {
        statement.setLong(1, pending.id());
        statement.setString(2, version);
        try (ResultSet rs = statement.executeQuery()) {
          if (rs.next()) {
            return pending;
          }
        }
      }
      // the row changed since the read (handed out, extended, re-armed, gone): read it again
    }
    throw new IllegalStateException(
        "timer '%s' of handler '%s' kept changing concurrently; try again"
            .formatted(timerId, handler));
  }

  private boolean isInFlight(Connection connection, Pending pending) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(inFlight)) {
      statement.setShort(1, pending.lane());
      statement.setLong(2, pending.id());
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        return rs.getBoolean(1);
      }
    }
  }

  private boolean extend(Connection connection, Pending pending, Timer timer) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(extend)) {
      bindDeadline(statement, 1, timer);
      statement.setLong(3, pending.id());
      return pullFollowers(connection, statement) != null;
    }
  }

  /** The event id of the pending timer extended, or null when none was (none, or firing). */
  private String extendPending(Connection connection, String handler, Timer timer)
      throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(extendPending)) {
      bindDeadline(statement, 1, timer);
      statement.setString(3, handler);
      statement.setString(4, timer.id());
      return pullFollowers(connection, statement);
    }
  }

  private boolean remove(Connection connection, Pending pending) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(remove)) {
      statement.setLong(1, pending.id());
      return pullFollowers(connection, statement) != null;
    }
  }

  /**
   * Runs {@code moving} (extend or remove: event_id, lane, handler, key, sequence, base of the row
   * it moved) and pulls the followers of a keyed timer it moved earlier or removed ({@link #pull});
   * the event id, or null when it moved nothing.
   */
  private String pullFollowers(Connection connection, PreparedStatement moving)
      throws SQLException {
    String eventId;
    String key;
    OffsetDateTime base;
    try (ResultSet rs = moving.executeQuery()) {
      if (!rs.next()) {
        return null;
      }
      eventId = rs.getString(1);
      key = rs.getString(4);
      base = rs.getObject(6, OffsetDateTime.class);
      if (key == null || base == null) {
        return eventId;
      }
      try (PreparedStatement statement = connection.prepareStatement(pull)) {
        statement.setString(1, eventId);
        statement.setShort(2, rs.getShort(2));
        statement.setString(3, rs.getString(3));
        statement.setString(4, key);
        statement.setLong(5, rs.getLong(5));
        statement.setObject(6, base);
        statement.execute(); // returns the event id: nothing to read
      }
    }
    return eventId;
  }

  /**
   * Refuses an event id that exists, as the arm would, before a REPLACE removes anything. (A
   * transaction that commits the same new id between this read and the arm still makes the arm
   * refuse it after the removal: ids must be new, so only a caller reusing one meets that.)
   */
  private void requireNewEventId(Connection connection, OutboxEvent event) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(eventExists)) {
      statement.setString(1, event.id());
      try (ResultSet rs = statement.executeQuery()) {
        if (rs.next()) {
          throw eventIdExists(event);
        }
      }
    }
  }

  private static IllegalArgumentException eventIdExists(OutboxEvent event) {
    return new IllegalArgumentException(
        ("event id '%s' exists already: a timer arms a new event, so give it a new id (the"
                + " builder's default, a new time-ordered UUID)")
            .formatted(event.id()));
  }

  /** Arms the event; false when a pending timer with the id won (the event row is undone). */
  private boolean arm(Connection connection, OutboxEvent event, Timer timer) throws SQLException {
    java.sql.Array handlers = connection.createArrayOf("text", event.handlers().toArray());
    long events;
    long inserted;
    try (PreparedStatement statement = connection.prepareStatement(arm)) {
      bindDeadline(statement, 1, timer);
      statement.setString(3, event.id());
      statement.setString(4, event.type());
      statement.setString(5, event.key());
      statement.setBytes(6, event.payload());
      statement.setString(7, event.contentType());
      statement.setString(8, PostgresPublisher.json(event.headers()));
      statement.setArray(9, handlers);
      statement.setString(10, event.key());
      statement.setShort(11, (short) event.lane());
      statement.setShort(12, (short) event.lane());
      statement.setString(13, event.key());
      statement.setString(14, timer.id());
      statement.setArray(15, handlers);
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        events = rs.getLong(1);
        inserted = rs.getLong(2);
      }
    }
    if (events == 0) {
      throw eventIdExists(event);
    }
    if (inserted == 0) {
      try (PreparedStatement statement = connection.prepareStatement(unarm)) {
        statement.setString(1, event.id());
        statement.executeUpdate();
      }
      return false;
    }
    return true;
  }

  private static void bindDeadline(PreparedStatement statement, int index, Timer timer)
      throws SQLException {
    if (timer.at() != null) {
      statement.setObject(index, OffsetDateTime.ofInstant(timer.at(), ZoneOffset.UTC));
      statement.setNull(index + 1, Types.BIGINT);
    } else {
      statement.setNull(index, Types.TIMESTAMP_WITH_TIMEZONE);
      Duration in = timer.in();
      // exact: Timer caps it at 1,000 years, far below the long's 292,000 (it used to wrap)
      statement.setLong(
          index + 1,
          Math.addExact(Math.multiplyExact(in.toSeconds(), 1_000_000L), in.toNanosPart() / 1_000));
    }
  }

  private static void requireTransaction(Connection connection) throws SQLException {
    if (connection.getAutoCommit()) {
      throw new IllegalArgumentException(
          "transaction must be a connection in a transaction (autoCommit=false): a timer is"
              + " written in the caller's transaction, which holds the timer until it commits");
    }
  }
}
