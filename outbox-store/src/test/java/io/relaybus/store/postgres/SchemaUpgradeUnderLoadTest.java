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
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/**
 * The upgrade in place while publishers and a consumer run: a database of the released version 1,
 * four publisher threads writing keyed events in transactions that stay open a little (some rolled
 * back), a consumer that leases all lanes, claims and completes as the connector does; setup() of
 * this relaybus runs mid-stream (version 2), then a test-only version 3 that takes ACCESS EXCLUSIVE
 * on deliveries and lanes. After the upgrade one publisher switches to the new SQL function.
 */
class SchemaUpgradeUnderLoadTest {
  private static final String PREFIX = "live_";
  private static final int PUBLISHERS = 4;
  private static final int TRANSACTIONS = 120; // per publisher
  private static final List<String> KEYS = List.of("k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
  private static final List<String> HANDLERS = List.of("a", "b");

  private record Published(String id, String key) {}

  private record Got(String eventId, String handler, String key, Long sequence) {}

  @Test
  void upgradeWhilePublishingAndDeliveringLosesNothingAndKeepsKeyOrder() throws Exception {
    PostgresMigrationsTest.setup(PostgresMigrationsTest.versionOne(PREFIX));
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema(PostgresMigrationsTest.SCHEMA)
            .tablePrefix(PREFIX)
            .poolSize(8)
            .build();
    ConcurrentLinkedQueue<Published> committed = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<String> rolledBack = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<Got> received = new ConcurrentLinkedQueue<>();
    ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
    AtomicInteger transactions = new AtomicInteger();
    AtomicInteger viaFunction = new AtomicInteger();
    AtomicBoolean upgraded = new AtomicBoolean();
    AtomicBoolean stop = new AtomicBoolean();
    int[] committedAtUpgrade = new int[2];
    int[] lockRetries = new int[1];
    ExecutorService pool = Executors.newFixedThreadPool(PUBLISHERS + 2);
    CountDownLatch go = new CountDownLatch(1);
    try {
      Future<?> consumer =
          pool.submit(
              () -> {
                List<LaneLease> leases =
                    store.acquireLanes(
                        "consumer-1",
                        "g",
                        IntStream.range(0, 256).boxed().toList(),
                        Duration.ofMinutes(10));
                assertThat(leases).hasSize(256);
                go.countDown();
                while (!stop.get()) {
                  List<ClaimedDelivery> batch = store.claim("consumer-1", leases, 64);
                  List<DeliveryToken> tokens = new ArrayList<>();
                  for (ClaimedDelivery d : ClaimedDelivery.inKeyOrder(batch)) {
                    received.add(new Got(d.eventId(), d.handler(), d.key(), d.sequence()));
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
                  for (int t = 0; t < TRANSACTIONS; t++) {
                    try {
                      publishOne(
                          store,
                          random,
                          publisher,
                          t,
                          upgraded.get() && publisher == 0,
                          committed,
                          rolledBack,
                          viaFunction);
                    } catch (Throwable e) {
                      errors.add(e);
                    }
                    transactions.incrementAndGet();
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
                    .until(() -> transactions.get() >= PUBLISHERS * TRANSACTIONS / 4);
                committedAtUpgrade[0] = committed.size();
                try (Connection c = store.dataSource().getConnection()) {
                  new PostgresSchema(new Tables(PostgresMigrationsTest.SCHEMA, PREFIX)).setup(c);
                }
                upgraded.set(true);
                await()
                    .atMost(Duration.ofMinutes(2))
                    .until(() -> transactions.get() >= PUBLISHERS * TRANSACTIONS / 2);
                committedAtUpgrade[1] = committed.size();
                PostgresSchema three =
                    new PostgresSchema(
                        new Tables(PostgresMigrationsTest.SCHEMA, PREFIX),
                        PostgresMigrationsTest.withTestMigration(),
                        Duration.ofMillis(100),
                        Duration.ofMinutes(2));
                try (Connection c = store.dataSource().getConnection()) {
                  three.setup(c);
                }
                lockRetries[0] = three.lockRetries();
                return null;
              });
      upgrade.get(5, TimeUnit.MINUTES);
      for (Future<?> publisher : publishers) {
        publisher.get(5, TimeUnit.MINUTES);
      }
      int expected = committed.size() * HANDLERS.size();
      await().atMost(Duration.ofMinutes(2)).until(() -> received.size() >= expected);
      stop.set(true);
      consumer.get(1, TimeUnit.MINUTES);

      System.out.printf(
          "committed %d events (%d before version 2, %d before version 3, %d through the function),"
              + " %d rolled back, %d deliveries received, version 3 retried %d times for locks%n",
          committed.size(),
          committedAtUpgrade[0],
          committedAtUpgrade[1],
          viaFunction.get(),
          rolledBack.size(),
          received.size(),
          lockRetries[0]);
      assertThat(errors).isEmpty();
      assertThat(committedAtUpgrade[0]).as("committed before version 2").isPositive();
      assertThat(committedAtUpgrade[1]).isGreaterThan(committedAtUpgrade[0]);
      assertThat(committed.size()).as("committed in the end").isGreaterThan(committedAtUpgrade[1]);
      assertThat(viaFunction.get()).as("published through the SQL function").isPositive();
      assertThat(rows("SELECT version FROM mig." + PREFIX + "schema_version ORDER BY 1"))
          .containsExactly("1", "2", "3");

      // nothing lost, nothing twice, nothing rolled back
      Set<List<String>> want = new HashSet<>();
      for (Published e : committed) {
        for (String handler : HANDLERS) {
          want.add(List.of(e.id(), handler));
        }
      }
      List<List<String>> got =
          received.stream().map(g -> List.of(g.eventId(), g.handler())).toList();
      assertThat(got).hasSize(want.size()).doesNotHaveDuplicates();
      assertThat(new HashSet<>(got)).isEqualTo(want);
      assertThat(received).extracting(Got::eventId).doesNotContainAnyElementsOf(rolledBack);

      // per handler and key: the sequences 1..n of the key's committed events, in that order
      Map<String, Integer> perKey = new HashMap<>();
      committed.stream()
          .filter(e -> e.key() != null)
          .forEach(e -> perKey.merge(e.key(), 1, Integer::sum));
      for (String handler : HANDLERS) {
        for (String key : KEYS) {
          assertThat(
                  received.stream()
                      .filter(g -> g.handler().equals(handler) && key.equals(g.key()))
                      .map(Got::sequence)
                      .toList())
              .as("sequences delivered to %s for %s", handler, key)
              .containsExactlyElementsOf(
                  IntStream.rangeClosed(1, perKey.getOrDefault(key, 0))
                      .mapToObj(Long::valueOf)
                      .toList());
        }
      }

      // the new function, right after: the next sequence of its key, delivered
      try (Connection c = store.dataSource().getConnection()) {
        publishWithFunction(c, "after", "k0", "a");
      }
      List<LaneLease> leases =
          store.acquireLanes(
              "consumer-2", "g", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(1));
      List<ClaimedDelivery> last = store.claim("consumer-2", leases, 10);
      assertThat(last)
          .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler, ClaimedDelivery::sequence)
          .containsExactly(
              org.assertj.core.groups.Tuple.tuple("after", "a", perKey.get("k0") + 1L));
    } finally {
      stop.set(true);
      pool.shutdownNow();
      pool.awaitTermination(1, TimeUnit.MINUTES);
      store.close();
    }
  }

  /**
   * One transaction of 1 to 3 events (keyed mostly, some without a key), held open 0-3 ms after the
   * publish (every fifteenth 250 ms); every tenth rolled back.
   */
  private static void publishOne(
      PostgresOutboxStore store,
      Random random,
      int publisher,
      int t,
      boolean withFunction,
      ConcurrentLinkedQueue<Published> committed,
      ConcurrentLinkedQueue<String> rolledBack,
      AtomicInteger viaFunction)
      throws Exception {
    List<Published> events = new ArrayList<>();
    int count = 1 + random.nextInt(3);
    for (int e = 0; e < count; e++) {
      String key = random.nextInt(8) == 0 ? null : KEYS.get(random.nextInt(KEYS.size()));
      events.add(new Published("p" + publisher + "-t" + t + "-e" + e, key));
    }
    boolean rollback = t % 10 == 9;
    try (Connection c = store.dataSource().getConnection()) {
      c.setAutoCommit(false);
      try {
        if (withFunction) {
          // one key at a time in key order, as publishAll takes them, so no two deadlock
          List<Published> sorted = new ArrayList<>(events);
          sorted.sort(
              java.util.Comparator.comparing(
                  Published::key, java.util.Comparator.nullsFirst(String::compareTo)));
          events = sorted;
          for (Published e : events) {
            publishWithFunction(c, e.id(), e.key(), "a", "b");
          }
          viaFunction.addAndGet(rollback ? 0 : events.size());
        } else {
          store.publishAll(
              c,
              events.stream()
                  .map(
                      e ->
                          OutboxEvent.builder("t")
                              .id(e.id())
                              .key(e.key())
                              .json("{\"n\":1}")
                              .handlers(HANDLERS.toArray(String[]::new))
                              .build())
                  .toList());
        }
        // now and then a transaction that outlasts a migration's lock timeout (100 ms)
        Thread.sleep(t % 15 == 7 ? 250 : random.nextInt(4));
        if (rollback) {
          c.rollback();
          events.forEach(e -> rolledBack.add(e.id()));
        } else {
          c.commit();
          committed.addAll(events);
        }
      } catch (Exception e) {
        c.rollback();
        throw e;
      }
    }
  }

  private static void publishWithFunction(Connection c, String id, String key, String... handlers)
      throws Exception {
    try (PreparedStatement ps =
        c.prepareStatement(
            "SELECT new_event FROM mig." + PREFIX + "publish(?, ?, ?, ?, ?, ?::json, ?)")) {
      ps.setString(1, id);
      ps.setString(2, "t");
      ps.setString(3, key);
      ps.setBytes(4, "{\"n\":1}".getBytes(StandardCharsets.UTF_8));
      ps.setString(5, "application/json");
      ps.setString(6, "{}");
      ps.setArray(7, c.createArrayOf("text", handlers));
      try (ResultSet rs = ps.executeQuery()) {
        assertThat(rs.next()).isTrue();
        assertThat(rs.getBoolean(1)).isTrue();
      }
    }
  }
}
