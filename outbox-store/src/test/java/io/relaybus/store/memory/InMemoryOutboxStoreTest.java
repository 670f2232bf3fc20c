package io.relaybus.store.memory;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.entry;
import static org.assertj.core.api.Assertions.tuple;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStatistics.HandlerCounts;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.testing.MutableClock;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class InMemoryOutboxStoreTest {
  private static final Instant START = Instant.parse("2026-01-01T00:00:00Z");
  private static final Duration LEASE = Duration.ofSeconds(30);
  private static final String GROUP = "connector";

  /** Three attempts, backoff 1 s, 2 s, 4 s... without jitter, so due times are exact. */
  private static final RetryPolicy POLICY =
      new RetryPolicy(3, Duration.ofSeconds(1), Duration.ofMinutes(1), 0);

  private final MutableClock clock = new MutableClock(START);
  private final InMemoryOutboxStore store =
      InMemoryOutboxStore.builder().clock(clock).retryPolicy(POLICY).build();

  // ---- awaitWork ----

  private static OutboxEvent wakeEvent(String id) {
    return OutboxEvent.builder("t").id(id).key("k").handlers("h").build();
  }

  /**
   * A publish, a committed transaction and a scheduled timer each wake a waiter (every one waiting
   * then), a rolled-back transaction does not; a wake-up that came while nobody waited is returned
   * once, to the next call.
   */
  @Test
  void awaitWorkIsWokenByWhatInsertsDeliveries() throws Exception {
    assertThat(store.awaitWork(Duration.ZERO)).isFalse();
    ExecutorService waiters = Executors.newFixedThreadPool(2);
    try {
      Future<Boolean> one = waiters.submit(() -> store.awaitWork(Duration.ofMinutes(1)));
      Future<Boolean> two = waiters.submit(() -> store.awaitWork(Duration.ofMinutes(1)));
      org.awaitility.Awaitility.await()
          .atMost(Duration.ofSeconds(30))
          .until(() -> store.waitingForWork() == 2);
      store.publish(wakeEvent("e1"));
      assertThat(one.get(30, TimeUnit.SECONDS)).isTrue();
      assertThat(two.get(30, TimeUnit.SECONDS)).isTrue();
    } finally {
      waiters.shutdownNow();
    }
    assertThat(store.awaitWork(Duration.ZERO)).as("taken").isFalse();

    try (InMemoryOutboxStore.Transaction tx = store.begin()) {
      store.publish(tx, wakeEvent("rolled-back"));
      tx.rollback();
    }
    assertThat(store.awaitWork(Duration.ofMillis(10))).isFalse();

    try (InMemoryOutboxStore.Transaction tx = store.begin()) {
      store.publish(tx, wakeEvent("e2"));
      assertThat(store.awaitWork(Duration.ZERO)).as("not before commit").isFalse();
      tx.commit();
    }
    assertThat(store.awaitWork(Duration.ZERO)).as("pending since the commit").isTrue();
    assertThat(store.awaitWork(Duration.ZERO)).isFalse();

    store.schedule(
        wakeEvent("t1"),
        io.relaybus.store.Timer.at(START.plusSeconds(60))
            .named("timer-1", io.relaybus.store.TimerConflict.EXTEND));
    assertThat(store.awaitWork(Duration.ZERO)).isTrue();
  }

  @Test
  void awaitWorkRefusesANegativeTimeout() {
    assertThatThrownBy(() -> store.awaitWork(Duration.ofMillis(-1)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("timeout must be zero or more, but was PT-0.001S");
  }

  // ---- publish ----

  /**
   * Strict republish in a transaction: the publish call saw a new id, but a different event of the
   * same id committed before this transaction did, so the commit refuses and rolls back, as
   * PostgreSQL's publish would have waited for the other and refused.
   */
  @Test
  void strictCommitRefusesAnEventThatAnotherTransactionCommittedDifferently() {
    InMemoryOutboxStore strict =
        InMemoryOutboxStore.builder().clock(clock).strictRepublish(true).build();
    InMemoryOutboxStore.Transaction first = strict.begin();
    assertThat(strict.publish(first, event("e1", "k", "billing")).newEvent()).isTrue();
    strict.publish(
        OutboxEvent.builder("order.paid").id("e1").key("k").json("{}").handler("audit").build());

    assertThatThrownBy(first::commit)
        .isInstanceOfSatisfying(
            io.relaybus.store.RepublishConflictException.class,
            e -> assertThat(e.differingFields()).containsExactly("type"));
    assertThat(strict.listDeliveries(DeliveryQuery.all()).items())
        .extracting(DeliveryView::handler)
        .containsExactly("audit");
  }

  @Test
  void createsOneDeliveryPerHandlerInTheLaneOfTheKey() {
    PublishResult result = store.publish(event("e1", "order-1", "billing", "shipping"));

    assertThat(result).isEqualTo(new PublishResult("e1", true, List.of("billing", "shipping")));
    List<DeliveryView> deliveries = list(DeliveryQuery.all());
    assertThat(deliveries)
        .extracting(DeliveryView::handler, DeliveryView::lane, DeliveryView::sequence)
        .containsExactly(
            tuple("billing", Lanes.laneOf("order-1", "e1"), 1L),
            tuple("shipping", Lanes.laneOf("order-1", "e1"), 1L));
    assertThat(deliveries.get(0))
        .isEqualTo(
            new DeliveryView(
                1,
                "e1",
                "billing",
                Lanes.laneOf("order-1", "e1"),
                "order-1",
                1L,
                DeliveryStatus.PENDING,
                false,
                0,
                START,
                null,
                START,
                START));
  }

  @Test
  void keyedEventsTakeConsecutiveSequencesPerKeyAndUnkeyedNone() {
    store.publishAll(
        List.of(
            event("e1", "k1", "a"),
            event("e2", "k1", "a"),
            event("e3", "k2", "a"),
            event("e4", null, "a")));

    assertThat(list(DeliveryQuery.all()))
        .extracting(DeliveryView::eventId, DeliveryView::sequence, DeliveryView::lane)
        .containsExactly(
            tuple("e1", 1L, Lanes.laneOf("k1", "e1")),
            tuple("e2", 2L, Lanes.laneOf("k1", "e2")),
            tuple("e3", 1L, Lanes.laneOf("k2", "e3")),
            tuple("e4", null, Lanes.laneOf(null, "e4")));
  }

  @Test
  void republishAddsDeliveriesOnlyForNewHandlers() {
    store.publish(event("e1", null, "a"));

    assertThat(store.publish(event("e1", null, "a", "b")))
        .isEqualTo(new PublishResult("e1", false, List.of("b")));
    assertThat(store.publish(event("e1", null, "b", "a")))
        .isEqualTo(new PublishResult("e1", false, List.of()));
    assertThat(list(DeliveryQuery.all()))
        .extracting(DeliveryView::handler)
        .containsExactly("a", "b");
  }

  @Test
  void completedHandlerNeverRunsAgainForTheSameEventId() {
    store.publish(event("e1", null, "a"));
    List<LaneLease> leases = acquireAll("task-0");
    store.complete(tokens(store.claim("task-0", leases, 10)));

    assertThat(store.publish(event("e1", null, "a")))
        .isEqualTo(new PublishResult("e1", false, List.of()));
    assertThat(list(DeliveryQuery.all())).isEmpty();
  }

  @Test
  void republishKeepsTheFirstEventAndTakesTheKeysNextSequence() {
    store.publish(event("e1", "k", "a"));
    store.publish(event("e2", "k", "a"));
    OutboxEvent changed =
        OutboxEvent.builder("other.type").id("e1").key("k").json("{\"v\":2}").handler("b").build();

    store.publish(changed);

    DeliveryView added = only(DeliveryQuery.all().withHandler("b"));
    assertThat(added.sequence()).isEqualTo(3L);
    ClaimedDelivery claimed =
        store.claim("t", acquireAll("t"), 10).stream()
            .filter(c -> c.handler().equals("b"))
            .findFirst()
            .orElseThrow();
    assertThat(claimed.type()).isEqualTo("order.placed");
    assertThat(new String(claimed.payload(), StandardCharsets.UTF_8)).isEqualTo("{}");
  }

  @Test
  void rejectsABatchNamingOneIdTwiceAndPublishesNothing() {
    List<OutboxEvent> batch =
        List.of(event("e1", null, "a"), event("dup", null, "a"), event("dup", null, "b"));

    assertThatThrownBy(() -> store.publishAll(batch))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("events must have distinct ids, but event id 'dup' is listed twice");
    assertThat(list(DeliveryQuery.all())).isEmpty();
  }

  @Test
  void concurrentPublishersOfOneKeyGetDistinctConsecutiveSequences() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(4);
    List<Future<?>> done = new ArrayList<>();
    for (int t = 0; t < 4; t++) {
      int thread = t;
      done.add(
          pool.submit(
              () -> {
                for (int i = 0; i < 100; i++) {
                  store.publish(event("e-" + thread + "-" + i, "hot", "a"));
                }
              }));
    }
    for (Future<?> f : done) {
      f.get(10, TimeUnit.SECONDS);
    }
    pool.shutdown();

    List<Long> sequences =
        list(DeliveryQuery.all().withLimit(1000)).stream().map(DeliveryView::sequence).toList();
    assertThat(sequences).hasSize(400).doesNotHaveDuplicates().allMatch(s -> s >= 1 && s <= 400);
  }

  // ---- transactions ----

  @Test
  void publishedEventsAppearOnlyAtCommit() {
    InMemoryOutboxStore.Transaction tx = store.begin();

    PublishResult result = store.publish(tx, event("e1", "k", "a"));

    assertThat(result).isEqualTo(new PublishResult("e1", true, List.of("a")));
    assertThat(list(DeliveryQuery.all())).isEmpty();
    tx.commit();
    assertThat(list(DeliveryQuery.all())).extracting(DeliveryView::eventId).containsExactly("e1");
    assertThat(tx.isOpen()).isFalse();
  }

  @Test
  void rollbackAndCloseDiscardEverything() {
    InMemoryOutboxStore.Transaction rolledBack = store.begin();
    store.publish(rolledBack, event("e1", "k", "a"));
    rolledBack.rollback();
    try (InMemoryOutboxStore.Transaction closed = store.begin()) {
      store.publish(closed, event("e2", "k", "a"));
    }

    assertThat(list(DeliveryQuery.all())).isEmpty();
    // Neither took a sequence: the next publish of the key gets 1.
    store.publish(event("e3", "k", "a"));
    assertThat(only(DeliveryQuery.all()).sequence()).isEqualTo(1L);
  }

  @Test
  void sequencesFollowCommitOrderNotPublishOrder() {
    InMemoryOutboxStore.Transaction first = store.begin();
    InMemoryOutboxStore.Transaction second = store.begin();
    store.publish(first, event("published-first", "k", "a"));
    store.publish(second, event("published-second", "k", "a"));

    second.commit();
    first.commit();

    assertThat(list(DeliveryQuery.all()))
        .extracting(DeliveryView::eventId, DeliveryView::sequence)
        .containsExactlyInAnyOrder(tuple("published-second", 1L), tuple("published-first", 2L));
  }

  @Test
  void republishInsideOneTransactionSeesItsOwnEarlierPublish() {
    InMemoryOutboxStore.Transaction tx = store.begin();
    store.publish(tx, event("e1", null, "a"));

    assertThat(store.publish(tx, event("e1", null, "a", "b")))
        .isEqualTo(new PublishResult("e1", false, List.of("b")));
    tx.commit();
    assertThat(list(DeliveryQuery.all()))
        .extracting(DeliveryView::handler)
        .containsExactly("a", "b");
  }

  @Test
  void anEndedTransactionCannotPublishOrCommit() {
    InMemoryOutboxStore.Transaction tx = store.begin();
    tx.commit();

    assertThatThrownBy(() -> store.publish(tx, event("e1", null, "a")))
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("transaction has already been committed or rolled back");
    assertThatThrownBy(tx::commit).isInstanceOf(IllegalStateException.class);
  }

  @Test
  void rejectsATransactionOfAnotherStore() {
    InMemoryOutboxStore.Transaction foreign = InMemoryOutboxStore.create().begin();

    assertThatThrownBy(() -> store.publish(foreign, event("e1", null, "a")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("transaction must have been begun by this store");
  }

  // ---- leases ----

  @Test
  void aFreeLaneIsGrantedWithANewEpochAndNoTakeover() {
    assertThat(store.acquireLanes("task-0", GROUP, List.of(7, 3, 7), LEASE))
        .containsExactly(
            new LaneLease(3, 1, START.plus(LEASE), false, 0),
            new LaneLease(7, 1, START.plus(LEASE), false, 0));
  }

  @Test
  void theSameOwnerRenewsUnderTheSameEpoch() {
    store.acquireLanes("task-0", GROUP, List.of(3), LEASE);
    clock.advance(Duration.ofSeconds(10));

    assertThat(store.acquireLanes("task-0", GROUP, List.of(3), LEASE))
        .containsExactly(new LaneLease(3, 1, clock.instant().plus(LEASE), false, 0));
  }

  @Test
  void aLiveLaneOfAnotherGroupIsLeftOutUntilItExpires() {
    store.acquireLanes("a-0", "connector-a", List.of(3), LEASE);

    assertThat(store.acquireLanes("b-0", "connector-b", List.of(3, 4), LEASE))
        .extracting(LaneLease::lane)
        .containsExactly(4);
    clock.advance(LEASE);
    assertThat(store.acquireLanes("b-0", "connector-b", List.of(3), LEASE))
        .containsExactly(new LaneLease(3, 2, clock.instant().plus(LEASE), true, 0));
  }

  @Test
  void anOwnerOfTheSameGroupTakesOverAtOnceAndChargesWhatWasInFlight() {
    int lane = Lanes.laneOf("k", "e1");
    store.publishAll(List.of(event("e1", "k", "a"), event("e2", "k", "a")));
    List<LaneLease> old = store.acquireLanes("task-0/old", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> lost = store.claim("task-0/old", old, 10);

    List<LaneLease> taken = store.acquireLanes("task-0/new", GROUP, List.of(lane), LEASE);

    assertThat(taken).containsExactly(new LaneLease(lane, 2, START.plus(LEASE), true, 2));
    assertThat(list(DeliveryQuery.all()))
        .extracting(
            DeliveryView::status,
            DeliveryView::inFlight,
            DeliveryView::attempts,
            DeliveryView::lastError)
        .containsOnly(
            tuple(
                DeliveryStatus.PENDING,
                false,
                1,
                "lane " + lane + " taken over while in flight (attempt 1 of 3)"));
    assertThat(store.complete(tokens(lost))).isEmpty();
    assertThat(store.claim("task-0/new", taken, 10))
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::attempts)
        .containsExactly(tuple("e1", 1), tuple("e2", 1));
  }

  /** Guards the poison-record loop: a record that crashes its task every time must still die. */
  @Test
  void aDeliveryThatCrashesEveryHolderEndsInTheDeadLetters() {
    int lane = Lanes.laneOf("k", "e1");
    store.publish(event("e1", "k", "a"));

    for (int incarnation = 0; incarnation < POLICY.maxAttempts(); incarnation++) {
      List<LaneLease> leases =
          store.acquireLanes("task-0/" + incarnation, GROUP, List.of(lane), LEASE);
      assertThat(store.claim("task-0/" + incarnation, leases, 10)).hasSize(1);
    }
    List<LaneLease> last = store.acquireLanes("task-0/last", GROUP, List.of(lane), LEASE);

    assertThat(last.get(0).charged()).isEqualTo(1);
    DeliveryView dead = only(DeliveryQuery.all());
    assertThat(dead.status()).isEqualTo(DeliveryStatus.DEAD);
    assertThat(dead.attempts()).isEqualTo(3);
    assertThat(dead.lastError())
        .isEqualTo(
            "attempts exhausted: lane " + lane + " taken over while in flight (attempt 3 of 3)");
    assertThat(store.claim("task-0/last", last, 10)).isEmpty();
  }

  @Test
  void renewExtendsOnlyLeasesStillHeld() {
    List<LaneLease> mine = store.acquireLanes("task-0", GROUP, List.of(1, 2), LEASE);
    store.acquireLanes("task-0/new", GROUP, List.of(2), LEASE);
    clock.advance(Duration.ofSeconds(10));

    assertThat(store.renewLanes("task-0", mine, LEASE))
        .containsExactly(new LaneLease(1, 1, clock.instant().plus(LEASE), false, 0));
  }

  @Test
  void relinquishFreesLanesAndGivesInFlightBackWithoutCharging() {
    int lane = Lanes.laneOf("k", "e1");
    store.publish(event("e1", "k", "a"));
    List<LaneLease> leases = store.acquireLanes("task-0", GROUP, List.of(lane), LEASE);
    List<ClaimedDelivery> claimed = store.claim("task-0", leases, 10);

    assertThat(store.relinquishLanes("task-0", leases)).isEqualTo(1);
    assertThat(store.relinquishLanes("task-0", leases)).isZero();

    DeliveryView released = only(DeliveryQuery.all());
    assertThat(released.attempts()).isZero();
    assertThat(released.inFlight()).isFalse();
    assertThat(store.complete(tokens(claimed))).isEmpty();
    // Free now: another group gets it at once, and it is no takeover.
    List<LaneLease> next = store.acquireLanes("other", "other-group", List.of(lane), LEASE);
    assertThat(next).containsExactly(new LaneLease(lane, 2, START.plus(LEASE), false, 0));
    assertThat(store.claim("other", next, 10))
        .extracting(c -> c.token().claims(), ClaimedDelivery::attempts)
        .containsExactly(tuple(1, 0));
  }

  @Test
  void argumentsAreCheckedAndNamed() {
    assertThatThrownBy(() -> store.acquireLanes("o", GROUP, List.of(256), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("lanes must be between 0 and 255, but was 256");
    assertThatThrownBy(() -> store.acquireLanes(" ", GROUP, List.of(1), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("owner must not be blank, but was ' '");
    assertThatThrownBy(() -> store.acquireLanes("o", null, List.of(1), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("group must not be blank, but was null");
    assertThatThrownBy(() -> store.acquireLanes("o", GROUP, List.of(1), Duration.ZERO))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("duration must be positive, but was PT0S");
    assertThatThrownBy(() -> store.claim("o", List.of(), 0))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("limit must be positive, but was 0");
  }

  // ---- claim ----

  @Test
  void handsOutDueDeliveriesOfHeldLanesOnlyAndNeverTwice() {
    store.publishAll(List.of(event("e1", "k1", "a"), event("e2", "k2", "a")));
    int lane = Lanes.laneOf("k1", "e1");
    assertThat(Lanes.laneOf("k2", "e2")).isNotEqualTo(lane);
    List<LaneLease> leases = store.acquireLanes("t", GROUP, List.of(lane), LEASE);

    assertThat(store.claim("t", leases, 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly("e1");
    assertThat(store.claim("t", leases, 10)).isEmpty();
    assertThat(only(DeliveryQuery.all().withEventId("e1")).inFlight()).isTrue();
  }

  @Test
  void aLostLeaseClaimsNothing() {
    store.publish(event("e1", "k", "a"));
    List<LaneLease> old = acquireAll("t/old");
    acquireAll("t/new");

    assertThat(store.claim("t/old", old, 10)).isEmpty();
  }

  @Test
  void claimCarriesTheEventAndAToken() {
    OutboxEvent event =
        OutboxEvent.builder("order.placed")
            .id("e1")
            .key("k")
            .payload(new byte[] {1, 2, 3}, "application/x-test")
            .header("traceparent", "00-abc-01")
            .handler("a")
            .build();
    store.publish(event);
    List<LaneLease> leases = acquireAll("t");

    ClaimedDelivery claimed = store.claim("t", leases, 10).get(0);
    claimed.payload()[0] = 99;

    assertThat(claimed.token()).isEqualTo(new DeliveryToken(1, event.lane(), 1, 0, event.id()));
    assertThat(claimed.sequence()).isEqualTo(1L);
    assertThat(claimed.contentType()).isEqualTo("application/x-test");
    assertThat(claimed.headers()).containsExactly(entry("traceparent", "00-abc-01"));
    assertThat(claimed.eventTime()).isEqualTo(START);
    store.release(List.of(claimed.token()));
    assertThat(store.claim("t", leases, 10).get(0).payload()).containsExactly(1, 2, 3);
  }

  @Test
  void aKeyIsHandedOutInSequenceOrderUpToTheLimit() {
    publishKeyed("k", 3);
    List<LaneLease> leases = acquireAll("t");

    assertThat(store.claim("t", leases, 2))
        .extracting(ClaimedDelivery::sequence)
        .containsExactly(1L, 2L);
    assertThat(store.claim("t", leases, 2))
        .extracting(ClaimedDelivery::sequence)
        .containsExactly(3L);
  }

  @Test
  void aPendingPredecessorBlocksTheRestOfItsKey() {
    publishKeyed("k", 3);
    List<LaneLease> leases = acquireAll("t");
    ClaimedDelivery first = store.claim("t", leases, 1).get(0);

    assertThat(store.reschedule(first.token(), "broker timeout"))
        .isEqualTo(FailOutcome.RESCHEDULED);
    assertThat(store.claim("t", leases, 10)).isEmpty();
    clock.advance(Duration.ofSeconds(1));
    assertThat(store.claim("t", leases, 10))
        .extracting(ClaimedDelivery::sequence)
        .containsExactly(1L, 2L, 3L);
  }

  @Test
  void aDeadPredecessorDoesNotBlockItsKey() {
    publishKeyed("k", 3);
    List<LaneLease> leases = acquireAll("t");
    ClaimedDelivery first = store.claim("t", leases, 1).get(0);

    assertThat(store.bury(first.token(), "payload too large")).isTrue();

    assertThat(store.claim("t", leases, 10))
        .extracting(ClaimedDelivery::sequence)
        .containsExactly(2L, 3L);
  }

  @Test
  void handlersOfOneKeyAreOrderedIndependently() {
    store.publishAll(List.of(event("e1", "k", "a", "b"), event("e2", "k", "a", "b")));
    List<LaneLease> leases = acquireAll("t");
    List<ClaimedDelivery> firsts = store.claim("t", leases, 10);
    ClaimedDelivery a1 =
        firsts.stream().filter(c -> c.handler().equals("a") && c.sequence() == 1).findFirst().get();
    store.release(tokens(firsts.stream().filter(c -> c != a1).toList()));

    store.reschedule(a1.token(), "failed");

    assertThat(store.claim("t", leases, 10))
        .extracting(ClaimedDelivery::handler, ClaimedDelivery::sequence)
        .containsExactly(tuple("b", 1L), tuple("b", 2L));
  }

  @Test
  void unkeyedDeliveriesGoInDueOrder() {
    List<String> ids = idsInOneLane(3);
    ids.forEach(id -> store.publish(event(id, null, "a")));
    List<LaneLease> leases = acquireAll("t");
    ClaimedDelivery first = store.claim("t", leases, 1).get(0);
    assertThat(first.eventId()).isEqualTo(ids.get(0));
    store.reschedule(first.token(), "failed");
    clock.advance(Duration.ofSeconds(5));

    assertThat(store.claim("t", leases, 10))
        .extracting(ClaimedDelivery::eventId)
        .containsExactly(ids.get(1), ids.get(2), ids.get(0));
  }

  // ---- outcomes ----

  @Test
  void completeDeletesOnlyThroughTokensThatHold() {
    store.publishAll(List.of(event("e1", null, "a"), event("e2", null, "a")));
    List<ClaimedDelivery> claimed = store.claim("t", acquireAll("t"), 10);
    DeliveryToken e1 = claimOf(claimed, "e1").token();
    DeliveryToken e2 = claimOf(claimed, "e2").token();
    DeliveryToken staleE2 =
        new DeliveryToken(e2.deliveryId(), e2.lane(), e2.epoch(), 5, e2.eventId());

    assertThat(store.complete(List.of(e1, staleE2))).containsExactly(e1.deliveryId());
    assertThat(store.complete(List.of(e1))).isEmpty();
    assertThat(list(DeliveryQuery.all()))
        .extracting(DeliveryView::id)
        .containsExactly(e2.deliveryId());
    assertThat(list(DeliveryQuery.all().withStatus(DeliveryStatus.COMPLETED))).isEmpty();
  }

  @Test
  void completionHistoryIsListedAndCountedWhenEnabled() {
    InMemoryOutboxStore withHistory =
        InMemoryOutboxStore.builder().clock(clock).completionHistory(true).build();
    withHistory.publish(event("e1", "k", "a"));
    List<ClaimedDelivery> claimed =
        withHistory.claim(
            "t", withHistory.acquireLanes("t", GROUP, LaneRange.all().lanes(), LEASE), 10);
    clock.advance(Duration.ofSeconds(2));

    withHistory.complete(tokens(claimed));

    DeliveryPage history =
        withHistory.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.COMPLETED));
    assertThat(history.items())
        .containsExactly(
            new DeliveryView(
                1,
                "e1",
                "a",
                Lanes.laneOf("k", "e1"),
                "k",
                1L,
                DeliveryStatus.COMPLETED,
                false,
                0,
                START,
                null,
                START,
                START.plusSeconds(2)));
    assertThat(withHistory.statistics().handlers())
        .containsExactly(entry("a", new HandlerCounts(0, 0, 0, 1)));
  }

  @Test
  void rescheduleBacksOffUntilTheAttemptsAreSpent() {
    store.publish(event("e1", null, "a"));
    List<LaneLease> leases = acquireAll("t");

    DeliveryToken first = store.claim("t", leases, 1).get(0).token();
    assertThat(store.reschedule(first, "timeout 1")).isEqualTo(FailOutcome.RESCHEDULED);
    assertThat(only(DeliveryQuery.all()))
        .extracting(DeliveryView::attempts, DeliveryView::availableAt, DeliveryView::lastError)
        .containsExactly(1, START.plusSeconds(1), "timeout 1");
    assertThat(store.reschedule(first, "again")).isEqualTo(FailOutcome.LOST);

    clock.advance(Duration.ofSeconds(1));
    DeliveryToken second = store.claim("t", leases, 1).get(0).token();
    assertThat(store.reschedule(second, "timeout 2")).isEqualTo(FailOutcome.RESCHEDULED);
    assertThat(only(DeliveryQuery.all()).availableAt()).isEqualTo(clock.instant().plusSeconds(2));

    clock.advance(Duration.ofSeconds(2));
    DeliveryToken third = store.claim("t", leases, 1).get(0).token();
    assertThat(store.reschedule(third, "timeout 3")).isEqualTo(FailOutcome.DEAD);
    assertThat(only(DeliveryQuery.all()))
        .extracting(DeliveryView::status, DeliveryView::attempts, DeliveryView::lastError)
        .containsExactly(DeliveryStatus.DEAD, 3, "timeout 3");
  }

  @Test
  void buryDeadLettersAtOnce() {
    store.publish(event("e1", null, "a"));
    List<LaneLease> leases = acquireAll("t");
    DeliveryToken token = store.claim("t", leases, 1).get(0).token();

    assertThat(store.bury(token, "no topic for handler a")).isTrue();
    assertThat(store.bury(token, "again")).isFalse();

    assertThat(only(DeliveryQuery.all()))
        .extracting(
            DeliveryView::status,
            DeliveryView::inFlight,
            DeliveryView::attempts,
            DeliveryView::lastError)
        .containsExactly(DeliveryStatus.DEAD, false, 1, "no topic for handler a");
    clock.advance(Duration.ofHours(1));
    assertThat(store.claim("t", leases, 10)).isEmpty();
  }

  @Test
  void releaseGivesDeliveriesBackWithoutChargingAnAttempt() {
    store.publish(event("e1", null, "a"));
    List<LaneLease> leases = acquireAll("t");
    DeliveryToken token = store.claim("t", leases, 1).get(0).token();

    assertThat(store.release(List.of(token, token))).isEqualTo(1);

    ClaimedDelivery again = store.claim("t", leases, 1).get(0);
    assertThat(again.attempts()).isZero();
    assertThat(again.token().claims()).isEqualTo(1);
    assertThat(store.complete(List.of(token))).isEmpty();
    assertThat(store.complete(List.of(again.token()))).containsExactly(token.deliveryId());
  }

  // ---- admin ----

  @Test
  void requeueBringsOnlyDeadDeliveriesBackWithAFreshBudget() {
    store.publishAll(List.of(event("e1", null, "a"), event("e2", null, "a")));
    List<LaneLease> leases = acquireAll("t");
    List<ClaimedDelivery> claimed = store.claim("t", leases, 10);
    store.bury(claimOf(claimed, "e1").token(), "bad payload");
    clock.advance(Duration.ofMinutes(5));

    assertThat(store.requeue(List.of(1L, 2L, 999L))).isEqualTo(1);

    assertThat(only(DeliveryQuery.all().withEventId("e1")))
        .extracting(
            DeliveryView::status,
            DeliveryView::attempts,
            DeliveryView::availableAt,
            DeliveryView::lastError,
            DeliveryView::updatedAt)
        .containsExactly(DeliveryStatus.PENDING, 0, clock.instant(), null, clock.instant());
    assertThat(store.claim("t", leases, 10))
        .extracting(ClaimedDelivery::eventId, c -> c.token().claims())
        .containsExactly(tuple("e1", 2));
  }

  @Test
  void requeueDeadSelectsByHandlerOrTakesAll() {
    store.publish(event("e1", null, "a", "b"));
    List<LaneLease> leases = acquireAll("t");
    store.claim("t", leases, 10).forEach(c -> store.bury(c.token(), "bad"));

    assertThat(store.requeueDead("a")).isEqualTo(1);
    assertThat(store.requeueDead("a")).isZero();
    assertThat(store.requeueDead(null)).isEqualTo(1);
    assertThat(list(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD))).isEmpty();
  }

  @Test
  void listingFiltersAndPagesByIdWithInFlightShown() {
    store.publishAll(
        List.of(
            event("e1", "k1", "a"),
            event("e2", "k1", "b"),
            event("e3", "k2", "a"),
            event("e4", "k2", "a"),
            event("e5", "k2", "a")));
    List<LaneLease> leases = acquireAll("t");
    store.claim("t", leases, 10).stream()
        .filter(c -> c.eventId().equals("e3"))
        .forEach(c -> store.bury(c.token(), "bad"));

    DeliveryPage first = store.listDeliveries(DeliveryQuery.all().withLimit(2));
    DeliveryPage second = store.listDeliveries(DeliveryQuery.all().withLimit(2).after(2L));
    DeliveryPage last = store.listDeliveries(DeliveryQuery.all().withLimit(2).after(4L));

    assertThat(first.items()).extracting(DeliveryView::id).containsExactly(1L, 2L);
    assertThat(first.nextAfterId()).isEqualTo(2L);
    assertThat(second.items()).extracting(DeliveryView::id).containsExactly(3L, 4L);
    assertThat(second.nextAfterId()).isEqualTo(4L);
    assertThat(last.items()).extracting(DeliveryView::id).containsExactly(5L);
    assertThat(last.nextAfterId()).isNull();
    assertThat(first.items()).extracting(DeliveryView::inFlight).containsExactly(true, true);
    assertThat(list(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)))
        .extracting(DeliveryView::eventId)
        .containsExactly("e3");
    assertThat(list(DeliveryQuery.all().withStatus(DeliveryStatus.PENDING).withKey("k2")))
        .extracting(DeliveryView::eventId)
        .containsExactly("e4", "e5");
    assertThat(list(DeliveryQuery.all().withHandler("b")))
        .extracting(DeliveryView::eventId)
        .containsExactly("e2");
    assertThat(list(DeliveryQuery.all().withEventId("e4").withHandler("a")))
        .extracting(DeliveryView::id)
        .containsExactly(4L);
  }

  @Test
  void statisticsCountPerHandlerWithAgeAndLaneBacklog() {
    store.publish(event("e1", "k", "a", "b"));
    clock.advance(Duration.ofSeconds(10));
    store.publish(event("e2", "k", "a"));
    List<LaneLease> leases = acquireAll("t");
    List<ClaimedDelivery> claimed = store.claim("t", leases, 10);
    ClaimedDelivery e2 = claimOf(claimed, "e2");
    ClaimedDelivery b1 =
        claimed.stream().filter(c -> c.handler().equals("b")).findFirst().orElseThrow();
    store.reschedule(e2.token(), "retry later");
    store.bury(b1.token(), "bad");
    clock.advance(Duration.ofMillis(500));

    OutboxStatistics statistics = store.statistics();

    assertThat(statistics.handlers())
        .containsOnly(
            entry("a", new HandlerCounts(2, 1, 0, 0)), entry("b", new HandlerCounts(0, 0, 1, 0)));
    assertThat(statistics.oldestPendingAge()).isEqualTo(Duration.ofMillis(10_500));
    assertThat(statistics.laneBacklog()).hasSize(Lanes.COUNT);
    assertThat(statistics.laneBacklog().get(Lanes.laneOf("k", "e1"))).isEqualTo(2L);
    assertThat(statistics.laneBacklog().stream().mapToLong(Long::longValue).sum()).isEqualTo(2);
  }

  @Test
  void statisticsOfAnEmptyOutbox() {
    OutboxStatistics statistics = store.statistics();

    assertThat(statistics.handlers()).isEmpty();
    assertThat(statistics.oldestPendingAge()).isEqualTo(Duration.ZERO);
    assertThat(statistics.laneBacklog()).isEqualTo(Collections.nCopies(Lanes.COUNT, 0L));
  }

  @Test
  void purgeRemovesOnlyWhatIsOldEnough() {
    InMemoryOutboxStore withHistory =
        InMemoryOutboxStore.builder().clock(clock).completionHistory(true).build();
    withHistory.publishAll(
        List.of(event("done", "k1", "a"), event("dead", "k2", "a"), event("waiting", "k3", "a")));
    List<LaneLease> leases = withHistory.acquireLanes("t", GROUP, LaneRange.all().lanes(), LEASE);
    for (ClaimedDelivery c : withHistory.claim("t", leases, 10)) {
      switch (c.eventId()) {
        case "done" -> withHistory.complete(List.of(c.token()));
        case "dead" -> withHistory.bury(c.token(), "bad");
        default -> withHistory.release(List.of(c.token()));
      }
    }
    RetentionPolicy oneDay =
        new RetentionPolicy(Duration.ofDays(1), Duration.ofDays(1), Duration.ofDays(1));

    assertThat(withHistory.purge(oneDay)).isEqualTo(new PurgeResult(0, 0, 0, 0));
    clock.advance(Duration.ofDays(2));
    assertThat(withHistory.purge(oneDay)).isEqualTo(new PurgeResult(2, 1, 1, 2));

    assertThat(withHistory.listDeliveries(DeliveryQuery.all()).items())
        .extracting(DeliveryView::eventId)
        .containsExactly("waiting");
    // The purged event counts as new again, and its key's counter starts over.
    assertThat(withHistory.publish(event("done", "k1", "a")).newEvent()).isTrue();
    assertThat(withHistory.listDeliveries(DeliveryQuery.all().withKey("k1")).items())
        .extracting(DeliveryView::sequence)
        .containsExactly(1L);
    assertThat(withHistory.publish(event("waiting", "k3", "a")).newEvent()).isFalse();
  }

  @Test
  void defaultsAndNoOps() {
    InMemoryOutboxStore defaults = InMemoryOutboxStore.create();
    defaults.setup();
    defaults.verifySchema();
    defaults.close();

    assertThat(defaults.retryPolicy()).isEqualTo(RetryPolicy.defaults());
    assertThat(store.retryPolicy()).isEqualTo(POLICY);
    assertThatThrownBy(() -> InMemoryOutboxStore.builder().clock(null))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("clock must not be null");
  }

  private static OutboxEvent event(String id, String key, String... handlers) {
    return OutboxEvent.builder("order.placed")
        .id(id)
        .key(key)
        .json("{}")
        .handlers(handlers)
        .build();
  }

  private void publishKeyed(String key, int count) {
    for (int i = 1; i <= count; i++) {
      store.publish(event(key + "-" + i, key, "a"));
    }
  }

  private List<LaneLease> acquireAll(String owner) {
    return store.acquireLanes(owner, GROUP, LaneRange.all().lanes(), LEASE);
  }

  private List<DeliveryView> list(DeliveryQuery query) {
    return store.listDeliveries(query).items();
  }

  private DeliveryView only(DeliveryQuery query) {
    List<DeliveryView> views = list(query);
    assertThat(views).hasSize(1);
    return views.get(0);
  }

  private static ClaimedDelivery claimOf(List<ClaimedDelivery> claimed, String eventId) {
    return claimed.stream().filter(c -> c.eventId().equals(eventId)).findFirst().orElseThrow();
  }

  private static List<DeliveryToken> tokens(List<ClaimedDelivery> claimed) {
    return claimed.stream().map(ClaimedDelivery::token).toList();
  }

  /** Unkeyed event ids that hash to one lane, in ascending order of publication. */
  private static List<String> idsInOneLane(int count) {
    int lane = Lanes.laneOf(null, "u-0");
    List<String> ids = new ArrayList<>();
    for (int i = 0; ids.size() < count; i++) {
      if (Lanes.laneOf(null, "u-" + i) == lane) {
        ids.add("u-" + i);
      }
    }
    return ids;
  }
}
