package io.relaybus.store.postgres;

import static io.relaybus.store.postgres.PostgresMigrationsTest.rows;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/**
 * A rolling upgrade from the released version 1 while publishers and a consumer run, as it happens
 * in the field: the database and every instance start at version 1 ({@link VersionOneClient}: its
 * SQL verbatim). Four publisher threads write keyed events in transactions held open 0-3 ms (every
 * fifteenth 250 ms, half the migrations' lock timeout; every tenth rolled back); a version-1
 * consumer holds all lanes, claims and completes, slower than the publishers, so a backlog of
 * version-1 deliveries builds up. Mid-stream this relaybus's setup() runs every migration under
 * that load (the shipped lock timeout, 500 ms, retried). Then the instances roll: two publishers
 * switch to this relaybus's Java publisher, one to the SQL function, one stays on version-1 SQL (an
 * old instance still running: the trigger turns its delivery inserts into log rows); the old
 * consumer stops the way a stopped task does (its last batch half acknowledged), relinquishes its
 * lanes, and this relaybus's consumer takes them. Later four test-only migrations take ACCESS
 * EXCLUSIVE on events, log, deliveries and lanes, one each, under the same load.
 *
 * <p>What must hold: every committed (event, handler) is received, nothing rolled back is; the only
 * deliveries received twice are exactly those the old consumer had claimed and not completed when
 * it handed over; and per (handler, key) the sequences go up in the order received (version 1's key
 * sequences, then log ids, which the migration starts above every version-1 sequence), by each
 * consumer and across the handover.
 */
class SchemaUpgradeUnderLoadTest {
  private static final String PREFIX = "roll_";
  private static final int PUBLISHERS = 4;
  // Transactions per publisher: version 1 before the upgrade (and on while it runs), then the
  // rolled paths until the test migration is done and this many at least
  private static final int BEFORE = 60;
  private static final int AFTER = 120;
  private static final List<String> KEYS = List.of("k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  private static final List<String> HANDLERS = List.of("a", "b");
  private static final List<Integer> ALL_LANES = IntStream.range(0, 256).boxed().toList();

  /** How a transaction published: which version's code an instance ran. */
  private enum Path {
    VERSION_ONE_BEFORE,
    VERSION_ONE_AFTER,
    JAVA,
    FUNCTION
  }

  private record Published(String id, String key, Path path) {}

  private record Got(String consumer, String eventId, String handler, String key, Long sequence) {
    List<String> pair() {
      return List.of(eventId, handler);
    }
  }

  @Test
  void rollingUpgradeFromVersionOneLosesNothingAndKeepsKeyOrder() throws Exception {
    PostgresMigrationsTest.setup(PostgresMigrationsTest.versionOne(PREFIX));
    PostgresTables tables = new PostgresTables(PostgresMigrationsTest.SCHEMA, PREFIX);
    VersionOneClient old = new VersionOneClient(tables);
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema(PostgresMigrationsTest.SCHEMA)
            .tablePrefix(PREFIX)
            .poolSize(10)
            .build();
    ConcurrentLinkedQueue<Published> committed = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<String> rolledBack = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<Got> received = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
    Map<Path, AtomicInteger> committedBy = new EnumMap<>(Path.class);
    for (Path path : Path.values()) {
      committedBy.put(path, new AtomicInteger());
    }
    AtomicInteger transactions = new AtomicInteger();
    AtomicInteger afterUpgrade = new AtomicInteger();
    AtomicBoolean upgraded = new AtomicBoolean();
    AtomicBoolean migratedAgain = new AtomicBoolean();
    AtomicBoolean handOver = new AtomicBoolean();
    AtomicBoolean stop = new AtomicBoolean();
    CountDownLatch go = new CountDownLatch(1);
    CountDownLatch handedOver = new CountDownLatch(1);
    Set<List<String>> inFlightAtHandover = ConcurrentHashMap.newKeySet();
    int[] committedAt = new int[3];
    int[] lockRetries = new int[2];
    int[] backlogAtHandover = new int[1];
    ExecutorService pool = Executors.newFixedThreadPool(PUBLISHERS + 3);
    try {
      // the version-1 consumer: slower than the publishers (8 a claim, 50 ms between), so a
      // backlog of version-1 deliveries is pending when it hands over
      Future<?> oldConsumer =
          pool.submit(
              () -> {
                List<LaneLease> leases;
                try (Connection c = store.dataSource().getConnection()) {
                  c.setAutoCommit(false);
                  leases = old.acquire(c, "consumer-1", "g", ALL_LANES, Duration.ofMinutes(10));
                  c.commit();
                }
                assertThat(leases).hasSize(256);
                go.countDown();
                while (!handOver.get()) {
                  List<ClaimedDelivery> batch = claimWithVersionOne(store, old, leases, received);
                  if (!batch.isEmpty()) {
                    List<DeliveryToken> tokens =
                        batch.stream().map(ClaimedDelivery::token).toList();
                    try (Connection c = store.dataSource().getConnection()) {
                      assertThat(old.complete(c, tokens)).hasSize(tokens.size());
                    }
                  }
                  Thread.sleep(50);
                }
                // Stopped as a task stops: the last batch was sent, half of it acknowledged.
                List<ClaimedDelivery> last = claimWithVersionOne(store, old, leases, received);
                List<ClaimedDelivery> acked = last.subList(0, last.size() / 2);
                List<ClaimedDelivery> unacked = last.subList(last.size() / 2, last.size());
                try (Connection c = store.dataSource().getConnection()) {
                  assertThat(old.complete(c, acked.stream().map(ClaimedDelivery::token).toList()))
                      .hasSize(acked.size());
                  unacked.forEach(d -> inFlightAtHandover.add(List.of(d.eventId(), d.handler())));
                  assertThat(old.relinquish(c, "consumer-1", leases)).isEqualTo(256);
                  // fenced: an acknowledgement after the handover completes nothing
                  assertThat(old.complete(c, unacked.stream().map(ClaimedDelivery::token).toList()))
                      .isEmpty();
                }
                backlogAtHandover[0] =
                    Integer.parseInt(
                        rows("SELECT count(*) FROM mig." + PREFIX + "deliveries").get(0));
                handedOver.countDown();
                return null;
              });
      Future<?> newConsumer =
          pool.submit(
              () -> {
                handedOver.await();
                List<LaneLease> leases =
                    store.acquireLanes("consumer-2", "g", ALL_LANES, Duration.ofMinutes(10));
                assertThat(leases).hasSize(256);
                while (!stop.get()) {
                  List<ClaimedDelivery> batch = store.claim("consumer-2", leases, 64);
                  List<DeliveryToken> tokens = new ArrayList<>();
                  for (ClaimedDelivery d : ClaimedDelivery.inKeyOrder(batch)) {
                    received.add(got("new", d));
                    tokens.add(d.token());
                  }
                  if (!tokens.isEmpty()) {
                    assertThat(store.complete(tokens)).hasSize(tokens.size());
                  } else {
                    Thread.sleep(5);
                  }
                }
                return null;
              });
      List<Future<?>> publishers = new ArrayList<>();
      for (int p = 0; p < PUBLISHERS; p++) {
        int publisher = p;
        publishers.add(
            pool.submit(
                () -> {
                  go.await();
                  Random random = new Random(publisher);
                  Path rolled =
                      switch (publisher) {
                        case 0, 1 -> Path.JAVA;
                        case 2 -> Path.FUNCTION;
                        default -> Path.VERSION_ONE_AFTER;
                      };
                  int t = 0;
                  // stop: the test failed or ended; without it a failed upgrade left these
                  // running (every error is caught) past the test, and the JVM could not exit
                  for (int after = 0; !stop.get() && (!migratedAgain.get() || after < AFTER); t++) {
                    // the path is chosen when the transaction starts, as an instance runs one
                    boolean rolledOut = upgraded.get();
                    try {
                      publishOne(
                          store,
                          old,
                          rolledOut ? rolled : Path.VERSION_ONE_BEFORE,
                          random,
                          publisher,
                          t,
                          committed,
                          rolledBack,
                          committedBy);
                    } catch (Throwable e) {
                      errors.add(e);
                    }
                    transactions.incrementAndGet();
                    if (rolledOut) {
                      after++;
                      afterUpgrade.incrementAndGet();
                    }
                  }
                  return null;
                }));
      }
      Future<?> upgrade =
          pool.submit(
              () -> {
                go.await();
                await()
                    .atMost(Duration.ofMinutes(2))
                    .until(() -> transactions.get() >= PUBLISHERS * BEFORE);
                committedAt[0] = committed.size();
                // as shipped: lock timeout 500 ms, retried for up to 2 minutes. (At 100 ms it never
                // got its locks under this load: a writer of key_sequences or deliveries that waits
                // behind a 250 ms transaction on a hot key's row holds its own lock longer still.)
                PostgresSchema current = new PostgresSchema(tables);
                try (Connection c = store.dataSource().getConnection()) {
                  current.setup(c);
                }
                lockRetries[0] = current.lockRetries();
                upgraded.set(true);
                await().atMost(Duration.ofMinutes(2)).until(() -> afterUpgrade.get() >= 20);
                committedAt[1] = committed.size();
                handOver.set(true);
                handedOver.await();
                await()
                    .atMost(Duration.ofMinutes(2))
                    .until(() -> afterUpgrade.get() >= PUBLISHERS * AFTER / 2);
                committedAt[2] = committed.size();
                // ACCESS EXCLUSIVE on four tables, one per migration (two in one transaction
                // deadlocked with the claims, which read the log before events: on a loaded CI
                // machine every attempt for 2 minutes), with the shipped lock timeout (500 ms) as
                // the
                // upgrade above: at 100 ms it got its locks only on an idle machine (a claim or a
                // publish stretched by a loaded CPU outlasts it; one publisher transaction in
                // fifteen holds its locks 250 ms anyway).
                PostgresSchema later =
                    new PostgresSchema(
                        tables,
                        PostgresMigrationsTest.withTestMigration(),
                        PostgresSchema.LOCK_TIMEOUT,
                        Duration.ofMinutes(2));
                try (Connection c = store.dataSource().getConnection()) {
                  later.setup(c);
                }
                lockRetries[1] = later.lockRetries();
                migratedAgain.set(true);
                return null;
              });
      upgrade.get(5, TimeUnit.MINUTES);
      for (Future<?> publisher : publishers) {
        publisher.get(5, TimeUnit.MINUTES);
      }
      oldConsumer.get(1, TimeUnit.MINUTES);
      Set<List<String>> want = new HashSet<>();
      for (Published e : committed) {
        for (String handler : HANDLERS) {
          want.add(List.of(e.id(), handler));
        }
      }
      // until everything came, or the assertions below say what did not
      long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1);
      while (!received.stream().map(Got::pair).collect(Collectors.toSet()).containsAll(want)
          && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
      stop.set(true);
      newConsumer.get(1, TimeUnit.MINUTES);

      List<Got> got = new ArrayList<>(received);
      long byOld = got.stream().filter(g -> g.consumer().equals("old")).count();
      System.out.printf(
          "committed %d events (%d before the upgrade, %d before the handover, %d before the test"
              + " migration; by path %s), %d rolled back; received %d deliveries (%d by the version-1"
              + " consumer), %d pending in deliveries at the handover, %d in flight; lock retries:"
              + " upgrade %d, test migration %d%n",
          committed.size(),
          committedAt[0],
          committedAt[1],
          committedAt[2],
          committedBy,
          rolledBack.size(),
          got.size(),
          byOld,
          backlogAtHandover[0],
          inFlightAtHandover.size(),
          lockRetries[0],
          lockRetries[1]);
      assertThat(errors).isEmpty();
      assertThat(rows("SELECT version FROM mig." + PREFIX + "schema_version ORDER BY 1"))
          .containsExactlyElementsOf(
              PostgresMigrationsTest.versions(PostgresMigrationsTest.withTestMigration()));
      assertThat(committedAt[0]).as("committed before the upgrade").isPositive();
      assertThat(committedAt[1]).isGreaterThan(committedAt[0]);
      assertThat(committedAt[2]).isGreaterThan(committedAt[1]);
      assertThat(committed.size()).isGreaterThan(committedAt[2]);
      for (Path path : Path.values()) {
        assertThat(committedBy.get(path).get()).as("events committed by %s", path).isPositive();
      }
      assertThat(backlogAtHandover[0])
          .as("version-1 deliveries pending when the new consumer took over")
          .isPositive();

      // nothing lost, nothing rolled back received (what is missing is printed with its rows)
      Set<List<String>> missing = new HashSet<>(want);
      got.forEach(g -> missing.remove(g.pair()));
      Map<String, Path> pathOf = new HashMap<>();
      committed.forEach(e -> pathOf.put(e.id(), e.path()));
      System.out.println(
          "missing by path: "
              + missing.stream()
                  .collect(
                      Collectors.groupingBy(m -> pathOf.get(m.get(0)), Collectors.counting())));
      for (List<String> pair : missing.stream().limit(5).toList()) {
        System.out.println(
            "missing "
                + pair
                + ": log "
                + rows(
                    "SELECT id, lane, handlers, key, xid, created_at FROM mig."
                        + PREFIX
                        + "log WHERE event_id = ?",
                    pair.get(0))
                + ", deliveries "
                + rows(
                    "SELECT id, lane, sequence, status, attempts, claims, available_at, xid FROM mig."
                        + PREFIX
                        + "deliveries WHERE event_id = ? AND handler = ?",
                    pair.get(0),
                    pair.get(1)));
      }
      assertThat(got.stream().map(Got::pair).collect(Collectors.toSet())).isEqualTo(want);
      assertThat(got).extracting(Got::eventId).doesNotContainAnyElementsOf(rolledBack);

      // twice: exactly what the old consumer had claimed and not completed, once by each
      Map<List<String>, List<String>> consumersOf = new HashMap<>();
      got.forEach(
          g -> consumersOf.computeIfAbsent(g.pair(), k -> new ArrayList<>()).add(g.consumer()));
      Map<List<String>, List<String>> twice =
          consumersOf.entrySet().stream()
              .filter(e -> e.getValue().size() > 1)
              .collect(Collectors.toMap(Map.Entry::getKey, Map.Entry::getValue));
      assertThat(twice.keySet()).isEqualTo(inFlightAtHandover);
      assertThat(twice.values()).allSatisfy(c -> assertThat(c).containsExactly("old", "new"));

      // per handler and key, the sequences go up in the order received: by each consumer, and
      // across the handover once the redelivered ones are left out
      for (String handler : HANDLERS) {
        for (String key : KEYS) {
          List<Got> ofKey =
              got.stream().filter(g -> g.handler().equals(handler) && key.equals(g.key())).toList();
          assertThat(ofKey).extracting(Got::sequence).doesNotContainNull();
          for (String consumer : List.of("old", "new")) {
            assertThat(ofKey.stream().filter(g -> g.consumer().equals(consumer)).map(Got::sequence))
                .as("sequences %s received for %s, %s", consumer, handler, key)
                .isSortedAccordingTo(Comparator.naturalOrder())
                .doesNotHaveDuplicates();
          }
          Set<List<String>> seen = new HashSet<>();
          List<Long> firsts =
              ofKey.stream().filter(g -> seen.add(g.pair())).map(Got::sequence).toList();
          assertThat(firsts)
              .as("sequences received for %s, %s, first receipts", handler, key)
              .isSortedAccordingTo(Comparator.naturalOrder())
              .doesNotHaveDuplicates();
        }
      }
    } finally {
      stop.set(true);
      handOver.set(true);
      pool.shutdownNow();
      pool.awaitTermination(1, TimeUnit.MINUTES);
      store.close();
    }
  }

  private static Got got(String consumer, ClaimedDelivery d) {
    return new Got(consumer, d.eventId(), d.handler(), d.key(), d.sequence());
  }

  /** One claim of the version-1 consumer in its own transaction, recorded as received. */
  private static List<ClaimedDelivery> claimWithVersionOne(
      PostgresOutboxStore store,
      VersionOneClient old,
      List<LaneLease> leases,
      ConcurrentLinkedQueue<Got> received)
      throws Exception {
    List<ClaimedDelivery> batch;
    try (Connection c = store.dataSource().getConnection()) {
      c.setAutoCommit(false);
      batch = old.claim(c, "consumer-1", leases, 8);
      c.commit();
    }
    batch.forEach(d -> received.add(got("old", d)));
    return batch;
  }

  /**
   * One transaction of 1 to 3 events (keyed mostly, some without a key) along {@code path}, held
   * open 0-3 ms after the publish (every fifteenth 250 ms); every tenth rolled back.
   */
  private static void publishOne(
      PostgresOutboxStore store,
      VersionOneClient old,
      Path path,
      Random random,
      int publisher,
      int t,
      ConcurrentLinkedQueue<Published> committed,
      ConcurrentLinkedQueue<String> rolledBack,
      Map<Path, AtomicInteger> committedBy)
      throws Exception {
    List<Published> events = new ArrayList<>();
    int count = 1 + random.nextInt(3);
    for (int e = 0; e < count; e++) {
      String key = random.nextInt(8) == 0 ? null : KEYS.get(random.nextInt(KEYS.size()));
      events.add(new Published("p" + publisher + "-t" + t + "-e" + e, key, path));
    }
    List<OutboxEvent> outbox =
        events.stream()
            .map(
                e ->
                    OutboxEvent.builder("t")
                        .id(e.id())
                        .key(e.key())
                        .json("{\"n\":1}")
                        .handlers(HANDLERS.toArray(String[]::new))
                        .build())
            .toList();
    boolean rollback = t % 10 == 9;
    try (Connection c = store.dataSource().getConnection()) {
      c.setAutoCommit(false);
      try {
        switch (path) {
          case VERSION_ONE_BEFORE, VERSION_ONE_AFTER -> old.publishAll(c, outbox);
          case JAVA -> store.publishAll(c, outbox);
          case FUNCTION -> {
            // one key at a time in key order, as publishAll takes them, so no two deadlock
            List<Published> sorted = new ArrayList<>(events);
            sorted.sort(
                Comparator.comparing(Published::key, Comparator.nullsFirst(String::compareTo)));
            for (Published e : sorted) {
              publishWithFunction(c, e.id(), e.key());
            }
          }
        }
        // now and then a transaction that holds its locks 250 ms, half the migrations' lock timeout
        Thread.sleep(t % 15 == 7 ? 250 : random.nextInt(4));
        if (rollback) {
          c.rollback();
          events.forEach(e -> rolledBack.add(e.id()));
        } else {
          c.commit();
          committed.addAll(events);
          committedBy.get(path).addAndGet(events.size());
        }
      } catch (Exception e) {
        c.rollback();
        throw e;
      }
    }
  }

  private static void publishWithFunction(Connection c, String id, String key) throws Exception {
    try (PreparedStatement ps =
        c.prepareStatement(
            "SELECT new_event FROM mig." + PREFIX + "publish(?, ?, ?, ?, ?, ?::json, ?)")) {
      ps.setString(1, id);
      ps.setString(2, "t");
      ps.setString(3, key);
      ps.setBytes(4, "{\"n\":1}".getBytes(StandardCharsets.UTF_8));
      ps.setString(5, "application/json");
      ps.setString(6, "{}");
      ps.setArray(7, c.createArrayOf("text", HANDLERS.toArray()));
      try (ResultSet rs = ps.executeQuery()) {
        assertThat(rs.next()).isTrue();
        assertThat(rs.getBoolean(1)).isTrue();
      }
    }
  }
}
