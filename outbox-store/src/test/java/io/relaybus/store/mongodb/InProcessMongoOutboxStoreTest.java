package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.eq;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.mongodb.ConnectionString;
import com.mongodb.MongoClientSettings;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.Updates;
import com.mongodb.event.CommandListener;
import com.mongodb.event.CommandStartedEvent;
import com.mongodb.event.CommandSucceededEvent;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.exception.MongoServerException;
import io.netty.channel.Channel;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.testing.MongoServers;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.bson.Document;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The MongoDB-only tests on mongo-java-server in process, and the races forced through the clock
 * ({@link io.relaybus.store.testing.MutableClock#onceReadFrom}): a second caller runs at the point
 * where a store operation reads the time, between its read and its write.
 */
class InProcessMongoOutboxStoreTest extends AbstractMongoOutboxStoreTest {
  private static final RetryPolicy TEN_SECOND_BACKOFF =
      new RetryPolicy(5, Duration.ofSeconds(10), Duration.ofSeconds(10), 0);
  private static MongoClient client;

  @BeforeAll
  static void connect() {
    client = MongoServers.client(MongoServers.inProcess());
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  @Override
  MongoClient client() {
    return client;
  }

  @Override
  String database() {
    return "behaviour";
  }

  @Override
  String uri() {
    return MongoServers.inProcess().uri();
  }

  @Override
  boolean hasTransactions() {
    return false;
  }

  private static OutboxEvent timerEvent(String id) {
    return OutboxEvent.builder("session.expired").id(id).json("{}").handler("h").build();
  }

  /**
   * What the interleaving of the two tests below left: owner a claims e1 and reschedules it; in the
   * middle of that reschedule (in the clock read by MongoCompletion.fail, after its epoch check and
   * its read of the delivery, before its write) a relinquishes its lanes, b acquires them and
   * claims the same delivery; then a's write lands. The docs say the lane writes are "ordered so
   * that the fencing is exact".
   */
  private record RelinquishRace(
      List<LaneLease> a,
      List<ClaimedDelivery> aBatch,
      int relinquished,
      List<LaneLease> bLeases,
      List<ClaimedDelivery> bBatch,
      FailOutcome aOutcome) {}

  private RelinquishRace rescheduleWhileTheLaneChangesHands(MongoOutboxStore store) {
    store.publish(OutboxEvent.builder("t").id("e1").key("k1").json("{}").handler("h").build());

    List<LaneLease> a =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    List<ClaimedDelivery> aBatch = store.claim("a", a, 10);
    AtomicInteger relinquished = new AtomicInteger(-1);
    AtomicReference<List<ClaimedDelivery>> bBatch = new AtomicReference<>();
    AtomicReference<List<LaneLease>> bLeases = new AtomicReference<>();
    clock.onceReadFrom(
        MongoCompletion.class,
        "fail",
        () -> {
          relinquished.set(store.relinquishLanes("a", a));
          bLeases.set(
              store.acquireLanes("b", "g", LaneRange.all().lanes(), Duration.ofSeconds(30)));
          bBatch.set(store.claim("b", bLeases.get(), 10));
        });
    FailOutcome aOutcome = store.reschedule(aBatch.get(0).token(), "a's send failed");
    return new RelinquishRace(a, aBatch, relinquished.get(), bLeases.get(), bBatch.get(), aOutcome);
  }

  /**
   * Symptom: a relinquish moved the epoch but not the delivery's claim counter, so a's stale token
   * matched b's live claim and a's reschedule answered RESCHEDULED instead of LOST.
   */
  @Test
  void aRescheduleLandingAfterItsHolderRelinquishedIsLostAndTheNextHolderCompletes() {
    MongoOutboxStore store = open(TEN_SECOND_BACKOFF);
    RelinquishRace race = rescheduleWhileTheLaneChangesHands(store);
    assertThat(race.aBatch()).extracting(ClaimedDelivery::eventId).containsExactly("e1");
    assertThat(race.relinquished()).isEqualTo(race.a().size());

    // b got e1 in the middle of a's reschedule: b's copy is now in flight
    assertThat(race.bBatch()).extracting(ClaimedDelivery::eventId).containsExactly("e1");
    long id = race.bBatch().get(0).token().deliveryId();

    // a no longer held the lane when its write landed: its token is stale (another epoch)
    assertThat(race.aOutcome())
        .as("a's reschedule with a stale-epoch token")
        .isEqualTo(FailOutcome.LOST);
    // and b's claim, the live one, completes
    assertThat(store.complete(List.of(race.bBatch().get(0).token())))
        .as("b completes its in-flight copy")
        .containsExactly(id);
  }

  /**
   * Symptom: the stale reschedule made e1 due again, and once its backoff passed b's next claim
   * handed e1 out a second time while b's first copy was in flight: the next holder sent the
   * delivery twice.
   */
  @Test
  void aRescheduleLandingAfterItsHolderRelinquishedDoesNotHandTheDeliveryOutTwice() {
    MongoOutboxStore store = open(TEN_SECOND_BACKOFF);
    RelinquishRace race = rescheduleWhileTheLaneChangesHands(store);
    assertThat(race.bBatch()).extracting(ClaimedDelivery::eventId).containsExactly("e1");

    // b's copy of e1 is still in flight (b renews its leases); after a's backoff has passed,
    // b's next claim must not hand e1 out a second time
    clock.advance(Duration.ofSeconds(11));
    List<LaneLease> renewed = store.renewLanes("b", race.bLeases(), Duration.ofSeconds(30));
    assertThat(store.claim("b", renewed, 10))
        .as("e1 handed out again while b's first copy is in flight")
        .extracting(ClaimedDelivery::eventId)
        .isEmpty();
  }

  /**
   * docs/outbox-store.md, Timers: "Dead timers (their send failed maxAttempts times) free their
   * id". A timer whose last attempt is charged by a lane takeover (MongoLanes.charge) dies like one
   * whose send failed (MongoCompletion.fail).
   *
   * <p>Symptom: the charge marked the timer dead but left it holding its id, so scheduling a new
   * timer under the same id failed with "timer 't1' of handler 'h' kept changing while scheduled".
   */
  @Test
  void aTimerKilledByATakeoverChargeFreesItsId() {
    MongoOutboxStore store =
        open(new RetryPolicy(1, Duration.ofSeconds(1), Duration.ofSeconds(1), 0));

    TimerResult armed =
        store.schedule(timerEvent("e1"), Timer.in(Duration.ZERO).named("t1", TimerConflict.FAIL));
    assertThat(armed.outcome()).isEqualTo(TimerOutcome.ARMED);

    List<LaneLease> a =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    List<ClaimedDelivery> fired = store.claim("a", a, 10);
    assertThat(fired).extracting(ClaimedDelivery::eventId).containsExactly("e1");

    // b takes the lanes over while e1 is in flight: its one attempt is charged, it is dead now
    List<LaneLease> b =
        store.acquireLanes("b", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    assertThat(b.stream().mapToInt(LaneLease::charged).sum()).isEqualTo(1);
    Document dead = collection("deliveries").find(eq(Fields.EVENT_ID, "e1")).first();
    assertThat(dead.getString(Fields.STATUS)).isEqualTo(Fields.DEAD);

    // Dead timers free their id: a new timer under "t1" is armed.
    TimerResult again =
        store.schedule(timerEvent("e2"), Timer.in(Duration.ZERO).named("t1", TimerConflict.FAIL));
    assertThat(again).isEqualTo(new TimerResult(TimerOutcome.ARMED, "e2"));
    assertThat(store.claim("b", b, 10)).extracting(ClaimedDelivery::eventId).containsExactly("e2");
  }

  /**
   * A REPLACE removes the pending timer, then arms its own event; a second caller's KEEP runs in
   * between (in the clock read at the start of MongoTimers.arm) and arms the id first.
   *
   * <p>Symptom: the REPLACE answered REPLACED naming e1 although its arm had lost and e1 was never
   * stored.
   */
  @Test
  void aReplaceThatLosesItsArmToAConcurrentCallDoesNotReportAnEventItNeverStored() {
    MongoOutboxStore first = open(RetryPolicy.defaults());
    MongoOutboxStore second = open(RetryPolicy.defaults());
    Timer inAMinute = Timer.in(Duration.ofMinutes(1));

    assertThat(first.schedule(timerEvent("e0"), inAMinute.named("t1", TimerConflict.FAIL)))
        .isEqualTo(new TimerResult(TimerOutcome.ARMED, "e0"));

    AtomicReference<TimerResult> secondResult = new AtomicReference<>();
    clock.onceReadFrom(
        MongoTimers.class,
        "arm",
        () ->
            secondResult.set(
                second.schedule(timerEvent("e2"), inAMinute.named("t1", TimerConflict.KEEP))));
    TimerResult replaced =
        first.schedule(timerEvent("e1"), inAMinute.named("t1", TimerConflict.REPLACE));

    // The second caller ran between the first one's remove and arm.
    assertThat(secondResult.get()).isNotNull();
    boolean e1Stored = collection("events").find(eq(Fields.ID, "e1")).first() != null;
    // Whatever the outcome, an answer naming e1 as the timer's event must mean e1 was armed.
    assertThat(replaced.eventId().equals("e1") && !e1Stored)
        .as(
            "first caller answered %s, second %s; event e1 stored: %s",
            replaced, secondResult.get(), e1Stored)
        .isFalse();
    TimerResult cancelled = first.cancelTimer("h", "t1");
    assertThat(cancelled.outcome()).isEqualTo(TimerOutcome.CANCELLED);
    // the pending timer is the one the last answer named
    assertThat(cancelled.eventId()).isIn(replaced.eventId(), secondResult.get().eventId());
  }

  private static OutboxEvent keyed(String id, String key) {
    return OutboxEvent.builder("test.happened").id(id).key(key).json("{}").handler("h").build();
  }

  /**
   * Two publishers of one key without a transaction (a standalone server, as here): publisher A
   * takes sequence 1 of key k (its findAndModify on the key counter has returned) and has not yet
   * written its deliveries; publisher B publishes e2 (sequence 2) completely, and a claim runs. The
   * docs promise publish order on a server without transactions (MongoPublisher: "publishers of one
   * key ... take sequences in publish order"): the key's deliveries must go out in the order of the
   * sequences they were given.
   *
   * <p>Symptom: the claim in the gap hands out e2 (sequence 2), and e1 (sequence 1) goes after it:
   * a consumer sees k's sequences 2, 1.
   */
  @Test
  void aKeysLaterSequenceIsNotHandedOutWhileAnEarlierSequenceIsStillBeingWritten() {
    MongoOutboxStore store = open(RetryPolicy.defaults());
    List<LaneLease> leases =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    List<ClaimedDelivery> out = new ArrayList<>();
    String keys = collection("key_sequences").getNamespace().getCollectionName();
    AtomicBoolean armed = new AtomicBoolean(true);
    AtomicInteger counterRequest = new AtomicInteger(-1);
    CommandListener afterTheSequenceIsTaken =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            if (command.getCommandName().equals("findAndModify")
                && keys.equals(command.getCommand().getString("findAndModify").getValue())) {
              counterRequest.compareAndSet(-1, command.getRequestId());
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getRequestId() == counterRequest.get() && armed.getAndSet(false)) {
              store.publish(keyed("e2", "k"));
              out.addAll(store.claim("a", leases, 10));
            }
          }
        };
    try (MongoClient publishing =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri()))
                .addCommandListener(afterTheSequenceIsTaken)
                .build())) {
      MongoOutboxStore publisherA =
          MongoOutboxStore.builder()
              .client(publishing)
              .database(database())
              .collectionPrefix(prefix())
              .clock(clock)
              .build();
      publisherA.publish(keyed("e1", "k"));
    }
    assertThat(armed).as("B published and claimed inside A's publish").isFalse();
    out.addAll(store.claim("a", leases, 10));

    assertThat(out)
        .as("k's deliveries in the order they went out (event, sequence)")
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::sequence)
        .containsExactly(
            org.assertj.core.api.Assertions.tuple("e1", 1L),
            org.assertj.core.api.Assertions.tuple("e2", 2L));
  }

  /**
   * Four keys of one lane, each with its head waiting for a retry and three followers published
   * meanwhile (so older in due order than their head); then every head comes due. Nothing is in
   * flight and everything is due, so the head of every key may go: the randomized test's drain
   * asserts that such a claim returns at least one delivery (docs/reliability.md, "Bounded polls").
   *
   * <p>Symptom: a claim of limit 2 read two followers of k1 (blocked by k1's head) and parked them,
   * selected again and read two of k2's, then two of k3's, and stopped after its third selection
   * with nothing picked: the claim returned nothing (the next one would hand out heads).
   */
  @Test
  void aClaimWithEveryHeadDueReturnsSomethingHoweverManyKeysHaveOlderFollowers() {
    MongoOutboxStore store = open(TEN_SECOND_BACKOFF);
    int lane = Lanes.laneOf("key0", "x");
    List<String> keys = new ArrayList<>(List.of("key0"));
    keys.addAll(keysInLane(lane, 3, "key0"));
    List<LaneLease> leases = store.acquireLanes("a", "g", List.of(lane), Duration.ofMinutes(5));
    for (String key : keys) {
      store.publish(keyed("head-" + key, key));
    }
    List<ClaimedDelivery> heads = store.claim("a", leases, 10);
    assertThat(heads).hasSize(4);
    heads.forEach(
        h -> assertThat(store.reschedule(h.token(), "down")).isEqualTo(FailOutcome.RESCHEDULED));
    for (String key : keys) {
      for (int i = 1; i <= 3; i++) {
        store.publish(keyed("f" + i + "-" + key, key));
        clock.advance(Duration.ofMillis(1));
      }
    }
    clock.advance(Duration.ofSeconds(11));

    assertThat(store.claim("a", leases, 2))
        .as("a claim with nothing in flight and every key's head due")
        .isNotEmpty();
  }

  /**
   * A purge with a short events retention runs while publisher A has taken sequence 2 of key k (its
   * findAndModify on the key counter has returned, its reservation is on the counter) and has not
   * yet written its delivery: nothing of k is pending, the counter is as old as the retention, its
   * sequence unchanged. The docs promise publish order without transactions as long as the
   * reservation holds ("a claim holds a key back while one of its sequences is taken but not
   * written"); a counter with a live reservation is a publish under way.
   *
   * <p>Symptom: the purge deleted the counter under A's reservation, A wrote e2 with sequence 2,
   * and e3, published after A returned, got sequence 1 from a new counter: the claim handed out e3
   * before e2.
   */
  @Test
  void aPurgeWhileASequenceIsBeingWrittenKeepsTheKeysCounter() {
    MongoOutboxStore store = open(RetryPolicy.defaults());
    List<LaneLease> leases =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    store.publish(keyed("e1", "k"));
    assertThat(store.complete(store.claim("a", leases, 10).stream().map(d -> d.token()).toList()))
        .hasSize(1);
    clock.advance(Duration.ofSeconds(1));
    String keys = collection("key_sequences").getNamespace().getCollectionName();
    AtomicBoolean armed = new AtomicBoolean(true);
    AtomicInteger counterRequest = new AtomicInteger(-1);
    AtomicReference<io.relaybus.store.PurgeResult> purged = new AtomicReference<>();
    CommandListener purgeAfterTheSequenceIsTaken =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            if (command.getCommandName().equals("findAndModify")
                && keys.equals(command.getCommand().getString("findAndModify").getValue())) {
              counterRequest.compareAndSet(-1, command.getRequestId());
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getRequestId() == counterRequest.get() && armed.getAndSet(false)) {
              purged.set(
                  store.purge(
                      new io.relaybus.store.RetentionPolicy(
                          Duration.ZERO, Duration.ZERO, Duration.ZERO)));
            }
          }
        };
    try (MongoClient publishing =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri()))
                .addCommandListener(purgeAfterTheSequenceIsTaken)
                .build())) {
      MongoOutboxStore publisherA =
          MongoOutboxStore.builder()
              .client(publishing)
              .database(database())
              .collectionPrefix(prefix())
              .clock(clock)
              .build();
      publisherA.publish(keyed("e2", "k"));
    }
    assertThat(armed).as("the purge ran inside A's publish").isFalse();
    assertThat(purged.get().events()).as("e1's event, done and old enough").isEqualTo(1);
    store.publish(keyed("e3", "k"));

    assertThat(store.claim("a", leases, 10))
        .as("k's deliveries in the order they went out (event, sequence)")
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::sequence)
        .containsExactly(
            org.assertj.core.api.Assertions.tuple("e2", 2L),
            org.assertj.core.api.Assertions.tuple("e3", 3L));
  }

  /**
   * A reservation left by a publisher that died after taking a sequence holds its key until it
   * expires; a publish releases its own (and expired ones).
   */
  @Test
  void aReservationLeftBehindHoldsItsKeyUntilItExpires() {
    MongoOutboxStore store = open(RetryPolicy.defaults());
    List<LaneLease> leases =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofMinutes(5));
    store.publish(keyed("e1", "k"));
    assertThat(
            collection("key_sequences")
                .find(eq(Fields.ID, "k"))
                .first()
                .getList(Fields.RESERVED, Document.class))
        .as("released once the deliveries were written")
        .isEmpty();
    collection("key_sequences")
        .updateOne(
            eq(Fields.ID, "k"),
            com.mongodb.client.model.Updates.push(
                Fields.RESERVED,
                new Document(Fields.RESERVATION, "dead")
                    .append(
                        Fields.RESERVATION_EXPIRES,
                        java.util.Date.from(
                            clock.instant().plus(MongoPublisher.RESERVATION_TTL)))));
    store.publish(keyed("o1", "other"));
    assertThat(store.claim("a", leases, 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly("o1");

    clock.advance(MongoPublisher.RESERVATION_TTL);
    assertThat(store.claim("a", leases, 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly("e1");
    store.publish(keyed("e2", "k"));
    assertThat(
            collection("key_sequences")
                .find(eq(Fields.ID, "k"))
                .first()
                .getList(Fields.RESERVED, Document.class))
        .as("the expired one went with the next release")
        .isEmpty();
  }

  /**
   * A server whose reply to one command is an error although the command was applied: what a
   * connection reset or a failover after the write looks like to the client ("a call commits and
   * the caller never hears").
   */
  private static final class FailingAfterWriteBackend extends MemoryBackend {
    volatile String failAfterUpdateOf;

    /** The next find on this collection fails (a connection reset, a failover). */
    volatile String failFindOf;

    @Override
    public de.bwaldvogel.mongo.bson.Document handleCommand(
        Channel channel, String database, String command, de.bwaldvogel.mongo.bson.Document query) {
      String find = failFindOf;
      if (find != null && command.equals("find") && find.equals(query.get("find"))) {
        failFindOf = null;
        throw new MongoServerException("connection reset");
      }
      de.bwaldvogel.mongo.bson.Document reply =
          super.handleCommand(channel, database, command, query);
      String target = failAfterUpdateOf;
      if (target != null && command.equals("update") && target.equals(query.get("update"))) {
        failAfterUpdateOf = null;
        throw new MongoServerException("connection reset after the write was applied");
      }
      return reply;
    }
  }

  /**
   * The claim's lane write (the in-flight entries) lands, and the claim's caller gets an error. On
   * PostgreSQL a claim whose commit outcome is unknown gives its batch back, at once or at the
   * owner's next claim (docs/reliability.md, table row 3); the connector goes on polling with the
   * same leases.
   *
   * <p>Symptom: e1 stays in the lane's in-flight list, handed to nobody; because in flight counts
   * as sent for the per-key rule, the owner's next claim hands out e2 without e1: key k goes out as
   * e2 and (after the lane changes hands and its attempt is charged) e1.
   */
  @Test
  void aClaimWhoseLaneWriteLandedButFailedToAnswerGivesItsBatchBackAtTheNextClaim() {
    FailingAfterWriteBackend backend = new FailingAfterWriteBackend();
    MongoServer server = new MongoServer(backend);
    java.net.InetSocketAddress address = server.bind();
    try (MongoClient own = MongoClients.create("mongodb://127.0.0.1:" + address.getPort())) {
      MongoOutboxStore store =
          MongoOutboxStore.builder()
              .client(own)
              .database("ambiguous")
              .collectionPrefix("x_")
              .clock(clock)
              .build();
      store.setup();
      store.publish(keyed("e1", "k"));
      store.publish(keyed("e2", "k"));
      List<LaneLease> leases =
          store.acquireLanes("a", "g", List.of(Lanes.laneOf("k", "e1")), Duration.ofSeconds(30));

      backend.failAfterUpdateOf = "x_lanes";
      assertThatThrownBy(() -> store.claim("a", leases, 1))
          .isInstanceOf(OutboxStoreException.class);
      assertThat(backend.failAfterUpdateOf).as("the lane write was the one that failed").isNull();

      List<ClaimedDelivery> next = store.claim("a", leases, 10);
      assertThat(next)
          .as("the owner's next claim, after a claim it never heard back from")
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e1", "e2");
    } finally {
      server.shutdownNow();
    }
  }

  /**
   * Row 42 when the lane write answered and a later step of the claim failed: the claim holds two
   * lanes, one of which changed between its read and its write (another caller moved its {@code
   * rev}), so its write landed on k's lane only; it then reads the lanes again to see which writes
   * landed, and that read fails. The caller gets an error and no batch.
   *
   * <p>Symptom: e1 and e2 stayed in k's lane's in-flight list, handed to nobody; the owner's next
   * claims handed out x1 only, and k went out only after the lane changed hands, charged an attempt
   * it never had.
   */
  @Test
  void aClaimThatFailsAfterItsLaneWriteLandedGivesItsBatchBackAtTheNextClaim() {
    FailingAfterWriteBackend backend = new FailingAfterWriteBackend();
    MongoServer server = new MongoServer(backend);
    java.net.InetSocketAddress address = server.bind();
    String uri = "mongodb://127.0.0.1:" + address.getPort();
    int laneOfK = Lanes.laneOf("k", "e1");
    String other = "other";
    for (int i = 0; Lanes.laneOf(other, "x1") == laneOfK; i++) {
      other = "other" + i;
    }
    int otherLane = Lanes.laneOf(other, "x1");
    AtomicBoolean armed = new AtomicBoolean();
    CommandListener afterTheLaneRead =
        new CommandListener() {
          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getCommandName().equals("find") && armed.getAndSet(false)) {
              // the claim read its lanes (its first find): the other lane changes, and the read
              // after the lane write will fail
              try (MongoClient meanwhile = MongoClients.create(uri)) {
                meanwhile
                    .getDatabase("ambiguous")
                    .getCollection("x_lanes")
                    .updateOne(eq(Fields.ID, otherLane), Updates.inc(Fields.REV, 1L));
              }
              backend.failFindOf = "x_lanes";
            }
          }
        };
    try (MongoClient claiming =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri))
                .addCommandListener(afterTheLaneRead)
                .build())) {
      MongoOutboxStore store = storeOn(claiming);
      store.setup();
      store.publish(keyed("e1", "k"));
      store.publish(keyed("e2", "k"));
      store.publish(keyed("x1", other));
      List<LaneLease> leases =
          store.acquireLanes("a", "g", List.of(laneOfK, otherLane), Duration.ofSeconds(30));

      armed.set(true);
      assertThatThrownBy(() -> store.claim("a", leases, 10))
          .isInstanceOf(OutboxStoreException.class);
      assertThat(backend.failFindOf)
          .as("the read after the lane write was the one that failed")
          .isNull();

      List<String> next = new ArrayList<>();
      for (int claims = 0; claims < 3; claims++) {
        store.claim("a", leases, 10).forEach(d -> next.add(d.eventId()));
      }
      assertThat(next)
          .as("the owner's next claims, after a claim that failed once its lane write had landed")
          .containsExactlyInAnyOrder("e1", "e2", "x1");
    } finally {
      server.shutdownNow();
    }
  }

  /**
   * The same with a named timer among the picks of the lane whose write did not land: the claim
   * gives the timer back ({@code untake}), and that write fails after it was applied. The claim's
   * batch in the other lane was recorded by then.
   *
   * <p>Symptom: the claim threw, e1 stayed in flight handed to nobody, and the owner's next claim
   * handed out only the timer.
   */
  @Test
  void aClaimWhoseGivingBackOfATimerFailsStillHandsOutWhatItRecorded() {
    FailingAfterWriteBackend backend = new FailingAfterWriteBackend();
    MongoServer server = new MongoServer(backend);
    java.net.InetSocketAddress address = server.bind();
    String uri = "mongodb://127.0.0.1:" + address.getPort();
    int laneOfK = Lanes.laneOf("k", "e1");
    String timerEventId = "t-e1";
    for (int i = 0; Lanes.laneOf(null, timerEventId) == laneOfK; i++) {
      timerEventId = "t-e" + i;
    }
    int timerLane = Lanes.laneOf(null, timerEventId);
    AtomicInteger phase = new AtomicInteger(); // 1: armed, 2: lanes read, 3: lane write sent
    AtomicInteger laneWrite = new AtomicInteger(-1);
    CommandListener listener =
        new CommandListener() {
          @Override
          public void commandStarted(CommandStartedEvent command) {
            if (phase.get() == 2
                && command.getCommandName().equals("update")
                && "x_lanes".equals(command.getCommand().getString("update").getValue())) {
              laneWrite.set(command.getRequestId());
              phase.set(3);
            }
          }

          @Override
          public void commandSucceeded(CommandSucceededEvent command) {
            if (command.getCommandName().equals("find") && phase.compareAndSet(1, 2)) {
              // the claim read its lanes: the timer's lane changes, so the claim's write does
              // not land there
              try (MongoClient meanwhile = MongoClients.create(uri)) {
                meanwhile
                    .getDatabase("ambiguous")
                    .getCollection("x_lanes")
                    .updateOne(eq(Fields.ID, timerLane), Updates.inc(Fields.REV, 1L));
              }
            } else if (command.getRequestId() == laneWrite.get()) {
              // the lane write answered: the next update of the deliveries (the timer given
              // back) fails after it was applied
              backend.failAfterUpdateOf = "x_deliveries";
            }
          }
        };
    try (MongoClient claiming =
        MongoClients.create(
            MongoClientSettings.builder()
                .applyConnectionString(new ConnectionString(uri))
                .addCommandListener(listener)
                .build())) {
      MongoOutboxStore store = storeOn(claiming);
      store.setup();
      store.publish(keyed("e1", "k"));
      store.schedule(
          timerEvent(timerEventId), Timer.in(Duration.ZERO).named("t1", TimerConflict.FAIL));
      List<LaneLease> leases =
          store.acquireLanes("a", "g", List.of(laneOfK, timerLane), Duration.ofSeconds(30));

      phase.set(1);
      List<ClaimedDelivery> first = store.claim("a", leases, 10);
      assertThat(phase.get()).as("the claim wrote its lanes").isEqualTo(3);
      assertThat(backend.failAfterUpdateOf)
          .as("the timer's give-back was the write that failed")
          .isNull();
      assertThat(first).extracting(ClaimedDelivery::eventId).containsExactly("e1");
      assertThat(store.claim("a", leases, 10))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly(timerEventId);
    } finally {
      server.shutdownNow();
    }
  }

  /**
   * A takeover's charge lands and its caller hears an error (a connection reset after the write);
   * the caller tries again (the connector does at its next renewal round). The retry finds the lane
   * its own already, e1 still in the lane's lost list (emptying it came after the charge) and e1's
   * counter moved on by the first call's charge.
   *
   * <p>Symptom: the retry reported 0 charged for the attempt its own takeover charged (the count in
   * the connector's takeover log line).
   */
  @Test
  void aTakeoverRetriedAfterItsChargesReplyWasLostReportsWhatItCharged() {
    takeOverWithTheChargesReplyLost(
        RetryPolicy.defaults(),
        (store, heldByB) ->
            assertThat(store.claim("b", heldByB, 10))
                .extracting(ClaimedDelivery::eventId, ClaimedDelivery::attempts)
                .containsExactly(org.assertj.core.api.Assertions.tuple("e1", 1)));
  }

  /** The same when the charge spent e1's last attempt: it is dead, and charged all the same. */
  @Test
  void aTakeoverRetriedAfterItsChargesReplyWasLostReportsWhatItChargedToDeath() {
    takeOverWithTheChargesReplyLost(
        new RetryPolicy(1, Duration.ofSeconds(1), Duration.ofSeconds(1), 0),
        (store, heldByB) -> {
          assertThat(store.claim("b", heldByB, 10)).isEmpty();
          assertThat(store.statistics().totalDead()).isEqualTo(1);
        });
  }

  /**
   * a claims e1; b takes a's lane over, and the reply to its charge of e1 is lost (the write
   * applied); b tries again. Checks b's lease on the retry, then {@code then}.
   */
  private void takeOverWithTheChargesReplyLost(
      RetryPolicy policy, java.util.function.BiConsumer<MongoOutboxStore, List<LaneLease>> then) {
    FailingAfterWriteBackend backend = new FailingAfterWriteBackend();
    MongoServer server = new MongoServer(backend);
    java.net.InetSocketAddress address = server.bind();
    try (MongoClient own = MongoClients.create("mongodb://127.0.0.1:" + address.getPort())) {
      MongoOutboxStore store =
          MongoOutboxStore.builder()
              .client(own)
              .database("ambiguous")
              .collectionPrefix("x_")
              .retryPolicy(policy)
              .clock(clock)
              .build();
      store.setup();
      store.publish(keyed("e1", "k"));
      List<Integer> lane = List.of(Lanes.laneOf("k", "e1"));
      List<LaneLease> heldByA = store.acquireLanes("a", "g", lane, Duration.ofSeconds(30));
      assertThat(store.claim("a", heldByA, 10))
          .extracting(ClaimedDelivery::eventId)
          .containsExactly("e1");

      backend.failAfterUpdateOf = "x_deliveries";
      assertThatThrownBy(() -> store.acquireLanes("b", "g", lane, Duration.ofSeconds(30)))
          .isInstanceOf(OutboxStoreException.class);
      assertThat(backend.failAfterUpdateOf).as("the charge was the write that failed").isNull();
      List<LaneLease> heldByB = store.acquireLanes("b", "g", lane, Duration.ofSeconds(30));

      assertThat(heldByB)
          .as("b's lease, on the retry")
          .extracting(LaneLease::epoch, LaneLease::charged)
          .containsExactly(org.assertj.core.api.Assertions.tuple(heldByA.get(0).epoch() + 1, 1));
      then.accept(store, heldByB);
    } finally {
      server.shutdownNow();
    }
  }

  /**
   * A takeover's lane write lands and its caller hears an error; the retry keeps the lane it holds
   * already. The previous holder left k's e2 parked with nothing ahead of it (it died between
   * parking and unparking, as the sweep of lanes newly held is there for).
   *
   * <p>Symptom: the retry kept the lane without counting it as newly held, so b's claims did not
   * sweep it: e2 went out only at b's minute's sweep.
   */
  @Test
  void aTakeoverRetriedAfterItsLaneWriteLandedUnheardStillSweepsTheLane() {
    FailingAfterWriteBackend backend = new FailingAfterWriteBackend();
    MongoServer server = new MongoServer(backend);
    java.net.InetSocketAddress address = server.bind();
    try (MongoClient own = MongoClients.create("mongodb://127.0.0.1:" + address.getPort())) {
      MongoOutboxStore store = storeOn(own);
      store.setup();
      List<Integer> lane = List.of(Lanes.laneOf("k", "e1"));
      List<LaneLease> heldByA = store.acquireLanes("a", "g", lane, Duration.ofSeconds(30));
      assertThat(store.claim("a", heldByA, 10)).isEmpty(); // a's claim swept the lane it took
      store.publish(keyed("e1", "k"));
      store.publish(keyed("e2", "k"));
      // as if a's claim parked e2 behind e1 and died, and e1 went out and completed since
      MongoCollection<Document> deliveries =
          own.getDatabase("ambiguous").getCollection("x_deliveries");
      deliveries.updateOne(eq(Fields.EVENT_ID, "e2"), Updates.set(Fields.PARKED, true));
      deliveries.deleteOne(eq(Fields.EVENT_ID, "e1"));

      backend.failAfterUpdateOf = "x_lanes";
      assertThatThrownBy(() -> store.acquireLanes("b", "g", lane, Duration.ofSeconds(30)))
          .isInstanceOf(OutboxStoreException.class);
      assertThat(backend.failAfterUpdateOf).as("the lane write was the one that failed").isNull();
      List<LaneLease> heldByB = store.acquireLanes("b", "g", lane, Duration.ofSeconds(30));
      assertThat(heldByB).extracting(LaneLease::epoch).containsExactly(heldByA.get(0).epoch() + 1);

      List<String> out = new ArrayList<>();
      for (int claims = 0; claims < 3; claims++) {
        store.claim("b", heldByB, 10).forEach(d -> out.add(d.eventId()));
      }
      assertThat(out).as("what b's three claims handed out").containsExactly("e2");
    } finally {
      server.shutdownNow();
    }
  }

  private MongoOutboxStore storeOn(MongoClient client) {
    return MongoOutboxStore.builder()
        .client(client)
        .database("ambiguous")
        .collectionPrefix("x_")
        .clock(clock)
        .build();
  }

  private static List<String> keysInLane(int lane, int n, String exclude) {
    List<String> keys = new ArrayList<>();
    for (int i = 0; keys.size() < n; i++) {
      if (Lanes.laneOf("key" + i, "x") == lane && !("key" + i).equals(exclude)) {
        keys.add("key" + i);
      }
    }
    return keys;
  }

  /**
   * A claim's last selection (the third) finds key g's head h picked and g's later candidate held
   * back by z, a due delivery of g that was not among the candidates (it came due later than g's
   * newer y2). h holds parked followers, so the claim adds h's run to the batch: z goes out with h.
   * Then, after recording, the claim parks the followers of the keys its last selection held back:
   * it marks z, now in flight, as their blocker and parks y and y2 behind it.
   *
   * <p>Symptom: once h and z are completed nothing is ahead of y and y2, yet they stay parked (out
   * of the claim index) and no claim hands them out until the periodic sweep, a minute later on
   * this store's clock (docs/reliability.md, row 1: "its run goes out in order within
   * ceil(n/limit)+1 claims once the blocker settles").
   */
  @Test
  void followersParkedBehindADeliveryTheSameClaimHandedOutGoOnceItCompletes() {
    MongoOutboxStore store = open(TEN_SECOND_BACKOFF);
    int lane = Lanes.laneOf("g", "x");
    List<String> others = keysInLane(lane, 4, "g");
    List<LaneLease> leases = store.acquireLanes("a", "grp", List.of(lane), Duration.ofSeconds(50));

    // t0: the heads of four other keys, and g's h and z, all claimed
    for (int i = 0; i < 4; i++) {
      store.publish(keyed("b" + i, others.get(i)));
    }
    store.publish(keyed("h", "g"));
    store.publish(keyed("z", "g"));
    List<ClaimedDelivery> first = store.claim("a", leases, 100);
    assertThat(first).hasSize(6);
    ClaimedDelivery h = first.stream().filter(d -> d.eventId().equals("h")).findFirst().get();
    ClaimedDelivery z = first.stream().filter(d -> d.eventId().equals("z")).findFirst().get();
    assertThat(store.reschedule(h.token(), "h failed")).isEqualTo(FailOutcome.RESCHEDULED);
    // y waits for h (due at t0+10): parked, h marked as holding it
    store.publish(keyed("y", "g"));
    assertThat(store.claim("a", leases, 100)).isEmpty();
    assertThat(store.reschedule(z.token(), "z failed")).isEqualTo(FailOutcome.RESCHEDULED);

    // t0+5: the other keys' heads retry (due at t0+15); each gets a follower; g gets y2
    clock.advance(Duration.ofSeconds(5));
    for (ClaimedDelivery b : first) {
      if (b.eventId().startsWith("b")) {
        assertThat(store.reschedule(b.token(), "b failed")).isEqualTo(FailOutcome.RESCHEDULED);
      }
    }
    for (int i = 0; i < 4; i++) {
      store.publish(keyed("f" + i, others.get(i)));
    }
    store.publish(keyed("y2", "g"));

    // t0+10: h and z are due
    clock.advance(Duration.ofSeconds(5));
    List<ClaimedDelivery> batch = store.claim("a", leases, 2);
    assertThat(batch).extracting(ClaimedDelivery::eventId).containsExactly("h", "z");
    assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList())).hasSize(2);

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      store.claim("a", leases, 10).forEach(d -> out.add(d.eventId()));
    }
    long parked =
        collection("deliveries")
            .countDocuments(
                com.mongodb.client.model.Filters.and(
                    com.mongodb.client.model.Filters.in(Fields.EVENT_ID, "y", "y2"),
                    eq(Fields.PARKED, true)));
    assertThat(out)
        .as(
            "what three claims handed out after g's h and z were completed (y, y2 parked: %d)",
            parked)
        .containsExactly("y", "y2");
  }

  /**
   * The process clock steps back (an NTP correction, a VM resumed from a snapshot) between two
   * publishes of one key. A publish is due at once: on PostgreSQL its due time is the server's
   * clock, here the publishing process's, so e1 is due at its old "now", a minute ahead of the
   * clock after the step.
   *
   * <p>Symptom: for as long as the step (a minute here, any length in general) e1 is not handed out
   * although nothing holds it back, and e2, published after it, waits behind it.
   */
  @Test
  void freshPublishesGoAtOnceAfterTheClockSteppedBack() {
    MongoOutboxStore store = open(RetryPolicy.defaults());
    List<LaneLease> leases =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofMinutes(5));
    store.publish(keyed("e1", "k"));
    clock.advance(Duration.ofMinutes(-1));
    store.publish(keyed("e2", "k"));

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      store.claim("a", leases, 10).forEach(d -> out.add(d.eventId()));
    }
    assertThat(out).as("what three claims handed out").containsExactly("e1", "e2");
  }

  /**
   * What failed {@code LeaseContract.twoClaimersNeverGetTheSameLaneOrDelivery} here once ("lanes
   * granted to both: [15]"): mongo-java-server hands a find the live documents and encodes them
   * after releasing its lock, so a read racing an update can return a lane half old, half new
   * (measured: 5 of 384,000 documents read during bulk updates, old epoch and owner with the new
   * {@code rev}). B read lane 15 free (owner null) with the {@code rev} of A's takeover, wrote its
   * own takeover conditioned on that {@code rev}, and it landed over A's; A's write had matched, so
   * A never looked again. Both were granted the lane, under the same epoch.
   *
   * <p>Here the document B's write meets is written by hand between its read and its write: A's
   * lease at the {@code rev} B read. A takeover lands only on the lane as it read it (epoch, owner)
   * and still free, expired or of its group.
   */
  @Test
  void aTakeoverDoesNotLandOnALaneThatIsNoLongerAsItReadIt() {
    MongoOutboxStore store = open(RetryPolicy.defaults());
    int lane = 15;
    Document free = collection("lanes").find(eq(Fields.ID, lane)).first();
    List<LaneLease> taken =
        acquireWithBetweenItsReadAndItsWrite(
            "B",
            "group-B",
            lane,
            () ->
                collection("lanes")
                    .updateOne(
                        eq(Fields.ID, lane),
                        Updates.combine(
                            Updates.set(Fields.EPOCH, free.getLong(Fields.EPOCH) + 1),
                            Updates.set(Fields.OWNER, "A"),
                            Updates.set(Fields.GROUP, "group-A"),
                            Updates.set(
                                Fields.LEASE_EXPIRES_AT,
                                Date.from(clock.instant().plusSeconds(30))))));

    assertThat(taken).as("B's acquisition").isEmpty();
    Document now = collection("lanes").find(eq(Fields.ID, lane)).first();
    assertThat(now.getString(Fields.OWNER)).isEqualTo("A");
    assertThat(now.getLong(Fields.REV)).isEqualTo(free.getLong(Fields.REV));
    assertThat(store.acquireLanes("B", "group-B", List.of(lane), Duration.ofSeconds(30))).isEmpty();
  }
}
