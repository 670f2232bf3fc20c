package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.RoundTrips;
import java.sql.Connection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * Storage v2's snapshot windows against transactions that publish several events in separate calls
 * while claims open windows between those calls, and against owners that hand their lanes over:
 * every committed delivery goes out, none twice.
 */
class PostgresLogWindowsTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();

  private static PostgresOutboxStore store(String prefix) {
    return store(prefix, EmbeddedPostgres17.jdbcUrl(), 10);
  }

  private static PostgresOutboxStore store(String prefix, String jdbcUrl, int poolSize) {
    return builder(prefix, jdbcUrl, poolSize).build();
  }

  private static PostgresOutboxStore.Builder builder(String prefix, String jdbcUrl, int poolSize) {
    return PostgresOutboxStore.builder()
        .jdbcUrl(jdbcUrl)
        .schema("windows")
        .tablePrefix(prefix)
        .poolSize(poolSize);
  }

  /**
   * Symptom: events of transactions that took their log id before a claim's floor and their xid
   * after the claim's xid bound were never handed out (10 of 2,166 deliveries in one run): the
   * bound was the claim transaction's xid, taken by an earlier statement of that transaction (the
   * first window read of the claim, which parks rows), so it was older than the floor.
   */
  @Test
  void eventsPublishedAcrossWindowBoundariesAllGoOutOnceAcrossHandovers() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    PostgresOutboxStore publisher = store(prefix);
    publisher.setup();
    Set<String> published = ConcurrentHashMap.newKeySet();
    ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
    AtomicBoolean stop = new AtomicBoolean();
    List<Thread> publishers = new ArrayList<>();
    for (int p = 0; p < 3; p++) {
      int number = p;
      Thread thread =
          new Thread(
              () -> {
                for (int t = 0; !stop.get(); t++) {
                  try (Connection c = publisher.dataSource().getConnection()) {
                    c.setAutoCommit(false);
                    List<String> ids = new ArrayList<>();
                    for (int e = 0; e < 3; e++) {
                      String id = "p" + number + "-" + t + "-" + e;
                      ids.add(id);
                      // one call per event: claims open windows between the calls
                      publisher.publish(
                          c,
                          OutboxEvent.builder("t")
                              .id(id)
                              .key("k" + ((t + e) % 20))
                              .json("{}")
                              .handlers("a", "b")
                              .build());
                    }
                    Thread.sleep(t % 7 == 0 ? 30 : 1);
                    c.commit();
                    published.addAll(ids);
                  } catch (Exception e) {
                    errors.add(e);
                    return;
                  }
                }
              });
      thread.start();
      publishers.add(thread);
    }
    // four owners in turn, each claiming and completing for a while, then handing the lanes over
    for (int owner = 0; owner < 4; owner++) {
      try (PostgresOutboxStore consumer = store(prefix)) {
        String name = "o" + owner;
        List<LaneLease> leases =
            consumer.acquireLanes(name, "g", LaneRange.all().lanes(), Duration.ofMinutes(1));
        long end = System.nanoTime() + Duration.ofMillis(700).toNanos();
        while (System.nanoTime() < end) {
          drainOnce(consumer, name, leases, received);
          Thread.sleep(2);
        }
        consumer.relinquishLanes(name, leases);
      }
    }
    stop.set(true);
    for (Thread thread : publishers) {
      thread.join();
    }
    assertThat(errors).isEmpty();
    try (PostgresOutboxStore consumer = store(prefix)) {
      List<LaneLease> leases =
          consumer.acquireLanes("last", "g", LaneRange.all().lanes(), Duration.ofMinutes(1));
      while (drainOnce(consumer, "last", leases, received) > 0) {
        // until a claim finds nothing
      }
    }

    Map<String, Integer> times = new HashMap<>();
    received.forEach(d -> times.merge(d, 1, Integer::sum));
    Set<String> expected = new java.util.TreeSet<>();
    published.forEach(id -> expected.addAll(List.of(id + "/a", id + "/b")));
    assertThat(published).hasSizeGreaterThan(300);
    assertThat(times.keySet()).as("every committed delivery, nothing else").isEqualTo(expected);
    assertThat(times).as("each once").allSatisfy((delivery, n) -> assertThat(n).isOne());
  }

  /**
   * The tail: a window read to its end is looked at again when the next one opens, and what is left
   * in it goes out. Nothing is left in one in the normal course (what the page does not hand out it
   * parks); the tail is the net under that, and a claim looks at it only for a window that had rows
   * (one the probe found empty stays empty). Here a row is put into a window already read (its xid
   * and id moved there by hand) while the next window of its lane opens empty.
   */
  @Test
  void aRowLeftInAWindowThatHadRowsGoesOutWhenTheNextOpensEmpty() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      String keyHere = "here";
      String keyThere = "there-0";
      for (int i = 1;
          io.relaybus.store.Lanes.laneOf(keyThere, null)
              == io.relaybus.store.Lanes.laneOf(keyHere, null);
          i++) {
        keyThere = "there-" + i;
      }
      store.publish(event("e1", keyHere));
      store.publish(event("e2", keyThere));
      String log = store.tableName("log");
      String e1Xid =
          PostgresMigrationsTest.rows("SELECT xid FROM " + log + " WHERE event_id = 'e1'").get(0);
      String e2Id =
          PostgresMigrationsTest.rows("SELECT id FROM " + log + " WHERE event_id = 'e2'").get(0);
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      assertThat(drainOnce(store, "o", leases, received)).isEqualTo(2);

      // e3 of e1's lane, moved into the window e1 went out of: e1's xid, an id above e1's and at
      // most the window's ceil (e2's id, free in this lane)
      store.publish(event("e3", keyHere));
      execute(
          "UPDATE " + log + " SET xid = '" + e1Xid + "', id = " + e2Id + " WHERE event_id = 'e3'",
          store);
      // a publish on the other lane: windows open, e1's lane's new window is empty
      store.publish(event("e4", keyThere));
      for (int claims = 0; claims < 3 && received.size() < 4; claims++) {
        drainOnce(store, "o", leases, received);
      }

      assertThat(received).containsExactlyInAnyOrder("e1/h", "e2/h", "e3/h", "e4/h");
    }
  }

  /**
   * After the server lost WAL (the incarnation row gone, as after crash recovery) the windows in
   * memory may count reused transaction ids as seen: the sweep does not act on them, and sends the
   * stranded row on only once a claim has read the lanes again from their cursor rows.
   */
  @Test
  void theSweepWaitsForAClaimAfterTheServerLostWal() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      strandTheSecond(store, "lost", "l", leases, received);
      execute("DELETE FROM " + store.tableName("incarnation"), store);

      assertThat(store.sweep("o", leases)).as("windows of before the loss").isEmpty();
      assertThat(drainOnce(store, "o", leases, received)).isZero(); // reads from the cursor rows
      assertThat(store.sweep("o", leases))
          .extracting(PostgresLog.Rescued::eventId)
          .containsExactly("l2");
    }
  }

  /**
   * The safety net: a row its lane's cursor moved past without handing it out (made here by giving
   * it an xid that every later window's lower snapshot sees as committed) is found by the sweep,
   * becomes a pending delivery and goes out once; a row out and not done and a row not read yet are
   * left where they are.
   */
  @Test
  void aRowBehindItsLanesCursorIsSweptIntoDeliveriesAndGoesOutOnce() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      String key = "here";
      String other = keyOfAnotherLane(key);
      String log = store.tableName("log");
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      strandTheSecond(store, key, "e", leases, received);
      store.publish(event("e4", key));
      List<ClaimedDelivery> out = store.claim("o", leases, 50); // e4: out, not done
      assertThat(out).extracting(ClaimedDelivery::eventId).containsExactly("e4");
      assertThat(store.claim("o", leases, 50)).isEmpty(); // e4's window closes, e4 still out
      store.publish(event("e5", other)); // not read yet

      List<PostgresLog.Rescued> rescued = store.sweep("o", leases);

      assertThat(rescued).extracting(PostgresLog.Rescued::eventId).containsExactly("e2");
      assertThat(rescued.get(0).lane()).isEqualTo(io.relaybus.store.Lanes.laneOf(key, null));
      assertThat(store.sweep("o", leases)).isEmpty();
      store.complete(out.stream().map(ClaimedDelivery::token).toList());
      for (int claims = 0; claims < 4; claims++) {
        drainOnce(store, "o", leases, received);
      }
      assertThat(received).containsExactlyInAnyOrder("e1/h", "e3/h", "e2/h", "e5/h");
      assertThat(PostgresMigrationsTest.rows("SELECT event_id FROM " + log)).isEmpty();
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id FROM "
                      + store.tableName("deliveries")
                      + " WHERE status <> 'done'"))
          .isEmpty();
    }
  }

  /**
   * The safety net costs what was published since the last sweep, also while a transaction that
   * took an xid stays open. Symptom: each sweep looked from the lowest xid its lanes' lower
   * snapshots listed as running, which such a transaction holds where it began: every sweep (one a
   * minute, in a claim) went through the (xid) index entries of every row published since, and, the
   * xmin horizon held by the same transaction, of every row completed since (20,000 here: hundreds
   * of buffers a sweep, growing for as long as the transaction stays open).
   */
  @Test
  void aSweepReadsNothingPublishedBeforeTheLastOneWhileATransactionStaysOpen() throws Exception {
    long shallow = buffersOfASweepWhileATransactionStaysOpen(0);
    long deep = buffersOfASweepWhileATransactionStaysOpen(20_000);

    assertThat(deep).as("buffers after 20,000, %d after none", shallow).isLessThan(shallow + 20);
  }

  /**
   * Buffers read by a sweep after {@code completed} events were published and completed while a
   * transaction that took an xid (and so holds the xmin horizon, and is listed as running in every
   * snapshot) stays open, the sweep before it having run after them.
   */
  private static long buffersOfASweepWhileATransactionStaysOpen(int completed) throws Exception {
    try (PostgresOutboxStore store = setUpStore();
        Connection open = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      String key = "swept";
      store.publish(event("first", key));
      assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(1);
      open.setAutoCommit(false);
      open.createStatement().executeQuery("SELECT pg_current_xact_id()").close();
      for (int n = 0; n < completed; ) {
        List<OutboxEvent> batch = new ArrayList<>();
        for (int i = 0; i < 500; i++, n++) {
          batch.add(event("d" + n, key));
        }
        store.publishAll(batch);
        while (drainOnce(store, "o", leases, received, 500) > 0) {}
      }
      // the lanes' lower snapshots move past what was published, and the sweep looks after it
      store.publish(event("last", keyOfAnotherLane(key)));
      assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(1);
      assertThat(drainOnce(store, "o", leases, received, 10)).isZero();
      assertThat(store.sweep("o", leases)).isEmpty();
      execute("VACUUM ANALYZE " + store.tableName("log"), store);
      execute("SELECT pg_stat_statements_reset()", store);

      assertThat(store.sweep("o", leases)).isEmpty();

      assertThat(received).hasSize(completed + 2);
      open.rollback();
      return buffersRead("WITH c AS", store);
    }
  }

  /**
   * A completion between taking its tokens off the lists and its statement's end (here held up by a
   * lock on its row) has its rows still in the log: the sweep leaves them alone, not knowing
   * whether the completion will land (it would send them again otherwise).
   */
  @Test
  void theSweepLeavesTheRowsOfACompletionInProgressAlone() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      String log = store.tableName("log");
      List<LaneLease> leases = allLanes(store);
      store.publish(event("e1", "k"));
      List<ClaimedDelivery> out = store.claim("o", leases, 50);
      assertThat(out).hasSize(1);
      store.publish(event("e2", keyOfAnotherLane("k")));
      assertThat(store.claim("o", leases, 50)).hasSize(1); // e1's window closed, e1 still out
      try (Connection locker = store.dataSource().getConnection()) {
        locker.setAutoCommit(false);
        try (java.sql.Statement s = locker.createStatement()) {
          s.execute("SELECT * FROM " + log + " WHERE event_id = 'e1' FOR UPDATE");
        }
        CompletableFuture<java.util.Set<Long>> completion =
            CompletableFuture.supplyAsync(
                () -> store.complete(out.stream().map(ClaimedDelivery::token).toList()));
        awaitLockWait(store);

        assertThat(store.sweep("o", leases)).isEmpty();

        locker.rollback();
        assertThat(within30s(completion)).hasSize(1);
      }
      assertThat(store.sweep("o", leases)).isEmpty();
      assertThat(PostgresMigrationsTest.rows("SELECT event_id FROM " + log)).containsExactly("e2");
    }
  }

  /**
   * Symptom: with the xmin horizon held, claims got slower with every row their lanes had completed
   * (one task beside two publishers, about 26,000 deliveries per 10 s: the page statement went from
   * 8,000 to 100,000 buffer reads per call within 40 s). Below a window's floor the claim read the
   * lane's whole (lane, id) range and filtered it by xid, twice (the page and its look for blocked
   * rows); and the statement's deletion of the rows it parks read the whole (lane, id) index even
   * when it had none to delete (statistics count live rows only, so the planner took the log for
   * nearly empty). Now rows of transactions a window saw running are looked up by xid, and the
   * deletion runs only when there is something to delete.
   */
  @Test
  void aClaimAndACompletionReadNothingOfTheLanesCompletedRows() throws Exception {
    Map<String, Long> shallow = buffersForARowOfATransactionSeenRunning(0);
    Map<String, Long> deep = buffersForARowOfATransactionSeenRunning(20_000);

    // 20,000 completed rows of the lane lie on about 400 pages of the log and 60 of its (lane, id)
    // index: before, the claim read 1,327 buffers here against 274, and the completion of its one
    // row 653 against 5 (its join with the log was planned on statistics that count live rows
    // only, and there were none: it read the whole index)
    assertThat(deep.get("page")).isLessThan(shallow.get("page") + 100);
    assertThat(deep.get("complete")).isLessThan(shallow.get("complete") + 20);
  }

  /**
   * A takeover charges what the previous holder had handed out and not finished. Symptom: it read
   * the lane's whole {@code (lane, id)} range for that, with the xmin horizon held an entry and a
   * heap visit for every row the lane ever completed (20,000 here), to find the one row in flight.
   * Now it reads from the floor of the oldest window not done, and below it only the rows of
   * transactions that window's lower snapshot did not see, through {@code (xid)}.
   */
  @Test
  void aTakeoverReadsNothingOfTheLanesCompletedRows() throws Exception {
    long shallow = buffersOfATakeover(0);
    long deep = buffersOfATakeover(20_000);

    assertThat(deep).isLessThan(shallow + 100);
  }

  private static long buffersOfATakeover(int completed) throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    // a cursor row at every claim: the takeover starts from the oldest window not done, not from
    // where a row appended up to an interval or CURSOR_ROWS deliveries earlier left it
    try (PostgresOutboxStore store =
            builder(prefix, EmbeddedPostgres17.jdbcUrl(), 10)
                .cursorInterval(Duration.ZERO)
                .build();
        Connection holder = EmbeddedPostgres17.dataSource().getConnection()) {
      store.setup();
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      String key = "deep";
      completeWithTheHorizonHeld(store, holder, leases, received, key, completed);
      store.publish(event("in-flight", key));
      store.publish(event("not-yet", key));
      assertThat(store.claim("o", leases, 1))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("in-flight");

      execute("SELECT pg_stat_statements_reset()", store);
      int lane = io.relaybus.store.Lanes.laneOf(key, null);
      assertThat(store.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1))).hasSize(1);

      // the delivery in flight was charged its attempt and left the log; the next stays there
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || ':' || attempts || ':' || status FROM "
                      + store.tableName("deliveries")))
          .containsExactly("in-flight:1:pending");
      assertThat(PostgresMigrationsTest.rows("SELECT event_id FROM " + store.tableName("log")))
          .containsExactly("not-yet");
      holder.rollback();
      return buffersRead("WITH cur AS", store);
    }
  }

  /**
   * A completion reaches its rows through the versions its statement sees; a row another
   * transaction changed meanwhile (here an update that commits while the completion waits for its
   * lock) is reached again by key: the row still leaves the log, and a handler still is struck.
   */
  @Test
  void aCompletionFinishesRowsAnotherTransactionChangedMeanwhile() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore store = store(prefix);
        Connection other = store.dataSource().getConnection()) {
      store.setup();
      List<LaneLease> leases = allLanes(store);
      store.publish(OutboxEvent.builder("t").id("gone").key("k").json("{}").handlers("a").build());
      store.publish(
          OutboxEvent.builder("t").id("struck").key("k").json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> claimed = store.claim("o", leases, 10);
      assertThat(claimed)
          .extracting(d -> d.eventId() + "/" + d.handler())
          .containsExactly("gone/a", "struck/a", "struck/b");
      List<io.relaybus.store.DeliveryToken> done =
          claimed.stream()
              .filter(d -> !d.handler().equals("b"))
              .map(ClaimedDelivery::token)
              .toList();

      other.setAutoCommit(false);
      try (java.sql.Statement s = other.createStatement()) {
        // a new version of each row, its lock held until the completion waits for it
        assertThat(s.executeUpdate("UPDATE " + store.tableName("log") + " SET key = key"))
            .isEqualTo(2);
      }
      CompletableFuture<Set<Long>> completed =
          CompletableFuture.supplyAsync(() -> store.complete(done));
      awaitLockWait(store);
      other.commit();

      assertThat(within30s(completed)).hasSize(2);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || ':' || array_to_string(handlers, ',', '-') FROM "
                      + store.tableName("log")))
          .containsExactly("struck:-,b");
    }
  }

  /** Waits until a session of the store's database waits for a row lock. */
  private static void awaitLockWait(PostgresOutboxStore store) throws Exception {
    for (int i = 0; i < 500; i++) {
      if (!PostgresMigrationsTest.rows(
              "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                  + " AND (query LIKE 'WITH t AS%' OR query LIKE 'WITH fenced AS%')")
          .isEmpty()) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("the completion never waited for the row lock");
  }

  /**
   * Waits until {@code n} sessions wait for a lock in a completion's statement, a takeover's
   * charge, a claim's page statement or a sweep (told by how they begin: the server shows only a
   * statement's first 1,024 bytes).
   */
  /**
   * Locks the log row of {@code eventId} in a transaction of {@code locker} (left open: the caller
   * rolls it back), so that statements reaching for that row queue behind it.
   */
  private static void holdLogRow(Connection locker, PostgresOutboxStore store, String eventId)
      throws java.sql.SQLException {
    locker.setAutoCommit(false);
    try (java.sql.Statement s = locker.createStatement()) {
      s.execute(
          "SELECT * FROM "
              + store.tableName("log")
              + " WHERE event_id = '"
              + eventId
              + "' FOR UPDATE");
    }
  }

  /** The advisory lock (class, key) that {@link #pauseTheNextLogWrite} holds its statement on. */
  private static final String PAUSE = "727272, 2";

  /**
   * Holds the next statement that deletes or updates rows of {@code store}'s log (a completion, a
   * reschedule, burial or release, a takeover, a claim's parking) before its first write, its
   * snapshot taken and no row locked: a statement trigger of the test waits for an advisory lock
   * that {@code pauser} holds until {@link #resume}. Only the first transaction to get there waits;
   * the others run through.
   */
  private static void pauseTheNextLogWrite(Connection pauser, PostgresOutboxStore store)
      throws Exception {
    String log = store.tableName("log");
    execute(
        """
        CREATE FUNCTION %s_pause() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF pg_try_advisory_xact_lock(727272, 1) THEN
            PERFORM pg_advisory_xact_lock_shared(%s);
          END IF;
          RETURN NULL;
        END $$;
        CREATE TRIGGER pause BEFORE DELETE OR UPDATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION %s_pause()"""
            .formatted(log, PAUSE, log, log),
        store);
    try (java.sql.Statement s = pauser.createStatement()) {
      s.execute("SELECT pg_advisory_lock(" + PAUSE + ")");
    }
  }

  /** Waits until a statement waits in {@link #pauseTheNextLogWrite}'s trigger. */
  private static void awaitPaused() throws Exception {
    for (int i = 0; i < 500; i++) {
      if (!PostgresMigrationsTest.rows(
              "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                  + " AND wait_event = 'advisory' AND query NOT LIKE 'SELECT pg_advisory_lock%'")
          .isEmpty()) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("no statement waited in the trigger");
  }

  /** Lets the statement {@link #pauseTheNextLogWrite} holds go on. */
  private static void resume(Connection pauser) throws Exception {
    try (java.sql.Statement s = pauser.createStatement()) {
      s.execute("SELECT pg_advisory_unlock(" + PAUSE + ")");
    }
  }

  /** What {@code call} returned, once it has: within 30 s, or the test fails. */
  private static <T> T within30s(CompletableFuture<T> call) throws Exception {
    return call.get(30, TimeUnit.SECONDS);
  }

  private static void awaitLockWaits(int n) throws Exception {
    for (int i = 0; i < 500; i++) {
      List<String> waiting =
          PostgresMigrationsTest.rows(
              "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                  + " AND (query LIKE 'WITH t AS%' OR query LIKE 'WITH fenced AS%'"
                  + " OR query LIKE 'WITH cur AS%' OR query LIKE 'WITH req AS%'"
                  + " OR query LIKE 'SELECT b.floor%' OR query LIKE 'WITH c AS%')");
      if (Integer.parseInt(waiting.get(0)) >= n) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError(n + " sessions never waited for a lock");
  }

  /**
   * Symptom: a few times an hour under the held-xmin delivery benchmark, 4 to 10 consecutive
   * single-event publishes were never handed out, in every lane of one task that had one of them
   * (the safety net found them a minute later). A claim's floor, read as {@code SELECT last_value
   * FROM} the log's sequence, was 32 above the last id taken (582,238 where the page statement read
   * 582,209 a moment later): {@code nextval} writes the value 32 fetches on into the sequence tuple
   * while it logs it, and a scan reads the tuple holding only a pin. The next windows started above
   * ids that transactions beginning after the claim's xid bound then took, so neither their by-id
   * part nor their by-xid part read those rows. The race needs another backend inside {@code
   * nextval}'s WAL insert at the instant of the read, which no test can arrange; so this pins the
   * way the claim reads the sequence, in what PostgreSQL ran: only {@code
   * pg_sequence_last_value()}, which reads under the buffer lock.
   */
  @Test
  void theClaimReadsTheLogSequenceOnlyUnderItsLock() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore store = store(prefix)) {
      store.setup();
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      execute("SELECT pg_stat_statements_reset()", store);
      store.publish(event("e1", "k1"));
      assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(1);
      store.publish(event("e2", "k2"));
      assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(1);
      assertThat(received).containsExactly("e1/h", "e2/h");

      String sequence = store.tableName("log_seq");
      List<String> claims =
          PostgresMigrationsTest.rows(
              "SELECT query FROM pg_stat_statements WHERE query LIKE '%' || ? || '%'",
              store.tableName("log"));
      assertThat(claims).as("the store's statements on the log").isNotEmpty();
      assertThat(String.join("\n", claims))
          // (pg_stat_statements shows the sequence's name, a literal, as a parameter)
          .contains("pg_sequence_last_value($")
          .doesNotContainPattern("(?i)FROM\\s+" + java.util.regex.Pattern.quote(sequence));
      List<String> boundary =
          PostgresMigrationsTest.rows(
              "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                  + " WHERE n.nspname = 'windows' AND p.proname = ?",
              prefix + "log_boundary_");
      assertThat(boundary).hasSize(1);
      assertThat(boundary.get(0))
          .contains("floor := coalesce(pg_sequence_last_value('" + sequence + "'::regclass), 0)")
          .doesNotContainPattern("(?i)last_value\\s+INTO\\s+floor");
    }
  }

  /**
   * A claim's latency under load is mostly its waits for the server (each waits for a core on a
   * busy machine): on a busy log a claim that hands out rows is two round trips, the boundary sent
   * with the page statement and the cursors' rows with the commit (it was four). An idle one
   * (nothing happened since the last read) is its boundary and its commit; the first idle claim
   * after a busy run sends its page with the boundary in vain, and rolls it back.
   */
  @Test
  void aBusyClaimIsTwoRoundTrips() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (RoundTrips proxy = new RoundTrips(EmbeddedPostgres17.jdbcUrl());
        PostgresOutboxStore publisher = store(prefix);
        PostgresOutboxStore store = store(prefix, proxy.jdbcUrl(), 1)) {
      publisher.setup();
      List<LaneLease> leases = allLanes(store);
      List<String> received = new ArrayList<>();
      List<String> published = new ArrayList<>();
      for (int round = 0; round < 2; round++) {
        List<Integer> busy = new ArrayList<>();
        List<Integer> idle = new ArrayList<>();
        // the first claims load the cursors and prepare the statements (pgjdbc's prepareThreshold)
        for (int i = 0; i < 12; i++) {
          for (String id : List.of(round + "e" + i, round + "f" + i)) {
            publisher.publish(event(id, "k" + (i % 3)));
            published.add(id);
          }
          int before = proxy.count();
          List<ClaimedDelivery> batch = store.claim("o", leases, 10);
          busy.add(proxy.count() - before);
          batch.forEach(d -> received.add(d.eventId()));
          store.complete(batch.stream().map(ClaimedDelivery::token).toList());
        }
        for (int i = 0; i < 4; i++) {
          int before = proxy.count();
          assertThat(store.claim("o", leases, 10)).isEmpty();
          idle.add(proxy.count() - before);
        }
        assertThat(busy.subList(6, busy.size()))
            .as("round trips of busy claims " + busy)
            .containsOnly(2);
        assertThat(idle).as("round trips of idle claims").containsExactly(2, 2, 2, 2);
      }
      assertThat(received).containsExactlyInAnyOrderElementsOf(published).hasSize(48);
    }
  }

  /**
   * A claim made while {deliveries} has no pending keyed delivery sends the page statement without
   * its parking steps; one made when a retry has come into being since reads nothing with it and
   * sends the whole statement, which parks the key's next row behind the retry: the unblocked
   * statement never hands out a row that a retry of its key is ahead of.
   */
  @Test
  void aPageThatCannotParkReadsNothingWhenARowCouldBeBlocked() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema("windows")
            .tablePrefix(prefix)
            // the retry stays pending (not due) for the whole test
            .retryPolicy(
                new io.relaybus.store.RetryPolicy(
                    10, Duration.ofMinutes(10), Duration.ofMinutes(10), 0))
            .build()) {
      store.setup();
      List<LaneLease> leases = allLanes(store);
      store.publish(event("a1", "ka"));
      store.publish(event("b1", "kb"));
      Map<String, ClaimedDelivery> first = new HashMap<>();
      store.claim("o", leases, 10).forEach(d -> first.put(d.eventId(), d));
      assertThat(first).containsOnlyKeys("a1", "b1");
      assertThat(pageCalls(prefix))
          .as("the first claim: the whole statement")
          .containsExactly(1L, 0L);

      // nothing in {deliveries}: the next claim sends the statement without parking
      store.complete(List.of(first.get("a1").token()));
      store.publish(event("a2", "ka"));
      List<ClaimedDelivery> second = store.claim("o", leases, 10);
      assertThat(second).extracting(ClaimedDelivery::eventId).containsExactly("a2");
      assertThat(pageCalls(prefix)).containsExactly(1L, 1L);

      // b1 fails: a pending keyed delivery of kb, due later. b2 must wait behind it.
      store.reschedule(first.get("b1").token(), "broker said no");
      store.complete(List.of(second.get(0).token()));
      store.publish(event("b2", "kb"));
      store.publish(event("a3", "ka"));
      List<ClaimedDelivery> third = store.claim("o", leases, 10);

      assertThat(third).extracting(ClaimedDelivery::eventId).containsExactly("a3");
      assertThat(pageCalls(prefix))
          .as("the statement without parking read nothing, the whole one parked b2")
          .containsExactly(2L, 2L);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT e.id FROM "
                      + store.tableName("deliveries")
                      + " d JOIN "
                      + store.tableName("events")
                      + " e ON e.id = d.event_id WHERE d.status = 'pending' ORDER BY d.sequence"))
          .containsExactly("b1", "b2");
      // while it may block, claims send the whole statement at once
      store.complete(List.of(third.get(0).token()));
      store.publish(event("a4", "ka"));
      assertThat(store.claim("o", leases, 10))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("a4");
      assertThat(pageCalls(prefix)).containsExactly(3L, 2L);
    }
  }

  /** Calls of the claim's whole page statement and of the one without parking, of this prefix. */
  private static List<Long> pageCalls(String prefix) throws Exception {
    String calls =
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '%%windows."
            + prefix
            + "log g%%' AND query LIKE '%%WITH req AS%%' AND query %s LIKE '%%skipped AS%%'";
    return List.of(
        Long.valueOf(PostgresMigrationsTest.rows(calls.formatted("")).get(0)),
        Long.valueOf(PostgresMigrationsTest.rows(calls.formatted("NOT")).get(0)));
  }

  /**
   * Symptom: for a minute after a deployment, a completion of one row read the whole {@code (lane,
   * id)} index of the log (653 buffers against 5): the store's statements are prepared, and
   * PostgreSQL keeps the generic plan it made after five runs, on a nearly empty log, until the
   * log's next ANALYZE (autovacuum's, a minute or more later). Here autovacuum is off for the log,
   * so the plans made while it held a few rows stay while a backlog of 20,000 builds up.
   */
  @Test
  void claimAndCompletionReadWhatTheyHandleWhenTheLogGrewSinceTheirPlansWereMade()
      throws Exception {
    Map<String, Long> planned = buffersOfAOneRowClaimAfterABacklogOf(20_000, false);
    Map<String, Long> analyzed = buffersOfAOneRowClaimAfterABacklogOf(20_000, true);

    assertThat(planned.get("complete")).isLessThan(analyzed.get("complete") + 20);
    assertThat(planned.get("page")).isLessThan(analyzed.get("page") + 100);
  }

  private static Map<String, Long> buffersOfAOneRowClaimAfterABacklogOf(
      int backlog, boolean analyze) throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      execute("ALTER TABLE " + store.tableName("log") + " SET (autovacuum_enabled = false)", store);
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      // a few rows at a time while the log is nearly empty: prepared, then planned generically
      for (int n = 0; n < 30; n++) {
        store.publish(event("e" + n, "k" + n));
        assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(1);
      }
      for (int n = 0; n < backlog; ) {
        List<OutboxEvent> batch = new ArrayList<>();
        for (int i = 0; i < 500; i++, n++) {
          batch.add(event("b" + n, "k" + n % 1_000));
        }
        store.publishAll(batch);
      }
      if (analyze) {
        execute("ANALYZE " + store.tableName("log"), store);
      }
      // the first claim after the backlog opens windows; the second finds nothing new committed
      assertThat(drainOnce(store, "o", leases, received, 1)).isEqualTo(1);
      execute("SELECT pg_stat_statements_reset()", store);
      assertThat(drainOnce(store, "o", leases, received, 1)).isEqualTo(1);

      assertThat(received).hasSize(32);
      return Map.of(
          "boundary",
          buffersRead("SELECT b.floor", store),
          "page",
          buffersRead("WITH req AS", store),
          "complete",
          completionBuffers(store));
    }
  }

  /**
   * Buffers read by the page statement and the completion of a claim that finds one row of a
   * transaction its lane's window saw running, after {@code completed} rows of that lane went out
   * and were completed with the xmin horizon held (so nothing they left behind may be vacuumed
   * away).
   */
  private static Map<String, Long> buffersForARowOfATransactionSeenRunning(int completed)
      throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore store = store(prefix);
        Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Connection running = store.dataSource().getConnection()) {
      store.setup();
      List<LaneLease> leases = allLanes(store);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      String key = "deep";
      completeWithTheHorizonHeld(store, holder, leases, received, key, completed);

      // a transaction in progress when the next windows open (a publish on another lane opens
      // them), committed after: its row is below the floor of its lane's next window
      running.setAutoCommit(false);
      store.publishAll(running, List.of(event("late", key)));
      store.publish(event("other", keyOfAnotherLane(key)));
      assertThat(drainOnce(store, "o", leases, received, 500)).isEqualTo(1);
      running.commit();
      execute("SELECT pg_stat_statements_reset()", store);
      assertThat(drainOnce(store, "o", leases, received, 500)).isEqualTo(1);

      assertThat(received).contains("late/h", "other/h").hasSize(completed + 2);
      holder.rollback();
      return Map.of(
          "page", buffersRead("WITH req AS", store), "complete", completionBuffers(store));
    }
  }

  /**
   * Holds the xmin horizon on {@code holder} (REPEATABLE READ, one read, left open), then publishes
   * and completes {@code completed} events of {@code key}, and analyzes the log as autovacuum would
   * (it runs, though it may remove nothing): the plans see the table and its indexes as they are.
   */
  private static void completeWithTheHorizonHeld(
      PostgresOutboxStore store,
      Connection holder,
      List<LaneLease> leases,
      ConcurrentLinkedQueue<String> received,
      String key,
      int completed)
      throws Exception {
    holder.setAutoCommit(false);
    holder.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
    holder.createStatement().executeQuery("SELECT 1").close();
    for (int n = 0; n < completed; ) {
      List<OutboxEvent> batch = new ArrayList<>();
      for (int i = 0; i < 250; i++, n++) {
        batch.add(event("d" + n, key));
      }
      store.publishAll(batch);
      while (drainOnce(store, "o", leases, received, 500) > 0) {}
    }
    assertThat(received).hasSize(completed);
    execute("VACUUM ANALYZE " + store.tableName("log"), store);
  }

  /**
   * An idle claim is one statement that reads nothing of the log's history, however long it stays
   * idle while other stores' lanes publish and complete with the xmin horizon held. Symptom: its
   * boundary looked for committed rows the windows had not seen from the snapshot of the last claim
   * that opened windows, and a quiet boundary opens none: every later idle claim looked from that
   * same snapshot again, through the (xid) index entries of every row the other lanes had published
   * and completed since, which the held horizon keeps (20,000 here: hundreds of buffers per idle
   * claim, and more with every row of the others).
   */
  @Test
  void anIdleClaimReadsNothingOfWhatOtherLanesCompletedSince() throws Exception {
    long shallow = buffersOfAnIdleClaimAfterOthersCompleted(0, false);
    long deep = buffersOfAnIdleClaimAfterOthersCompleted(20_000, false);

    assertThat(deep).as("buffers after 20,000, %d after none", shallow).isLessThan(shallow + 20);
  }

  /**
   * The same for the idle task's wait between its claims: it looks for rows its claims have not
   * seen from where its claims' boundary looks from. Symptom: it looked from the snapshot of the
   * last claim that opened windows, through every row the other lanes published and completed
   * since, at every wait (20,000 here).
   */
  @Test
  void anIdleTasksWaitReadsNothingOfWhatOtherLanesCompletedSince() throws Exception {
    long shallow = buffersOfAnIdleClaimAfterOthersCompleted(0, true);
    long deep = buffersOfAnIdleClaimAfterOthersCompleted(20_000, true);

    assertThat(deep).as("buffers after 20,000, %d after none", shallow).isLessThan(shallow + 20);
  }

  /**
   * Buffers read by the boundary statement of the second idle claim of a store holding half of the
   * lanes, after another store holding the other half published and completed {@code completed}
   * events with the xmin horizon held.
   */
  private static long buffersOfAnIdleClaimAfterOthersCompleted(int completed, boolean waits)
      throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore idle = store(prefix);
        PostgresOutboxStore busy = store(prefix);
        Connection holder = EmbeddedPostgres17.dataSource().getConnection()) {
      idle.setup();
      List<Integer> lanes = LaneRange.all().lanes();
      List<LaneLease> idleLeases =
          idle.acquireLanes("i", "g", lanes.subList(0, 128), Duration.ofMinutes(5));
      List<LaneLease> busyLeases =
          busy.acquireLanes("b", "g", lanes.subList(128, 256), Duration.ofMinutes(5));
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      idle.publish(event("mine", keyInLane(0)));
      assertThat(drainOnce(idle, "i", idleLeases, received, 10)).isEqualTo(1);
      assertThat(drainOnce(idle, "i", idleLeases, received, 10)).isZero();

      holder.setAutoCommit(false);
      holder.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
      holder.createStatement().executeQuery("SELECT 1").close();
      String key = keyInLane(200);
      for (int n = 0; n < completed; ) {
        List<OutboxEvent> batch = new ArrayList<>();
        for (int i = 0; i < 500; i++, n++) {
          batch.add(event("d" + n, key));
        }
        busy.publishAll(batch);
        while (drainOnce(busy, "b", busyLeases, received, 500) > 0) {}
      }
      execute("VACUUM ANALYZE " + idle.tableName("log"), idle);

      // the first idle claim after them may step over what the others left; the next ones not
      assertThat(drainOnce(idle, "i", idleLeases, received, 10)).isZero();
      execute("SELECT pg_stat_statements_reset()", idle);
      assertThat(drainOnce(idle, "i", idleLeases, received, 10)).isZero();
      if (waits) {
        // the first wait opens the listener and returns at once; one that times out after it
        for (int i = 0; i < 5 && idle.awaitWork(Duration.ofMillis(50)); i++) {}
        execute("SELECT pg_stat_statements_reset()", idle);
        assertThat(idle.awaitWork(Duration.ofMillis(50))).as("nothing new: timed out").isFalse();
      }

      assertThat(received).hasSize(completed + 1);
      holder.rollback();
      return waits ? buffersRead("WITH f AS", idle) : buffersRead("SELECT b.floor", idle);
    }
  }

  /**
   * A claim's page statement goes with their windows' bounds only to the lanes its page can reach.
   * Symptom: in a drain every lane's window is still being read, so every lane held was sent with
   * its bounds and probed (its lane row for the epoch, its window's ranges), about 8 µs each, while
   * the page took its rows from a lane or two: a quarter of a drain's claim with 128 lanes.
   */
  @Test
  void aDrainsClaimReadsOnlyTheLanesItsPageCanReach() throws Exception {
    long few = buffersOfADrainsClaim(8);
    long all = buffersOfADrainsClaim(LaneRange.all().lanes().size());

    // before, with 256 lanes held the claim read 275 buffers against 34 with 8
    assertThat(all).as("buffers with every lane held, %d with 8", few).isLessThan(few + 100);
  }

  /**
   * Buffers read by the page statement of a claim of 10 while each of {@code held} lanes has 30
   * rows in a window being read (the claims before opened the windows and took from some).
   */
  private static long buffersOfADrainsClaim(int held) throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      List<LaneLease> leases =
          store.acquireLanes(
              "o", "g", LaneRange.all().lanes().subList(0, held), Duration.ofMinutes(1));
      List<OutboxEvent> events = new ArrayList<>();
      for (LaneLease lease : leases) {
        String key = keyInLane(lease.lane());
        for (int i = 0; i < 30; i++) {
          events.add(event(key + "-" + i, key));
        }
      }
      store.publishAll(events);
      ConcurrentLinkedQueue<String> received = new ConcurrentLinkedQueue<>();
      for (int i = 0; i < 6; i++) {
        assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(10);
      }
      execute("SELECT pg_stat_statements_reset()", store);
      assertThat(drainOnce(store, "o", leases, received, 10)).isEqualTo(10);
      return buffersRead("WITH req AS", store);
    }
  }

  /**
   * A claim whose first page statement went to the few lanes the last claims needed, and found them
   * nearly dry, reads on into its other lanes in the same claim: it hands out as much as it may
   * while there is any, in each key's order, and everything exactly once.
   */
  @Test
  void aClaimWhoseFirstLanesRunDryReadsOnIntoTheRest() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      List<LaneLease> leases = allLanes(store);
      // lane 0 deep (its claims fill from it alone), then a row in each of 40 lanes further on
      List<OutboxEvent> events = new ArrayList<>();
      Map<String, List<String>> published = new HashMap<>();
      for (int lane = 0; lane <= 200; lane += lane == 0 ? 40 : 4) {
        String key = keyInLane(lane);
        for (int i = 0; i < (lane == 0 ? 39 : 1); i++) {
          events.add(event(key + "-" + i, key));
          published.computeIfAbsent(key, k -> new ArrayList<>()).add(key + "-" + i);
        }
      }
      store.publishAll(events);

      List<Integer> sizes = new ArrayList<>();
      Map<String, List<String>> received = new HashMap<>();
      for (int claims = 0; claims < 20; claims++) {
        List<ClaimedDelivery> batch = store.claim("o", leases, 10);
        sizes.add(batch.size());
        batch.forEach(
            d -> received.computeIfAbsent(d.key(), k -> new ArrayList<>()).add(d.eventId()));
        if (!batch.isEmpty()) {
          store.complete(batch.stream().map(ClaimedDelivery::token).toList());
        }
      }

      // 39 + 41 rows: every claim full while there were 10 left, never one that stopped short
      assertThat(sizes.subList(0, 8)).as("claims " + sizes).containsOnly(10);
      assertThat(sizes.subList(8, sizes.size())).as("claims " + sizes).containsOnly(0);
      assertThat(received).isEqualTo(published);
    }
  }

  /**
   * A claim under a quiet boundary (nothing new in the log since the last read) opens no window,
   * also when its first page statement went to some of its lanes and the rest followed. Symptom
   * (the fault suite, connections terminated): the further statement opened windows for the lanes
   * the first had read to their end, with no xid bound; a later cursor row of such a lane failed
   * its NOT NULL check ({@code hi_x}), and the task failed for good. The claim now refuses to open
   * a window without its bound, so this fails at the first such claim (about 2,000 here before).
   */
  @Test
  void aQuietClaimThatReadsOnIntoTheRestOpensNoWindow() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    // a cursor row at every claim that took rows: each window's bounds are written as they are
    try (PostgresOutboxStore store =
        builder(prefix, EmbeddedPostgres17.jdbcUrl(), 10).cursorInterval(Duration.ZERO).build()) {
      store.setup();
      store.firstPageLanes(1);
      List<LaneLease> leases = allLanes(store);
      java.util.Random random = new java.util.Random(42);
      Map<String, List<String>> published = new HashMap<>();
      Map<String, List<String>> received = new HashMap<>();
      List<DeliveryToken> outstanding = new ArrayList<>();
      int ids = 0;
      // publishes now and then between small claims, completions now and then: the lanes' windows
      // open at different claims, and many claims find nothing new in the log (quiet)
      for (int step = 0; step < 400; step++) {
        if (random.nextInt(4) == 0) {
          String key = keyInLane(2 * random.nextInt(20));
          String id = key + "-" + ids++;
          store.publish(event(id, key));
          published.computeIfAbsent(key, k -> new ArrayList<>()).add(id);
        }
        for (ClaimedDelivery d : store.claim("o", leases, 1 + random.nextInt(3))) {
          received.computeIfAbsent(d.key(), k -> new ArrayList<>()).add(d.eventId());
          outstanding.add(d.token());
        }
        if (random.nextInt(8) == 0) {
          assertThat(store.complete(outstanding)).hasSize(outstanding.size());
          outstanding.clear();
        }
      }
      store.complete(outstanding);
      for (int claims = 0; claims < 20; claims++) {
        for (ClaimedDelivery d : store.claim("o", leases, 10)) {
          received.computeIfAbsent(d.key(), k -> new ArrayList<>()).add(d.eventId());
          store.complete(List.of(d.token()));
        }
      }

      assertThat(received).isEqualTo(published);
    }
  }

  /** A store on tables of its own, set up. */
  private static PostgresOutboxStore setUpStore() {
    PostgresOutboxStore store = store("w" + PREFIXES.incrementAndGet() + "_");
    store.setup();
    return store;
  }

  /** Every lane, for owner "o" of group "g", for a minute. */
  private static List<LaneLease> allLanes(PostgresOutboxStore store) {
    return store.acquireLanes("o", "g", LaneRange.all().lanes(), Duration.ofMinutes(1));
  }

  private static String keyInLane(int lane) {
    for (int i = 0; ; i++) {
      if (io.relaybus.store.Lanes.laneOf("k" + i, null) == lane) {
        return "k" + i;
      }
    }
  }

  /** Buffers read since the last reset by the store's statement that starts with {@code start}. */
  private static long buffersRead(String start, PostgresOutboxStore store) throws Exception {
    List<String> hits =
        PostgresMigrationsTest.rows(
            "SELECT shared_blks_hit + shared_blks_read FROM pg_stat_statements"
                + " WHERE query LIKE ? || '%' AND query LIKE '%' || ? || '%'",
            start, store.tableName("log"));
    assertThat(hits).as(start).hasSize(1);
    return Long.parseLong(hits.get(0));
  }

  /**
   * Buffers read by the completion: its delete where the claim read the rows, and the whole
   * statement when any row went that way; at least one of them ran.
   */
  private static long completionBuffers(PostgresOutboxStore store) throws Exception {
    List<String> hits =
        PostgresMigrationsTest.rows(
            "SELECT shared_blks_hit + shared_blks_read FROM pg_stat_statements"
                + " WHERE (query LIKE 'WITH t AS%' OR query LIKE 'WITH fenced AS%')"
                + " AND query LIKE '%' || ? || '%'",
            store.tableName("log"));
    assertThat(hits).as("completion statements").isNotEmpty();
    return hits.stream().mapToLong(Long::parseLong).sum();
  }

  private static String keyOfAnotherLane(String key) {
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    for (int i = 0; ; i++) {
      if (io.relaybus.store.Lanes.laneOf(key + i, null) != lane) {
        return key + i;
      }
    }
  }

  /**
   * Each way of publishing records in the log row where its event row was written (version 10), as
   * the event row's ctid: one event, a batch, and the SQL function. A republish's row for added
   * handlers has none (the event row it would point at is the version the republish replaces).
   */
  @Test
  void aLogRowSaysWhereItsEventRowWasWritten() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore store = store(prefix)) {
      store.setup();
      store.publish(event("one", "k1"));
      store.publishAll(List.of(event("batch-1", "k2"), event("batch-2", "k3")));
      execute(
          "SELECT * FROM windows."
              + prefix
              + "publish('sql', 't', 'k4', '{}'::bytea, 'application/json', '{}'::json,"
              + " ARRAY['h'])",
          store);
      String where =
          "SELECT g.event_id || ' ' || coalesce((g.event_tid = e.ctid)::text, 'none') FROM "
              + store.tableName("log")
              + " g JOIN "
              + store.tableName("events")
              + " e ON e.id = g.event_id ORDER BY g.id";
      assertThat(PostgresMigrationsTest.rows(where))
          .containsExactly("one true", "batch-1 true", "batch-2 true", "sql true");

      // the republish updates the event row (its handlers): the first row now points at the
      // version it replaced, and the claim takes that event by its id
      store.publish(
          OutboxEvent.builder("t").id("one").key("k1").json("{}").handlers("h", "h2").build());
      assertThat(PostgresMigrationsTest.rows(where))
          .containsExactly("one false", "batch-1 true", "batch-2 true", "sql true", "one none");
    }
  }

  /**
   * The claim takes each event from the tuple its log row points at only when that tuple is the
   * event's: here one row points at another event's tuple (as after a VACUUM FULL, which moves
   * tuples, or a slot reused after a purge), one at a version an update replaced, and one has none
   * (a version-1 publisher, a republish). Each delivery carries its own event.
   */
  @Test
  void aClaimTakesTheEventByItsIdWhereTheLogRowPointsElsewhere() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      for (String id : List.of("a", "b", "c", "d")) {
        store.publish(
            OutboxEvent.builder("type-" + id)
                .id(id)
                .key("key-" + id)
                .json("{\"event\":\"" + id + "\"}")
                .handlers("h")
                .build());
      }
      String log = store.tableName("log");
      String events = store.tableName("events");
      // b's row is updated (its tuple moves); a points at b's tuple; c has none; d as published
      execute("UPDATE " + events + " SET headers = '{\"moved\":\"yes\"}' WHERE id = 'b'", store);
      execute(
          "UPDATE "
              + log
              + " SET event_tid = (SELECT ctid FROM "
              + events
              + " WHERE id = 'b') WHERE event_id = 'a'",
          store);
      execute("UPDATE " + log + " SET event_tid = NULL WHERE event_id = 'c'", store);

      List<LaneLease> leases = allLanes(store);
      List<ClaimedDelivery> batch = store.claim("o", leases, 10);

      assertThat(batch)
          .extracting(
              d ->
                  d.eventId()
                      + " "
                      + d.type()
                      + " "
                      + new String(d.payload(), java.nio.charset.StandardCharsets.UTF_8)
                      + " "
                      + d.headers())
          .containsExactlyInAnyOrder(
              "a type-a {\"event\":\"a\"} {}",
              "b type-b {\"event\":\"b\"} {moved=yes}",
              "c type-c {\"event\":\"c\"} {}",
              "d type-d {\"event\":\"d\"} {}");
    }
  }

  /**
   * The completion fetches each row from where its claim read it, only while that tuple is still
   * the row: here the table is rewritten between claim and completion (a VACUUM FULL after one row
   * was updated), so the place the claim read e1 at now holds e2, e2's holds e3 and e3's holds e1.
   * Completing e1 deletes e1 and nothing else; then e2 and e3 go. One key, so one lane: the lane's
   * epoch, checked too, tells none of them apart.
   */
  @Test
  void aCompletionFinishesTheRowItsClaimReadWhereTheTableWasRewritten() throws Exception {
    try (PostgresOutboxStore store = setUpStore()) {
      store.publish(event("e1", "k"));
      store.publish(event("e2", "k"));
      store.publish(event("e3", "k"));
      String log = store.tableName("log");
      List<LaneLease> leases = allLanes(store);
      Map<String, DeliveryToken> tokens = new HashMap<>();
      store.claim("o", leases, 10).forEach(d -> tokens.put(d.eventId(), d.token()));
      assertThat(tokens).containsOnlyKeys("e1", "e2", "e3");
      List<String> placesClaimed =
          PostgresMigrationsTest.rows("SELECT ctid::text FROM " + log + " ORDER BY id");

      execute("UPDATE " + log + " SET key = key WHERE event_id = 'e1'", store);
      execute("VACUUM FULL " + log, store);
      assertThat(PostgresMigrationsTest.rows("SELECT event_id FROM " + log + " ORDER BY ctid"))
          .as("the places the claim read e1, e2, e3 at now hold e2, e3, e1")
          .containsExactly("e2", "e3", "e1");
      assertThat(PostgresMigrationsTest.rows("SELECT ctid::text FROM " + log + " ORDER BY ctid"))
          .isEqualTo(placesClaimed);

      assertThat(store.complete(List.of(tokens.get("e1")))).hasSize(1);
      assertThat(PostgresMigrationsTest.rows("SELECT event_id FROM " + log + " ORDER BY id"))
          .containsExactly("e2", "e3");
      assertThat(store.complete(List.of(tokens.get("e2"), tokens.get("e3")))).hasSize(2);
      assertThat(PostgresMigrationsTest.rows("SELECT event_id FROM " + log)).isEmpty();
    }
  }

  /**
   * A claim appended a cursor row for every lane it took from, so in steady state, a delivery or
   * two per claim, those rows were a quarter of the WAL. A busy lane now appends one at its first
   * claim under its lease, then once per cursor interval or per {@link PostgresLog#CURSOR_ROWS}
   * deliveries, whichever comes first.
   */
  @Test
  void aBusyLaneAppendsItsCursorRowAtItsFirstClaimThenOncePerIntervalOrRows() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "busy";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    String rows = "SELECT count(*) FROM windows." + prefix + "lane_cursors WHERE lane = " + lane;
    try (PostgresOutboxStore store = firstClaimCursorsOnly(prefix)) {
      List<LaneLease> leases = store.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      for (int i = 0; i < 5; i++) {
        store.publish(event("e" + i, key));
        List<ClaimedDelivery> batch = store.claim("o", leases, 10);
        assertThat(batch).extracting(ClaimedDelivery::eventId).containsExactly("e" + i);
        store.complete(batch.stream().map(ClaimedDelivery::token).toList());
      }
      assertThat(PostgresMigrationsTest.rows(rows)).containsExactly("1");

      // 4 handed out since the row: the claim that brings it to CURSOR_ROWS appends
      List<OutboxEvent> many = new ArrayList<>();
      for (int i = 0; i < PostgresLog.CURSOR_ROWS - 4; i++) {
        many.add(event("m" + i, key));
      }
      store.publishAll(many);
      List<ClaimedDelivery> batch = store.claim("o", leases, PostgresLog.CURSOR_ROWS);
      assertThat(batch).hasSize(PostgresLog.CURSOR_ROWS - 4);
      store.complete(batch.stream().map(ClaimedDelivery::token).toList());
      assertThat(PostgresMigrationsTest.rows(rows)).containsExactly("2");
    }
    // another store of the same owner under the same lease: its first claim appends, as does one
    // after the interval, and none in between
    try (PostgresOutboxStore store =
        builder(prefix, EmbeddedPostgres17.jdbcUrl(), 4)
            .cursorInterval(Duration.ofMillis(300))
            .build()) {
      List<LaneLease> leases = store.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(publishAndClaim(store, leases, "f0", key)).containsExactly("f0");
      assertThat(publishAndClaim(store, leases, "f1", key)).containsExactly("f1");
      assertThat(PostgresMigrationsTest.rows(rows)).containsExactly("3");
      Thread.sleep(350);
      assertThat(publishAndClaim(store, leases, "f2", key)).containsExactly("f2");
      assertThat(PostgresMigrationsTest.rows(rows)).containsExactly("4");
    }
  }

  /**
   * What a holder handed out after its lane's last cursor row is not charged at a takeover (the row
   * does not name it) but stays in the log: the new holder sends it again after the charged
   * delivery, in the key's order, each once.
   */
  @Test
  void aTakeoverChargesWhatTheLastCursorRowNamesAndTheRestGoesOutAgainInOrder() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "taken";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore store = firstClaimCursorsOnly(prefix)) {
      List<LaneLease> leases = store.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      handOutPastTheCursorRow(store, leases, key);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT count(*) FROM windows." + prefix + "lane_cursors WHERE lane = " + lane))
          .containsExactly("1");

      List<LaneLease> taken = store.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).hasSize(1);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || ':' || attempts || ':' || status FROM "
                      + store.tableName("deliveries")))
          .containsExactly("e1:1:pending");
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id FROM " + store.tableName("log") + " ORDER BY id"))
          .containsExactly("e2", "e3");

      assertThat(claimAndComplete(store, "p", taken)).containsExactly("e1:1", "e2:0", "e3:0");
    }
  }

  /**
   * A completion is fenced by the lane's epoch however it finds its rows. Here the rows are where
   * the old holder's claim read them, the way a completion deletes them without its whole
   * statement; the lane was taken over by another store meanwhile, and what the old holder handed
   * out after its last cursor row (not charged) must stay for the new holder to send.
   */
  @Test
  void aCompletionAfterAnotherStoreTookTheLaneOverFinishesNothing() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "fenced";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix)) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = handOutPastTheCursorRow(old, leases, key);

      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).hasSize(1);
      assertThat(old.complete(late.stream().map(ClaimedDelivery::token).toList())).isEmpty();
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id FROM " + old.tableName("log") + " ORDER BY id"))
          .containsExactly("e2", "e3");

      assertThat(claimAndComplete(next, "p", taken)).containsExactly("e1:1", "e2:0", "e3:0");
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * Symptom (the randomized test, twice: a log delivery completed twice with no fencing finding): a
   * completion commits while a takeover of its lane is inside its charge statement, whose snapshot
   * still saw the row. Neither locks the other out (the completion reads the lane's epoch without a
   * lock, the takeover has not moved it yet), so the completion deletes the row and says it did,
   * and the charge, whose delete then finds the row gone, had written it to {deliveries} from its
   * snapshot all the same: the new holder sends it again, charged, and completes it a second time.
   * The charge now writes only the rows its delete removed, as they were when it removed them.
   */
  @Test
  void aTakeoverChargesNothingThatACompletionCommittedMeanwhileFinished() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "raced";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = store(prefix);
        PostgresOutboxStore next = store(prefix);
        // not a connection of the store: its sessions end a transaction left idle for 30 s
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      old.setup();
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      old.publish(OutboxEvent.builder("t").id("e1").key(key).json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> out = old.claim("o", leases, 10); // its cursor row names e1 as out
      assertThat(out).extracting(ClaimedDelivery::handler).containsExactly("a", "b");

      holdLogRow(locker, old, "e1");
      // the completion first: it queues for the row, its snapshot at the old epoch
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(
              () -> old.complete(out.stream().map(ClaimedDelivery::token).toList()));
      awaitLockWaits(1);
      // then the takeover, whose charge statement sees the row and queues behind the completion
      CompletableFuture<List<LaneLease>> takeover =
          CompletableFuture.supplyAsync(
              () -> next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1)));
      awaitLockWaits(2);
      locker.rollback();

      assertThat(within30s(completion))
          .containsExactlyInAnyOrderElementsOf(
              out.stream().map(ClaimedDelivery::deliveryId).toList());
      List<LaneLease> taken = within30s(takeover);
      assertThat(taken).extracting(LaneLease::takenOver).containsExactly(true);
      assertThat(taken)
          .extracting(LaneLease::charged)
          .as("nothing was in flight")
          .containsExactly(0);
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("deliveries")))
          .containsExactly("0");
      assertThat(next.claim("p", taken, 10)).as("done once, never sent again").isEmpty();
    }
  }

  /**
   * The other order of the race above: the takeover's charge takes the row first, and a completion
   * whose statement began before the takeover committed (so it saw the old epoch) finds the row
   * gone when it gets to it. It said the token was done all the same (it counted every token of a
   * lane at its epoch), and the charged delivery went out again and was completed a second time. A
   * completion now counts only the tokens whose rows it deleted or struck.
   */
  @Test
  void aCompletionThatFindsItsRowChargedByATakeoverMeanwhileFinishesNothing() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "charged";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = store(prefix);
        PostgresOutboxStore next = store(prefix);
        // not a connection of the store: its sessions end a transaction left idle for 30 s
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      old.setup();
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      old.publish(OutboxEvent.builder("t").id("e1").key(key).json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> out = old.claim("o", leases, 10);
      assertThat(out).extracting(ClaimedDelivery::handler).containsExactly("a", "b");

      holdLogRow(locker, old, "e1");
      // the takeover first: its charge statement queues for the row
      CompletableFuture<List<LaneLease>> takeover =
          CompletableFuture.supplyAsync(
              () -> next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1)));
      awaitLockWaits(1);
      // then the completion of handler a alone (b still out: the whole statement, which strikes),
      // its snapshot at the old epoch, queued behind the takeover
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(() -> old.complete(List.of(out.get(0).token())));
      awaitLockWaits(2);
      locker.rollback();

      List<LaneLease> taken = within30s(takeover);
      assertThat(taken).extracting(LaneLease::charged).containsExactly(2);
      assertThat(within30s(completion)).as("the takeover had it: not done here").isEmpty();
      List<ClaimedDelivery> again = next.claim("p", taken, 10);
      assertThat(again)
          .extracting(d -> d.handler() + ":" + d.attempts() + ":" + d.deliveryId())
          .containsExactly("a:1:" + out.get(0).deliveryId(), "b:1:" + out.get(1).deliveryId());
    }
  }

  /**
   * The race of {@link #aTakeoverChargesNothingThatACompletionCommittedMeanwhileFinished} in the
   * claim's parking: what the old holder handed out after its last cursor row stays in the log for
   * the new holder, and the takeover's charge of e1 makes a pending delivery of the key that blocks
   * e2 and e3 there, so the new holder's claim parks them. The old holder's completion of e2, its
   * snapshot at the old epoch, commits while that claim statement runs (neither locks the other
   * out: the claim locks the lane, the completion reads its epoch without a lock): the parking had
   * written e2 to {deliveries} from its snapshot, its delete then found the row gone, and e2 went
   * out again and was completed a second time.
   */
  @Test
  void aClaimParksNothingThatACompletionCommittedMeanwhileFinished() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "parked";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        // not a connection of the store: its sessions end a transaction left idle for 30 s
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = handOutPastTheCursorRow(old, leases, key); // e2, e3
      ClaimedDelivery e2 = late.get(0);

      holdLogRow(locker, old, "e2");
      // the old holder's completion of e2 first: it queues for the row, its snapshot at the old
      // epoch
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(() -> old.complete(List.of(e2.token())));
      awaitLockWaits(1);
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).as("e1").containsExactly(1);
      // then the new holder's claim, which parks e2 and e3 behind e1 and queues for e2's row
      CompletableFuture<List<ClaimedDelivery>> claim =
          CompletableFuture.supplyAsync(() -> next.claim("p", taken, 10));
      awaitLockWaits(2);
      locker.rollback();

      assertThat(within30s(completion)).containsExactly(e2.deliveryId());
      // parked behind e1 and handed out with it from {deliveries}, in the key's order
      List<ClaimedDelivery> first = within30s(claim);
      assertThat(first)
          .extracting(d -> d.eventId() + ":" + d.attempts())
          .as("e2 was done: only e3 goes out again")
          .containsExactly("e1:1", "e3:0");
      assertThat(next.complete(first.stream().map(ClaimedDelivery::token).toList())).hasSize(2);
      assertThat(claimAndComplete(next, "p", taken)).isEmpty();
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * The same race where the claim hands out some handlers of a row and parks the others (struck
   * from the row, which stays): e1 has handler b only, so its charge blocks e2's b and not its a.
   * The old holder's completion of e2's b (a still out there) struck b after the claim's snapshot;
   * the claim's strike found the row changed, struck b again on its newest version and counted the
   * row finished, and the b it had parked from its snapshot went out a second time.
   */
  @Test
  void aClaimParksNoHandlerThatACompletionCommittedMeanwhileStruck() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "struck";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      old.publish(OutboxEvent.builder("t").id("e1").key(key).json("{}").handlers("b").build());
      assertThat(old.claim("o", leases, 10)) // its cursor row names e1 as out
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e1");
      old.publish(OutboxEvent.builder("t").id("e2").key(key).json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> late = old.claim("o", leases, 10); // after the cursor row
      assertThat(late).extracting(ClaimedDelivery::handler).containsExactly("a", "b");

      holdLogRow(locker, old, "e2");
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(() -> old.complete(List.of(late.get(1).token())));
      awaitLockWaits(1);
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).as("e1").containsExactly(1);
      CompletableFuture<List<ClaimedDelivery>> claim =
          CompletableFuture.supplyAsync(() -> next.claim("p", taken, 10));
      awaitLockWaits(2);
      locker.rollback();

      assertThat(within30s(completion)).containsExactly(late.get(1).deliveryId());
      List<ClaimedDelivery> first = within30s(claim);
      assertThat(first)
          .extracting(d -> d.eventId() + "/" + d.handler() + ":" + d.attempts())
          .as("e2's b was done; its a, out at the old holder past its cursor row, goes again")
          .containsExactlyInAnyOrder("e1/b:1", "e2/a:0");
      next.complete(first.stream().map(ClaimedDelivery::token).toList());
      List<String> again = new ArrayList<>();
      for (int claims = 0; claims < 5; claims++) {
        List<ClaimedDelivery> batch = next.claim("p", taken, 10);
        batch.forEach(d -> again.add(d.eventId() + "/" + d.handler()));
        next.complete(batch.stream().map(ClaimedDelivery::token).toList());
      }
      assertThat(again).as("e2's b was done").isEmpty();
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * Symptom: a delivery the new holder completed was rescheduled by the old holder and went out
   * again. What the old holder handed out past its last cursor row stays in the log at a takeover
   * and the new holder reads it again. The old holder's reschedule of one handler of such a row
   * (another handler still out there) read the lane's epoch in its snapshot, taken before the
   * takeover committed, and struck its handler on the row's newest version: the new holder had
   * struck it meanwhile with its completion, which said done. The reschedule struck it again and
   * wrote the delivery to {deliveries} from its snapshot all the same, where it was handed out a
   * second time and completed again (row 91's race, in a reschedule, burial or release). A move now
   * writes the delivery only if the version it struck or deleted still had the handler.
   */
  @Test
  void aRescheduleMovesNoHandlerThatACompletionCommittedMeanwhileStruck() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "moved";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection pauser = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = twoHandlersOutPastTheCursorRow(old, leases, key);

      // the old holder's reschedule of e2's a (b still out: a strike), its snapshot at the old
      // epoch, held before it writes the log
      pauseTheNextLogWrite(pauser, old);
      CompletableFuture<FailOutcome> reschedule =
          CompletableFuture.supplyAsync(() -> old.reschedule(late.get(0).token(), "refused"));
      awaitPaused();
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).as("e1 was done").containsExactly(0);
      List<ClaimedDelivery> again = next.claim("p", taken, 10);
      assertThat(again)
          .extracting(d -> d.handler() + ":" + d.deliveryId())
          .as("read again: past the old holder's cursor row")
          .containsExactly("a:" + late.get(0).deliveryId(), "b:" + late.get(1).deliveryId());
      assertThat(next.complete(List.of(again.get(0).token())))
          .containsExactly(again.get(0).deliveryId());
      resume(pauser);

      FailOutcome outcome = within30s(reschedule);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || '/' || handler || ':' || status FROM "
                      + old.tableName("deliveries")))
          .as("e2's a was done: nothing to send again")
          .isEmpty();
      assertThat(outcome).as("the new holder had done it").isEqualTo(FailOutcome.LOST);
      assertThat(next.complete(List.of(again.get(1).token())))
          .containsExactly(again.get(1).deliveryId());
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * The other order of {@link #aRescheduleMovesNoHandlerThatACompletionCommittedMeanwhileStruck}:
   * the new holder's claim parks the handler (its key blocked by the takeover's charge of e1) while
   * the old holder's burial of it waits after its snapshot. The burial struck it again, its insert
   * found the parked row under the same id and wrote nothing, yet it answered that it had buried a
   * delivery that was pending, never attempted there. It now answers with what it wrote.
   */
  @Test
  void aBurialOfAHandlerTheNewHoldersClaimParkedMeanwhileBuriesNothing() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "buried";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection pauser = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      old.publish(OutboxEvent.builder("t").id("e1").key(key).json("{}").handlers("b").build());
      assertThat(old.claim("o", leases, 10)) // its cursor row names e1 as out
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e1");
      old.publish(OutboxEvent.builder("t").id("e2").key(key).json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> late = old.claim("o", leases, 10); // after the cursor row
      assertThat(late).extracting(ClaimedDelivery::handler).containsExactly("a", "b");

      pauseTheNextLogWrite(pauser, old);
      CompletableFuture<Boolean> burial =
          CompletableFuture.supplyAsync(() -> old.bury(late.get(1).token(), "poison"));
      awaitPaused();
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).as("e1").containsExactly(1);
      assertThat(next.claim("p", taken, 10))
          .extracting(d -> d.eventId() + "/" + d.handler() + ":" + d.attempts())
          .as("e2's b parked behind e1's, then handed out after it")
          .containsExactlyInAnyOrder("e1/b:1", "e2/a:0", "e2/b:0");
      resume(pauser);

      assertThat(within30s(burial)).as("the new holder's claim had parked it").isFalse();
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || '/' || handler || ':' || status || ':' || attempts FROM "
                      + old.tableName("deliveries")
                      + " ORDER BY id"))
          .containsExactly("e1/b:pending:1", "e2/b:pending:0");
    }
  }

  /**
   * Symptom: one delivery completed by both holders of its lane. What the old holder handed out
   * past its last cursor row stays in the log at a takeover and the new holder hands it out again
   * (a duplicate in Kafka, by design). The old holder's completion of one handler of such a row
   * (another still out there: a strike), its snapshot at the old epoch, struck it after the new
   * holder's claim had read the row; the new holder's completion of the same handler then struck it
   * again, a version that no longer had it, and counted it done as well: completed twice, where a
   * row deleted meanwhile makes the second completion finish nothing. A completion now counts a
   * token only if the version it deleted, or struck (locked as found), still had its handler.
   */
  @Test
  void aCompletionCountsNoHandlerAnotherCompletionStruckMeanwhile() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "twice";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = twoHandlersOutPastTheCursorRow(old, leases, key);

      holdLogRow(locker, old, "e2");
      // the old holder's completion of e2's a (b still out: a strike), queued for the row, its
      // snapshot at the old epoch
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(() -> old.complete(List.of(late.get(0).token())));
      awaitLockWaits(1);
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).as("e1 was done").containsExactly(0);
      List<ClaimedDelivery> again = next.claim("p", taken, 10);
      assertThat(again)
          .extracting(d -> d.handler() + ":" + d.deliveryId())
          .as("read again: past the old holder's cursor row")
          .containsExactly("a:" + late.get(0).deliveryId(), "b:" + late.get(1).deliveryId());
      locker.rollback();
      assertThat(within30s(completion)).containsExactly(late.get(0).deliveryId());

      assertThat(next.complete(List.of(again.get(0).token())))
          .as("the old holder completed e2's a")
          .isEmpty();
      assertThat(next.complete(List.of(again.get(1).token())))
          .containsExactly(again.get(1).deliveryId());
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * Symptom: a log row with every handler struck stayed in the log, and with a claim limit of 1 it
   * stalled its lane for good. The old holder's completion of one handler of a row (another still
   * out there: a strike), its snapshot at the old epoch, struck it after the new holder had struck
   * the other one with its own completion (its first handler still out there): two strikes of
   * different handlers, each on a version that still had its handler, left no handler. Nobody then
   * has the row out once the new holder loses the lane before it finishes its first handler (it
   * handed the row out past its own cursor row, so the next takeover does not charge it): the next
   * holder reads the row and sends nothing of it, the page counts it, so a claim of limit 1 read it
   * again and again and never reached the key's next event; with a larger limit the row stayed
   * below the lane's window (its event kept from purge) until the sweep took it for a defect. The
   * strike that would leave no handler now deletes the row.
   */
  @Test
  void theStrikeOfARowsLastHandlerLeftTakesTheRowOutOfTheLog() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "emptied";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore third = firstClaimCursorsOnly(prefix);
        Connection pauser = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      old.publish(event("e1", key));
      List<ClaimedDelivery> first = old.claim("o", leases, 10); // its cursor row names e1 as out
      assertThat(old.complete(first.stream().map(ClaimedDelivery::token).toList())).hasSize(1);
      old.publish(event("e2", key));
      old.publish(OutboxEvent.builder("t").id("e3").key(key).json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> late = old.claim("o", leases, 10); // after the cursor row
      assertThat(late)
          .extracting(d -> d.eventId() + "/" + d.handler())
          .containsExactly("e2/h", "e3/a", "e3/b");

      // the old holder's completion of e3's a (b still out: a strike), its snapshot at the old
      // epoch, held before it writes the log
      pauseTheNextLogWrite(pauser, old);
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(() -> old.complete(List.of(late.get(1).token())));
      awaitPaused();
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).as("e1 was done").containsExactly(0);
      // the new holder's first claim (its cursor row) takes e2 only, its second e3
      List<ClaimedDelivery> e2 = next.claim("p", taken, 1);
      assertThat(e2).extracting(ClaimedDelivery::eventId).containsExactly("e2");
      assertThat(next.complete(List.of(e2.get(0).token()))).hasSize(1);
      List<ClaimedDelivery> again = next.claim("p", taken, 10);
      assertThat(again)
          .extracting(d -> d.eventId() + "/" + d.handler())
          .containsExactly("e3/a", "e3/b");
      // the new holder's completion of e3's b (a still out there: a strike)
      assertThat(next.complete(List.of(again.get(1).token())))
          .containsExactly(again.get(1).deliveryId());
      resume(pauser);
      assertThat(within30s(completion)).containsExactly(late.get(1).deliveryId());

      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || ':' || array_to_string(handlers, ',', '-') FROM "
                      + old.tableName("log")))
          .as("e3's a and b are done: nothing of it is left to send")
          .isEmpty();

      // the new holder loses the lane before it finishes e3's a
      List<LaneLease> third0 = third.acquireLanes("q", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(third0).extracting(LaneLease::charged).as("e2 was done").containsExactly(0);
      third.publish(event("e4", key));
      List<String> sent = new ArrayList<>();
      for (int claims = 0; claims < 5 && sent.isEmpty(); claims++) {
        List<ClaimedDelivery> batch = third.claim("q", third0, 1);
        batch.forEach(d -> sent.add(d.eventId() + "/" + d.handler()));
        assertThat(third.complete(batch.stream().map(ClaimedDelivery::token).toList()))
            .hasSameSizeAs(batch);
      }
      assertThat(sent).as("e4 goes out with limit 1").containsExactly("e4/h");
      assertThat(
              third
                  .purge(
                      new io.relaybus.store.RetentionPolicy(
                          Duration.ZERO, Duration.ZERO, Duration.ZERO))
                  .events())
          .as("e1 to e4, none with a delivery left")
          .isEqualTo(4);
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * {@link #theStrikeOfARowsLastHandlerLeftTakesTheRowOutOfTheLog} through a reschedule: the old
   * holder's reschedule of e2's a (b still out there), its snapshot at the old epoch, struck it
   * after the new holder's completion of b had struck that one, and moved it to {deliveries}: a row
   * with no handler stayed in the log. The reschedule now deletes the row.
   */
  @Test
  void aRescheduleOfARowsLastHandlerLeftTakesTheRowOutOfTheLog() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "emptiedByAMove";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection pauser = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = twoHandlersOutPastTheCursorRow(old, leases, key);

      pauseTheNextLogWrite(pauser, old);
      CompletableFuture<FailOutcome> reschedule =
          CompletableFuture.supplyAsync(() -> old.reschedule(late.get(0).token(), "refused"));
      awaitPaused();
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> again = next.claim("p", taken, 10);
      assertThat(again).extracting(ClaimedDelivery::handler).containsExactly("a", "b");
      assertThat(next.complete(List.of(again.get(1).token())))
          .containsExactly(again.get(1).deliveryId());
      resume(pauser);
      assertThat(within30s(reschedule)).isEqualTo(FailOutcome.RESCHEDULED);

      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || ':' || array_to_string(handlers, ',', '-') FROM "
                      + old.tableName("log")))
          .as("e2's a is in deliveries, its b done: nothing of the row is left to send")
          .isEmpty();
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || '/' || handler || ':' || status || ':' || attempts FROM "
                      + old.tableName("deliveries")))
          .containsExactly("e2/a:pending:1");
      assertThat(next.complete(List.of(again.get(0).token())))
          .as("the old holder moved e2's a to deliveries: it goes out from there")
          .isEmpty();
    }
  }

  /**
   * Row 96 against a reschedule: the old holder's reschedule of a handler the new holder had read
   * again (its snapshot at the old epoch) struck it and moved it to {deliveries} after the new
   * holder's claim; the new holder's completion of it struck the row again and said done, for a
   * delivery that then went out again from {deliveries} and was completed a second time.
   */
  @Test
  void aCompletionOfAHandlerTheOldHolderRescheduledMeanwhileFinishesNothing() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "rescheduled";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = twoHandlersOutPastTheCursorRow(old, leases, key);

      holdLogRow(locker, old, "e2");
      CompletableFuture<FailOutcome> reschedule =
          CompletableFuture.supplyAsync(() -> old.reschedule(late.get(0).token(), "refused"));
      awaitLockWaits(1);
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> again = next.claim("p", taken, 10);
      assertThat(again).extracting(ClaimedDelivery::handler).containsExactly("a", "b");
      locker.rollback();
      assertThat(within30s(reschedule)).isEqualTo(FailOutcome.RESCHEDULED);

      assertThat(next.complete(List.of(again.get(0).token())))
          .as("the old holder moved e2's a to deliveries: it goes out from there")
          .isEmpty();
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id || '/' || handler || ':' || status || ':' || attempts FROM "
                      + old.tableName("deliveries")))
          .containsExactly("e2/a:pending:1");
    }
  }

  /**
   * Purge against the claim's parking: e2's only route is its log row, which a claim is moving to
   * {deliveries} (its key blocked by e1's retry) when the purge runs. The purge's statements see
   * the row in the log or the delivery in {deliveries}, never neither, so the event stays and the
   * parked delivery goes out with it, not dead-lettered as "the event row is missing" (a loss in
   * disguise).
   */
  @Test
  void aPurgeWhileAClaimParksAnEventsOnlyRowKeepsTheEvent() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "purged";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore store = firstClaimCursorsOnly(prefix);
        Connection pauser = EmbeddedPostgres17.dataSource().getConnection()) {
      List<LaneLease> leases = store.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      store.publish(event("e1", key));
      List<ClaimedDelivery> first = store.claim("o", leases, 10);
      assertThat(store.reschedule(first.get(0).token(), "refused"))
          .as("pending in deliveries, due after its backoff: it blocks the key")
          .isEqualTo(FailOutcome.RESCHEDULED);
      store.publish(event("e2", key));

      // the claim that parks e2 behind e1, held before it takes e2's row out of the log
      pauseTheNextLogWrite(pauser, store);
      CompletableFuture<List<ClaimedDelivery>> claim =
          CompletableFuture.supplyAsync(() -> store.claim("o", leases, 10));
      awaitPaused();
      io.relaybus.store.PurgeResult purged =
          store.purge(
              new io.relaybus.store.RetentionPolicy(Duration.ZERO, Duration.ZERO, Duration.ZERO));
      resume(pauser);
      assertThat(within30s(claim)).as("e2 parked, e1 not due yet").isEmpty();

      assertThat(purged.events()).isZero();
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT id FROM " + store.tableName("events") + " ORDER BY id"))
          .containsExactly("e1", "e2");
      List<String> sent = new ArrayList<>();
      for (int polls = 0; polls < 100 && sent.size() < 2; polls++) {
        List<ClaimedDelivery> batch = store.claim("o", leases, 10);
        batch.forEach(d -> sent.add(d.eventId() + ":" + d.type() + ":" + d.attempts()));
        store.complete(batch.stream().map(ClaimedDelivery::token).toList());
        Thread.sleep(50);
      }
      assertThat(sent).containsExactly("e1:t:1", "e2:t:0");
      assertThat(store.countDeadLetters(io.relaybus.store.DeadLetterFilter.all())).isZero();
    }
  }

  /**
   * The race in the sweep: a completion takes its tokens off the store's lists before its
   * statement, so a claim of the same store in the meantime appends a cursor row whose oldest
   * window not done comes after the row being completed. A takeover resumes from that row: the row
   * is visible in the new holder's lower snapshot and out nowhere there, and the sweep looks at it
   * when its transaction committed while an older one still ran. The new holder's sweep, whose
   * snapshot still saw it (the completion, at the old epoch, had not committed), wrote it to
   * {deliveries} from its snapshot while its delete found the row gone: e1 went out again and was
   * completed a second time.
   */
  @Test
  void aSweepMovesNothingThatACompletionCommittedMeanwhileFinished() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "swept";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore old =
            builder(prefix, EmbeddedPostgres17.jdbcUrl(), 4).cursorInterval(Duration.ZERO).build();
        PostgresOutboxStore next = firstClaimCursorsOnly(prefix);
        Connection locker = EmbeddedPostgres17.dataSource().getConnection()) {
      old.setup();
      List<LaneLease> leases = old.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      // a transaction older than e1's, running when the windows around e1 are read: their lower
      // snapshots' xmin is below e1's xid, so a sweep from them looks at it
      locker.setAutoCommit(false);
      try (java.sql.Statement s = locker.createStatement()) {
        s.execute("SELECT pg_current_xact_id()");
      }
      old.publish(event("e1", key));
      List<ClaimedDelivery> out = old.claim("o", leases, 10);
      assertThat(out).extracting(ClaimedDelivery::eventId).containsExactly("e1");
      holdLogRow(locker, old, "e1");
      // the completion of e1: off the lists, its statement queued for the row at the old epoch
      CompletableFuture<Set<Long>> completion =
          CompletableFuture.supplyAsync(
              () -> old.complete(out.stream().map(ClaimedDelivery::token).toList()));
      awaitLockWaits(1);
      // a claim meanwhile: its cursor row names the window after e1's as the oldest not done
      old.publish(event("e2", key));
      List<ClaimedDelivery> e2 = old.claim("o", leases, 10);
      assertThat(e2).extracting(ClaimedDelivery::eventId).containsExactly("e2");
      assertThat(old.complete(e2.stream().map(ClaimedDelivery::token).toList())).hasSize(1);
      List<LaneLease> taken = next.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(taken).extracting(LaneLease::charged).containsExactly(0);
      // the new holder reads the lane from that cursor row: e3, not e1, which is behind it
      next.publish(event("e3", key));
      assertThat(claimAndComplete(next, "p", taken)).containsExactly("e3:0");
      // its sweep, whose snapshot sees e1 (the completion has not committed), queues for its row
      CompletableFuture<List<PostgresLog.Rescued>> sweep =
          CompletableFuture.supplyAsync(() -> next.sweep("p", taken));
      awaitLockWaits(2);
      locker.rollback();

      assertThat(within30s(completion)).containsExactly(out.get(0).deliveryId());
      List<PostgresLog.Rescued> rescued = within30s(sweep);
      assertThat(claimAndComplete(next, "p", taken)).as("done once, never sent again").isEmpty();
      assertThat(rescued).as("e1 was done, not left behind").isEmpty();
      assertThat(next.rescuedRows()).isZero();
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + old.tableName("log")))
          .containsExactly("0");
    }
  }

  /**
   * Symptom (the randomized test, once on a loaded machine: a log delivery handed out twice to one
   * owner under one epoch): a claim with a lease the lane had moved past (its holder lost the lane
   * and does not know yet; here owner "o", taken over by "p" in the same store) loaded the lane's
   * cursor for its own epoch and put it in place of the current holder's. The holder's next claim
   * found no cursor under its epoch, read the lane again from its last cursor row and handed out
   * again what it had out since. A stale lease's claim now reads with a cursor of its own.
   */
  @Test
  void aClaimWithALeaseTheLaneMovedPastLeavesTheHoldersCursorAlone() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "stale";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore store = firstClaimCursorsOnly(prefix)) {
      List<LaneLease> stale = store.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<LaneLease> leases = store.acquireLanes("p", "g", List.of(lane), Duration.ofMinutes(1));
      assertThat(leases.get(0).epoch()).isGreaterThan(stale.get(0).epoch());
      store.publish(event("e1", key));
      assertThat(store.claim("p", leases, 10))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e1");
      store.publish(event("e2", key));
      assertThat(store.claim("p", leases, 10))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e2");

      assertThat(store.claim("o", stale, 10)).isEmpty();

      store.publish(event("e3", key));
      assertThat(store.claim("p", leases, 10))
          .as("only what is new: e1 and e2 are still out")
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e3");
    }
  }

  /**
   * Symptom (the fault suite's exactly-once failover: 38 duplicates): a completion of deliveries
   * the store had handed out before it read their lane again from its cursor row (as it does after
   * a failed completion or claim, or when the server lost WAL) finished nothing, so their rows went
   * out again: second records of deliveries Kafka had, which exactly-once offsets do not catch in a
   * task that never restarted. They are finished by key now: a row goes with its last handler, read
   * from the row itself.
   */
  @Test
  void aCompletionAfterTheStoreReadItsLaneAgainFinishesTheRows() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "again";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore store = firstClaimCursorsOnly(prefix)) {
      List<LaneLease> leases = store.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      List<ClaimedDelivery> late = handOutPastTheCursorRow(store, leases, key);
      List<DeliveryToken> tokens = late.stream().map(ClaimedDelivery::token).toList();
      store.log().forget(tokens); // what a failed completion does to the lane

      assertThat(store.complete(tokens))
          .containsExactlyInAnyOrderElementsOf(
              tokens.stream().map(DeliveryToken::deliveryId).toList());
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT event_id FROM " + store.tableName("log") + " ORDER BY id"))
          .containsExactly("e1");
      // e1 was out and never done: handed out again (in flight at the loss); e2 and e3 are not
      assertThat(claimAndComplete(store, "o", leases)).containsExactly("e1:0");

      store.publish(
          OutboxEvent.builder("t").id("e4").key(key).json("{}").handlers("a", "b").build());
      List<ClaimedDelivery> both = store.claim("o", leases, 10);
      assertThat(both).extracting(ClaimedDelivery::handler).containsExactly("a", "b");
      store.log().forget(both.stream().map(ClaimedDelivery::token).toList());
      assertThat(store.complete(List.of(both.get(0).token()))).hasSize(1);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT array_to_string(handlers, ',', '-') FROM "
                      + store.tableName("log")
                      + " WHERE event_id = 'e4'"))
          .as("the first handler struck, the row kept for the other")
          .containsExactly("-,b");
      assertThat(store.complete(List.of(both.get(1).token()))).hasSize(1);
      assertThat(PostgresMigrationsTest.rows("SELECT count(*) FROM " + store.tableName("log")))
          .containsExactly("0");
      assertThat(claimAndComplete(store, "o", leases)).isEmpty();
    }
  }

  /**
   * A row one of whose handlers is done is struck, not deleted: read again (here by a restarted
   * store resuming from the lane's cursor row), it sends only the handlers still out, under the
   * same delivery ids. The short form of the page statement sends the row once with its handlers
   * (the store makes a delivery of each that is not struck), the whole form a row per handler.
   */
  @Test
  void aRowReadAgainAfterOneOfItsHandlersWasDoneSendsOnlyTheOthers() throws Exception {
    String prefix = "w" + PREFIXES.incrementAndGet() + "_";
    String key = "struck";
    int lane = io.relaybus.store.Lanes.laneOf(key, null);
    try (PostgresOutboxStore first = firstClaimCursorsOnly(prefix);
        PostgresOutboxStore restarted = firstClaimCursorsOnly(prefix)) {
      List<LaneLease> leases = first.acquireLanes("o", "g", List.of(lane), Duration.ofMinutes(1));
      first.publish(
          OutboxEvent.builder("t").id("e").key(key).json("{}").handlers("a", "b", "c").build());
      List<ClaimedDelivery> claimed = first.claim("o", leases, 10);
      assertThat(claimed).extracting(ClaimedDelivery::handler).containsExactly("a", "b", "c");
      assertThat(first.complete(List.of(claimed.get(1).token()))).hasSize(1);
      assertThat(
              PostgresMigrationsTest.rows(
                  "SELECT array_to_string(handlers, ',', '-') FROM " + first.tableName("log")))
          .containsExactly("a,-,c");

      // the restarted store's first claim (another lane) sends the whole page statement and finds
      // nothing that could block a row; its next sends the short one, which reads the row again
      String other = keyOfAnotherLane(key);
      List<LaneLease> others =
          restarted.acquireLanes(
              "r",
              "g",
              List.of(io.relaybus.store.Lanes.laneOf(other, null)),
              Duration.ofMinutes(1));
      restarted.publish(event("x", other));
      assertThat(restarted.claim("r", others, 10))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("x");
      List<ClaimedDelivery> again = restarted.claim("o", leases, 10);
      assertThat(again)
          .extracting(d -> d.handler() + ":" + d.deliveryId())
          .containsExactly("a:" + claimed.get(0).deliveryId(), "c:" + claimed.get(2).deliveryId());
    }
  }

  /**
   * Owner "o" hands out e1 of {@code key} (its lane's first claim under the lease: a cursor row),
   * then e2 and e3 (a claim after it: no cursor row in an hour's interval); returns e2 and e3.
   */
  private static List<ClaimedDelivery> handOutPastTheCursorRow(
      PostgresOutboxStore store, List<LaneLease> leases, String key) {
    assertThat(publishAndClaim(store, leases, "e1", key)).containsExactly("e1");
    store.publish(event("e2", key));
    store.publish(event("e3", key));
    List<ClaimedDelivery> claimed = store.claim("o", leases, 10);
    assertThat(claimed).extracting(ClaimedDelivery::eventId).containsExactly("e2", "e3");
    return claimed;
  }

  /** Ten claims of {@code owner}, each completed at once: what they handed out, event:attempts. */
  private static List<String> claimAndComplete(
      PostgresOutboxStore store, String owner, List<LaneLease> leases) {
    List<String> received = new ArrayList<>();
    for (int claims = 0; claims < 10; claims++) {
      List<ClaimedDelivery> batch = store.claim(owner, leases, 10);
      batch.forEach(d -> received.add(d.eventId() + ":" + d.attempts()));
      assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList()))
          .hasSameSizeAs(batch);
    }
    return received;
  }

  /** Publishes {@code id} of {@code key}; the event ids owner "o"'s next claim hands out. */
  private static List<String> publishAndClaim(
      PostgresOutboxStore store, List<LaneLease> leases, String id, String key) {
    store.publish(event(id, key));
    return store.claim("o", leases, 10).stream().map(ClaimedDelivery::eventId).toList();
  }

  /**
   * A store whose busy lanes append a cursor row only at their first claim (an hour's interval).
   */
  private static PostgresOutboxStore firstClaimCursorsOnly(String prefix) {
    PostgresOutboxStore store =
        builder(prefix, EmbeddedPostgres17.jdbcUrl(), 4)
            .cursorInterval(Duration.ofHours(1))
            .build();
    store.setup();
    return store;
  }

  private static OutboxEvent event(String id, String key) {
    return OutboxEvent.builder("t").id(id).key(key).json("{}").handlers("h").build();
  }

  private static void execute(String sql, PostgresOutboxStore store) throws Exception {
    try (Connection c = store.dataSource().getConnection();
        java.sql.Statement s = c.createStatement()) {
      s.execute(sql);
    }
  }

  /**
   * Events {@code name}1 and {@code name}2 under {@code key} and {@code name}3 on another lane: the
   * first and third go out and are done, the second is left behind its lane's cursor (given an xid
   * that every later window's lower snapshot sees as committed), which only the sweep finds.
   */
  private static void strandTheSecond(
      PostgresOutboxStore store,
      String key,
      String name,
      List<LaneLease> leases,
      ConcurrentLinkedQueue<String> received)
      throws Exception {
    store.publish(event(name + "1", key));
    assertThat(drainOnce(store, "o", leases, received)).isEqualTo(1);
    store.publish(event(name + "2", key));
    execute(
        "UPDATE " + store.tableName("log") + " SET xid = '3' WHERE event_id = '" + name + "2'",
        store);
    store.publish(event(name + "3", keyOfAnotherLane(key)));
    for (int claims = 0; claims < 3; claims++) {
      drainOnce(store, "o", leases, received);
    }
    assertThat(received).containsExactly(name + "1/h", name + "3/h");
  }

  private static int drainOnce(
      PostgresOutboxStore store,
      String owner,
      List<LaneLease> leases,
      ConcurrentLinkedQueue<String> received) {
    return drainOnce(store, owner, leases, received, 50);
  }

  private static int drainOnce(
      PostgresOutboxStore store,
      String owner,
      List<LaneLease> leases,
      ConcurrentLinkedQueue<String> received,
      int limit) {
    List<ClaimedDelivery> batch = store.claim(owner, leases, limit);
    batch.forEach(d -> received.add(d.eventId() + "/" + d.handler()));
    if (!batch.isEmpty()) {
      assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList()))
          .hasSize(batch.size());
    }
    return batch.size();
  }

  /**
   * {@code old} publishes e1 on {@code key}, claims it (its cursor row names e1 as out) and
   * completes it, then publishes e2 for handlers a and b and claims both: handed out after the
   * lane's cursor row, so a takeover does not charge them. Returns e2's two deliveries.
   */
  private static List<ClaimedDelivery> twoHandlersOutPastTheCursorRow(
      PostgresOutboxStore old, List<LaneLease> leases, String key) {
    old.publish(event("e1", key));
    List<ClaimedDelivery> first = old.claim("o", leases, 10);
    assertThat(old.complete(first.stream().map(ClaimedDelivery::token).toList())).hasSize(1);
    old.publish(OutboxEvent.builder("t").id("e2").key(key).json("{}").handlers("a", "b").build());
    List<ClaimedDelivery> late = old.claim("o", leases, 10);
    assertThat(late).extracting(ClaimedDelivery::handler).containsExactly("a", "b");
    return late;
  }
}
