package io.relaybus.store.postgres;

import java.sql.Connection;
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
 * minute, so a connection a firewall dropped silently is found and replaced.
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

  /** The first look at the transactions running when a wait began; each next one twice as late. */
  static final Duration FIRST_SLICE = Duration.ofMillis(5);

  private static final Logger log = LoggerFactory.getLogger(PostgresWakeups.class);

  private final PostgresTables tables;
  private final Opener opener;
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

  /** What the caller's claims have looked at (the sequence, the snapshot), as they last read it. */
  private Supplier<PostgresLog.Seen> seen = () -> new PostgresLog.Seen(Long.MAX_VALUE, null);

  void seen(Supplier<PostgresLog.Seen> seen) {
    this.seen = seen;
  }

  PostgresWakeups(PostgresTables tables, Opener opener) {
    this.tables = tables;
    this.opener = opener;
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
        // publishers notify only while a listener says it waits (PostgresMigrations.LOG_STORAGE);
        // a publish that took its id after the caller's last claim and did not see the flag is
        // found by the sequence having moved since. The flag is shared by every listener of the
        // outbox, so it is left up here: the publish that notifies lowers it, and every listener
        // hears that notification (PostgresMigrations.NOTIFY_LOWERS_THE_FLAG). One that took its
        // id before the last claim read the sequence and committed after that claim's snapshot,
        // but before the flag went up, is neither: the flag's statement finds its rows by xid
        PostgresLog.Seen last = seen.get();
        Flag flag = raiseFlag(last.snapshot());
        if (flag.last > last.ceil() || flag.unseen) {
          return true;
        }
        woken = awaitNotifications(listening, deadline, flag.running);
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
   * Waits for a notification until {@code deadline}; true when one came or, meanwhile, one of the
   * {@code running} transactions (those running when the flag was set) committed. A publisher
   * decides whether to notify when it inserts: one that took its log id before the caller's last
   * claim read the sequence, and had not committed then, saw the flag down and sends nothing; its
   * commit is seen here instead, by looking at those transactions after a first short wait and
   * again after each wait twice as long, until none of them runs. One of them committing (any kind
   * of transaction: which ones published cannot be told) makes the caller claim; its claim then
   * finds whether anything is new at the cost of one statement.
   */
  private boolean awaitNotifications(PGConnection listening, long deadline, String running)
      throws SQLException {
    long slice = FIRST_SLICE.toMillis();
    while (true) {
      long remainingMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
      long waitMs = running.isEmpty() ? remainingMs : Math.min(slice, remainingMs);
      PGNotification[] notifications =
          waitMs < 1
              ? listening.getNotifications() // what has arrived, without waiting (0 blocks)
              : listening.getNotifications((int) Math.min(waitMs, Integer.MAX_VALUE));
      if (arrived(notifications)) {
        return true;
      }
      if (remainingMs < 1 || running.isEmpty()) {
        return false;
      }
      Running still = stillRunning(running);
      if (still.committed) {
        return true;
      }
      running = still.xids;
      slice *= 2;
    }
  }

  /**
   * Of the given transactions (xids, comma-separated): those still running, and whether any
   * committed.
   */
  private Running stillRunning(String xids) throws SQLException {
    try (java.sql.PreparedStatement statement =
        connection.prepareStatement(
            "SELECT coalesce(bool_or(pg_xact_status(x) = 'committed'), false),"
                + " coalesce(string_agg(x::text, ',') FILTER (WHERE pg_xact_status(x) = 'in progress'), '')"
                + " FROM unnest(string_to_array(?, ',')::xid8[]) AS x")) {
      statement.setString(1, xids);
      try (java.sql.ResultSet rs = statement.executeQuery()) {
        rs.next();
        return new Running(rs.getBoolean(1), rs.getString(2));
      }
    }
  }

  private record Running(boolean committed, String xids) {}

  /**
   * The log sequence's last value read after the flag was set, the transactions running then, and
   * whether a log row the last claim's snapshot did not see has committed.
   */
  private record Flag(long last, String running, boolean unseen) {}

  private static boolean arrived(PGNotification[] notifications) {
    return notifications != null && notifications.length > 0;
  }

  /**
   * Sets the waiting flag; returns the log sequence's last value, read after it was set, the
   * transactions running then, and whether a log row that {@code claimed} (the last claim's
   * snapshot; null: none yet) did not see has committed: two probes of the {@code (xid)} index, as
   * the claim's quiet boundary makes ({@code log_boundary_}), over rows that came after it.
   */
  private Flag raiseFlag(String claimed) throws SQLException {
    try (java.sql.PreparedStatement flag =
        connection.prepareStatement(
            tables.sql(
                """
                SELECT setval('{schema}.{p}waiting', 1), (SELECT last_value FROM {log_seq}),
                  array_to_string(ARRAY(SELECT pg_snapshot_xip(pg_current_snapshot())), ','),
                  s.snap IS NOT NULL AND (
                    EXISTS (SELECT 1 FROM {log} g WHERE g.xid >= pg_snapshot_xmax(s.snap))
                    OR EXISTS (SELECT 1 FROM {log} g
                               WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(s.snap)))))
                FROM (SELECT ?::pg_snapshot AS snap) s"""))) {
      flag.setString(1, claimed);
      try (java.sql.ResultSet rs = flag.executeQuery()) {
        rs.next();
        return new Flag(rs.getLong(2), rs.getString(3), rs.getBoolean(4));
      }
    }
  }

  /** Opens the connection and LISTENs; false (and a pause before the next try) when it fails. */
  private boolean open() {
    Connection opened = null;
    try {
      opened = opener.open();
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
