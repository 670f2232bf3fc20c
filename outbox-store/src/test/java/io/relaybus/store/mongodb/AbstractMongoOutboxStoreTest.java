package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.eq;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.tuple;

import com.mongodb.ConnectionString;
import com.mongodb.MongoClientSettings;
import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.Updates;
import com.mongodb.event.CommandListener;
import com.mongodb.event.CommandStartedEvent;
import com.mongodb.event.CommandSucceededEvent;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.testing.MutableClock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.bson.Document;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * What only the MongoDB store has to prove: its document model (the lane hash, the indexes),
 * parking, the {@code lost} list, half-finished publishes without a transaction, pruning of the
 * in-flight lists, and its settings. Runs on every server a subclass names; time is a clock the
 * test moves.
 */
abstract class AbstractMongoOutboxStoreTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private static final String GROUP = "connector-a";
  private static final Duration LEASE = Duration.ofSeconds(30);
  private static final RetryPolicy ONE_MINUTE_BACKOFF =
      new RetryPolicy(5, Duration.ofMinutes(1), Duration.ofMinutes(1), 0);

  final MutableClock clock = new MutableClock(Instant.parse("2026-01-01T00:00:00Z"));
  private final String prefix = "m" + PREFIXES.incrementAndGet() + "_";
  private final List<MongoOutboxStore> opened = new ArrayList<>();
  private MongoOutboxStore store;

  /** The client of the server under test, shared by the class. */
  abstract MongoClient client();

  abstract String database();

  /** Whether the server under test has transactions. */
  abstract boolean hasTransactions();

  @BeforeEach
  void openStore() {
    store = open(ONE_MINUTE_BACKOFF);
  }

  @AfterEach
  void closeStores() {
    opened.forEach(MongoOutboxStore::close);
  }

  MongoOutboxStore open(RetryPolicy policy) {
    MongoOutboxStore s =
        MongoOutboxStore.builder()
            .client(client())
            .database(database())
            .collectionPrefix(prefix)
            .retryPolicy(policy)
            .clock(clock)
            .build();
    s.setup();
    opened.add(s);
    return s;
  }

  /** The collection prefix of this test's stores. */
  String prefix() {
    return prefix;
  }

  MongoCollection<Document> collection(String name) {
    return client().getDatabase(database()).getCollection(prefix + name);
  }

  private static OutboxEvent event(String id, String key) {
    return OutboxEvent.builder("test.happened").id(id).key(key).json("{}").handler("h").build();
  }

  private List<LaneLease> leaseAll(String owner) {
    return store.acquireLanes(owner, GROUP, LaneRange.all().lanes(), LEASE);
  }

  private static List<String> eventIds(List<ClaimedDelivery> batch) {
    return batch.stream().map(ClaimedDelivery::eventId).toList();
  }

  @Test
  void deliveriesCarryTheLaneOfTheSharedHash() {
    store.publishAll(List.of(event("e1", "order-1"), event("e2", null)));

    Document keyed = collection("deliveries").find(eq(Fields.EVENT_ID, "e1")).first();
    Document unkeyed = collection("deliveries").find(eq(Fields.EVENT_ID, "e2")).first();
    assertThat(keyed.getInteger(Fields.LANE_ID)).isEqualTo(Lanes.laneOf("order-1", "e1"));
    assertThat(keyed.getLong(Fields.SEQUENCE)).isEqualTo(1L);
    assertThat(unkeyed.getInteger(Fields.LANE_ID)).isEqualTo(Lanes.laneOf(null, "e2"));
    assertThat(unkeyed).doesNotContainKeys(Fields.KEY, Fields.SEQUENCE);
  }

  @Test
  void setupIsIdempotentAndCreatesTheIndexesTheClaimNeeds() {
    store.setup();
    store.setup();

    List<String> indexes = new ArrayList<>();
    collection("deliveries").listIndexes().forEach(i -> indexes.add(i.getString("name")));
    assertThat(indexes)
        .contains("event_handler_unique", "lane_due", "key_sequence", "parked", "dead_updated");
    assertThat(collection("lanes").countDocuments()).isEqualTo(Lanes.COUNT);
    store.verifySchema();

    MongoOutboxStore fresh =
        MongoOutboxStore.builder()
            .client(client())
            .database(database())
            .collectionPrefix(prefix + "x_")
            .build();
    assertThatThrownBy(fresh::verifySchema)
        .isInstanceOf(OutboxStoreException.class)
        .hasMessageContaining("the outbox is not set up in database " + database())
        .hasMessageContaining("run setup()");
  }

  /**
   * Guards the deep-backlog symptom: the followers of a key whose head waits for a retry filled
   * every claim's candidates, so the other keys of the same lane starved behind them.
   */
  @Test
  void aBlockedKeysBacklogIsParkedAndStarvesNoOtherKeyOfItsLane() {
    int lane = Lanes.laneOf("hot", "head");
    String cold = sameLaneKey(lane);
    store.publish(event("head", "hot"));
    for (int i = 1; i <= 50; i++) {
      store.publish(event("hot-" + i, "hot"));
    }
    clock.advance(Duration.ofSeconds(1));
    for (int i = 1; i <= 5; i++) {
      store.publish(event("cold-" + i, cold));
    }
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery head = store.claim("A", leases, 1).get(0);
    assertThat(store.reschedule(head.token(), "downstream down"))
        .isEqualTo(FailOutcome.RESCHEDULED);

    // the first look finds ten blocked followers: they are parked and the claim looks again
    assertThat(eventIds(store.claim("A", leases, 10)))
        .containsExactly("cold-1", "cold-2", "cold-3", "cold-4", "cold-5");
    assertThat(collection("deliveries").countDocuments(eq(Fields.PARKED, true))).isEqualTo(50);

    clock.advance(Duration.ofMinutes(1));
    List<ClaimedDelivery> run = store.claim("A", leases, 100);
    assertThat(run).hasSize(51);
    assertThat(run.get(0).eventId()).isEqualTo("head");
    assertThat(run).extracting(ClaimedDelivery::sequence).isSorted();
    assertThat(collection("deliveries").countDocuments(eq(Fields.PARKED, true))).isZero();
  }

  /**
   * Issue 13 item 3 on MongoDB: an event document a hand-written publisher got wrong (a payload
   * that is not binary) is dead-lettered with the reason before the claim records anything; the
   * rest of its key goes in order and nothing stays in flight.
   */
  @Test
  void anUnreadableEventIsDeadLetteredBeforeTheClaimRecordsAnything() {
    for (String id : List.of("bad", "e2", "e3")) {
      store.publish(event(id, "k"));
    }
    collection("events")
        .updateOne(eq(Fields.ID, "bad"), com.mongodb.client.model.Updates.set(Fields.PAYLOAD, "x"));
    List<LaneLease> leases = leaseAll("A");

    List<ClaimedDelivery> batch = store.claim("A", leases, 10);

    assertThat(eventIds(batch)).containsExactly("e2", "e3");
    Document dead = collection("deliveries").find(eq(Fields.EVENT_ID, "bad")).first();
    assertThat(dead.getString(Fields.STATUS)).isEqualTo(Fields.DEAD);
    assertThat(dead.getString(Fields.LAST_ERROR))
        .startsWith("unreadable event: ClassCastException");
    assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList())).hasSize(2);
    assertThat(store.claim("A", leases, 10)).isEmpty();
    assertThat(store.statistics().totalPending()).isZero();
  }

  private static String sameLaneKey(int lane) {
    for (int i = 0; ; i++) {
      if (Lanes.laneOf("cold" + i, "x") == lane) {
        return "cold" + i;
      }
    }
  }

  @Test
  void aParkedKeyWithNothingAheadIsUnparkedByTheSweepOfANewHolder() {
    store.publish(event("e1", "k"));
    store.publish(event("e2", "k"));
    // As if a claim parked e2 behind e1 and died before e1 was handed out and e1 then completed.
    collection("deliveries").updateOne(eq(Fields.EVENT_ID, "e2"), Updates.set(Fields.PARKED, true));
    collection("deliveries").deleteOne(eq(Fields.EVENT_ID, "e1"));

    assertThat(eventIds(store.claim("A", leaseAll("A"), 10))).containsExactly("e2");
  }

  /** The taker died between bumping the epoch and charging: the next holder charges, once. */
  @Test
  void lostDeliveriesOfATakerThatDiedAreChargedByTheNextHolderOnce() {
    store.publish(event("e1", "k"));
    int lane = Lanes.laneOf("k", "e1");
    List<LaneLease> old = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery claimed = store.claim("A", old, 10).get(0);
    Document entry = new Document("id", claimed.deliveryId()).append("claims", 0);
    collection("lanes")
        .updateOne(
            eq(Fields.ID, lane),
            Updates.combine(
                Updates.inc(Fields.EPOCH, 1L),
                Updates.set(Fields.OWNER, "taker-that-died"),
                Updates.set(Fields.IN_FLIGHT, List.of()),
                Updates.set(Fields.LOST, List.of(entry)),
                Updates.inc(Fields.REV, 1L)));

    assertThat(store.complete(List.of(claimed.token()))).as("fenced by the epoch").isEmpty();
    List<LaneLease> taken = store.acquireLanes("B", GROUP, List.of(lane), LEASE);

    assertThat(taken)
        .extracting(LaneLease::takenOver, LaneLease::charged)
        .containsExactly(tuple(true, 1));
    assertThat(
            collection("lanes")
                .find(eq(Fields.ID, lane))
                .first()
                .getList(Fields.LOST, Document.class))
        .isEmpty();
    // The same entry again (b's call failed after the charge, before lost was emptied, and b tries
    // again): no second charge; the retry counts the attempt b's takeover charged (row 108).
    collection("lanes").updateOne(eq(Fields.ID, lane), Updates.set(Fields.LOST, List.of(entry)));
    assertThat(store.acquireLanes("B", GROUP, List.of(lane), LEASE))
        .extracting(LaneLease::epoch, LaneLease::charged)
        .containsExactly(tuple(taken.get(0).epoch(), 1));
    assertThat(
            collection("deliveries").find(eq(Fields.EVENT_ID, "e1")).first().get(Fields.ATTEMPTS))
        .isEqualTo(1);
    List<ClaimedDelivery> again = store.claim("B", taken, 10);
    assertThat(again)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::attempts)
        .containsExactly(tuple("e1", 1));
  }

  /**
   * Symptom (issue 13, item 2): a republish that added a handler between the purge's check for
   * deliveries and its delete lost its event, and the new delivery was left without it. The purge
   * runs on a client whose command listener does the republish right after that check.
   */
  @Test
  void eventGivenAHandlerBetweenThePurgesCheckAndItsDeleteIsKept() {
    store.publish(event("e1", "k"));
    List<LaneLease> leases = leaseAll("A");
    assertThat(store.complete(tokensOf(store.claim("A", leases, 10)))).hasSize(1);
    clock.advance(Duration.ofSeconds(1));
    AtomicBoolean armed = new AtomicBoolean(true);
    CommandListener republishAfterTheCheck =
        new CommandListener() {
          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            // the purge's first distinct is its check of the events' deliveries
            if (command.getCommandName().equals("distinct") && armed.getAndSet(false)) {
              store.publish(
                  OutboxEvent.builder("test.happened")
                      .id("e1")
                      .key("k")
                      .json("{}")
                      .handlers("h", "h2")
                      .build());
            }
          }
        };
    PurgeResult purged;
    try (MongoClient purging =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri()))
                .addCommandListener(republishAfterTheCheck)
                .build())) {
      MongoOutboxStore purger =
          MongoOutboxStore.builder()
              .client(purging)
              .database(database())
              .collectionPrefix(prefix)
              .clock(clock)
              .build();
      purged = purger.purge(new RetentionPolicy(Duration.ZERO, Duration.ZERO, Duration.ZERO));
    }
    assertThat(armed).as("the republish ran inside the purge").isFalse();
    assertThat(purged.events()).isZero();
    assertThat(collection("events").countDocuments(eq(Fields.ID, "e1"))).isEqualTo(1);
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);
    assertThat(batch)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler)
        .containsExactly(tuple("e1", "h2"));
  }

  /**
   * Symptom: a dead letter requeued while purge looked for the keys that still have deliveries lost
   * its key's counter, and the key's next event, numbered from a restarted sequence, went out
   * before it (row 117's symptom, by a race). The purge asks which keys have a pending delivery,
   * then which have a dead one; the requeue came between the two, so neither saw the delivery.
   */
  @Test
  void aDeadLetterRequeuedBetweenThePurgesTwoLooksKeepsItsKeysCounter() {
    store.publish(event("e0", "k"));
    store.publish(event("e1", "k"));
    List<LaneLease> leases = leaseAll("A");
    List<ClaimedDelivery> first = store.claim("A", leases, 10);
    assertThat(eventIds(first)).containsExactly("e0", "e1");
    assertThat(store.complete(List.of(first.get(0).token()))).hasSize(1);
    assertThat(store.bury(first.get(1).token(), "broken")).isTrue();
    clock.advance(Duration.ofSeconds(1));
    AtomicBoolean pendingLook = new AtomicBoolean();
    AtomicBoolean armed = new AtomicBoolean(true);
    CommandListener requeueAfterThePendingLook =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            org.bson.BsonDocument body = command.getCommand();
            if (command.getCommandName().equals("distinct")
                && body.containsKey("key")
                && Fields.KEY.equals(body.getString("key").getValue())
                && body.toJson().contains("\"" + Fields.PENDING + "\"")) {
              pendingLook.set(true);
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getCommandName().equals("distinct")
                && pendingLook.getAndSet(false)
                && armed.getAndSet(false)) {
              assertThat(store.requeue(List.of(first.get(1).deliveryId()))).isEqualTo(1);
            }
          }
        };
    try (MongoClient purging =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri()))
                .addCommandListener(requeueAfterThePendingLook)
                .build())) {
      MongoOutboxStore purger =
          MongoOutboxStore.builder()
              .client(purging)
              .database(database())
              .collectionPrefix(prefix)
              .clock(clock)
              .build();
      purger.purge(new RetentionPolicy(Duration.ZERO, Duration.ofDays(7), Duration.ZERO));
    }
    assertThat(armed).as("the requeue ran inside the purge").isFalse();
    store.publish(event("e2", "k"));

    assertThat(eventIds(store.claim("A", leases, 1)))
        .as("the requeued e1, pending before e2 was published")
        .containsExactly("e1");
  }

  /**
   * Symptom: b's lease on a lane had expired; a read it as expired and took it over while b renewed
   * it in between. The takeover's write was conditioned only on the lane's {@code rev}, which a
   * renewal does not move, so it landed too: b was told its lease was renewed for 30 s and a was
   * granted the same lane.
   */
  @Test
  void aRenewalBetweenATakeoversReadAndItsWriteKeepsTheLaneWithItsHolder() {
    int lane = 7;
    List<LaneLease> held = store.acquireLanes("B", "group-b", List.of(lane), LEASE);
    clock.advance(LEASE.plusSeconds(1)); // expired, and nobody took it yet
    AtomicReference<List<LaneLease>> renewed = new AtomicReference<>();
    List<LaneLease> taken =
        acquireWithBetweenItsReadAndItsWrite(
            "A", "group-a", lane, () -> renewed.set(store.renewLanes("B", held, LEASE)));

    assertThat(renewed.get()).as("b's renewal").extracting(LaneLease::lane).containsExactly(lane);
    assertThat(taken).as("a's acquisition").isEmpty();
    Document doc = collection("lanes").find(eq(Fields.ID, lane)).first();
    assertThat(doc.getString(Fields.OWNER)).isEqualTo("B");
    assertThat(doc.getLong(Fields.EPOCH)).isEqualTo(held.get(0).epoch());
    assertThat(store.renewLanes("B", held, LEASE)).as("still b's").hasSize(1);
  }

  /**
   * The same race with the holder's own acquisition (its lease kept, and extended, in a write
   * conditioned on epoch and owner only): before the fix both acquisitions were granted the lane.
   */
  @Test
  void anAcquisitionKeepingItsLaneBetweenATakeoversReadAndItsWriteKeepsTheLane() {
    int lane = 7;
    List<LaneLease> held = store.acquireLanes("B", "group-b", List.of(lane), LEASE);
    clock.advance(LEASE.plusSeconds(1));
    AtomicReference<List<LaneLease>> kept = new AtomicReference<>();
    List<LaneLease> taken =
        acquireWithBetweenItsReadAndItsWrite(
            "A",
            "group-a",
            lane,
            () -> kept.set(store.acquireLanes("B", "group-b", List.of(lane), LEASE)));

    assertThat(kept.get())
        .as("b's acquisition")
        .extracting(LaneLease::lane, LaneLease::epoch)
        .containsExactly(tuple(lane, held.get(0).epoch()));
    assertThat(taken).as("a's acquisition").isEmpty();
    assertThat(collection("lanes").find(eq(Fields.ID, lane)).first().getString(Fields.OWNER))
        .isEqualTo("B");
  }

  /** Once the lease expired with no renewal in between, the takeover lands as before. */
  @Test
  void anExpiredLeaseIsTakenOverWhenNothingRenewsItInBetween() {
    int lane = 7;
    List<LaneLease> held = store.acquireLanes("B", "group-b", List.of(lane), LEASE);
    clock.advance(LEASE.plusSeconds(1));
    List<LaneLease> taken = acquireWithBetweenItsReadAndItsWrite("A", "group-a", lane, () -> {});

    assertThat(taken)
        .extracting(LaneLease::lane, LaneLease::epoch, LaneLease::takenOver)
        .containsExactly(tuple(lane, held.get(0).epoch() + 1, true));
    assertThat(store.renewLanes("B", held, LEASE)).isEmpty();
  }

  /**
   * Acquires {@code lane} for {@code owner} through a store on a client of its own, whose command
   * listener runs {@code between} once: after the acquisition's read of the lanes, before its
   * write.
   */
  List<LaneLease> acquireWithBetweenItsReadAndItsWrite(
      String owner, String group, int lane, Runnable between) {
    String lanes = collection("lanes").getNamespace().getCollectionName();
    AtomicInteger laneRead = new AtomicInteger(-1);
    AtomicBoolean armed = new AtomicBoolean(true);
    CommandListener betweenReadAndWrite =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            if (command.getCommandName().equals("find")
                && lanes.equals(command.getCommand().getString("find").getValue())) {
              laneRead.compareAndSet(-1, command.getRequestId());
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getRequestId() == laneRead.get() && armed.getAndSet(false)) {
              between.run();
            }
          }
        };
    try (MongoClient acquiring =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri()))
                .addCommandListener(betweenReadAndWrite)
                .build())) {
      MongoOutboxStore acquirer =
          MongoOutboxStore.builder()
              .client(acquiring)
              .database(database())
              .collectionPrefix(prefix)
              .clock(clock)
              .build();
      List<LaneLease> leases = acquirer.acquireLanes(owner, group, List.of(lane), LEASE);
      assertThat(armed).as("the other caller ran between the read and the write").isFalse();
      return leases;
    }
  }

  /**
   * Symptom: a's completion of e1 passed its epoch check and read e1 under a's claim counter; then
   * b took the lane over (its charge moved the counter on), claimed e1 again and completed it. a's
   * delete, conditioned on the old counter, deleted nothing, and its check of what was left found
   * e1 gone and took that for its own delete: a was answered "completed" for a delivery the
   * takeover had charged and b had sent again and completed, the delivery completed twice.
   */
  @Test
  void aCompletionWhoseDeliveryWasChargedAndCompletedByTheNewHolderMeanwhileCompletesNothing() {
    String key = "order-1";
    int lane = Lanes.laneOf(key, "e1");
    MongoOutboxStore newHolder = openWithHistory();
    newHolder.publish(event("e1", key));
    List<LaneLease> heldByA = newHolder.acquireLanes("A", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> sentByA = newHolder.claim("A", heldByA, 10);
    assertThat(eventIds(sentByA)).containsExactly("e1");
    clock.advance(LEASE.plusSeconds(1)); // a's lease expired: b takes the lane over
    AtomicReference<List<ClaimedDelivery>> sentByB = new AtomicReference<>();
    AtomicReference<Set<Long>> completedByB = new AtomicReference<>();
    Set<Long> completedByA =
        completeWithBetweenItsReadAndItsDelete(
            tokensOf(sentByA),
            () -> {
              List<LaneLease> heldByB = newHolder.acquireLanes("B", GROUP, List.of(lane), LEASE);
              assertThat(heldByB)
                  .extracting(LaneLease::epoch, LaneLease::takenOver, LaneLease::charged)
                  .containsExactly(tuple(heldByA.get(0).epoch() + 1, true, 1));
              sentByB.set(newHolder.claim("B", heldByB, 10));
              completedByB.set(newHolder.complete(tokensOf(sentByB.get())));
            });

    long e1 = sentByA.get(0).token().deliveryId();
    assertThat(sentByB.get())
        .extracting(d -> d.token().deliveryId(), d -> d.token().claims(), ClaimedDelivery::attempts)
        .containsExactly(tuple(e1, 1, 1));
    assertThat(completedByB.get()).as("b's completion").containsExactly(e1);
    assertThat(completedByA).as("a's completion").isEmpty();
    assertThat(collection("completed_deliveries").find().into(new ArrayList<>()))
        .extracting(d -> ((Number) d.get(Fields.ID)).longValue(), d -> d.get(Fields.ATTEMPTS))
        .containsExactly(tuple(e1, 1));
  }

  /**
   * The same race with a named timer: the takeover's charge ends a's claim of it, so it is no
   * longer firing, and a cancel deletes it before a's delete. Before the fix a's completion said
   * done too: the timer was both cancelled and completed.
   */
  @Test
  void aCompletionWhoseTimerWasChargedAndCancelledMeanwhileCompletesNothing() {
    MongoOutboxStore other = openWithHistory();
    other.schedule(
        OutboxEvent.builder("session.expired").id("t-e1").json("{}").handler("h").build(),
        Timer.in(Duration.ZERO).named("t1", TimerConflict.FAIL));
    List<LaneLease> heldByA = other.acquireLanes("A", GROUP, LaneRange.all().lanes(), LEASE);
    List<ClaimedDelivery> firedByA = other.claim("A", heldByA, 10);
    assertThat(eventIds(firedByA)).containsExactly("t-e1");
    clock.advance(LEASE.plusSeconds(1));
    AtomicReference<TimerResult> cancelled = new AtomicReference<>();
    Set<Long> completedByA =
        completeWithBetweenItsReadAndItsDelete(
            tokensOf(firedByA),
            () -> {
              List<LaneLease> heldByB =
                  other.acquireLanes("B", GROUP, LaneRange.all().lanes(), LEASE);
              assertThat(heldByB.stream().mapToInt(LaneLease::charged).sum()).isEqualTo(1);
              cancelled.set(other.cancelTimer("h", "t1"));
            });

    assertThat(cancelled.get().outcome()).isEqualTo(TimerOutcome.CANCELLED);
    assertThat(completedByA).as("a's completion").isEmpty();
    assertThat(collection("completed_deliveries").countDocuments()).isZero();
  }

  /**
   * Symptom: a's release of e1 passed its epoch check; b took the lane over and read e1 for its
   * charge; a's release landed (the counter moved on, no attempt charged) and b's charge,
   * conditioned on the old counter, matched nothing. b then counted as charged every delivery whose
   * counter had moved one past the lost entry's, which a's release had done too: b's lease reported
   * 1 charged for a delivery that was charged nothing.
   */
  @Test
  void aTakeoverDoesNotCountAsChargedWhatTheOldHolderReleasedMeanwhile() throws Exception {
    String key = "order-1";
    int lane = Lanes.laneOf(key, "e1");
    store.publish(event("e1", key));
    List<LaneLease> heldByA = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> sentByA = store.claim("A", heldByA, 10);
    assertThat(eventIds(sentByA)).containsExactly("e1");
    clock.advance(LEASE.plusSeconds(1));
    CountDownLatch releaseChecked = new CountDownLatch(1);
    CountDownLatch chargeRead = new CountDownLatch(1);
    ExecutorService releaser = Executors.newSingleThreadExecutor();
    List<LaneLease> heldByB;
    AtomicReference<Future<Integer>> released = new AtomicReference<>();
    try (MongoClient releasing =
            clientRunningAfterItsFirstFind(
                "lanes",
                () -> { // a's epoch check read the lane: b takes it over now
                  releaseChecked.countDown();
                  await(chargeRead);
                });
        MongoClient acquiring =
            clientRunningAfterItsFirstFind(
                "deliveries",
                () -> { // b's charge read e1: a's release lands now
                  chargeRead.countDown();
                  try {
                    released.get().get(30, TimeUnit.SECONDS);
                  } catch (Exception e) {
                    throw new AssertionError(e);
                  }
                })) {
      released.set(releaser.submit(() -> storeOn(releasing).release(tokensOf(sentByA))));
      assertThat(releaseChecked.await(30, TimeUnit.SECONDS)).isTrue();
      heldByB = storeOn(acquiring).acquireLanes("B", GROUP, List.of(lane), LEASE);
    } finally {
      releaser.shutdownNow();
    }

    assertThat(released.get().get()).as("a's release").isEqualTo(1);
    assertThat(heldByB)
        .extracting(LaneLease::epoch, LaneLease::takenOver, LaneLease::charged)
        .containsExactly(tuple(heldByA.get(0).epoch() + 1, true, 0));
    Document e1 = collection("deliveries").find(eq(Fields.EVENT_ID, "e1")).first();
    assertThat(e1.getInteger(Fields.ATTEMPTS)).isZero();
    assertThat(e1.getInteger(Fields.CLAIMS)).isEqualTo(sentByA.get(0).token().claims() + 1);
  }

  /**
   * Symptom: a cancel of the keyed timer t1 read it before a claim marked it as the blocker of its
   * key's followers e1 and e2 and parked them; its delete, conditioned on the timer's revision,
   * which parking leaves alone, still landed, and it unparked nothing: its read had shown no mark.
   * Nothing was ahead of e1 and e2 any more, yet no claim handed them out until the minute's sweep.
   */
  @Test
  void aTimerCancelledWhileAClaimParkedItsKeyBehindItHoldsNothingBack() {
    List<LaneLease> leases = keyWaitingForATimer();
    AtomicReference<List<String>> during = new AtomicReference<>();
    TimerResult cancelled;
    try (MongoClient cancelling =
        clientRunningAfterItsFirstFind( // the cancel read t1: a claim parks e1, e2 behind it now
            "deliveries", () -> during.set(eventIds(store.claim("A", leases, 10))))) {
      cancelled = storeOn(cancelling).cancelTimer("h", "t1");
    }
    assertThat(during.get()).as("the claim inside the cancel, t1 still pending").isEmpty();
    List<String> out = new ArrayList<>();
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(cancelled.outcome()).isEqualTo(TimerOutcome.CANCELLED);
    assertThat(out).as("what the claims handed out").containsExactly("e1", "e2");
    assertThat(parkedEventIds()).isEmpty();
  }

  /**
   * The same race the other way round: the whole cancel ran between the claim's mark of t1 and its
   * parking of e1 and e2. The cancel saw the mark and unparked the key, before anything was parked;
   * the claim then parked e1 and e2 behind a timer that was gone.
   */
  @Test
  void aTimerCancelledBetweenAClaimsMarkAndItsParkingHoldsNothingBack() {
    List<LaneLease> leases = keyWaitingForATimer();
    AtomicReference<TimerResult> cancelled = new AtomicReference<>();
    List<String> out = new ArrayList<>();
    try (MongoClient claiming =
        clientRunningAfterItsFirst( // the claim marked t1 as the key's blocker: cancel it now
            "update", "deliveries", () -> cancelled.set(store.cancelTimer("h", "t1")))) {
      out.addAll(eventIds(storeOn(claiming).claim("A", leases, 10)));
    }
    assertThat(cancelled.get()).as("the cancel ran inside the claim").isNotNull();
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(cancelled.get().outcome()).isEqualTo(TimerOutcome.CANCELLED);
    assertThat(out).as("what the claims handed out").containsExactly("e1", "e2");
    assertThat(parkedEventIds()).isEmpty();
  }

  /**
   * Key k's first delivery is the named timer t1 (not due for five minutes), followed by e1 and e2,
   * due now: a claim parks them behind t1. Returns A's lease of k's lane, whose newly held lane
   * this store swept already (its next sweep is a minute away).
   */
  private List<LaneLease> keyWaitingForATimer() {
    String key = "k";
    store.schedule(
        OutboxEvent.builder("session.expired").id("t-e1").key(key).json("{}").handler("h").build(),
        Timer.in(Duration.ofMinutes(5)).named("t1", TimerConflict.FAIL));
    List<LaneLease> leases =
        store.acquireLanes("A", GROUP, List.of(Lanes.laneOf(key, "t-e1")), LEASE);
    assertThat(store.claim("A", leases, 10)).as("t1 is not due").isEmpty();
    store.publish(event("e1", key));
    store.publish(event("e2", key));
    return leases;
  }

  private List<String> parkedEventIds() {
    List<String> parked = new ArrayList<>();
    collection("deliveries")
        .find(eq(Fields.PARKED, true))
        .forEach(d -> parked.add(d.getString(Fields.EVENT_ID)));
    return parked;
  }

  /**
   * A paused holder's claim parks behind a delivery the new holder has in flight. a's claim read
   * its lane (a in flight nowhere: e1, k's head, was rescheduled) and stopped there; b took the
   * lane over and claimed x1, x2 and e1, due again. Then a's claim went on: it found k's e2 held
   * back by e1 (pending, and not in a's flight), marked e1 and parked e2 behind it (its lane write
   * then recorded nothing: the lane had changed hands).
   *
   * <p>Symptom: b completed e1, nothing was ahead of e2 any more, yet no claim of b handed it out:
   * it stayed parked until b's sweep a minute later (a stall: docs/reliability.md, row 1, "its run
   * goes out in order within ceil(n/limit)+1 claims once the blocker settles").
   */
  @Test
  void followersParkedByAClaimWhoseLaneWasTakenOverMeanwhileGoOnceTheNewHoldersBlockerCompletes() {
    String key = "k";
    int lane = Lanes.laneOf(key, "e1");
    List<String> others = sameLaneKeys(lane, 2);
    store.publish(event("e1", key));
    List<LaneLease> heldByA = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery e1 = store.claim("A", heldByA, 10).get(0);
    assertThat(store.reschedule(e1.token(), "downstream down")).isEqualTo(FailOutcome.RESCHEDULED);
    store.publish(event("e2", key));
    clock.advance(Duration.ofSeconds(1));
    store.publish(event("x1", others.get(0)));
    clock.advance(Duration.ofSeconds(1));
    store.publish(event("x2", others.get(1)));
    clock.advance(Duration.ofMinutes(1)); // e1 is due again: due order e2, x1, x2, e1

    AtomicReference<List<LaneLease>> heldByB = new AtomicReference<>();
    List<ClaimedDelivery> sentByB = new ArrayList<>();
    List<ClaimedDelivery> sentByA;
    try (MongoClient claiming =
        clientRunningAfterItsFirstFind( // a's claim read its lane: b takes it and claims now
            "lanes",
            () -> {
              heldByB.set(store.acquireLanes("B", GROUP, List.of(lane), LEASE));
              for (int claims = 0; claims < 3; claims++) {
                sentByB.addAll(store.claim("B", heldByB.get(), 1));
              }
            })) {
      sentByA = storeOn(claiming).claim("A", heldByA, 2);
    }
    assertThat(eventIds(sentByB))
        .as("b's claims inside a's (e2 waited for e1, then was unparked by it)")
        .containsExactly("x1", "x2", "e1");
    assertThat(sentByA).as("a's claim, its lane taken over").isEmpty();

    assertThat(store.complete(tokensOf(sentByB))).hasSize(3);
    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      out.addAll(eventIds(store.claim("B", heldByB.get(), 10)));
    }
    assertThat(out)
        .as("what b's three claims handed out once e1 completed (parked: %s)", parkedEventIds())
        .containsExactly("e2");
    assertThat(parkedEventIds()).isEmpty();
  }

  /**
   * The same through the sweep of the paused holder. a's claim read its lane and stopped; b took
   * the lane over and claimed x1, e1 and e2, e2 failed (due again in ten seconds) and b parked k's
   * e3 behind it. Then a's claim went on, its minute's sweep due: it found k parked from e3 with e1
   * ahead (pending, and not in a's flight), marked e1 and parked e2 behind it.
   *
   * <p>Symptom: b completed e1 and e2 came due, yet b's claims handed out nothing until b's own
   * sweep, half a minute later here.
   */
  @Test
  void followersParkedByTheSweepOfAHolderWhoseLaneWasTakenOverGoOnceTheBlockerCompletes() {
    String key = "k";
    int lane = Lanes.laneOf(key, "e1");
    store.publish(event("x1", sameLaneKeys(lane, 1).get(0)));
    store.publish(event("e1", key));
    store.publish(event("e2", key));
    List<LaneLease> heldByA = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    AtomicReference<MongoOutboxStore> newHolder = new AtomicReference<>();
    AtomicReference<List<LaneLease>> heldByB = new AtomicReference<>();
    List<ClaimedDelivery> sentByB = new ArrayList<>();
    List<ClaimedDelivery> sentByA;
    try (MongoClient claiming =
        clientRunningAfterItsFirstFind( // a's claim read its lane: b takes it now
            "lanes",
            () -> {
              MongoOutboxStore b =
                  open(new RetryPolicy(5, Duration.ofSeconds(10), Duration.ofSeconds(10), 0));
              newHolder.set(b);
              heldByB.set(b.acquireLanes("B", GROUP, List.of(lane), LEASE));
              List<ClaimedDelivery> batch = b.claim("B", heldByB.get(), 10);
              assertThat(eventIds(batch)).containsExactly("x1", "e1", "e2");
              assertThat(b.reschedule(batch.get(2).token(), "downstream down"))
                  .isEqualTo(FailOutcome.RESCHEDULED);
              sentByB.addAll(batch.subList(0, 2));
              b.publish(event("e3", key));
              assertThat(b.claim("B", heldByB.get(), 10)).as("e3 waits for e2").isEmpty();
              clock.advance(Duration.ofSeconds(30)); // a's sweep is due, e2 too
            })) {
      MongoOutboxStore a = storeOn(claiming);
      clock.advance(Duration.ofSeconds(30));
      sentByA = a.claim("A", heldByA, 1);
    }
    assertThat(sentByA).as("a's claim, its lane taken over").isEmpty();

    MongoOutboxStore b = newHolder.get();
    assertThat(b.complete(tokensOf(sentByB))).hasSize(2);
    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      out.addAll(eventIds(b.claim("B", heldByB.get(), 10)));
    }
    assertThat(out)
        .as("what b's three claims handed out once e1 completed (parked: %s)", parkedEventIds())
        .containsExactly("e2", "e3");
    assertThat(parkedEventIds()).isEmpty();
  }

  /**
   * A claim decides what blocks a key from its own read of the lane's in-flight list. a's claim
   * read it with e1 (of key k) in flight; then, before the claim read its candidates, a buried e1,
   * the operator requeued it and e2 of k was published.
   *
   * <p>Symptom: the claim took e1 for in flight (sent), so nothing held e2 back: it handed e2 out,
   * and the requeued e1, pending before e2 was published, went out after it (row 117's symptom).
   */
  @Test
  void aDeadLetterRequeuedWhileAClaimRanIsNotOvertakenByItsKeysEventPublishedAfter() {
    String key = "k";
    int lane = Lanes.laneOf(key, "e1");
    store.publish(event("e1", key));
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery e1 = store.claim("A", leases, 10).get(0);
    List<String> out = new ArrayList<>();
    try (MongoClient claiming =
        clientRunningAfterItsFirstFind( // the claim read which of its lane's entries count
            "deliveries",
            () -> {
              assertThat(store.bury(e1.token(), "poison")).isTrue();
              assertThat(store.requeue(List.of(e1.token().deliveryId()))).isEqualTo(1);
              store.publish(event("e2", key));
            })) {
      out.addAll(eventIds(storeOn(claiming).claim("A", leases, 10)));
    }
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(out)
        .as("k's deliveries in the order they went out (parked: %s)", parkedEventIds())
        .containsExactly("e1", "e2");
  }

  /**
   * The same with e1 rescheduled (due again in a minute) instead of buried and requeued: e2,
   * published while e1 waits for its retry, must wait for it too.
   */
  @Test
  void aDeliveryRescheduledWhileAClaimRanHoldsBackItsKeysEventPublishedAfter() {
    String key = "k";
    int lane = Lanes.laneOf(key, "e1");
    store.publish(event("e1", key));
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery e1 = store.claim("A", leases, 10).get(0);
    List<String> out = new ArrayList<>();
    try (MongoClient claiming =
        clientRunningAfterItsFirstFind( // the claim read which of its lane's entries count
            "deliveries",
            () -> {
              assertThat(store.reschedule(e1.token(), "downstream down"))
                  .isEqualTo(FailOutcome.RESCHEDULED);
              store.publish(event("e2", key));
            })) {
      out.addAll(eventIds(storeOn(claiming).claim("A", leases, 10)));
    }
    out.addAll(eventIds(store.claim("A", leases, 10)));
    clock.advance(Duration.ofMinutes(1));
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(out)
        .as("k's deliveries in the order they went out (parked: %s)", parkedEventIds())
        .containsExactly("e1", "e2");
  }

  /**
   * The same through a blocker's run. e0 and e1 of k went out together, e0 failed and waits for its
   * retry, e2 is parked behind it; e1 is still in flight. Once e0 is due a claim hands it out with
   * its run; after the claim read its in-flight entries, e1 was buried and requeued.
   *
   * <p>Symptom: the run skipped e1 as in flight and took e2 along: k went out as e0, e2, then the
   * requeued e1.
   */
  @Test
  void aBlockersRunStopsBeforeADeadLetterRequeuedWhileTheClaimRan() {
    String key = "k";
    int lane = Lanes.laneOf(key, "e0");
    store.publish(event("e0", key));
    store.publish(event("e1", key));
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> first = store.claim("A", leases, 10);
    assertThat(eventIds(first)).containsExactly("e0", "e1");
    assertThat(store.reschedule(first.get(0).token(), "downstream down"))
        .isEqualTo(FailOutcome.RESCHEDULED);
    store.publish(event("e2", key));
    assertThat(store.claim("A", leases, 10)).as("e2 waits for e0, parked").isEmpty();
    clock.advance(Duration.ofMinutes(1));
    List<String> out = new ArrayList<>();
    try (MongoClient claiming =
        clientRunningAfterItsFirstFind( // the claim read which of its lane's entries count
            "deliveries",
            () -> {
              assertThat(store.bury(first.get(1).token(), "poison")).isTrue();
              assertThat(store.requeue(List.of(first.get(1).deliveryId()))).isEqualTo(1);
            })) {
      out.addAll(eventIds(storeOn(claiming).claim("A", leases, 10)));
    }
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(out)
        .as("k's deliveries in the order they went out (parked: %s)", parkedEventIds())
        .containsExactly("e0", "e1", "e2");
  }

  /**
   * A takeover's charge that spends e1's last attempt (dead), and the operator requeues e1 at once,
   * before the taker empties the lane's lost list (guard: passed before and after row 139's fix).
   * The requeued e1 goes out once, with a fresh budget; the old holder's completion completes
   * nothing; the lease counts the attempt its takeover charged.
   */
  @Test
  void aDeadLetterTheTakeoversChargeKilledAndTheOperatorRequeuedAtOnceGoesOutOnce() {
    MongoOutboxStore a = open(new RetryPolicy(1, Duration.ofMinutes(1), Duration.ofMinutes(1), 0));
    a.publish(event("e1", "k"));
    int lane = Lanes.laneOf("k", "e1");
    List<LaneLease> heldByA = a.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery e1 = a.claim("A", heldByA, 10).get(0);
    List<LaneLease> heldByB;
    try (MongoClient acquiring =
        clientRunningAfterItsFirst( // the charge wrote e1 dead: the operator requeues it now
            "update",
            "deliveries",
            () -> assertThat(store.requeue(List.of(e1.deliveryId()))).isEqualTo(1))) {
      heldByB =
          MongoOutboxStore.builder()
              .client(acquiring)
              .database(database())
              .collectionPrefix(prefix)
              .retryPolicy(new RetryPolicy(1, Duration.ofMinutes(1), Duration.ofMinutes(1), 0))
              .clock(clock)
              .build()
              .acquireLanes("B", GROUP, List.of(lane), LEASE);
    }

    assertThat(heldByB)
        .extracting(LaneLease::takenOver, LaneLease::charged)
        .containsExactly(tuple(true, 1));
    assertThat(a.complete(List.of(e1.token()))).as("the old holder's completion").isEmpty();
    List<ClaimedDelivery> sent = new ArrayList<>(store.claim("B", heldByB, 10));
    assertThat(sent)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::attempts)
        .containsExactly(tuple("e1", 0));
    assertThat(store.complete(tokensOf(sent))).hasSize(1);
    assertThat(store.claim("B", heldByB, 10)).isEmpty();
    assertThat(collection("deliveries").countDocuments()).isZero();
  }

  private static List<String> sameLaneKeys(int lane, int n) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; keys.size() < n; i++) {
      if (Lanes.laneOf("other" + i, "x") == lane) {
        keys.add("other" + i);
      }
    }
    return keys;
  }

  /**
   * Symptom: c took the lane over from a (one delivery in flight, e1) and read e1 for its charge;
   * before c's write, d took the lane over from c, found e1 still in the lane's lost list and
   * charged it. c's write, conditioned on the counter it read, matched nothing, and c counted e1 as
   * charged anyway: it carried one more claim and the very last error c would have written (the
   * reason names the attempt and the lane, which both charges share). Both leases reported 1
   * charged for one attempt charged.
   */
  @Test
  void aTakeoverDoesNotCountAsChargedWhatALaterTakeoverCharged() {
    String key = "order-1";
    int lane = Lanes.laneOf(key, "e1");
    store.publish(event("e1", key));
    List<LaneLease> heldByA = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    assertThat(eventIds(store.claim("A", heldByA, 10))).containsExactly("e1");
    AtomicReference<List<LaneLease>> heldByD = new AtomicReference<>();
    List<LaneLease> heldByC;
    try (MongoClient acquiring =
        clientRunningAfterItsFirstFind( // c's charge read e1: d takes the lane over from c now
            "deliveries",
            () -> heldByD.set(store.acquireLanes("D", GROUP, List.of(lane), LEASE)))) {
      heldByC = storeOn(acquiring).acquireLanes("C", GROUP, List.of(lane), LEASE);
    }

    long epoch = heldByA.get(0).epoch();
    assertThat(heldByD.get())
        .as("d's lease")
        .extracting(LaneLease::epoch, LaneLease::takenOver, LaneLease::charged)
        .containsExactly(tuple(epoch + 2, true, 1));
    assertThat(heldByC)
        .as("c's lease")
        .extracting(LaneLease::epoch, LaneLease::takenOver, LaneLease::charged)
        .containsExactly(tuple(epoch + 1, true, 0));
    Document e1 = collection("deliveries").find(eq(Fields.EVENT_ID, "e1")).first();
    assertThat(e1.getInteger(Fields.ATTEMPTS)).isEqualTo(1);
  }

  /**
   * Row 44 in the path a blocker's run takes. e1 (sequence 1 of key k) failed and waits for its
   * retry with e2 parked behind it; once e1 is due a claim hands it out with its run, read after
   * the claim's check of k's reservations. Between that check and the run's read publisher p took
   * sequence 3 of k without a transaction (reserving it) and has not written it yet, and publisher
   * q published e4, sequence 4, completely.
   *
   * <p>Symptom: the run took e4 along (e2, e4: e3 was not written yet), so k went out as 1, 2, 4,
   * then 3.
   */
  @Test
  void aBlockersRunLeavesOutWhatComesAfterASequenceStillBeingWritten() {
    List<LaneLease> leases = keyWhoseHeadIsDueAgainWithItsFollowerParked();
    List<String> out = new ArrayList<>();
    try (MongoClient claiming =
        clientWith(after("find", "key_sequences", 1, this::sequenceThreeTakenAndFourPublished))) {
      out.addAll(eventIds(storeOn(claiming).claim("A", leases, 10)));
    }
    sequenceThreeWritten();
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(out)
        .as("k's deliveries in the order they went out")
        .containsExactly("e1", "e2", "e3", "e4");
  }

  /**
   * The same, with p writing sequence 3 and releasing its reservation after the run's read and
   * before the run's own check of the reservations: that check finds none, and e3 is not in the
   * run.
   */
  @Test
  void aBlockersRunStopsBeforeASequenceWrittenSinceItsRead() {
    List<LaneLease> leases = keyWhoseHeadIsDueAgainWithItsFollowerParked();
    List<String> out = new ArrayList<>();
    try (MongoClient claiming =
        clientWith(
            after("find", "key_sequences", 1, this::sequenceThreeTakenAndFourPublished),
            // the run's events (the first read was the candidates')
            after("find", "events", 2, this::sequenceThreeWritten))) {
      out.addAll(eventIds(storeOn(claiming).claim("A", leases, 10)));
    }
    out.addAll(eventIds(store.claim("A", leases, 10)));

    assertThat(out)
        .as("k's deliveries in the order they went out")
        .containsExactly("e1", "e2", "e3", "e4");
  }

  /**
   * Symptom: {@code statistics()} read the per-handler counts and the lanes' backlog in two
   * aggregations of the deliveries: an event published (or a delivery completed, moved) between
   * them was in one and not the other, so the totals and the backlog disagreed. Here e3 is
   * published as soon as the call's first aggregation of the deliveries answered.
   */
  @Test
  void statisticsAreOneViewOfTheOutboxWhileEventsArePublished() {
    store.publish(event("e1", "a"));
    store.publish(event("e2", "b"));
    AtomicBoolean published = new AtomicBoolean();
    OutboxStatistics statistics;
    try (MongoClient reading =
        clientRunningAfterItsFirst(
            "aggregate",
            "deliveries",
            () -> {
              store.publish(event("e3", "c"));
              published.set(true);
            })) {
      statistics = storeOn(reading).statistics();
    }

    assertThat(published).as("e3 was published during the call").isTrue();
    assertThat(statistics.handlers())
        .containsExactly(Map.entry("h", new OutboxStatistics.HandlerCounts(2, 2, 0, 0)));
    assertThat(statistics.laneBacklog().stream().mapToLong(Long::longValue).sum())
        .as("the lanes' backlog, from the same read of the deliveries as the totals")
        .isEqualTo(2);
    assertThat(store.statistics().totalPending()).isEqualTo(3);
  }

  /**
   * The completion history is another collection, read by an aggregation of its own, and a
   * completion deletes the delivery and then writes its history document. Symptom: the deliveries
   * were read first, so e1, completed between the two reads, was counted pending and completed. The
   * history is read first now: a delivery completed during the call is in neither (as between the
   * completion's own two writes), never in both. Here e1 is completed as soon as the call's first
   * aggregation answered, whichever collection it read.
   */
  @Test
  void statisticsCountADeliveryCompletedDuringTheCallOnceAtMost() {
    MongoOutboxStore completing = openWithHistory();
    completing.publish(event("e1", "a"));
    completing.publish(event("e2", "b"));
    List<LaneLease> leases = completing.acquireLanes("A", GROUP, LaneRange.all().lanes(), LEASE);
    List<ClaimedDelivery> batch = completing.claim("A", leases, 10);
    assertThat(eventIds(batch)).containsExactlyInAnyOrder("e1", "e2");
    DeliveryToken e1 =
        batch.stream().filter(d -> d.eventId().equals("e1")).findFirst().orElseThrow().token();
    AtomicInteger aggregations = new AtomicInteger();
    AtomicInteger first = new AtomicInteger(-1);
    AtomicReference<Set<Long>> completed = new AtomicReference<>();
    CommandListener afterTheFirstAggregation =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            if (command.getCommandName().equals("aggregate")
                && aggregations.incrementAndGet() == 1) {
              first.set(command.getRequestId());
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getRequestId() == first.get()) {
              completed.set(completing.complete(List.of(e1)));
            }
          }
        };
    OutboxStatistics statistics;
    try (MongoClient reading = clientWith(afterTheFirstAggregation)) {
      statistics = storeOn(reading).statistics();
    }

    assertThat(completed.get()).as("e1 was completed during the call").hasSize(1);
    assertThat(statistics.handlers())
        .as("e2 pending; e1, completed during the call, in neither")
        .containsExactly(Map.entry("h", new OutboxStatistics.HandlerCounts(1, 1, 0, 0)));
    assertThat(store.statistics().handlers())
        .containsExactly(Map.entry("h", new OutboxStatistics.HandlerCounts(1, 1, 0, 1)));
  }

  /**
   * laneStatus() read the lanes' in-flight deliveries (and which of them are still pending) in one
   * query and the pending deliveries per lane in an aggregation after it. Symptom: e1, in flight
   * and completed between the two, was counted in flight on a lane with nothing pending. Both
   * counts now come from the aggregation's one pass over the pending deliveries: a lane never has
   * more in flight than pending.
   */
  @Test
  void laneStatusCountsInFlightOnlyWhatItCountsPending() {
    store.publish(event("e1", "a"));
    int lane = Lanes.laneOf("a", "e1");
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);
    assertThat(eventIds(batch)).containsExactly("e1");
    AtomicReference<Set<Long>> completed = new AtomicReference<>();
    List<LaneStatus> lanes;
    try (MongoClient reading =
        clientRunningAfterItsFirstFind( // the call read e1 as in flight: it is completed now
            "deliveries", () -> completed.set(store.complete(tokensOf(batch))))) {
      lanes = storeOn(reading).laneStatus();
    }

    assertThat(completed.get()).as("e1 was completed during the call").hasSize(1);
    assertThat(lanes.get(lane))
        .extracting(LaneStatus::inFlight, LaneStatus::pending)
        .as("e1's lane: in flight, pending")
        .containsExactly(0L, 0L);
  }

  private static final Document RESERVATION_OF_P = new Document(Fields.RESERVATION, "publisher-p");

  /** e1 of key k failed and is due again, e2 parked behind it: its claim sends e1 with its run. */
  private List<LaneLease> keyWhoseHeadIsDueAgainWithItsFollowerParked() {
    store.publish(event("e1", "k"));
    List<LaneLease> leases =
        store.acquireLanes("A", GROUP, List.of(Lanes.laneOf("k", "e1")), LEASE);
    ClaimedDelivery e1 = store.claim("A", leases, 10).get(0);
    assertThat(store.reschedule(e1.token(), "downstream down")).isEqualTo(FailOutcome.RESCHEDULED);
    store.publish(event("e2", "k"));
    assertThat(store.claim("A", leases, 10)).as("e2 waits for e1, parked").isEmpty();
    clock.advance(Duration.ofMinutes(1));
    return leases;
  }

  /** Publisher p takes sequence 3 of k, as MongoPublisher.nextSequence; q publishes e4. */
  private void sequenceThreeTakenAndFourPublished() {
    collection("key_sequences")
        .updateOne(
            eq(Fields.ID, "k"),
            Updates.combine(
                Updates.inc(Fields.SEQUENCE, 1L),
                Updates.push(
                    Fields.RESERVED,
                    new Document(RESERVATION_OF_P)
                        .append(
                            Fields.RESERVATION_EXPIRES,
                            Date.from(clock.instant().plus(MongoPublisher.RESERVATION_TTL))))));
    store.publish(event("e4", "k"));
  }

  /** p writes sequence 3 (delivery, then event), then releases its reservation. */
  private void sequenceThreeWritten() {
    collection("deliveries")
        .insertOne(MongoPublisher.delivery(1_000_000L, "e3", "h", "k", 3L, clock.instant()));
    collection("events")
        .insertOne(MongoPublisher.eventDocument(event("e3", "k"), List.of("h"), clock.instant()));
    collection("key_sequences")
        .updateOne(
            eq(Fields.ID, "k"),
            Updates.pullByFilter(
                new Document(
                    Fields.RESERVED,
                    new Document(Fields.RESERVATION, RESERVATION_OF_P.get(Fields.RESERVATION)))));
  }

  private static void await(CountDownLatch latch) {
    try {
      assertThat(latch.await(30, TimeUnit.SECONDS)).isTrue();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError(e);
    }
  }

  /** A client whose command listener runs {@code between} once, after its first find on it. */
  private MongoClient clientRunningAfterItsFirstFind(String collectionName, Runnable between) {
    return clientRunningAfterItsFirst("find", collectionName, between);
  }

  /**
   * A client whose command listener runs {@code between} once, after its first {@code commandName}
   * ({@code find}, {@code update}...) on the collection.
   */
  private MongoClient clientRunningAfterItsFirst(
      String commandName, String collectionName, Runnable between) {
    return clientWith(after(commandName, collectionName, 1, between));
  }

  /**
   * A command listener that runs {@code between} once, after the {@code nth} {@code commandName} on
   * the collection succeeded.
   */
  private CommandListener after(
      String commandName, String collectionName, int nth, Runnable between) {
    String name = collection(collectionName).getNamespace().getCollectionName();
    AtomicInteger seen = new AtomicInteger();
    AtomicInteger request = new AtomicInteger(-1);
    AtomicBoolean armed = new AtomicBoolean(true);
    return new CommandListener() {
      @Override
      public void commandStarted(CommandStartedEvent command) {
        if (command.getCommandName().equals(commandName)
            && name.equals(command.getCommand().getString(commandName).getValue())
            && seen.incrementAndGet() == nth) {
          request.set(command.getRequestId());
        }
      }

      @Override
      public void commandSucceeded(CommandSucceededEvent command) {
        if (command.getRequestId() == request.get() && armed.getAndSet(false)) {
          between.run();
        }
      }
    };
  }

  private MongoClient clientWith(CommandListener... listeners) {
    MongoClientSettings.Builder settings =
        MongoClientSettings.builder().applyConnectionString(new ConnectionString(uri()));
    for (CommandListener listener : listeners) {
      settings.addCommandListener(listener);
    }
    return MongoClients.create(settings.build());
  }

  private MongoOutboxStore storeOn(MongoClient client) {
    return MongoOutboxStore.builder()
        .client(client)
        .database(database())
        .collectionPrefix(prefix)
        .retryPolicy(ONE_MINUTE_BACKOFF)
        .clock(clock)
        .build();
  }

  private MongoOutboxStore openWithHistory() {
    MongoOutboxStore s =
        MongoOutboxStore.builder()
            .client(client())
            .database(database())
            .collectionPrefix(prefix)
            .retryPolicy(ONE_MINUTE_BACKOFF)
            .completionHistory(true)
            .clock(clock)
            .build();
    s.setup();
    opened.add(s);
    return s;
  }

  /**
   * Completes {@code tokens} through a store (history on) on a client of its own, whose command
   * listener runs {@code between} once: after the completion's read of the deliveries, before its
   * delete.
   */
  Set<Long> completeWithBetweenItsReadAndItsDelete(List<DeliveryToken> tokens, Runnable between) {
    String deliveries = collection("deliveries").getNamespace().getCollectionName();
    AtomicInteger deliveryRead = new AtomicInteger(-1);
    AtomicBoolean armed = new AtomicBoolean(true);
    CommandListener betweenReadAndDelete =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            if (command.getCommandName().equals("find")
                && deliveries.equals(command.getCommand().getString("find").getValue())) {
              deliveryRead.compareAndSet(-1, command.getRequestId());
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getRequestId() == deliveryRead.get() && armed.getAndSet(false)) {
              between.run();
            }
          }
        };
    try (MongoClient completing =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri()))
                .addCommandListener(betweenReadAndDelete)
                .build())) {
      MongoOutboxStore completer =
          MongoOutboxStore.builder()
              .client(completing)
              .database(database())
              .collectionPrefix(prefix)
              .completionHistory(true)
              .clock(clock)
              .build();
      Set<Long> done = completer.complete(tokens);
      assertThat(armed).as("the other callers ran between the read and the delete").isFalse();
      return done;
    }
  }

  private static List<DeliveryToken> tokensOf(List<ClaimedDelivery> batch) {
    return batch.stream().map(ClaimedDelivery::token).toList();
  }

  /** Without a transaction a publish that died after its deliveries is finished by its retry. */
  @Test
  void aDeliveryWhoseEventIsMissingIsNotHandedOutAndHoldsItsKey() {
    Instant now = clock.instant();
    collection("deliveries")
        .insertOne(MongoPublisher.delivery(1_000_000L, "half", "h", "k", 0L, now));
    store.publish(event("next", "k"));

    List<LaneLease> leases = leaseAll("A");
    assertThat(store.claim("A", leases, 10)).as("half has no event yet and blocks next").isEmpty();

    PublishResult retried = store.publish(event("half", "k"));
    assertThat(retried).isEqualTo(new PublishResult("half", true, List.of("h")));
    assertThat(eventIds(store.claim("A", leases, 10))).containsExactly("half", "next");
  }

  /**
   * A publish that died after its deliveries and before its event (no transaction) leaves a
   * delivery without its event: the docs say it "blocks its key until" the publish is retried, and
   * the contract (docs/reliability.md, row 1) that a blocked key delays no other key. Here the
   * half-published head of key k and k's followers are the oldest due deliveries of their lane, and
   * another key of the same lane was published after them.
   *
   * <p>Symptom: with a claim limit no larger than k's stuck deliveries, every claim returns
   * nothing: the head is a candidate (so not a blocker, and nothing is parked), its followers wait
   * for it, and the lane's other key never goes, for as long as nobody retries the dead publish.
   */
  @Test
  void aDeliveryWithoutItsEventDelaysNoOtherKeyOfItsLane() {
    int lane = Lanes.laneOf("k", "half");
    String other = sameLaneKey(lane);
    collection("deliveries")
        .insertOne(MongoPublisher.delivery(1_000_000L, "half", "h", "k", 0L, clock.instant()));
    clock.advance(Duration.ofSeconds(1));
    for (int i = 1; i <= 5; i++) {
      store.publish(event("f" + i, "k"));
    }
    clock.advance(Duration.ofSeconds(1));
    store.publish(event("o1", other));
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3 && !out.contains("o1"); claims++) {
      out.addAll(eventIds(store.claim("A", leases, 3)));
    }
    assertThat(out).as("what three claims of three handed out").containsExactly("o1");
  }

  /**
   * A delivery without its event older than the grace a publish in progress is given is
   * dead-lettered with the reason, and its key goes on; a retry of the publish gives it back.
   */
  @Test
  void aDeliveryWithoutItsEventPastTheGraceIsDeadLetteredAndARetryGivesItBack() {
    collection("deliveries")
        .insertOne(MongoPublisher.delivery(1_000_000L, "half", "h", "k", 0L, clock.instant()));
    store.publish(event("next", "k"));
    List<LaneLease> leases = leaseAll("A");
    assertThat(store.claim("A", leases, 10)).as("within the grace").isEmpty();

    clock.advance(MongoClaims.MISSING_EVENT_GRACE);
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);
    assertThat(eventIds(batch)).containsExactly("next");
    Document dead = collection("deliveries").find(eq(Fields.EVENT_ID, "half")).first();
    assertThat(dead.getString(Fields.STATUS)).isEqualTo(Fields.DEAD);
    assertThat(dead.getString(Fields.LAST_ERROR))
        .isEqualTo("unreadable event: the event document is missing");
    assertThat(store.complete(tokensOf(batch))).hasSize(1);

    store.publish(event("half", "k"));
    assertThat(eventIds(store.claim("A", leases, 10))).containsExactly("half");
  }

  @Test
  void theNextClaimPrunesCompletedEntriesFromTheInFlightList() {
    store.publishAll(List.of(event("e1", "k"), event("e2", "k")));
    int lane = Lanes.laneOf("k", "e1");
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> first = store.claim("A", leases, 10);
    store.complete(first.stream().map(ClaimedDelivery::token).toList());
    assertThat(inFlightOf(lane)).as("completion writes no lane").hasSize(2);

    store.publish(event("e3", "k"));
    ClaimedDelivery third = store.claim("A", leases, 10).get(0);

    assertThat(inFlightOf(lane))
        .containsExactly(new Document("id", third.deliveryId()).append("claims", 0));
  }

  private List<Document> inFlightOf(int lane) {
    return collection("lanes")
        .find(eq(Fields.ID, lane))
        .first()
        .getList(Fields.IN_FLIGHT, Document.class);
  }

  @Test
  void failuresAndReleasesWriteOnlyTheDelivery() {
    store.publishAll(List.of(event("e1", null), event("e2", null)));
    List<LaneLease> leases = leaseAll("A");
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);
    long lanesRevBefore = revSum();

    store.release(List.of(batch.get(0).token()));
    store.bury(batch.get(1).token(), "bad");

    assertThat(revSum()).isEqualTo(lanesRevBefore);
    DeliveryToken released = batch.get(0).token();
    assertThat(store.claim("A", leases, 10))
        .extracting(ClaimedDelivery::deliveryId, c -> c.token().claims())
        .containsExactly(tuple(released.deliveryId(), released.claims() + 1));
  }

  private long revSum() {
    long sum = 0;
    for (Document lane : collection("lanes").find()) {
      sum += ((Number) lane.get(Fields.REV)).longValue();
    }
    return sum;
  }

  @Test
  void reportsWhetherTheServerHasTransactions() {
    assertThat(store.supportsTransactions()).isEqualTo(hasTransactions());
  }

  @Test
  void theInboxNeedsTheCallersTransactionOnTheStoresClient() {
    try (ClientSession session = client().startSession()) {
      assertThatThrownBy(() -> store.recordHandled(session, event("e1", null), "h"))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("active transaction");
    }
    try (MongoClient other = com.mongodb.client.MongoClients.create(uri());
        ClientSession foreign = other.startSession()) {
      assertThatThrownBy(() -> store.publish(foreign, event("e1", null)))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("session of the MongoClient this store uses");
    }
  }

  abstract String uri();

  @Test
  void rejectsBadSettingsNamingTheRule() {
    assertThatThrownBy(
            () ->
                MongoOutboxStore.builder()
                    .client(client())
                    .database("d")
                    .collectionPrefix("Bad-")
                    .build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "collection prefix must match [a-z_][a-z0-9_]* and be at most 32 characters, but was 'Bad-'");
    assertThatThrownBy(() -> MongoOutboxStore.builder().client(client()).database("a/b").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("database must match [A-Za-z0-9_-]{1,63}, but was 'a/b'");
    assertThatThrownBy(() -> MongoOutboxStore.builder().database("d").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("exactly one of connectionString and client must be set");
    assertThatThrownBy(
            () -> MongoOutboxStore.builder().connectionString("mongodb://localhost:1").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("database must be set");
    assertThatThrownBy(
            () -> MongoOutboxStore.builder().connectionString("http://localhost/x").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("connectionString must be a mongodb:// or mongodb+srv:// URI");
  }
}
