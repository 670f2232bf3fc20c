package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.Timer;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.FirstColumn;
import io.relaybus.store.testing.NewThreads;
import io.relaybus.store.testing.SilentServer;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * awaitWork on PostgreSQL: the schema's trigger NOTIFYs at commit, the store's own connection
 * LISTENs. A wait that returns {@code true} was woken (a timeout returns {@code false}), so the
 * tests wait with timeouts far longer than they allow the call to take.
 */
class PostgresWakeupsTest {
  private static final String SCHEMA = "wake";
  private static final Duration LONG = Duration.ofSeconds(60);
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private final List<PostgresOutboxStore> stores = new ArrayList<>();

  @AfterEach
  void close() {
    stores.forEach(PostgresOutboxStore::close);
  }

  private PostgresOutboxStore store(String schema, String prefix, Boolean notify) {
    PostgresOutboxStore.Builder builder =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema(schema)
            .tablePrefix(prefix)
            .poolSize(3);
    if (notify != null) {
      builder.notifyOnPublish(notify);
    }
    PostgresOutboxStore store = builder.build();
    stores.add(store);
    return store;
  }

  private PostgresOutboxStore setUp(String prefix) {
    PostgresOutboxStore store = store(SCHEMA, prefix, null);
    store.setup();
    return store;
  }

  private static String freshPrefix() {
    return "w" + PREFIXES.incrementAndGet() + "_";
  }

  private static OutboxEvent event(String id) {
    return OutboxEvent.builder("t").id(id).key("k").json("{}").handlers("h").build();
  }

  /**
   * Marks everything published so far as seen, as a task's claim does, and drains the wake-ups:
   * awaitWork returns at once when a log row the last claim's snapshot did not see has committed.
   * The lanes read are not known (as after a claim whose lanes were not all read to one snapshot):
   * a row in any lane is news.
   */
  private static void listening(PostgresOutboxStore store) throws Exception {
    PostgresLog.Seen now = snapshotNow();
    store.wakeups().seen(() -> now);
    drain(store);
  }

  /** A snapshot taken now, as the claim's page statement takes it. */
  private static PostgresLog.Seen snapshotNow() throws SQLException {
    try (Connection c = connection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT pg_current_snapshot()::text")) {
      rs.next();
      return new PostgresLog.Seen(rs.getString(1), null);
    }
  }

  private static void drain(PostgresOutboxStore store) throws InterruptedException {
    while (store.awaitWork(Duration.ofMillis(100))) {
      // drained
    }
  }

  private static CompletableFuture<Boolean> waitInBackground(PostgresOutboxStore store) {
    return CompletableFuture.supplyAsync(
        () -> {
          try {
            return store.awaitWork(LONG);
          } catch (InterruptedException e) {
            throw new IllegalStateException(e);
          }
        });
  }

  private static Connection connection() throws SQLException {
    return EmbeddedPostgres17.dataSource().getConnection();
  }

  private static void execute(String sql) throws SQLException {
    try (Connection c = connection();
        Statement s = c.createStatement()) {
      s.execute(sql);
    }
  }

  private static List<String> rows(String sql, Object... args) throws SQLException {
    return PostgresMigrationsTest.rows(sql, args);
  }

  @Test
  void aPublishCommittedOnAnotherConnectionWakesTheWait() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);
    CompletableFuture<Boolean> waiting = waitInBackground(store);

    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      store.publish(tx, event("e1"));
      tx.commit();
    }

    assertThat(waiting.get(30, TimeUnit.SECONDS)).as("woken, not timed out").isTrue();
    listening(store); // the task claims what woke it
    assertThat(store.awaitWork(Duration.ofMillis(200))).as("nothing more pending").isFalse();
  }

  /**
   * A publisher decides whether to notify when it inserts, by the waiting flag. One that took its
   * log id before the caller's last claim read the sequence, and commits only once the caller
   * waits, sent nothing: the wait went on to its timeout (the poll interval, 1 s as shipped). The
   * wait now keeps an eye on the transactions running when it began and ends when one of them
   * commits.
   */
  @Test
  void aPublishThatTookItsIdBeforeTheLastClaimAndCommitsDuringTheWaitWakesIt() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);
    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      store.publish(tx, event("early"));
      // the claim read the sequence after that id was taken, and could not see the row
      listening(store);
      CompletableFuture<Boolean> waiting = waitInBackground(store);
      Thread.sleep(300);
      assertThat(waiting).as("nothing committed yet").isNotDone();

      tx.commit();

      assertThat(waiting).succeedsWithin(Duration.ofSeconds(5)).isEqualTo(true);
    }
  }

  /**
   * The same publish committing after the claim but before the wait began: it is not among the
   * transactions running then, and its id is not past what the claim read, so the wait went on to
   * its timeout. Its row is one the claim's snapshot did not see, and the wait now starts by
   * looking for such rows.
   */
  @Test
  void aPublishThatTookItsIdBeforeTheLastClaimAndCommittedBeforeTheWaitWakesIt() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    List<LaneLease> leases =
        store.acquireLanes("A", "g", LaneRange.all().lanes(), Duration.ofMinutes(1));
    assertThat(store.claim("A", leases, 10)).isEmpty();
    drain(store); // the listener opened (a first wait reports true), the flag is up
    store.publish(event("other")); // notifies and lowers the flag
    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      store.publish(tx, event("early")); // the flag is down: it will not notify
      assertThat(store.claim("A", leases, 10))
          .as("the claim reads the sequence past early's id, and cannot see early")
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("other");
      drain(store); // other's notification

      tx.commit();
    }

    assertThat(waitInBackground(store)).succeedsWithin(Duration.ofSeconds(5)).isEqualTo(true);
    assertThat(store.claim("A", leases, 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly("early");
    assertThat(store.awaitWork(Duration.ofMillis(200))).as("nothing more pending").isFalse();
  }

  /**
   * The other side of the test above: a transaction that runs through the whole wait (a long report
   * writing its own table, a stuck client) and never commits does not end it; the wait looks at it
   * at doubling intervals and times out as before.
   */
  @Test
  void aTransactionRunningThroughTheWaitDoesNotEndIt() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);
    execute("CREATE TABLE IF NOT EXISTS " + SCHEMA + ".unrelated (x int)");
    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      try (Statement s = tx.createStatement()) {
        s.execute("INSERT INTO " + SCHEMA + ".unrelated VALUES (1)"); // it has an xid
      }

      assertThat(store.awaitWork(Duration.ofMillis(1500))).as("timed out, not woken").isFalse();

      tx.rollback();
    }
  }

  /** NOTIFY is sent at commit only: a rolled-back publish wakes nobody. */
  @Test
  void aPublishRolledBackWakesNothing() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);

    // the wait is under way when the publish rolls back: its ids moved the sequence, but no
    // notification comes
    CompletableFuture<Boolean> waiting =
        CompletableFuture.supplyAsync(
            () -> {
              try {
                return store.awaitWork(Duration.ofSeconds(3));
              } catch (InterruptedException e) {
                throw new IllegalStateException(e);
              }
            });
    Thread.sleep(500);
    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      store.publish(tx, event("rolled-back"));
      tx.rollback();
    }

    assertThat(waiting.get(10, java.util.concurrent.TimeUnit.SECONDS)).isFalse();
    listening(store);
    store.publish(event("committed"));
    assertThat(store.awaitWork(LONG)).isTrue();
  }

  /** The trigger is in the database: the SQL function wakes the wait as the Java store does. */
  @Test
  void aPlainSqlPublishWakesTheWait() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = setUp(prefix);
    listening(store);
    CompletableFuture<Boolean> waiting = waitInBackground(store);

    try (Connection c = connection();
        PreparedStatement publish =
            c.prepareStatement(
                "SELECT new_event FROM "
                    + SCHEMA
                    + "."
                    + prefix
                    + "publish('sql-1', 'order.placed', 'k', '{}'::bytea, 'application/json',"
                    + " '{}'::json, ARRAY['h'])");
        ResultSet rs = publish.executeQuery()) {
      assertThat(rs.next()).isTrue();
      assertThat(rs.getBoolean(1)).isTrue();
    }

    assertThat(waiting.get(30, TimeUnit.SECONDS)).isTrue();
  }

  /** One publish wakes every store of the outbox (each task listens), none of another prefix. */
  @Test
  void everyListenerOfTheOutboxIsWokenAndNoneOfAnother() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore one = setUp(prefix);
    PostgresOutboxStore two = store(SCHEMA, prefix, null);
    PostgresOutboxStore other = setUp(freshPrefix());
    listening(one);
    listening(two);
    listening(other);

    one.publish(event("e1"));

    assertThat(one.awaitWork(LONG)).isTrue();
    assertThat(two.awaitWork(LONG)).isTrue();
    assertThat(other.awaitWork(Duration.ofSeconds(1))).isFalse();
  }

  /**
   * Several tasks of one outbox wait at once, each on a listener of its own, and share the flag
   * that tells publishers to notify. One of them found work at once (the log's sequence had moved
   * since its last claim) while another was waiting: it lowered the flag on its way out, the next
   * publish sent nothing, and the other waited to its timeout (the poll interval, 1 s as shipped;
   * here 60 s). Now the flag is lowered by the publish that notifies, which every waiter hears.
   */
  @Test
  void aListenerThatFoundWorkAtOnceDoesNotSilenceAnotherThatWaits() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore one = setUp(prefix);
    PostgresOutboxStore two = store(SCHEMA, prefix, null);
    PostgresLog.Seen beforeE0 = snapshotNow();
    one.publish(event("e0"));
    listening(one);
    listening(two);
    CompletableFuture<Boolean> twoWaits = waitInBackground(two);
    String flag = "SELECT last_value FROM " + SCHEMA + "." + prefix + "waiting";
    await().atMost(Duration.ofSeconds(30)).until(() -> rows(flag).get(0).equals("1"));

    // one's last claim did not see e0: its wait ends at once
    one.wakeups().seen(() -> beforeE0);
    assertThat(one.awaitWork(LONG)).as("one: work since its last claim").isTrue();
    assertThat(twoWaits).as("two still waits").isNotDone();

    one.publish(event("e1"));

    assertThat(twoWaits.get(30, TimeUnit.SECONDS)).as("two woken by e1, not timed out").isTrue();
  }

  /**
   * A claim parks rows in the deliveries table, whose statement trigger fired even when it parked
   * none: while one task waited, another task's claim woke it, for an empty claim of its own.
   */
  @Test
  void anotherTasksClaimDoesNotWakeTheWait() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore one = setUp(prefix);
    PostgresOutboxStore two = store(SCHEMA, prefix, null);
    List<LaneLease> leases =
        one.acquireLanes("A", "g", LaneRange.all().lanes(), Duration.ofMinutes(1));
    one.publish(event("e1"));
    listening(two); // two has seen e1 and waits, the flag up

    assertThat(one.claim("A", leases, 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly("e1");

    assertThat(two.awaitWork(Duration.ofSeconds(2))).as("timed out, not woken").isFalse();
    one.publish(event("e2"));
    assertThat(two.awaitWork(LONG)).as("a publish still wakes it").isTrue();
  }

  /**
   * Two stores of one outbox, as two tasks: {@code one} publishes (and holds lanes 0-127 when
   * {@code oneHolds}), {@code two} holds lanes 128-255, has claimed (nothing) and drained its
   * wake-ups.
   */
  private record TwoTasks(
      String prefix,
      PostgresOutboxStore one,
      List<LaneLease> ones,
      PostgresOutboxStore two,
      List<LaneLease> twos) {
    static TwoTasks start(PostgresWakeupsTest test, boolean oneHolds) throws Exception {
      String prefix = freshPrefix();
      PostgresOutboxStore one = test.setUp(prefix);
      PostgresOutboxStore two = test.store(SCHEMA, prefix, null);
      List<Integer> all = LaneRange.all().lanes();
      List<LaneLease> ones =
          oneHolds
              ? one.acquireLanes("A", "g", all.subList(0, 128), Duration.ofMinutes(1))
              : List.of();
      List<LaneLease> twos =
          two.acquireLanes("B", "g", all.subList(128, 256), Duration.ofMinutes(1));
      if (oneHolds) {
        assertThat(one.claim("A", ones, 10)).isEmpty();
      }
      assertThat(two.claim("B", twos, 10)).isEmpty();
      drain(two);
      return new TwoTasks(prefix, one, ones, two, twos);
    }

    /** two waits in the background, the flag up. */
    CompletableFuture<Boolean> twoWaits() {
      CompletableFuture<Boolean> waiting = waitInBackground(two);
      awaitFlagUp();
      return waiting;
    }

    void awaitFlagUp() {
      String flag = "SELECT last_value FROM " + SCHEMA + "." + prefix + "waiting";
      await().atMost(Duration.ofSeconds(30)).until(() -> rows(flag).get(0).equals("1"));
    }

    List<String> twoClaims() {
      return two.claim("B", twos, 10).stream().map(ClaimedDelivery::eventId).toList();
    }
  }

  /** A key whose lane is in [from, to). */
  private static String keyInLanes(int from, int to) {
    for (int i = 0; ; i++) {
      int lane = Lanes.laneOf("key-" + i, null);
      if (lane >= from && lane < to) {
        return "key-" + i;
      }
    }
  }

  private static OutboxEvent keyed(String id, String key) {
    return OutboxEvent.builder("t").id(id).key(key).json("{}").handlers("h").build();
  }

  /**
   * Two tasks with half the lanes each. Every publish woke both, and the task whose lanes it was
   * not on made an empty claim; now its wait looks at its own lanes and goes on. The publish that
   * woke the other lowered the flag: the wait raises it again, so a publish on its own lanes still
   * notifies it at once.
   */
  @Test
  void aPublishOnAnotherTasksLanesDoesNotEndTheWaitAndOneOnItsOwnDoes() throws Exception {
    TwoTasks tasks = TwoTasks.start(this, true);
    CompletableFuture<Boolean> twoWaits = tasks.twoWaits();

    tasks.one().publish(keyed("a1", keyInLanes(0, 128)));
    tasks.awaitFlagUp(); // a1 lowered it, two raised it again
    Thread.sleep(500);
    assertThat(twoWaits).as("not two's lanes: two still waits").isNotDone();

    tasks.one().publish(keyed("b1", keyInLanes(128, 256)));

    assertThat(twoWaits).succeedsWithin(Duration.ofSeconds(5)).isEqualTo(true);
    assertThat(tasks.twoClaims()).containsExactly("b1");
    assertThat(tasks.one().claim("A", tasks.ones(), 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly("a1");
  }

  /**
   * The same after a handover: a task that held every lane and gave half of them up (relinquished,
   * as a task does when it hands lanes to a new one) waits for its own lanes only. Symptom: its
   * store kept the lanes' windows, which no claim of it reads again, so its lanes never all counted
   * as read up to one snapshot, and every publish on the lanes it had given up woke it, and it
   * claimed for nothing.
   */
  @Test
  void aTaskThatRelinquishedLanesIsNotWokenByPublishesOnThem() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore one = setUp(prefix);
    PostgresOutboxStore two = store(SCHEMA, prefix, null);
    List<Integer> all = LaneRange.all().lanes();
    List<LaneLease> everything = two.acquireLanes("B", "g", all, Duration.ofMinutes(1));
    assertThat(two.claim("B", everything, 10)).isEmpty();
    assertThat(two.relinquishLanes("B", everything.subList(0, 128))).isEqualTo(128);
    List<LaneLease> twos = everything.subList(128, 256);
    List<LaneLease> ones = one.acquireLanes("A", "g", all.subList(0, 128), Duration.ofMinutes(1));
    waitsForItsOwnLanesOnly(prefix, one, ones, two, twos);
  }

  /**
   * The same after a takeover: two is told at its renewal that lanes 0-127 went to another holder
   * (a task whose lease lapsed in a pause, or an older incarnation's lanes taken by a newer one),
   * and must stop counting their publishes as its news, without a restart.
   */
  @Test
  void aTaskWhoseLanesWereTakenOverIsNotWokenByPublishesOnThem() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore one = setUp(prefix);
    PostgresOutboxStore two = store(SCHEMA, prefix, null);
    List<Integer> all = LaneRange.all().lanes();
    List<LaneLease> everything = two.acquireLanes("B", "g", all, Duration.ofSeconds(1));
    assertThat(two.claim("B", everything, 10)).isEmpty();
    Thread.sleep(1_100); // two's leases lapse (its task paused)
    List<LaneLease> ones = one.acquireLanes("A", "g", all.subList(0, 128), Duration.ofMinutes(1));
    assertThat(ones).hasSize(128);
    List<LaneLease> twos = two.renewLanes("B", everything, Duration.ofMinutes(1));
    assertThat(twos).extracting(LaneLease::lane).containsExactlyElementsOf(all.subList(128, 256));
    waitsForItsOwnLanesOnly(prefix, one, ones, two, twos);
  }

  /**
   * One holds lanes 0-127, two lanes 128-255 after holding every lane: a publish on one's lanes
   * does not end two's wait, a publish on its own does.
   */
  private static void waitsForItsOwnLanesOnly(
      String prefix,
      PostgresOutboxStore one,
      List<LaneLease> ones,
      PostgresOutboxStore two,
      List<LaneLease> twos)
      throws Exception {
    assertThat(one.claim("A", ones, 10)).isEmpty();
    assertThat(two.claim("B", twos, 10)).isEmpty();
    drain(two);
    CompletableFuture<Boolean> twoWaits = waitInBackground(two);
    String flag = "SELECT last_value FROM " + SCHEMA + "." + prefix + "waiting";
    await().atMost(Duration.ofSeconds(30)).until(() -> rows(flag).get(0).equals("1"));

    one.publish(keyed("a1", keyInLanes(0, 128)));
    // a1 lowered the flag: two raises it again and goes on waiting (or, woken, returns)
    await()
        .atMost(Duration.ofSeconds(30))
        .until(() -> twoWaits.isDone() || rows(flag).get(0).equals("1"));
    Thread.sleep(500);
    assertThat(twoWaits).as("not two's lanes any more: two still waits").isNotDone();

    one.publish(keyed("b1", keyInLanes(128, 256)));
    assertThat(twoWaits).succeedsWithin(Duration.ofSeconds(5)).isEqualTo(true);
    assertThat(two.claim("B", twos, 10)).extracting(ClaimedDelivery::eventId).containsExactly("b1");
  }

  private static void signal(String signal, long pid) throws Exception {
    Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).start();
    assertThat(kill.waitFor()).as("kill -" + signal + " " + pid).isZero();
  }

  /**
   * The listener's peer stops answering: a hung backend here (SIGSTOP), as a connection a firewall
   * dropped silently or a server that froze (the socket stays open, no reply comes). awaitWork
   * waits "up to timeout" (the Connect task waits at most a second per poll and claims after it),
   * and the class doc promises such a connection "is found and replaced": so a wait of 500 ms must
   * end within seconds, not block in the wait's first statement for as long as the peer is silent.
   */
  @Test
  void aWaitEndsNearItsTimeoutWhenTheListenerStopsAnswering() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);
    Integer pid = store.wakeups().listenerPid();
    assertThat(pid).as("listening").isNotNull();

    signal("STOP", pid);
    CompletableFuture<Boolean> wait;
    try {
      wait =
          CompletableFuture.supplyAsync(
              () -> {
                try {
                  return store.awaitWork(Duration.ofMillis(500));
                } catch (InterruptedException e) {
                  throw new IllegalStateException(e);
                }
              });
      assertThat(wait)
          .as("a wait of 500 ms on a listener that does not answer, 15 s later")
          .succeedsWithin(Duration.ofSeconds(15));
    } finally {
      signal("CONT", pid);
    }
  }

  /**
   * What becomes due in the deliveries table (a timer, a retry) is not in the log: a notification
   * from there ends the wait whatever the lanes.
   */
  @Test
  void aTimerDueOnItsLanesEndsTheWait() throws Exception {
    TwoTasks tasks = TwoTasks.start(this, false);
    CompletableFuture<Boolean> twoWaits = tasks.twoWaits();

    tasks.one().schedule(keyed("t1", keyInLanes(128, 256)), Timer.in(Duration.ZERO));

    assertThat(twoWaits).succeedsWithin(Duration.ofSeconds(5)).isEqualTo(true);
    assertThat(tasks.twoClaims()).containsExactly("t1");
  }

  /**
   * A publish on its lanes that inserted while the flag was down (so it sent nothing), after
   * another task's publish had lowered it, and commits during the wait: the flag's statement lists
   * its transaction, and a look finds its row; not left to the timeout.
   */
  @Test
  void aPublishOnItsLanesThatSawTheFlagDownAndCommitsDuringTheWaitEndsIt() throws Exception {
    TwoTasks tasks = TwoTasks.start(this, false);
    tasks.one().publish(keyed("a0", keyInLanes(0, 128))); // notifies and lowers the flag
    drain(tasks.two()); // a0 is not two's: the wait raised the flag again and timed out
    execute(
        "SELECT setval('" + SCHEMA + "." + tasks.prefix() + "waiting', 0)"); // as a publish does
    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      tasks.one().publish(tx, keyed("b1", keyInLanes(128, 256))); // the flag is down: no notify
      CompletableFuture<Boolean> twoWaits = waitInBackground(tasks.two());
      Thread.sleep(300);
      assertThat(twoWaits).as("b1 not committed yet").isNotDone();

      tx.commit();

      assertThat(twoWaits).succeedsWithin(Duration.ofSeconds(5)).isEqualTo(true);
    }
    assertThat(tasks.twoClaims()).containsExactly("b1");
  }

  /**
   * A publish while no task waits calls no function of the store: since versions 15 and 16 the
   * wake-up trigger has the flag as its condition, and since this store version a one-event publish
   * takes its key's locks without {@code lock_keys} (the two calls were a fifth of its server
   * time). While a task waits, the trigger's function runs, once per publish, and lowers the flag.
   */
  @Test
  void aPublishWhileNoTaskWaitsCallsNoFunctionOfTheStore() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = setUp(prefix);
    String flag = SCHEMA + "." + prefix + "waiting";

    assertThat(functionsCalledBy(store, event("e1"))).as("nobody waits").isEmpty();
    assertThat(functionsCalledBy(store, keyed("e2", null))).as("unkeyed").isEmpty();

    execute("SELECT setval('" + flag + "', 1)"); // as a waiting task does
    assertThat(functionsCalledBy(store, event("e3"))).containsExactly(prefix + "notify_work 1");
    assertThat(rows("SELECT last_value FROM " + flag)).as("lowered").containsExactly("0");
    assertThat(functionsCalledBy(store, event("e4"))).isEmpty();
  }

  /** The store's functions {@code event}'s publish called in its transaction, and how often. */
  private static List<String> functionsCalledBy(PostgresOutboxStore store, OutboxEvent event)
      throws SQLException {
    try (Connection tx = connection()) {
      tx.setAutoCommit(false);
      try (Statement s = tx.createStatement()) {
        s.execute("SET LOCAL track_functions = 'all'");
      }
      store.publish(tx, event);
      List<String> calls =
          FirstColumn.of(
              tx,
              "SELECT funcname || ' ' || calls FROM pg_stat_xact_user_functions"
                  + " WHERE schemaname = '"
                  + SCHEMA
                  + "' ORDER BY 1");
      tx.commit();
      return calls;
    }
  }

  /**
   * A publisher's role needs on the outbox what docs/outbox-store.md lists (the tables, the log's
   * sequence), nothing on the waiting flag: the trigger reads and lowers it with its owner's
   * rights. Without them the publish itself failed, and only while a task waited.
   */
  @Test
  void aPublisherWithTheDocumentedRightsOnlyPublishesAndWakesTheWait() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = setUp(prefix);
    execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'wake_publisher') THEN"
            + " CREATE ROLE wake_publisher LOGIN; END IF; END $$");
    execute("GRANT USAGE ON SCHEMA " + SCHEMA + " TO wake_publisher");
    execute(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
            + SCHEMA
            + " TO wake_publisher");
    execute("GRANT USAGE ON SEQUENCE " + store.tableName("log_seq") + " TO wake_publisher");
    listening(store);
    CompletableFuture<Boolean> waiting = waitInBackground(store);
    String flag = "SELECT last_value FROM " + SCHEMA + "." + prefix + "waiting";
    await().atMost(Duration.ofSeconds(30)).until(() -> rows(flag).get(0).equals("1"));

    try (Connection tx =
        EmbeddedPostgres17.server().getDatabase("wake_publisher", "postgres").getConnection()) {
      tx.setAutoCommit(false);
      store.publish(tx, event("e1"));
      tx.commit();
    }

    assertThat(waiting.get(30, TimeUnit.SECONDS)).as("woken, not timed out").isTrue();
    assertThat(rows(flag)).as("lowered by the publish that notified").containsExactly("0");
  }

  /**
   * A listener whose backend is terminated: the next wait falls back (false, the failure logged),
   * delivery goes on, and a later wait listens again on a new backend (reporting true at once,
   * since a publish may have gone unseen meanwhile) and is woken by the next publish.
   */
  @Test
  void aTerminatedListenerFallsBackAndListensAgain() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);
    int killed = store.wakeups().listenerPid();
    assertThat(rows("SELECT query FROM pg_stat_activity WHERE pid = ?", killed))
        .singleElement()
        .asString()
        // its last statement: the LISTEN, or a look of a wait (with the flag set)
        .matches(q -> q.equals(store.wakeups().listenStatement()) || q.contains("pg_snapshot_xip"));

    assertThat(rows("SELECT pg_terminate_backend(?)", killed)).containsExactly("t");

    assertThat(store.awaitWork(Duration.ofMillis(500))).isFalse();
    assertThat(store.wakeups().listenerPid()).isNull();
    store.publish(event("while-down"));
    await().atMost(Duration.ofSeconds(30)).until(() -> store.awaitWork(Duration.ofMillis(300)));
    Integer listener = store.wakeups().listenerPid();
    assertThat(listener).isNotNull().isNotEqualTo(killed);
    assertThat(rows("SELECT query FROM pg_stat_activity WHERE pid = ?", listener))
        .singleElement()
        .asString()
        // its last statement: the LISTEN, or a look of a wait (with the flag set)
        .matches(q -> q.equals(store.wakeups().listenStatement()) || q.contains("pg_snapshot_xip"));

    listening(store);
    CompletableFuture<Boolean> waiting = waitInBackground(store);
    store.publish(event("after"));
    assertThat(waiting.get(30, TimeUnit.SECONDS)).isTrue();
  }

  /** close() ends a wait at once: it returns false long before its timeout. */
  @Test
  void closeEndsAWait() throws Exception {
    PostgresOutboxStore store = setUp(freshPrefix());
    listening(store);
    CompletableFuture<Boolean> waiting = waitInBackground(store);
    await().atMost(Duration.ofSeconds(10)).until(() -> store.wakeups().waiting());

    store.close();

    assertThat(waiting.get(30, TimeUnit.SECONDS)).isFalse();
  }

  /**
   * notifyOnPublish(false): setup() disables the trigger (no NOTIFY for any listener) and the store
   * does not listen; true enables it again; unset leaves it as it is.
   */
  @Test
  void notifyOnPublishSwitchesTheTriggerAndUnsetLeavesIt() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore listener = setUp(prefix);
    String state =
        "SELECT tgenabled FROM pg_trigger WHERE tgrelid = '"
            + SCHEMA
            + "."
            + prefix
            + "deliveries'::regclass AND tgname = '"
            + prefix
            + "notify_work'";
    assertThat(rows(state)).containsExactly("O");
    listening(listener);

    PostgresOutboxStore off = store(SCHEMA, prefix, false);
    off.setup();
    assertThat(rows(state)).containsExactly("D");
    CompletableFuture<Boolean> waiting =
        CompletableFuture.supplyAsync(
            () -> {
              try {
                return listener.awaitWork(Duration.ofSeconds(2));
              } catch (InterruptedException e) {
                throw new IllegalStateException(e);
              }
            });
    Thread.sleep(500); // the wait is under way: only a notification could end it early
    off.publish(event("unnoticed"));
    assertThat(waiting.get(10, TimeUnit.SECONDS)).isFalse();
    listening(listener);
    assertThat(off.wakeups()).isNull();
    assertThat(off.awaitWork(Duration.ofMillis(10))).isFalse();

    store(SCHEMA, prefix, null).setup();
    assertThat(rows(state)).containsExactly("D");

    store(SCHEMA, prefix, true).setup();
    assertThat(rows(state)).containsExactly("O");
    off.publish(event("noticed"));
    assertThat(listener.awaitWork(LONG)).isTrue();
  }

  /**
   * A setup() that finds the trigger dropped puts it back (the repair path); one that finds it as
   * wanted changes no catalog row.
   */
  @Test
  void setupRestoresADroppedTrigger() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = setUp(prefix);
    execute("DROP TRIGGER " + prefix + "notify_work ON " + SCHEMA + "." + prefix + "deliveries");
    String triggers =
        "SELECT tgname || ':' || tgenabled::text || ':' || xmin FROM pg_trigger WHERE tgrelid = '"
            + SCHEMA
            + "."
            + prefix
            + "deliveries'::regclass AND NOT tgisinternal AND tgname LIKE '%notify_work'";
    assertThat(rows(triggers)).isEmpty();

    store.setup();
    List<String> restored = rows(triggers);
    assertThat(restored).singleElement().asString().startsWith(prefix + "notify_work:O:");
    store(SCHEMA, prefix, true).setup();
    assertThat(rows(triggers)).isEqualTo(restored);
  }

  /**
   * A schema and prefix whose channel would pass 63 bytes get a shortened one (hash-suffixed) that
   * LISTEN and pg_notify agree on.
   */
  @Test
  void aLongSchemaAndPrefixGetAShortenedChannelThatWorks() throws Exception {
    String schema = "wake_" + "s".repeat(50);
    String prefix = "p".repeat(30) + "_";
    PostgresTables tables = new PostgresTables(schema, prefix);
    assertThat(tables.notifyChannel())
        .hasSize(PostgresTables.MAX_CHANNEL_LENGTH)
        .startsWith(schema.substring(0, 46))
        .matches(".{46}_[0-9a-f]{16}");
    assertThat(new PostgresTables("public", "relaybus_").notifyChannel())
        .isEqualTo("public.relaybus_outbox_work");
    PostgresOutboxStore store = store(schema, prefix, null);
    store.setup();
    assertThat(store.notifyChannel()).isEqualTo(tables.notifyChannel());
    listening(store);

    store.publish(event("e1"));

    assertThat(store.awaitWork(LONG)).isTrue();
  }

  /**
   * A server that accepts connections and never answers (stopped, a frozen VM): each open of the
   * listener gives up at the connect timeout, and its connection attempt ends with it. Before, the
   * listener's connection had no socket timeout: pgjdbc's login thread (loginTimeout stops waiting
   * for it, not the thread) stayed blocked reading for as long as the server stayed silent, one
   * more thread and socket at every reopen (1 s, 2 s, 4 s ... 60 s apart), past close().
   */
  @Test
  void listenerOpensAgainstAServerThatNeverAnswersLeaveNoThreadBehind() throws Exception {
    try (SilentServer silent = SilentServer.start()) {
      NewThreads threads = NewThreads.since(silent.acceptor());
      // sslmode=disable: pgjdbc bounds its wait for the answer to an SSL request (5 s), not for
      // the answer to the startup message
      PostgresOutboxStore store =
          PostgresOutboxStore.builder()
              .jdbcUrl(silent.jdbcUrl("db?sslmode=disable"))
              .connectTimeout(Duration.ofSeconds(1))
              .statementTimeout(Duration.ofSeconds(1)) // the pool's socket timeout: 6 s
              .poolSize(1)
              .build();
      try {
        // opens at once, again after 1 s and after 2 more: three listeners tried
        long until = System.nanoTime() + Duration.ofSeconds(6).toNanos();
        while (System.nanoTime() < until) {
          assertThat(store.awaitWork(Duration.ofMillis(500))).isFalse();
        }
      } finally {
        store.close();
      }

      assertThat(threads.leftAfter(Duration.ofSeconds(20))).isEmpty();
    }
  }
}
