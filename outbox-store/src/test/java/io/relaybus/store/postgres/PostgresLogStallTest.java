package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * Nothing stalls in storage v2's log: a delivery that is due and not blocked by an earlier one of
 * its key goes out at the next claim, through states off the well-trodden path (republished events,
 * publishes through the SQL function and an older relaybus's route trigger mixed with the Java
 * publish, keyed timers committed late, requeued dead letters, a parked key beside unkeyed rows,
 * lanes relinquished and taken over with windows open, long transactions). The tests count claims
 * exactly: claims of one hand out one delivery each, one claim of ten all that is due. The safety
 * net's sweep cannot run here (an interval of a day), and each test checks it moved nothing: a
 * delivery that needed it would be a stall (docs/architecture.md, "Nothing stalls").
 */
class PostgresLogStallTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();

  /** A retry never due within a test. */
  private static final RetryPolicy LATER =
      new RetryPolicy(10, Duration.ofHours(1), Duration.ofHours(1), 0);

  /** A retry due at once. */
  private static final RetryPolicy AT_ONCE = new RetryPolicy(10, Duration.ZERO, Duration.ZERO, 0);

  private static PostgresOutboxStore store(String prefix, RetryPolicy policy) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema("stalls")
            .tablePrefix(prefix)
            .poolSize(6)
            .retryPolicy(policy)
            .build();
    store.setup();
    store.sweepEvery(Duration.ofDays(1));
    return store;
  }

  private static String prefix() {
    return "s" + PREFIXES.incrementAndGet() + "_";
  }

  /** One owner's claims, counted; what they handed out as event/handler. */
  private static final class Consumer {
    final PostgresOutboxStore store;
    final String owner;
    List<LaneLease> leases;
    final List<String> received = new ArrayList<>();
    int claims;

    Consumer(PostgresOutboxStore store, String owner, Collection<Integer> lanes) {
      this.store = store;
      this.owner = owner;
      this.leases = store.acquireLanes(owner, "g", lanes, Duration.ofMinutes(5));
      assertThat(leases).hasSize(lanes.size());
    }

    /** One claim, not completed. */
    List<ClaimedDelivery> claim(int limit) {
      claims++;
      List<ClaimedDelivery> batch = store.claim(owner, leases, limit);
      batch.forEach(d -> received.add(d.eventId() + "/" + d.handler()));
      return batch;
    }

    /** One claim, completed at once; what it handed out. */
    List<String> claimAndComplete(int limit) {
      List<ClaimedDelivery> batch = claim(limit);
      if (!batch.isEmpty()) {
        assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList()))
            .hasSameSizeAs(batch);
      }
      return batch.stream().map(d -> d.eventId() + "/" + d.handler()).toList();
    }

    /**
     * Claims of {@code limit}, each completed, until every one of {@code expected} was handed out;
     * fails after {@code most} claims. Returns the claims it took.
     */
    int drain(int limit, int most, Collection<String> expected) {
      int before = claims;
      Set<String> missing = new LinkedHashSet<>(expected);
      List<String> got = new ArrayList<>();
      while (!missing.isEmpty()) {
        assertThat(claims - before)
            .as(
                "claims of %d for %s (got %s so far; sweep found %d)",
                limit, missing, got, store.rescuedRows())
            .isLessThan(most);
        List<String> batch = claimAndComplete(limit);
        got.addAll(batch);
        missing.removeAll(batch);
      }
      return claims - before;
    }

    /** A few more claims hand out nothing. */
    void nothingMore() {
      for (int i = 0; i < 3; i++) {
        assertThat(claimAndComplete(10)).isEmpty();
      }
    }
  }

  private static OutboxEvent event(String id, String key, String... handlers) {
    return OutboxEvent.builder("t").id(id).key(key).json("{}").handlers(handlers).build();
  }

  private static String keyInLane(int lane, String stem) {
    for (int i = 0; ; i++) {
      if (Lanes.laneOf(stem + i, null) == lane) {
        return stem + i;
      }
    }
  }

  /** An unkeyed event's id that falls in {@code lane}. */
  private static String unkeyedIdInLane(int lane, String stem) {
    for (int i = 0; ; i++) {
      if (Lanes.laneOf(null, stem + i) == lane) {
        return stem + i;
      }
    }
  }

  private static void publishSql(Connection c, PostgresOutboxStore store, OutboxEvent e)
      throws Exception {
    try (PreparedStatement s =
        c.prepareStatement(
            "SELECT * FROM "
                + store.tableName("events").replace("events", "publish")
                + "(?, ?, ?, ?, ?, ?::json, ?::text[])")) {
      s.setString(1, e.id());
      s.setString(2, e.type());
      s.setString(3, e.key());
      s.setBytes(4, "{}".getBytes(StandardCharsets.UTF_8));
      s.setString(5, e.contentType());
      s.setString(6, "{}");
      s.setArray(7, c.createArrayOf("text", e.handlers().toArray()));
      try (ResultSet rs = s.executeQuery()) {
        assertThat(rs.next()).isTrue();
      }
    }
  }

  private static Connection begin(PostgresOutboxStore store) throws Exception {
    Connection c = store.dataSource().getConnection();
    c.setAutoCommit(false);
    return c;
  }

  private static long count(PostgresOutboxStore store, String table, String where)
      throws Exception {
    return Long.parseLong(
        PostgresMigrationsTest.rows(
                "SELECT count(*) FROM " + store.tableName(table) + " WHERE " + where)
            .get(0));
  }

  private static void assertEmptyAndNoSweep(PostgresOutboxStore store) throws Exception {
    assertThat(count(store, "log", "true")).as("log rows left").isZero();
    assertThat(count(store, "deliveries", "status = 'pending'")).as("pending left").isZero();
    assertThat(store.rescuedRows()).as("rows the sweep moved").isZero();
  }

  // --- republish ----------------------------------------------------------------------------

  /** A republish adds handler b while e1's delivery to a is out: b goes at the next claim. */
  @Test
  void aHandlerAddedWhileTheFirstRowIsOutGoesAtTheNextClaim() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String key = "rep-out";
      Consumer o = new Consumer(store, "o", List.of(Lanes.laneOf(key, null)));
      store.publish(event("e1", key, "a"));
      List<ClaimedDelivery> out = o.claim(10);
      assertThat(out).extracting(ClaimedDelivery::handler).containsExactly("a");
      store.publish(event("e1", key, "a", "b"));
      assertThat(o.drain(10, 2, List.of("e1/b"))).isEqualTo(1);
      store.complete(out.stream().map(ClaimedDelivery::token).toList());
      o.nothingMore();
      assertEmptyAndNoSweep(store);
    }
  }

  /**
   * A republish adds b to e1 whose delivery to a is a pending retry (not due), and e2 of the key
   * follows with a and b: e1/b and e2/b go at once, e2/a is parked behind the retry.
   */
  @Test
  void aHandlerAddedWhileTheFirstRowIsRetriedGoesAtTheNextClaim() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String key = "rep-retry";
      Consumer o = new Consumer(store, "o", List.of(Lanes.laneOf(key, null)));
      store.publish(event("e1", key, "a"));
      List<ClaimedDelivery> out = o.claim(10);
      store.reschedule(out.get(0).token(), "failed");
      store.publish(event("e1", key, "a", "b"));
      store.publish(event("e2", key, "a", "b"));
      assertThat(o.drain(10, 3, List.of("e1/b", "e2/b"))).isEqualTo(1);
      o.nothingMore();
      assertThat(o.received).containsExactly("e1/a", "e1/b", "e2/b");
      assertThat(count(store, "deliveries", "status = 'pending'")).isEqualTo(2);
      assertThat(store.rescuedRows()).isZero();
    }
  }

  /** The same with the first row parked behind a retry of an earlier event of the key. */
  @Test
  void aHandlerAddedWhileTheFirstRowIsParkedGoesAtTheNextClaim() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String key = "rep-park";
      Consumer o = new Consumer(store, "o", List.of(Lanes.laneOf(key, null)));
      store.publish(event("e0", key, "a"));
      store.reschedule(o.claim(10).get(0).token(), "failed");
      store.publish(event("e1", key, "a"));
      assertThat(o.claimAndComplete(10)).isEmpty(); // e1 parked
      assertThat(count(store, "log", "true")).isZero();
      store.publish(event("e1", key, "a", "b"));
      assertThat(o.drain(10, 2, List.of("e1/b"))).isEqualTo(1);
      o.nothingMore();
      assertThat(count(store, "deliveries", "status = 'pending'")).isEqualTo(2);
      assertThat(store.rescuedRows()).isZero();
    }
  }

  /**
   * The first row dead: the added handler goes, the next event of the key goes, and the dead letter
   * requeued goes too.
   */
  @Test
  void aHandlerAddedWhileTheFirstRowIsDeadGoesAndTheRequeuedLetterToo() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String key = "rep-dead";
      Consumer o = new Consumer(store, "o", List.of(Lanes.laneOf(key, null)));
      store.publish(event("e1", key, "a"));
      ClaimedDelivery first = o.claim(10).get(0);
      assertThat(store.bury(first.token(), "poison")).isTrue();
      store.publish(event("e1", key, "a", "b"));
      store.publish(event("e2", key, "a"));
      assertThat(o.drain(10, 2, List.of("e1/b", "e2/a"))).isEqualTo(1);
      assertThat(store.requeue(List.of(first.deliveryId()))).isOne();
      assertThat(o.drain(10, 2, List.of("e1/a"))).isEqualTo(1);
      o.nothingMore();
      assertEmptyAndNoSweep(store);
    }
  }

  // --- publishers mixed ---------------------------------------------------------------------

  /**
   * One key published through the Java store, the SQL function and an older relaybus's insert into
   * deliveries (the route trigger makes it a log row per handler), in transactions that overlap
   * claims: each goes out within a claim or two of its commit, claims of one, in per-handler order.
   */
  @Test
  void aKeyPublishedThroughEveryPathGoesOutInOrderWithClaimsOfOne() throws Exception {
    String prefix = prefix();
    try (PostgresOutboxStore store = store(prefix, LATER)) {
      VersionOneClient old = new VersionOneClient(new PostgresTables("stalls", prefix));
      String key = "mixed";
      int lane = Lanes.laneOf(key, null);
      String other = keyInLane(lane, "mixed-other");
      Consumer o = new Consumer(store, "o", List.of(lane));
      List<String> expected = new ArrayList<>();
      for (int round = 0; round < 4; round++) {
        String r = "r" + round;
        try (Connection javaTx = begin(store);
            Connection sqlTx = begin(store);
            Connection oldTx = begin(store)) {
          store.publish(javaTx, event(r + "-java", key, "a", "b"));
          javaTx.commit();
          publishSql(sqlTx, store, event(r + "-sql", key, "a", "b"));
          store.publish(event(r + "-u", other, "a")); // another key of the lane
          o.claimAndComplete(1);
          sqlTx.commit();
          old.publishAll(oldTx, List.of(event(r + "-old", key, "a", "b")));
          o.claimAndComplete(1);
          oldTx.commit();
        }
        // a republish through the SQL function adds c to the Java event
        try (Connection c = begin(store)) {
          publishSql(c, store, event(r + "-java", key, "a", "b", "c"));
          c.commit();
        }
        for (String e : List.of(r + "-java", r + "-sql", r + "-old")) {
          expected.add(e + "/a");
          expected.add(e + "/b");
        }
        expected.add(r + "-java/c");
        expected.add(r + "-u/a");
      }
      List<String> all = new ArrayList<>(expected);
      int before = o.claims;
      expected.removeAll(o.received);
      int claims = o.drain(1, expected.size() + 3, expected);
      o.nothingMore();
      assertThat(o.received).containsExactlyInAnyOrderElementsOf(all);
      List<String> toA =
          o.received.stream().filter(d -> d.endsWith("/a") && !d.contains("-u/")).toList();
      List<String> inOrder = new ArrayList<>();
      for (int round = 0; round < 4; round++) {
        for (String e : List.of("-java", "-sql", "-old")) {
          inOrder.add("r" + round + e + "/a");
        }
      }
      assertThat(toA).isEqualTo(inOrder);
      assertThat(claims)
          .as("claims of one for %d deliveries", expected.size())
          .isEqualTo(expected.size());
      assertThat(before).isEqualTo(8);
      assertEmptyAndNoSweep(store);
    }
  }

  // --- keyed timers -------------------------------------------------------------------------

  /**
   * A transaction publishes e1 and e2 of a key and a keyed timer due at once, and commits after
   * several claims opened windows on the lane (other keys' traffic): the timer waits for e1 and e2,
   * then goes, in the claim that hands them out or the next.
   */
  @Test
  void aKeyedTimerCommittedLateGoesRightAfterTheLogRowsOfItsKey() throws Exception {
    for (int limit : List.of(10, 1)) {
      try (PostgresOutboxStore store = store(prefix(), LATER)) {
        String key = "late-timer";
        int lane = Lanes.laneOf(key, null);
        String other = keyInLane(lane, "busy");
        Consumer o = new Consumer(store, "o", List.of(lane));
        try (Connection tx = begin(store)) {
          store.publish(tx, event("e1", key, "h"));
          for (int i = 0; i < 3; i++) {
            store.publish(event("x" + i, other, "h"));
            o.claimAndComplete(limit);
          }
          store.publish(tx, event("e2", key, "h"));
          store.schedule(tx, event("t", key, "h"), Timer.in(Duration.ZERO));
          o.claimAndComplete(limit);
          tx.commit();
        }
        int claims = o.drain(limit, 5, List.of("e1/h", "e2/h", "t/h"));
        assertThat(claims).as("claims of %d", limit).isEqualTo(limit == 1 ? 3 : 1);
        List<String> ofKey = o.received.stream().filter(d -> !d.startsWith("x")).toList();
        assertThat(ofKey).containsExactly("e1/h", "e2/h", "t/h");
        o.nothingMore();
        assertEmptyAndNoSweep(store);
      }
    }
  }

  /**
   * A keyed timer due at once whose transaction took the key's lock first and commits late; a later
   * transaction's events of the key wait for it: the timer and then they go.
   */
  @Test
  void aKeyedTimerAheadOfItsKeysLogRowsGoesFirst() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String key = "early-timer";
      int lane = Lanes.laneOf(key, null);
      String other = keyInLane(lane, "busy");
      Consumer o = new Consumer(store, "o", List.of(lane));
      try (Connection tx = begin(store)) {
        store.schedule(tx, event("t", key, "h"), Timer.in(Duration.ZERO));
        for (int i = 0; i < 3; i++) {
          store.publish(event("x" + i, other, "h"));
          o.claimAndComplete(1);
        }
        tx.commit();
      }
      store.publish(event("e1", key, "h"));
      store.publish(event("e2", key, "h"));
      assertThat(o.drain(1, 6, List.of("t/h", "e1/h", "e2/h"))).isEqualTo(3);
      assertThat(o.received.stream().filter(d -> !d.startsWith("x")).toList())
          .containsExactly("t/h", "e1/h", "e2/h");
      o.nothingMore();
      assertEmptyAndNoSweep(store);
    }
  }

  // --- requeue ------------------------------------------------------------------------------

  /**
   * A dead letter of a key requeued while later events of the key sit in the log (not read yet):
   * the claims of one hand out the requeued one and the others within a claim each.
   */
  @Test
  void aDeadLetterRequeuedWhileItsKeysLaterRowsSitInTheLogGoesAndSoDoThey() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String key = "requeued";
      Consumer o = new Consumer(store, "o", List.of(Lanes.laneOf(key, null)));
      store.publish(event("e1", key, "h"));
      ClaimedDelivery first = o.claim(1).get(0);
      store.bury(first.token(), "poison");
      store.publish(event("e2", key, "h"));
      store.publish(event("e3", key, "h"));
      assertThat(store.requeue(List.of(first.deliveryId()))).isOne();
      assertThat(o.drain(1, 5, List.of("e1/h", "e2/h", "e3/h"))).isEqualTo(3);
      assertThat(o.received).containsExactly("e1/h", "e1/h", "e2/h", "e3/h");
      o.nothingMore();
      assertEmptyAndNoSweep(store);
    }
  }

  /**
   * The same with the later rows read and parked behind a retry of the key, the retry then dead
   * after its attempts and requeued: all go.
   */
  @Test
  void aRetryThatDiedWithParkedFollowersRequeuedTakesThemAlong() throws Exception {
    try (PostgresOutboxStore store =
        store(prefix(), new RetryPolicy(2, Duration.ZERO, Duration.ZERO, 0))) {
      String key = "died";
      Consumer o = new Consumer(store, "o", List.of(Lanes.laneOf(key, null)));
      store.publish(event("e1", key, "h"));
      ClaimedDelivery first = o.claim(1).get(0);
      store.publish(event("e2", key, "h"));
      store.publish(event("e3", key, "h"));
      store.reschedule(first.token(), "failed"); // pending, due at once
      List<ClaimedDelivery> again = o.claim(1); // parks e2 and e3 behind it, or hands it out
      ClaimedDelivery retry = again.isEmpty() ? o.claim(1).get(0) : again.get(0);
      assertThat(retry.eventId()).isEqualTo("e1");
      assertThat(store.reschedule(retry.token(), "failed again"))
          .isEqualTo(io.relaybus.store.FailOutcome.DEAD);
      assertThat(o.drain(1, 4, List.of("e2/h", "e3/h"))).isEqualTo(2);
      assertThat(store.requeue(List.of(first.deliveryId()))).isOne();
      assertThat(o.drain(1, 3, List.of("e1/h"))).isEqualTo(1);
      o.nothingMore();
      assertEmptyAndNoSweep(store);
    }
  }

  // --- a lane of unkeyed and keyed rows, one key parked ------------------------------------

  /**
   * Lane L holds a key parked behind a keyed timer not due, another key and unkeyed events,
   * published interleaved: with claims of one every other row goes, one per claim; once the timer
   * is cancelled the parked key follows.
   */
  @Test
  void aParkedKeyHoldsBackNoUnkeyedOrOtherKeyedRowOfItsLane() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), LATER)) {
      String parked = "parked";
      int lane = Lanes.laneOf(parked, null);
      String free = keyInLane(lane, "free");
      Consumer o = new Consumer(store, "o", List.of(lane));
      store.schedule(
          event("t", parked, "h"), Timer.in(Duration.ofHours(1)).named("t", TimerConflict.FAIL));
      List<String> others = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        store.publish(event("p" + i, parked, "h"));
        store.publish(event("f" + i, free, "h"));
        String u = unkeyedIdInLane(lane, "u" + i + "-");
        store.publish(OutboxEvent.builder("t").id(u).json("{}").handlers("h").build());
        others.add("f" + i + "/h");
        others.add(u + "/h");
      }
      assertThat(o.drain(1, others.size() + 3, others)).isEqualTo(others.size());
      assertThat(o.received).doesNotContain("p0/h", "t/h");
      assertThat(o.claimAndComplete(10)).isEmpty();
      assertThat(store.cancelTimer("h", "t").outcome())
          .isEqualTo(io.relaybus.store.TimerOutcome.CANCELLED);
      assertThat(o.drain(1, 6, List.of("p0/h", "p1/h", "p2/h", "p3/h"))).isEqualTo(4);
      o.nothingMore();
      assertEmptyAndNoSweep(store);
    }
  }

  // --- handover -----------------------------------------------------------------------------

  /**
   * Owner o has a window open (a transaction of the lane still running), rows out, rows parked
   * behind a timer and a row read past its cursor row; it relinquishes the lane (a task stopping),
   * and owner p of another store acquires it: p hands out everything due within a few claims of
   * one, the running transaction's rows once it commits, and the parked rows once the timer is
   * cancelled.
   */
  @Test
  void aLaneRelinquishedWithWindowsOpenAndRowsParkedGoesOnUnderItsNextOwner() throws Exception {
    String prefix = prefix();
    try (PostgresOutboxStore first = store(prefix, LATER);
        PostgresOutboxStore second = store(prefix, LATER)) {
      String parked = "handover-parked";
      int lane = Lanes.laneOf(parked, null);
      String free = keyInLane(lane, "handover-free");
      String late = keyInLane(lane, "handover-late");
      Consumer o = new Consumer(first, "o", List.of(lane));
      first.schedule(
          event("t", parked, "h"), Timer.in(Duration.ofHours(1)).named("t", TimerConflict.FAIL));
      Set<String> expected = new LinkedHashSet<>();
      try (Connection running = begin(first)) {
        first.publish(running, event("late1", late, "h"));
        for (int i = 0; i < 3; i++) {
          first.publish(event("p" + i, parked, "h"));
          first.publish(event("f" + i, free, "h"));
          expected.add("f" + i + "/h");
          o.claim(1); // out, never completed
        }
        first.relinquishLanes("o", o.leases);
        Consumer p = new Consumer(second, "p", List.of(lane));
        first.publish(event("f3", free, "h"));
        expected.add("f3/h");
        assertThat(p.drain(1, expected.size() + 3, expected)).isEqualTo(expected.size());
        running.commit();
        assertThat(p.drain(1, 3, List.of("late1/h"))).isEqualTo(1);
        assertThat(second.cancelTimer("h", "t").outcome())
            .isEqualTo(io.relaybus.store.TimerOutcome.CANCELLED);
        assertThat(p.drain(1, 5, List.of("p0/h", "p1/h", "p2/h"))).isEqualTo(3);
        p.nothingMore();
      }
      assertEmptyAndNoSweep(second);
      assertThat(first.rescuedRows()).isZero();
    }
  }

  // --- long transactions, claims of one -----------------------------------------------------

  /**
   * Transactions begun before a window's boundary and committed after several windows, on two keys
   * and unkeyed rows of one lane, claims of one between every step: at the end every delivery goes
   * within one claim each, and nothing is left.
   */
  @Test
  void transactionsOpenAcrossSeveralWindowsAllGoOutWithClaimsOfOne() throws Exception {
    try (PostgresOutboxStore store = store(prefix(), AT_ONCE)) {
      String k1 = "long-1";
      int lane = Lanes.laneOf(k1, null);
      String k2 = keyInLane(lane, "long-2");
      Consumer o = new Consumer(store, "o", List.of(lane));
      List<String> expected = new ArrayList<>();
      List<String> all = new ArrayList<>();
      List<Connection> open = new ArrayList<>();
      try {
        for (int step = 0; step < 12; step++) {
          Connection tx = begin(store);
          open.add(tx);
          String k = step % 3 == 0 ? k1 : step % 3 == 1 ? k2 : null;
          String id = k == null ? unkeyedIdInLane(lane, "u" + step + "-") : "e" + step;
          // each transaction's first statement takes its xid (and the key's lock) now
          store.publish(
              tx, OutboxEvent.builder("t").id(id).key(k).json("{}").handlers("h").build());
          expected.add(id + "/h");
          all.add(id + "/h");
          // a transaction of another key waits for none; one of the same key would wait for the
          // lock: commit every third transaction, the oldest first
          if (step % 3 == 2) {
            for (int i = 0; i < 3; i++) {
              o.claimAndComplete(1);
            }
            for (Connection c : open) {
              c.commit();
              c.close();
            }
            open.clear();
          } else {
            o.claimAndComplete(1);
          }
        }
      } finally {
        for (Connection c : open) {
          c.rollback();
          c.close();
        }
      }
      expected.removeAll(o.received);
      assertThat(o.drain(1, expected.size() + 3, expected)).isEqualTo(expected.size());
      o.nothingMore();
      assertThat(o.received).containsExactlyInAnyOrderElementsOf(all);
      assertEmptyAndNoSweep(store);
    }
  }

  /**
   * Publishers on threads of their own (the Java store, the SQL function, version 1's insert, keyed
   * timers due at once, republishes; transactions that sleep before they commit, so they commit
   * while claims run) against two owners of one store holding a lane each and claiming one to three
   * at a time, retrying, burying and parking keys behind far timers, handing a lane to a new owner
   * now and then: once the publishers stop, the far timers are cancelled and the dead letters
   * requeued, claims of one hand out everything, never two empty claims in a row while a delivery
   * is left.
   */
  @Test
  void concurrentPublishersAgainstClaimsOfOneLeaveNothingBehind() throws Exception {
    // about 40 s, most of it the drain's claims of one: the long form only, as the randomized
    // test's (docs/testing.md); reported as skipped in the suite
    org.junit.jupiter.api.Assumptions.assumeTrue(
        Boolean.getBoolean("stalls.concurrent"),
        "the run against concurrent publishers is the long form: -Dstalls.concurrent=true");
    String prefix = prefix();
    RetryPolicy policy = new RetryPolicy(3, Duration.ZERO, Duration.ZERO, 0);
    try (PostgresOutboxStore store = store(prefix, policy)) {
      store.firstPageLanes(1);
      VersionOneClient old = new VersionOneClient(new PostgresTables("stalls", prefix));
      int lane1 = Lanes.laneOf("c-k0", null);
      int lane2 = Lanes.laneOf(keyInLane((lane1 + 7) % 256, "c-x"), null);
      List<String> keys =
          List.of(
              "c-k0",
              keyInLane(lane1, "c-k1-"),
              keyInLane(lane2, "c-k2-"),
              keyInLane(lane2, "c-k3-"));
      Set<String> expected = java.util.concurrent.ConcurrentHashMap.newKeySet();
      java.util.concurrent.ConcurrentLinkedQueue<Throwable> errors =
          new java.util.concurrent.ConcurrentLinkedQueue<>();
      java.util.concurrent.atomic.AtomicBoolean stop =
          new java.util.concurrent.atomic.AtomicBoolean();
      AtomicInteger ids = new AtomicInteger();
      List<String> committedIds = java.util.Collections.synchronizedList(new ArrayList<>());
      List<Thread> threads = new ArrayList<>();
      for (int t = 0; t < 3; t++) {
        long seed = t;
        Thread thread =
            new Thread(
                () -> {
                  java.util.Random random = new java.util.Random(seed);
                  while (!stop.get()) {
                    try (Connection c = begin(store)) {
                      List<String> mine = new ArrayList<>();
                      List<String> events = new ArrayList<>();
                      int n = 1 + random.nextInt(3);
                      for (int i = 0; i < n; i++) {
                        String key =
                            random.nextInt(6) == 0 ? null : keys.get(random.nextInt(keys.size()));
                        int what = random.nextInt(10);
                        if (what == 0 && key != null) {
                          String id = "t" + ids.incrementAndGet();
                          store.schedule(c, event(id, key, "a"), Timer.in(Duration.ZERO));
                          mine.add(id + "/a");
                        } else if (what == 1 && !committedIds.isEmpty()) {
                          String id = committedIds.get(random.nextInt(committedIds.size()));
                          String h = "r" + random.nextInt(3);
                          // the stored key wins: the republish takes the event's own key's lock
                          publishSql(
                              c,
                              store,
                              OutboxEvent.builder("t").id(id).json("{}").handlers(h).build());
                          mine.add(id + "/" + h);
                        } else {
                          String id =
                              key == null
                                  ? unkeyedIdInLane(
                                      random.nextBoolean() ? lane1 : lane2,
                                      "u" + ids.incrementAndGet() + "-")
                                  : "e" + ids.incrementAndGet();
                          OutboxEvent e = event(id, key, random.nextBoolean() ? "a" : "b", "c");
                          int path = random.nextInt(3);
                          if (path == 0) {
                            store.publish(c, e);
                          } else if (path == 1) {
                            publishSql(c, store, e);
                          } else {
                            old.publishAll(c, List.of(e));
                          }
                          e.handlers().forEach(h -> mine.add(id + "/" + h));
                          events.add(id);
                        }
                        Thread.sleep(random.nextInt(4));
                      }
                      Thread.sleep(random.nextInt(10) == 0 ? 40 : 1);
                      c.commit();
                      expected.addAll(mine);
                      committedIds.addAll(events);
                    } catch (java.sql.SQLException e) {
                      if (!"40P01".equals(e.getSQLState())) { // opposite key orders: transient
                        errors.add(e);
                        return;
                      }
                    } catch (Throwable e) {
                      if (e.getCause() instanceof java.sql.SQLException q
                          && "40P01".equals(q.getSQLState())) {
                        continue;
                      }
                      errors.add(e);
                      return;
                    }
                  }
                });
        thread.start();
        threads.add(thread);
      }
      java.util.Random random = new java.util.Random(42);
      Consumer[] owners = {
        new Consumer(store, "x0", List.of(lane1)), new Consumer(store, "y0", List.of(lane2))
      };
      List<Consumer> all = new ArrayList<>(List.of(owners));
      List<List<ClaimedDelivery>> handed = List.of(new ArrayList<>(), new ArrayList<>());
      List<String> farTimers = new ArrayList<>();
      int incarnation = 0;
      long end = System.nanoTime() + Duration.ofSeconds(4).toNanos();
      while (System.nanoTime() < end && errors.isEmpty()) {
        int o = random.nextInt(2);
        Consumer consumer = owners[o];
        int op = random.nextInt(100);
        if (op < 50) {
          handed.get(o).addAll(consumer.claim(1 + random.nextInt(3)));
        } else if (op < 75) {
          List<ClaimedDelivery> some = new ArrayList<>(handed.get(o));
          handed.get(o).clear();
          assertThat(store.complete(some.stream().map(ClaimedDelivery::token).toList()))
              .hasSameSizeAs(some);
        } else if (op < 85) {
          if (!handed.get(o).isEmpty()) {
            ClaimedDelivery d = handed.get(o).remove(random.nextInt(handed.get(o).size()));
            if (random.nextBoolean()) {
              store.reschedule(d.token(), "failed");
            } else {
              store.release(List.of(d.token()));
            }
          }
        } else if (op < 90) {
          String id = "far" + ids.incrementAndGet();
          try {
            store.schedule(
                event(id, keys.get(random.nextInt(keys.size())), "a"),
                Timer.in(Duration.ofHours(1)).named(id, TimerConflict.FAIL));
            farTimers.add(id);
          } catch (io.relaybus.store.OutboxStoreException e) {
            // the publishers lock keys in several calls per transaction: a deadlock's victim
            assertThat(e.getMessage()).contains("40P01");
          }
        } else if (op < 95) {
          if (!farTimers.isEmpty()) {
            store.cancelTimer("a", farTimers.remove(random.nextInt(farTimers.size())));
          }
        } else {
          // a new owner of this lane: relinquished or taken over
          if (random.nextBoolean()) {
            store.relinquishLanes(consumer.owner, consumer.leases);
          }
          handed.get(o).clear();
          owners[o] =
              new Consumer(
                  store,
                  (o == 0 ? "x" : "y") + (++incarnation),
                  consumer.leases.stream().map(LaneLease::lane).toList());
          all.add(owners[o]);
        }
        Thread.sleep(random.nextInt(3));
      }
      stop.set(true);
      for (Thread thread : threads) {
        thread.join();
      }
      assertThat(errors).isEmpty();
      for (String id : farTimers) {
        store.cancelTimer("a", id);
      }
      for (int o = 0; o < 2; o++) {
        store.complete(handed.get(o).stream().map(ClaimedDelivery::token).toList());
      }
      store.requeueDead(null);
      Set<String> received = new java.util.HashSet<>();
      for (Consumer c : all) {
        received.addAll(c.received);
      }
      int empty = 0;
      int claims = 0;
      while (true) {
        int o = claims % 2;
        List<String> batch = owners[o].claimAndComplete(1);
        claims++;
        received.addAll(batch);
        boolean left =
            count(store, "log", "true") > 0 || count(store, "deliveries", "status = 'pending'") > 0;
        if (!left && batch.isEmpty()) {
          break;
        }
        empty = batch.isEmpty() ? empty + 1 : 0;
        assertThat(empty)
            .as(
                "empty claims in a row with %s in the log and %s pending",
                PostgresMigrationsTest.rows(
                    "SELECT lane, id, xid, event_id, handlers FROM " + store.tableName("log")),
                PostgresMigrationsTest.rows(
                    "SELECT lane, event_id, handler, sequence, available_at, xid FROM "
                        + store.tableName("deliveries")
                        + " WHERE status = 'pending'"))
            .isLessThanOrEqualTo(4); // two owners, one claim each in turn
      }
      Set<String> missing = new java.util.TreeSet<>(expected);
      missing.removeAll(received);
      assertThat(missing).as("never handed out").isEmpty();
      assertThat(store.rescuedRows()).isZero();
      assertThat(expected).hasSizeGreaterThan(100);
    }
  }

  // --- randomized ---------------------------------------------------------------------------

  /**
   * Random interleavings of every state above on two lanes (keyed and unkeyed rows, publishes
   * through the three paths, republishes, keyed timers due at once or far ahead, long transactions,
   * claims of one to three, completions, retries, burials, releases, requeues, relinquishes and
   * takeovers between two stores), then the far timers cancelled, the dead letters requeued and the
   * transactions committed: claims of one hand out every delivery, never two empty claims in a row
   * while one is left, and the log and {deliveries} end empty.
   */
  @Test
  void randomInterleavingsLeaveNothingBehind() throws Exception {
    for (long seed = 1; seed <= SEEDS; seed++) {
      randomRun(seed, 300);
    }
  }

  private static final long SEEDS = Long.getLong("stalls.seeds", 2);

  private static final class OpenTx {
    final Connection connection;
    final Set<String> keys = new java.util.HashSet<>();
    final Set<String> events = new java.util.HashSet<>();
    final List<String> deliveries = new ArrayList<>();
    final List<String[]> published = new ArrayList<>(); // id, key

    OpenTx(Connection connection) {
      this.connection = connection;
    }
  }

  private static void randomRun(long seed, int steps) throws Exception {
    java.util.Random random = new java.util.Random(seed);
    String prefix = prefix();
    List<String> journal = new ArrayList<>();
    try (PostgresOutboxStore a =
            store(prefix, new RetryPolicy(3, Duration.ZERO, Duration.ZERO, 0));
        PostgresOutboxStore b =
            store(prefix, new RetryPolicy(3, Duration.ZERO, Duration.ZERO, 0))) {
      a.firstPageLanes(1);
      b.firstPageLanes(1);
      VersionOneClient old = new VersionOneClient(new PostgresTables("stalls", prefix));
      int lane1 = Lanes.laneOf("r-k0", null);
      String k1 = keyInLane(lane1, "r-k1-");
      int lane2 = Lanes.laneOf(keyInLane((lane1 + 1) % 256, "r-x"), null);
      List<String> keys = List.of("r-k0", k1, keyInLane(lane2, "r-k2-"), keyInLane(lane2, "r-k3-"));
      List<Integer> lanes = List.of(lane1, lane2);
      PostgresOutboxStore[] stores = {a, b};
      int current = 0;
      int incarnation = 0;
      Consumer consumer = new Consumer(a, "o0", lanes);
      List<ClaimedDelivery> handed = new ArrayList<>();
      List<OpenTx> open = new ArrayList<>();
      Set<String> expected = new java.util.TreeSet<>();
      Set<String> received = new java.util.HashSet<>();
      java.util.Map<String, String[]> committedEvents = new java.util.LinkedHashMap<>();
      List<String> farTimers = new ArrayList<>();
      int ids = 0;
      try {
        for (int step = 0; step < steps; step++) {
          int op = random.nextInt(100);
          PostgresOutboxStore store = stores[current];
          if (op < 30) {
            // publish a new event: Java, SQL function or version 1; keyed or not; in a transaction
            // kept open, a new one kept open, or on its own
            String key = random.nextInt(5) == 0 ? null : keys.get(random.nextInt(keys.size()));
            String id =
                key == null
                    ? unkeyedIdInLane(lanes.get(random.nextInt(2)), "u" + (ids++) + "-")
                    : "e" + (ids++);
            List<String> handlers =
                random.nextBoolean()
                    ? List.of("a")
                    : random.nextBoolean() ? List.of("a", "b") : List.of("b");
            OpenTx tx = pickTx(store, open, key, random);
            if (tx == null) {
              continue;
            }
            OutboxEvent e =
                OutboxEvent.builder("t")
                    .id(id)
                    .key(key)
                    .json("{}")
                    .handlers(handlers.toArray(String[]::new))
                    .build();
            int path = random.nextInt(3);
            if (path == 0) {
              store.publish(tx.connection, e);
            } else if (path == 1) {
              publishSql(tx.connection, store, e);
            } else {
              old.publishAll(tx.connection, List.of(e));
            }
            journal.add(
                step
                    + " publish "
                    + id
                    + " key "
                    + key
                    + " "
                    + handlers
                    + " path "
                    + path
                    + " tx "
                    + System.identityHashCode(tx));
            if (key != null) {
              tx.keys.add(key);
            }
            tx.events.add(id);
            tx.published.add(new String[] {id, key});
            handlers.forEach(h -> tx.deliveries.add(id + "/" + h));
            finishTx(tx, open, random, expected, committedEvents, journal, step);
          } else if (op < 35) {
            // republish a committed event with handler c
            if (committedEvents.isEmpty()) {
              continue;
            }
            List<String> candidates = new ArrayList<>(committedEvents.keySet());
            String id = candidates.get(random.nextInt(candidates.size()));
            String key = committedEvents.get(id)[0];
            if (open.stream()
                .anyMatch(t -> t.events.contains(id) || (key != null && t.keys.contains(key)))) {
              continue;
            }
            String h = random.nextBoolean() ? "c" : "d";
            OutboxEvent e = OutboxEvent.builder("t").id(id).key(key).json("{}").handlers(h).build();
            try (Connection c = begin(store)) {
              if (random.nextBoolean()) {
                store.publish(c, e);
              } else {
                publishSql(c, store, e);
              }
              c.commit();
            }
            expected.add(id + "/" + h);
            journal.add(step + " republish " + id + " +" + h);
          } else if (op < 40) {
            // a keyed timer: due at once (in a transaction maybe kept open), or far (cancelled
            // later)
            String key = keys.get(random.nextInt(keys.size()));
            String id = "t" + (ids++);
            if (random.nextInt(3) == 0) {
              if (open.stream().anyMatch(t -> t.keys.contains(key))) {
                continue;
              }
              store.schedule(
                  event(id, key, "a"), Timer.in(Duration.ofHours(1)).named(id, TimerConflict.FAIL));
              farTimers.add(id); // cancelled by the end: never handed out
              journal.add(step + " far timer " + id + " key " + key);
            } else {
              OpenTx tx = pickTx(store, open, key, random);
              if (tx == null) {
                continue;
              }
              store.schedule(tx.connection, event(id, key, "a"), Timer.in(Duration.ZERO));
              tx.keys.add(key);
              tx.events.add(id);
              tx.deliveries.add(id + "/a");
              journal.add(
                  step + " timer " + id + " key " + key + " tx " + System.identityHashCode(tx));
              finishTx(tx, open, random, expected, committedEvents, journal, step);
            }
          } else if (op < 65) {
            int limit = 1 + random.nextInt(3);
            List<ClaimedDelivery> batch = consumer.claim(limit);
            batch.forEach(d -> received.add(d.eventId() + "/" + d.handler()));
            handed.addAll(batch);
            journal.add(
                step
                    + " claim "
                    + limit
                    + " by "
                    + consumer.owner
                    + " -> "
                    + batch.stream()
                        .map(d -> d.eventId() + "/" + d.handler() + "#" + d.deliveryId())
                        .toList());
          } else if (op < 80) {
            if (handed.isEmpty()) {
              continue;
            }
            List<ClaimedDelivery> some = new ArrayList<>();
            for (java.util.Iterator<ClaimedDelivery> it = handed.iterator(); it.hasNext(); ) {
              ClaimedDelivery d = it.next();
              if (random.nextInt(3) > 0) {
                some.add(d);
                it.remove();
              }
            }
            Set<Long> done = store.complete(some.stream().map(ClaimedDelivery::token).toList());
            journal.add(
                step
                    + " complete "
                    + some.stream().map(d -> d.eventId() + "/" + d.handler()).toList()
                    + " done "
                    + done.size());
            assertThat(done).as("seed %d: completions", seed).hasSameSizeAs(some);
          } else if (op < 86) {
            if (handed.isEmpty()) {
              continue;
            }
            ClaimedDelivery d = handed.remove(random.nextInt(handed.size()));
            int how = random.nextInt(3);
            String outcome =
                how == 0
                    ? String.valueOf(store.reschedule(d.token(), "failed"))
                    : how == 1
                        ? String.valueOf(store.bury(d.token(), "poison"))
                        : String.valueOf(store.release(List.of(d.token())));
            journal.add(
                step
                    + " "
                    + (how == 0 ? "reschedule " : how == 1 ? "bury " : "release ")
                    + d.eventId()
                    + "/"
                    + d.handler()
                    + " -> "
                    + outcome);
          } else if (op < 89) {
            // commit or roll back an open transaction
            if (open.isEmpty()) {
              continue;
            }
            OpenTx tx = open.remove(random.nextInt(open.size()));
            end(tx, random.nextInt(5) > 0, expected, committedEvents, journal, step);
          } else if (op < 92) {
            if (!farTimers.isEmpty()) {
              String id = farTimers.remove(random.nextInt(farTimers.size()));
              journal.add(step + " cancel " + id + " -> " + store.cancelTimer("a", id).outcome());
            }
          } else if (op < 94) {
            journal.add(step + " requeue dead -> " + store.requeueDead(null));
          } else {
            // hand the lanes over: relinquished (a task stopping) or taken over (a new incarnation)
            boolean relinquish = random.nextBoolean();
            if (relinquish) {
              store.relinquishLanes(consumer.owner, consumer.leases);
            }
            current = random.nextInt(2);
            handed.clear();
            String owner = "o" + (++incarnation);
            consumer = new Consumer(stores[current], owner, lanes);
            journal.add(
                step
                    + (relinquish ? " relinquished, " : " taken over, ")
                    + "now "
                    + owner
                    + " on store "
                    + current);
          }
        }
        // everything committed, every far timer cancelled, every dead letter requeued
        for (OpenTx tx : new ArrayList<>(open)) {
          end(tx, true, expected, committedEvents, journal, -1);
        }
        open.clear();
        PostgresOutboxStore store = stores[current];
        for (String id : farTimers) {
          store.cancelTimer("a", id);
        }
        // cancelled timers are not expected
        farTimers.clear();
        Set<Long> done = store.complete(handed.stream().map(ClaimedDelivery::token).toList());
        assertThat(done).hasSameSizeAs(handed);
        handed.clear();
        journal.add("end: requeued " + store.requeueDead(null));
        int empty = 0;
        int mostEmpty = 0;
        int claims = 0;
        while (true) {
          List<String> batch = consumer.claimAndComplete(1);
          claims++;
          received.addAll(batch);
          journal.add("drain " + claims + " -> " + batch);
          boolean left =
              count(store, "log", "true") > 0
                  || count(store, "deliveries", "status = 'pending'") > 0;
          if (batch.isEmpty()) {
            if (!left) {
              break;
            }
            empty++;
            mostEmpty = Math.max(mostEmpty, empty);
          } else {
            empty = 0;
          }
          if (mostEmpty > 2 || claims > 2_000) {
            throw new AssertionError(
                "seed "
                    + seed
                    + ": stalled with "
                    + PostgresMigrationsTest.rows(
                        "SELECT lane, id, xid, event_id, handlers FROM " + store.tableName("log"))
                    + " in the log and "
                    + PostgresMigrationsTest.rows(
                        "SELECT lane, event_id, handler, key, sequence, available_at, xid FROM "
                            + store.tableName("deliveries")
                            + " WHERE status = 'pending'")
                    + " pending; journal:\n"
                    + String.join("\n", journal));
          }
        }
        Set<String> missing = new java.util.TreeSet<>(expected);
        missing.removeAll(received);
        assertThat(missing)
            .as("seed %d: never handed out; journal:\n%s", seed, String.join("\n", journal))
            .isEmpty();
        assertThat(a.rescuedRows() + b.rescuedRows()).isZero();
      } finally {
        for (OpenTx tx : open) {
          tx.connection.rollback();
          tx.connection.close();
        }
      }
    }
  }

  /** An open transaction to publish {@code key} in, or a new one; null if another holds the key. */
  private static OpenTx pickTx(
      PostgresOutboxStore store, List<OpenTx> open, String key, java.util.Random random)
      throws Exception {
    if (key != null) {
      for (OpenTx tx : open) {
        if (tx.keys.contains(key)) {
          return random.nextBoolean() ? tx : null;
        }
      }
    }
    if (!open.isEmpty() && random.nextBoolean()) {
      return open.get(random.nextInt(open.size()));
    }
    OpenTx tx = new OpenTx(begin(store));
    open.add(tx);
    return tx;
  }

  /** Commits {@code tx} at once half the time (else it stays open across later steps). */
  private static void finishTx(
      OpenTx tx,
      List<OpenTx> open,
      java.util.Random random,
      Set<String> expected,
      java.util.Map<String, String[]> committedEvents,
      List<String> journal,
      int step)
      throws Exception {
    if (open.size() > 3 || random.nextBoolean()) {
      open.remove(tx);
      end(tx, true, expected, committedEvents, journal, step);
    }
  }

  private static void end(
      OpenTx tx,
      boolean commit,
      Set<String> expected,
      java.util.Map<String, String[]> committedEvents,
      List<String> journal,
      int step)
      throws Exception {
    if (commit) {
      tx.connection.commit();
      expected.addAll(tx.deliveries);
      for (String[] e : tx.published) {
        committedEvents.put(e[0], new String[] {e[1]});
      }
    } else {
      tx.connection.rollback();
    }
    tx.connection.close();
    journal.add(
        step
            + (commit ? " commit " : " rollback ")
            + System.identityHashCode(tx)
            + " "
            + tx.deliveries);
  }
}
