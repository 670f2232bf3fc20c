package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.tuple;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.connect.source.SourceRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * An older incarnation of a task whose start failed on a transient store error retries its start
 * from {@code poll()}; meanwhile Connect started a newer incarnation (a worker cut off from its
 * group during a database failover). The retry must not take a lane from the newer one, against a
 * real PostgreSQL 17 and the in-process MongoDB server, through the real stores.
 */
class NewerIncarnationTest {
  @TempDir static Path dataParent;
  private static EmbeddedPostgres server;
  private static MongoServer mongo;
  private static String mongoAddress;

  private final String connector = "orders-" + UUID.randomUUID().toString().substring(0, 8);
  private final List<OutboxSourceTask> started = new ArrayList<>();
  private StoreKind kind;
  private OutboxStore store;

  @BeforeAll
  static void startServer() throws Exception {
    server =
        EmbeddedPostgres.builder()
            .setDataDirectory(dataParent.resolve("pgdata"))
            .setCleanDataDirectory(true)
            .start();
    mongo = new MongoServer(new MemoryBackend());
    InetSocketAddress bound = mongo.bind();
    mongoAddress = "127.0.0.1:" + bound.getPort();
  }

  @AfterAll
  static void stopServer() throws IOException {
    server.close();
    mongo.shutdownNow();
  }

  @AfterEach
  void stopTasks() throws Exception {
    started.forEach(OutboxSourceTask::stop);
    if (store != null) {
      store.close();
    }
  }

  private Map<String, String> props(String... overrides) {
    Map<String, String> props = new HashMap<>();
    props.put("name", connector);
    if (kind == StoreKind.MONGODB) {
      props.put("store.kind", "mongodb");
      props.put("mongodb.uri", "mongodb://" + mongoAddress + "/" + connector);
    } else {
      props.put("connection.url", "jdbc:postgresql://127.0.0.1:" + server.getPort() + "/postgres");
      props.put("connection.user", "postgres");
      props.put("outbox.schema", "s_" + connector.replace('-', '_'));
    }
    props.put("outbox.setup", "true");
    props.put("task.lanes", "0-255");
    props.put("task.index", "0");
    props.put("lease.duration.ms", "3000"); // a renewal round every second
    props.put("completion.flush.interval.ms", "0");
    props.put("poll.interval.ms", "10");
    props.put("poll.linger.ms", "0");
    for (int i = 0; i < overrides.length; i += 2) {
      props.put(overrides[i], overrides[i + 1]);
    }
    return props;
  }

  /** The outbox, set up, for the test's own reads and writes. */
  private OutboxStore store() {
    if (store == null) {
      store = OutboxStores.open(new OutboxSourceConfig(props()), "test", 2);
      store.setup();
    }
    return store;
  }

  /**
   * A task whose store fails its first schema check on a transient error (the start then stays
   * pending, retried by poll), recording the owner it leases lanes as.
   */
  private OutboxSourceTask task(
      Map<String, String> props, boolean firstStartFails, AtomicReference<String> owner) {
    return task(props, firstStartFails, owner, () -> {});
  }

  /** As above, running {@code afterLaneRead} once, after the task's first read of the lanes. */
  private OutboxSourceTask task(
      Map<String, String> props,
      boolean firstStartFails,
      AtomicReference<String> owner,
      Runnable afterLaneRead) {
    AtomicInteger schemaChecks = new AtomicInteger();
    AtomicInteger laneReads = new AtomicInteger();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(OutboxStores.open(config, name, 2)) {
                  @Override
                  public void verifySchema() {
                    if (firstStartFails && schemaChecks.incrementAndGet() == 1) {
                      throw new OutboxStoreException("the server is failing over", true, null);
                    }
                    super.verifySchema();
                  }

                  @Override
                  public List<LaneLease> acquireLanes(
                      String by, String group, Collection<Integer> lanes, Duration duration) {
                    owner.set(by);
                    return super.acquireLanes(by, group, lanes, duration);
                  }

                  @Override
                  public List<LaneStatus> laneStatus() {
                    List<LaneStatus> lanes = super.laneStatus();
                    if (laneReads.incrementAndGet() == 1) {
                      afterLaneRead.run();
                    }
                    return lanes;
                  }

                  @Override
                  public List<LaneLease> acquireFreeLanes(
                      String by, String group, Collection<Integer> lanes, Duration duration) {
                    owner.set(by);
                    return super.acquireFreeLanes(by, group, lanes, duration);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props);
    started.add(task);
    return task;
  }

  private static List<SourceRecord> pollFor(OutboxSourceTask task, Duration atMost)
      throws InterruptedException {
    List<SourceRecord> records = new ArrayList<>();
    long end = System.nanoTime() + atMost.toNanos();
    while (records.isEmpty() && System.nanoTime() < end) {
      List<SourceRecord> polled = task.poll();
      if (polled != null) {
        records.addAll(polled);
      }
    }
    return records;
  }

  private static String eventId(SourceRecord record) {
    return String.valueOf(record.headers().lastWithName("relaybus-event-id").value());
  }

  /** Live holders and how many lanes each holds, among the given lanes. */
  private Map<String, Integer> holders(int from, int to) {
    Map<String, Integer> holders = new TreeMap<>();
    for (LaneStatus lane : store().laneStatus()) {
      if (lane.lane() >= from && lane.lane() <= to) {
        holders.merge(lane.held() ? lane.owner() : "(free)", 1, Integer::sum);
      }
    }
    return holders;
  }

  private List<DeliveryView> deliveries() {
    return store().listDeliveries(DeliveryQuery.all().withLimit(100)).items();
  }

  private void publish(String id) {
    store()
        .publish(
            OutboxEvent.builder("order.placed")
                .id(id)
                .key("order-1")
                .payload("{}".getBytes(StandardCharsets.UTF_8), "application/json")
                .handlers("billing")
                .build());
  }

  /**
   * Found by the connector review, 2026-12-07 (reliability row 112): the older incarnation's
   * retried start took all 256 lanes over from the newer one and sent e1, in flight with the newer
   * one, again (charged one attempt).
   */
  @ParameterizedTest
  @EnumSource(StoreKind.class)
  void aStartRetriedAfterANewerIncarnationStartedTakesNoLaneFromIt(StoreKind kind)
      throws Exception {
    this.kind = kind;
    store();
    publish("e1");
    AtomicReference<String> olderOwner = new AtomicReference<>();
    AtomicReference<String> newerOwner = new AtomicReference<>();
    OutboxSourceTask older = task(props(), true, olderOwner);
    Thread.sleep(5); // a later start
    OutboxSourceTask newer = task(props(), false, newerOwner);
    assertThat(pollFor(newer, Duration.ofSeconds(10)))
        .extracting(r -> eventId(r))
        .containsExactly("e1");

    List<SourceRecord> sentByTheOlder = new ArrayList<>();
    for (int i = 0; i < 5; i++) { // its retried start, then claims
      List<SourceRecord> polled = older.poll();
      if (polled != null) {
        sentByTheOlder.addAll(polled);
      }
    }

    assertThat(holders(0, 255)).as("the lanes' holders").isEqualTo(Map.of(newerOwner.get(), 256));
    assertThat(sentByTheOlder).extracting(r -> eventId(r)).as("sent by the older").isEmpty();
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::attempts)
        .as("e1, in flight with the newer")
        .containsExactly(tuple("e1", 0));

    // the newer stops (hands its lanes back, e1 pending again): the older gets them at a round
    newer.stop();
    assertThat(pollFor(older, Duration.ofSeconds(10)))
        .extracting(r -> eventId(r))
        .containsExactly("e1");
    assertThat(holders(0, 255)).isEqualTo(Map.of(olderOwner.get(), 256));
  }

  /**
   * The same across task names: tasks.max went from 1 to 2, and task-1 of the newer configuration
   * holds lanes 128-255 when task-0 of the older one (lanes 0-255) retries its start.
   */
  @ParameterizedTest
  @EnumSource(StoreKind.class)
  void aStartRetriedAfterANewerConfigurationsTaskStartedTakesNoLaneFromIt(StoreKind kind)
      throws Exception {
    this.kind = kind;
    store();
    AtomicReference<String> olderOwner = new AtomicReference<>();
    AtomicReference<String> newerOwner = new AtomicReference<>();
    OutboxSourceTask older = task(props(), true, olderOwner);
    Thread.sleep(5);
    OutboxSourceTask newer =
        task(props("task.index", "1", "task.lanes", "128-255"), false, newerOwner);
    newer.poll();

    for (int i = 0; i < 3; i++) {
      older.poll();
    }

    assertThat(holders(0, 127)).as("lanes 0-127").isEqualTo(Map.of(olderOwner.get(), 128));
    assertThat(holders(128, 255)).as("lanes 128-255").isEqualTo(Map.of(newerOwner.get(), 128));
    assertThat(Set.of(olderOwner.get(), newerOwner.get())).hasSize(2);
  }

  /**
   * The read of the lanes' holders and the takeover are two calls: a newer incarnation whose start
   * takes the lanes over between them (from an even older holder) loses them to the older one's
   * takeover, and takes them back at its next rounds; the older one then leaves them.
   */
  @ParameterizedTest
  @EnumSource(StoreKind.class)
  void aNewerIncarnationStartedBetweenTheOlderOnesReadAndTakeoverTakesTheLanesBack(StoreKind kind)
      throws Exception {
    this.kind = kind;
    store();
    AtomicReference<String> oldestOwner = new AtomicReference<>();
    AtomicReference<String> olderOwner = new AtomicReference<>();
    AtomicReference<String> newerOwner = new AtomicReference<>();
    OutboxSourceTask oldest = task(props(), false, oldestOwner);
    Thread.sleep(5);
    AtomicReference<OutboxSourceTask> newer = new AtomicReference<>();
    OutboxSourceTask older =
        task(
            props(),
            true,
            olderOwner,
            () -> {
              try {
                Thread.sleep(5);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
              newer.set(task(props(), false, newerOwner));
            });
    older.poll(); // its retried start reads the lanes (the oldest holds them), the newer starts

    assertThat(holders(0, 255))
        .as("right after the older's takeover")
        .isEqualTo(Map.of(olderOwner.get(), 256));
    Map<String, Integer> holders = Map.of();
    long end = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (!holders.equals(Map.of(newerOwner.get(), 256)) && System.nanoTime() < end) {
      newer.get().poll();
      older.poll();
      oldest.poll();
      holders = holders(0, 255);
    }
    assertThat(holders)
        .as("the lanes' holders, within 10 s")
        .isEqualTo(Map.of(newerOwner.get(), 256));
    for (long still = System.nanoTime() + Duration.ofSeconds(2).toNanos();
        System.nanoTime() < still; ) { // two more rounds of each
      newer.get().poll();
      older.poll();
      oldest.poll();
    }
    assertThat(holders(0, 255)).as("two seconds later").isEqualTo(Map.of(newerOwner.get(), 256));
  }
}
