package io.relaybus.store.postgres;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link PostgresOutboxStore#awaitWork}: LISTEN on the store's channel ({@link
 * PostgresTables#notifyChannel()}) on one connection of its own, which the schema's trigger ({@link
 * PostgresMigrations#NOTIFY_ON_INSERT}) notifies when a publishing transaction commits.
 *
 * <p>The connection is not the pool's: it stays open and idle in LISTEN for the store's life (a
 * pooled one would go back to the pool still listening, or be retired under it). It is opened at
 * the first wait, and after a failure (the server restarted, the backend was terminated, the
 * network broke) reopened at a later wait, after a pause that grows from 1 s to 60 s while opening
 * keeps failing; until then a wait sleeps its timeout. So a broken listener costs latency (the
 * caller's poll interval), never delivery. An idle listener repeats its LISTEN (a no-op) once a
 * minute, so a connection a firewall dropped silently is found and replaced; every statement on it
 * is bounded by {@link #STATEMENT_NETWORK_TIMEOUT}, and a read for notifications by the wait's own
 * timeout, so a peer that stops answering ends a wait within seconds.
 *
 * <p>One thread reads the connection at a time; others wait for it and return {@code true} too when
 * it was woken meanwhile. A wait after a (re)open returns {@code true} at once: a commit between
 * the caller's last claim and the LISTEN would otherwise go unseen until its timeout.
 */
final class PostgresWakeups implements AutoCloseable {
  /** Opens the listening connection (not from the pool); the caller closes what it returns. */
  interface Opener {
    Connection open() throws SQLException;
  }

  static final Duration FIRST_REOPEN_PAUSE = Duration.ofSeconds(1);
  static final Duration MAX_REOPEN_PAUSE = Duration.ofSeconds(60);
  static final Duration LIVENESS_CHECK = Duration.ofSeconds(60);

  /**
   * The client-side bound of each statement on the listener (the flag, the looks, the liveness
   * check; set with {@link Connection#setNetworkTimeout}): each reads a few index entries, so one
   * unanswered this long is a peer that stopped answering (a frozen server, a connection dropped
   * silently), and the listener is dropped and reopened as after any failure. The server's
   * statement_timeout needs a live backend; without this a wait blocked in its read for good.
   */
  static final Duration STATEMENT_NETWORK_TIMEOUT = Duration.ofSeconds(5);

  /** The first look at the transactions running when a wait began; each next one twice as late. */
  static final Duration FIRST_SLICE = Duration.ofMillis(5);

  /** Rows of other lanes a look reads at most before it says: claim (the snapshot is old). */
  static final int LOOK_LIMIT = 1000;

  private static final Logger log = LoggerFactory.getLogger(PostgresWakeups.class);

  private final PostgresTables tables;
  private final Opener opener;

  // the statements of a wait, rendered once
  private final String raiseFlag;
  private final String firstLook;
  private final String lookAgain;
  private final ReentrantLock reader = new ReentrantLock();
  private final CountDownLatch closed = new CountDownLatch(1);

  /**
   * Wake-ups seen so far (incremented under the reader lock); a thread that waited for the reader
   * compares it with what it was when it came.
   */
  private volatile long wakeups;

  /** Written under the reader lock; read by close() without it, to abort a blocked read. */
  private volatile Connection connection;

  // guarded by reader
  private long reopenAt; // System.nanoTime() before which no open is tried
  private Duration reopenPause = FIRST_REOPEN_PAUSE;
  private int failures; // since the listener last worked
  private long checkAt;

  /** What the caller's claims have looked at, as they last read it. */
  private Supplier<PostgresLog.Seen> seen = () -> new PostgresLog.Seen(null, null);

  void seen(Supplier<PostgresLog.Seen> seen) {
    this.seen = seen;
  }

  PostgresWakeups(PostgresTables tables, Opener opener) {
    this.tables = tables;
    this.opener = opener;
    this.raiseFlag = render(RAISE_FLAG);
    this.firstLook = render(FIRST_LOOK);
    this.lookAgain = render(LOOK_AGAIN);
  }

  /** The channel as LISTEN takes it: a quoted identifier. */
  String listenStatement() {
    return "LISTEN \"" + tables.notifyChannel().replace("\"", "\"\"") + "\"";
  }

  /**
   * Waits up to {@code timeout} for a notification; true when one came (or the listener was just
   * (re)opened), false at the timeout, also when there is no listener (then it sleeps).
   */
  boolean await(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    long seen = wakeups;
    if (!reader.tryLock(timeout.toNanos(), TimeUnit.NANOSECONDS)) {
      return wakeups != seen;
    }
    try {
      if (wakeups != seen) {
        return true; // the thread that read before us was woken
      }
      if (closed.getCount() == 0) {
        return false;
      }
      boolean woken = listen(deadline);
      if (woken) {
        wakeups++;
      }
      return woken;
    } finally {
      if (closed.getCount() == 0) {
        closeQuietly(connection);
        connection = null;
      }
      reader.unlock();
    }
  }

  /** Under the reader lock. */
  private boolean listen(long deadline) throws InterruptedException {
    if (connection == null) {
      if ((failures > 0 && System.nanoTime() - reopenAt < 0) || !open()) {
        sleepUntil(deadline);
        return false;
      }
      return true;
    }
    try {
      PGConnection listening = connection.unwrap(PGConnection.class);
      if (System.nanoTime() - checkAt >= 0) {
        try (Statement check = connection.createStatement()) {
          check.execute(listenStatement()); // a no-op round trip; pg_stat_activity still shows it
        }
        checkAt = System.nanoTime() + LIVENESS_CHECK.toNanos();
      }
      long remainingMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
      boolean woken;
      if (remainingMs < 1) {
        // getNotifications(0) would block until one comes; without a timeout it takes only what
        // has arrived, without waiting
        woken = arrived(listening.getNotifications());
      } else {
        // publishers notify only while a listener says it waits (PostgresMigrations.LOG_STORAGE).
        // The flag is shared by every listener of the outbox, so it is left up here: the publish
        // that notifies lowers it, and every listener hears that notification
        // (PostgresMigrations.NOTIFY_LOWERS_THE_FLAG). A publish that did not see the flag is
        // found by the flag's statement: its rows committed, or its transaction still to end
        woken = awaitNotifications(listening, deadline, seen.get());
      }
      if (woken) {
        checkAt = System.nanoTime() + LIVENESS_CHECK.toNanos();
      }
      return woken;
    } catch (SQLException | RuntimeException e) {
      if (closed.getCount() == 0) {
        return false; // close() cut the connection under us
      }
      log.warn(
          "Listening for new deliveries on channel {} failed; until the listener is back, waits"
              + " sleep (deliveries are found at the next poll). Reopening in {}.",
          tables.notifyChannel(),
          reopenPause,
          e);
      closeQuietly(connection);
      connection = null;
      failed();
      sleepUntil(deadline);
      return false;
    }
  }

  /**
   * Waits for a notification until {@code deadline}, or for a log row that {@code last} (the
   * caller's last claim) did not see, in its lanes, to commit.
   *
   * <p>A publisher decides whether to notify when it inserts, by the flag. One that inserted before
   * the flag went up sends nothing: its rows are found by the flag's statement if they had
   * committed; otherwise its transaction is among those the flag's statement lists (or, when the
   * log sequence moved while it ran, the first look a moment later), looked at again after each
   * wait twice as long while any of them has not ended, each time with the same look for rows. A
   * notification from the log, when all the caller's lanes were read up to one snapshot ({@link
   * PostgresLog.Seen#lanes()}), lowered the flag for every listener: this one raises it again and
   * looks, and goes on waiting while nothing came in its lanes. Any other notification (rows of
   * {@code deliveries}: a retry, a timer, an older publisher) ends the wait.
   */
  private boolean awaitNotifications(PGConnection listening, long deadline, PostgresLog.Seen last)
      throws SQLException {
    Look look = raiseFlag(last);
    long slice = FIRST_SLICE.toMillis();
    while (!look.unseen) {
      boolean settled = look.pending != null && look.pending.isEmpty();
      long remainingMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
      long waitMs = settled ? remainingMs : Math.min(slice, remainingMs);
      PGNotification[] notifications =
          waitMs < 1
              ? listening.getNotifications() // what has arrived, without waiting (0 blocks)
              : listening.getNotifications((int) Math.min(waitMs, Integer.MAX_VALUE));
      if (arrived(notifications)) {
        if (last.lanes() == null || !onlyFromTheLog(notifications)) {
          return true;
        }
        look = raiseFlag(last);
        slice = FIRST_SLICE.toMillis();
        continue;
      }
      if (remainingMs < 1 || settled) {
        return false;
      }
      look = look.pending == null ? firstLook(last) : lookAgain(last, look.pending);
      slice *= 2;
    }
    return true;
  }

  private static boolean onlyFromTheLog(PGNotification[] notifications) {
    for (PGNotification notification : notifications) {
      if (!PostgresMigrations.FROM_THE_LOG.equals(notification.getParameter())) {
        return false;
      }
    }
    return true;
  }

  /**
   * What a look found: whether a log row the last claim did not see has committed (in its lanes,
   * when known), and the transactions that may still insert such rows without notifying (xids,
   * comma-separated: those that had not ended, or ended after the look's snapshot; null: not looked
   * for yet).
   */
  private record Look(boolean unseen, String pending) {}

  /**
   * Rows the snapshot {@code s.snap} did not see (in lanes {@code s.lanes}; null: any lane) that
   * have committed, through two probes of the log's {@code (xid)} index over rows that came after
   * it. Past {@value #LOOK_LIMIT} such rows of other lanes it answers yes, so the caller claims and
   * its next snapshot is newer. No snapshot (nothing claimed yet): yes.
   */
  private static final String UNSEEN =
      """
      (SELECT s.snap IS NULL OR coalesce(bool_or(s.lanes IS NULL OR u.lane = ANY (s.lanes)), false)
              OR count(*) >= %1$d
       FROM ((SELECT g.lane FROM {log} g WHERE g.xid >= pg_snapshot_xmax(s.snap) LIMIT %1$d)
             UNION ALL
             (SELECT g.lane FROM {log} g
              WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(s.snap))) LIMIT %1$d)) u)"""
          .formatted(PostgresWakeups.LOOK_LIMIT);

  private static boolean arrived(PGNotification[] notifications) {
    return notifications != null && notifications.length > 0;
  }

  /**
   * Sets the waiting flag and looks for rows ({@link #UNSEEN}) and for the transactions that may
   * have inserted before the flag went up: those the statement's snapshot saw running, and those
   * that took an xid after it and before this statement's own (a snapshot lists running
   * transactions only below the newest that ended), unless they ended before the snapshot or
   * aborted. A publisher that took its xid after this statement's and still saw the flag down took
   * its log id while this statement ran: only if the sequence moved between its first and its last
   * read is the list not known (null), and the first look, a moment later, takes an xid of its own
   * for the bound.
   */
  private Look raiseFlag(PostgresLog.Seen last) throws SQLException {
    return look(raiseFlag, last, null);
  }

  private static final String RAISE_FLAG =
      """
        WITH f AS MATERIALIZED (
          SELECT {log_last_id} AS before,
                 setval('{schema}.{p}waiting', 1) AS up, pg_current_xact_id() AS own,
                 {log_last_id} AS after,
                 pg_current_snapshot() AS now
        )
        SELECT %s, CASE WHEN f.after > f.before THEN NULL ELSE %s END
        FROM f, (SELECT ?::pg_snapshot AS snap, ?::smallint[] AS lanes) s""";

  /** The transactions of {@link #raiseFlag} and {@link #firstLook}, from {@code f.now, f.own}. */
  private static final String PENDING =
      """
      array_to_string(ARRAY(
        SELECT x FROM (
          SELECT pg_snapshot_xip(f.now) AS x
          UNION ALL
          SELECT g::text::xid8 FROM generate_series(
            pg_snapshot_xmax(f.now)::text::bigint, f.own::text::bigint - 1) AS g) c
        WHERE NOT pg_visible_in_snapshot(x, f.now)
          AND pg_xact_status(x) IS DISTINCT FROM 'aborted'), ',')""";

  /** Looks for rows and for the transactions of {@link #raiseFlag}, with an xid of its own. */
  private Look firstLook(PostgresLog.Seen last) throws SQLException {
    return look(firstLook, last, null);
  }

  private static final String FIRST_LOOK =
      """
        WITH f AS MATERIALIZED (
          SELECT pg_current_xact_id() AS own, pg_current_snapshot() AS now
        )
        SELECT %s, %s
        FROM f, (SELECT ?::pg_snapshot AS snap, ?::smallint[] AS lanes) s""";

  /** Looks again ({@link #UNSEEN}); pending: those of {@code pending} still to be seen ended. */
  private Look lookAgain(PostgresLog.Seen last, String pending) throws SQLException {
    return look(lookAgain, last, pending);
  }

  private static final String LOOK_AGAIN =
      """
        SELECT %s, array_to_string(ARRAY(
                 SELECT x FROM unnest(string_to_array(?, ',')::xid8[]) AS x
                 WHERE NOT pg_visible_in_snapshot(x, pg_current_snapshot())
                   AND pg_xact_status(x) IS DISTINCT FROM 'aborted'), ',')
        FROM (SELECT ?::pg_snapshot AS snap, ?::smallint[] AS lanes) s""";

  /**
   * A look's statement as sent: {@link #UNSEEN} and {@link #PENDING} in its placeholders, the
   * store's names in place.
   */
  private String render(String sql) {
    return tables.sql(sql.formatted(UNSEEN, PENDING));
  }

  /**
   * Runs a look: {@code sql} (rendered), its first parameter {@code first} (none when null), then
   * the snapshot and the lanes.
   */
  private Look look(String sql, PostgresLog.Seen last, Object first) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(sql)) {
      int i = 1;
      if (first != null) {
        statement.setObject(i++, first);
      }
      statement.setString(i++, last.snapshot());
      if (last.lanes() == null) {
        statement.setNull(i, java.sql.Types.ARRAY);
      } else {
        statement.setArray(i, connection.createArrayOf("int2", last.lanes()));
      }
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        return new Look(rs.getBoolean(1), rs.getString(2));
      }
    }
  }

  /** Opens the connection and LISTENs; false (and a pause before the next try) when it fails. */
  private boolean open() {
    Connection opened = null;
    try {
      opened = opener.open();
      // the waits' getNotifications(timeout) use their own timeout instead, then restore this one
      opened.setNetworkTimeout(Runnable::run, (int) STATEMENT_NETWORK_TIMEOUT.toMillis());
      opened.setAutoCommit(true);
      warnIfTriggerOff(opened);
      try (Statement listen = opened.createStatement()) {
        listen.execute(listenStatement()); // last, so pg_stat_activity shows it
      }
      if (closed.getCount() == 0) {
        closeQuietly(opened);
        return false;
      }
      connection = opened;
      checkAt = System.nanoTime() + LIVENESS_CHECK.toNanos();
      boolean reopened = failures > 0;
      failures = 0;
      reopenPause = FIRST_REOPEN_PAUSE;
      if (reopened) {
        log.info("Listening for new deliveries on channel {} again.", tables.notifyChannel());
      } else {
        log.debug("Listening for new deliveries on channel {}.", tables.notifyChannel());
      }
      return true;
    } catch (SQLException | RuntimeException e) {
      closeQuietly(opened);
      log.warn(
          "Could not listen for new deliveries on channel {}: {}. Waits sleep instead (deliveries"
              + " are found at the next poll); trying again in {}.",
          tables.notifyChannel(),
          e.getMessage(),
          reopenPause);
      failed();
      return false;
    }
  }

  /** A listener on a schema whose trigger is disabled or missing would never be woken: say so. */
  private void warnIfTriggerOff(Connection opened) throws SQLException {
    for (String table : PostgresMigrations.NOTIFY_TABLES) {
      String state = PostgresSchema.triggerState(opened, tables, table);
      if (state == null || "D".equals(state)) {
        log.warn(
            "The wake-up trigger {} on {} is {}: nothing notifies channel {}, so new deliveries"
                + " are found only by polling. Run setup() (outbox.setup=true) to install it, build"
                + " the store with notifyOnPublish(true) (outbox.notify=true) to enable it, or"
                + " notifyOnPublish(false) (outbox.notify=false) not to listen.",
            tables.sql(PostgresMigrations.NOTIFY_TRIGGER),
            tables.sql(table),
            state == null ? "missing" : "disabled",
            tables.notifyChannel());
      }
    }
  }

  /** The next open waits out the pause, which doubles up to its maximum. */
  private void failed() {
    failures++;
    reopenAt = System.nanoTime() + reopenPause.toNanos();
    reopenPause = min(reopenPause.multipliedBy(2), MAX_REOPEN_PAUSE);
  }

  private void sleepUntil(long deadline) throws InterruptedException {
    long nanos = deadline - System.nanoTime();
    if (nanos > 0) {
      closed.await(nanos, TimeUnit.NANOSECONDS);
    }
  }

  /**
   * Ends every wait at once (a waiting thread returns false) and closes the connection: aborted,
   * since the reading thread may hold it in a blocking read.
   */
  @Override
  public void close() {
    closed.countDown();
    // the reader may be blocked in a read: cut the socket rather than wait for the lock
    Connection listening = connection;
    if (listening != null) {
      try {
        listening.abort(Runnable::run);
      } catch (SQLException | RuntimeException e) {
        closeQuietly(listening);
      }
    }
    if (reader.tryLock()) {
      try {
        closeQuietly(connection);
        connection = null;
      } finally {
        reader.unlock();
      }
    }
  }

  private static void closeQuietly(Connection connection) {
    if (connection != null) {
      try {
        connection.close();
      } catch (SQLException | RuntimeException ignored) {
        // already broken
      }
    }
  }

  private static Duration min(Duration a, Duration b) {
    return a.compareTo(b) <= 0 ? a : b;
  }

  // visible for testing: whether a thread is in a wait on the connection (or sleeping in one)
  boolean waiting() {
    return reader.isLocked();
  }

  // visible for testing: the listening backend's pid, or null when there is no listener
  Integer listenerPid() throws SQLException {
    if (!reader.tryLock()) {
      return null;
    }
    try {
      return connection == null ? null : connection.unwrap(PGConnection.class).getBackendPID();
    } finally {
      reader.unlock();
    }
  }
}
