package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.tuple;
import static org.awaitility.Awaitility.await;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The guarantees of the design, each pinned by one test, run against every store. A store's test
 * class extends this one and says how to make a fresh, set-up store and how to open a transaction.
 */
public abstract class OutboxStoreContractTest {
  protected static final String GROUP = "connector-a";
  protected static final Duration LEASE = Duration.ofSeconds(30);
  protected static final List<Integer> ALL_LANES = LaneRange.all().lanes();

  /** A transaction of the caller, as an application would hold it. */
  protected interface Tx extends AutoCloseable {
    PublishResult publish(OutboxEvent event);

    InboxOutcome recordHandled(OutboxEvent received, String handler);

    TimerResult schedule(OutboxEvent event, Timer timer);

    TimerResult cancelTimer(String handler, String timerId);

    void commit();

    void rollback();

    @Override
    void close();
  }

  /** A fresh, set-up store with nothing in it. */
  protected abstract OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory);

  protected abstract Tx begin(OutboxStore store);

  /** A fresh store like {@link #newStore}, built with {@code strictRepublish(true)}. */
  protected abstract OutboxStore newStrictStore();

  /**
   * Why {@link #begin} cannot work against the server under test, or {@code null} when it can (the
   * default). Tests that need a caller transaction are then reported as skipped with this reason,
   * never passed: e.g. MongoDB without a replica set has no transactions.
   */
  protected String transactionsUnavailableReason() {
    return null;
  }

  private void assumeTransactions() {
    String reason = transactionsUnavailableReason();
    assumeTrue(reason == null, reason);
  }

  protected OutboxStore store;
  private final List<OutboxStore> opened = new ArrayList<>();

  @BeforeEach
  void openStore() {
    store = open(RetryPolicy.defaults(), false);
  }

  @AfterEach
  void closeStores() {
    opened.forEach(OutboxStore::close);
  }

  protected OutboxStore open(RetryPolicy policy, boolean history) {
    OutboxStore s = newStore(policy, history);
    opened.add(s);
    return s;
  }

  protected OutboxStore openStrict() {
    OutboxStore s = newStrictStore();
    opened.add(s);
    return s;
  }

  protected static OutboxEvent event(String id, String key, String... handlers) {
    return OutboxEvent.builder("test.happened")
        .id(id)
        .key(key)
        .payload(("payload of " + id).getBytes(StandardCharsets.UTF_8), "text/plain")
        .header("traceparent", "00-" + id)
        .handlers(handlers)
        .build();
  }

  protected List<LaneLease> leaseAll(OutboxStore s, String owner, String group) {
    return s.acquireLanes(owner, group, ALL_LANES, LEASE);
  }

  protected static List<String> eventIds(List<ClaimedDelivery> batch) {
    return batch.stream().map(ClaimedDelivery::eventId).toList();
  }

  protected static List<DeliveryToken> tokens(List<ClaimedDelivery> batch) {
    return batch.stream().map(ClaimedDelivery::token).toList();
  }

  protected static LaneLease leaseOf(List<LaneLease> leases, int lane) {
    return leases.stream().filter(l -> l.lane() == lane).findFirst().orElseThrow();
  }

  private List<DeliveryView> all() {
    return store.listDeliveries(DeliveryQuery.all().withLimit(10_000)).items();
  }

  // ---------------------------------------------------------------- publish

  @Test
  void publishedEventCarriesEverythingToTheClaim() {
    PublishResult result = store.publish(event("e1", "order-1", "billing", "shipping"));
    assertThat(result).isEqualTo(new PublishResult("e1", true, List.of("billing", "shipping")));

    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);

    assertThat(batch).hasSize(2);
    ClaimedDelivery first = batch.get(0);
    assertThat(first.eventId()).isEqualTo("e1");
    assertThat(first.key()).isEqualTo("order-1");
    assertThat(first.lane()).isEqualTo(Lanes.laneOf("order-1", "e1"));
    // grows with commit order per key; consecutive per key only where the store counts per key
    assertThat(first.sequence()).isPositive();
    assertThat(first.attempts()).isZero();
    assertThat(first.type()).isEqualTo("test.happened");
    assertThat(new String(first.payload(), StandardCharsets.UTF_8)).isEqualTo("payload of e1");
    assertThat(first.contentType()).isEqualTo("text/plain");
    assertThat(first.headers()).containsExactly(java.util.Map.entry("traceparent", "00-e1"));
    assertThat(first.eventTime()).isNotNull();
    assertThat(batch)
        .extracting(ClaimedDelivery::handler)
        .containsExactlyInAnyOrder("billing", "shipping");
  }

  @Test
  void rolledBackPublishLeavesNothing() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      tx.publish(event("e1", "k", "billing"));
      tx.publish(event("e2", null, "billing", "shipping"));
      tx.rollback();
    }

    assertThat(all()).isEmpty();
    assertThat(store.statistics().totalPending()).isZero();
    assertThat(store.claim("A", leaseAll(store, "A", GROUP), 10)).isEmpty();
    // the event row went too: the same id is new again
    assertThat(store.publish(event("e1", "k", "billing")).newEvent()).isTrue();
  }

  @Test
  void committedTransactionPublishesEverything() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      tx.publish(event("e1", "k", "billing"));
      tx.publish(event("e2", null, "billing", "shipping"));
      tx.commit();
    }
    assertThat(all()).hasSize(3);
  }

  @Test
  void republishAddsDeliveriesOnlyForNewHandlers() {
    store.publish(event("e1", "k", "billing", "shipping"));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery billing =
        store.claim("A", leases, 10).stream()
            .filter(d -> d.handler().equals("billing"))
            .findFirst()
            .orElseThrow();
    assertThat(store.complete(List.of(billing.token()))).containsExactly(billing.deliveryId());

    PublishResult again = store.publish(event("e1", "k", "billing", "shipping", "audit"));
    PublishResult thrice = store.publish(event("e1", "k", "billing", "shipping", "audit"));

    assertThat(again).isEqualTo(new PublishResult("e1", false, List.of("audit")));
    assertThat(thrice).isEqualTo(new PublishResult("e1", false, List.of()));
    // billing completed and is never delivered again; shipping still pending; audit added
    assertThat(all())
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("shipping", "audit");
  }

  @Test
  void batchPublishReportsEachEventInInputOrder() {
    store.publish(event("old", null, "billing"));
    List<PublishResult> results =
        store.publishAll(
            List.of(
                event("n1", "k", "billing"),
                event("old", null, "billing", "audit"),
                event("n2", "k", "billing")));

    assertThat(results)
        .containsExactly(
            new PublishResult("n1", true, List.of("billing")),
            new PublishResult("old", false, List.of("audit")),
            new PublishResult("n2", true, List.of("billing")));
    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);
    assertThat(batch.stream().filter(d -> "k".equals(d.key())).map(ClaimedDelivery::sequence))
        .hasSize(2)
        .isSorted()
        .doesNotHaveDuplicates();
    assertThat(eventIds(batch.stream().filter(d -> "k".equals(d.key())).toList()))
        .containsExactly("n1", "n2");
  }

  /** Issue 13, item 8: a republish that differs from the stored event no longer goes unnoticed. */
  @Test
  void republishOfADifferentEventSaysWhatDiffersAndTheStoredEventWins() {
    store.publish(event("e1", "k", "billing"));
    OutboxEvent changed =
        OutboxEvent.builder("test.changed")
            .id("e1")
            .key("k2")
            .payload("another payload".getBytes(StandardCharsets.UTF_8), "application/json")
            .header("traceparent", "00-other")
            .handlers("billing", "audit")
            .build();
    OutboxEvent payloadOnly =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k")
            .payload("another payload".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("traceparent", "00-e1")
            .handlers("billing")
            .build();

    assertThat(store.publish(event("e1", "k", "billing")))
        .as("a faithful republish")
        .isEqualTo(new PublishResult("e1", false, List.of(), List.of()));
    assertThat(store.publish(changed))
        .isEqualTo(
            new PublishResult(
                "e1",
                false,
                List.of("audit"),
                List.of("type", "key", "payload", "contentType", "headers")));
    PublishResult payloadDiffers = store.publish(payloadOnly);
    assertThat(payloadDiffers.differingFields()).containsExactly("payload");
    assertThat(payloadDiffers.conflicting()).isTrue();
    assertThat(payloadDiffers.addedHandlers()).isEmpty();

    // the added route carries the event as first published
    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);
    ClaimedDelivery audit =
        batch.stream().filter(d -> d.handler().equals("audit")).findFirst().orElseThrow();
    assertThat(audit.type()).isEqualTo("test.happened");
    assertThat(audit.key()).isEqualTo("k");
    assertThat(audit.sequence()).as("a new route takes the key's next sequence").isPositive();
    assertThat(new String(audit.payload(), StandardCharsets.UTF_8)).isEqualTo("payload of e1");
    assertThat(audit.contentType()).isEqualTo("text/plain");
    assertThat(audit.headers()).containsExactly(java.util.Map.entry("traceparent", "00-e1"));
  }

  @Test
  void strictRepublishRefusesADifferentEventNamingTheIdAndTheFields() {
    OutboxStore strict = openStrict();
    strict.publish(event("e1", "k", "billing"));
    // idempotent republish and new routes still work
    assertThat(strict.publish(event("e1", "k", "billing", "audit")))
        .isEqualTo(new PublishResult("e1", false, List.of("audit")));
    OutboxEvent otherPayload =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k")
            .payload("another payload".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("traceparent", "00-e1")
            .handlers("billing", "shipping")
            .build();

    assertThatThrownBy(() -> strict.publish(otherPayload))
        .isInstanceOfSatisfying(
            RepublishConflictException.class,
            e -> {
              assertThat(e.eventId()).isEqualTo("e1");
              assertThat(e.differingFields()).containsExactly("payload");
            })
        .hasMessageContaining("event id 'e1'")
        .hasMessageContaining("different payload");
    assertThatThrownBy(() -> strict.publishAll(List.of(event("n1", null, "billing"), otherPayload)))
        .isInstanceOf(RepublishConflictException.class);

    List<DeliveryView> deliveries =
        strict.listDeliveries(DeliveryQuery.all().withLimit(100)).items();
    assertThat(deliveries)
        .extracting(DeliveryView::eventId, DeliveryView::handler)
        .as("nothing of the refused event was written")
        .containsExactlyInAnyOrder(
            org.assertj.core.groups.Tuple.tuple("e1", "billing"),
            org.assertj.core.groups.Tuple.tuple("e1", "audit"));
    assertThat(strict.publish(event("n1", null, "billing")).newEvent())
        .as("the batch was refused as a whole")
        .isTrue();
  }

  @Test
  void strictRepublishInATransactionRefusesTheCall() {
    assumeTransactions();
    OutboxStore strict = openStrict();
    strict.publish(event("e1", "k", "billing"));
    OutboxEvent otherKey =
        OutboxEvent.builder("test.happened")
            .id("e1")
            .key("k2")
            .payload("payload of e1".getBytes(StandardCharsets.UTF_8), "text/plain")
            .header("traceparent", "00-e1")
            .handlers("billing", "audit")
            .build();
    try (Tx tx = begin(strict)) {
      assertThatThrownBy(() -> tx.publish(otherKey))
          .isInstanceOfSatisfying(
              RepublishConflictException.class,
              e -> assertThat(e.differingFields()).containsExactly("key"));
      tx.rollback();
    }
    assertThat(strict.listDeliveries(DeliveryQuery.all()).items())
        .extracting(DeliveryView::handler)
        .containsExactly("billing");
  }

  @Test
  void batchWithTheSameIdTwiceIsRejected() {
    assertThatThrownBy(
            () -> store.publishAll(List.of(event("x", null, "h"), event("x", null, "h"))))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("'x'");
    assertThat(all()).isEmpty();
  }

  @Test
  void keySequenceFollowsCommitOrderNotPublishOrder() throws Exception {
    assumeTransactions();
    // A starts first but commits last; B publishes the same key and commits first.
    List<String> commitOrder = Collections.synchronizedList(new ArrayList<>());
    try (Tx a = begin(store)) {
      try (Tx b = begin(store)) {
        b.publish(event("b", "k", "h"));
        b.commit();
        commitOrder.add("b");
      }
      a.publish(event("a", "k", "h"));
      a.commit();
      commitOrder.add("a");
    }

    assertThat(eventIds(store.claim("A", leaseAll(store, "A", GROUP), 10))).isEqualTo(commitOrder);
  }

  @Test
  void concurrentPublishersOfOneKeyAreOrderedByCommit() throws Exception {
    assumeTransactions();
    // A publishes first and holds its transaction open; B publishes the same key from another
    // thread. Whatever the store does (block B until A commits, or order at commit), the claim
    // order must be the commit order.
    // Each commit and its record happen under one lock, so the list is the true commit order
    // (B, unblocked by A's commit, cannot record itself before A does).
    List<String> commitOrder = new ArrayList<>();
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (Tx a = begin(store)) {
      a.publish(event("a", "k", "h"));
      Future<?> b =
          pool.submit(
              () -> {
                try (Tx tx = begin(store)) {
                  tx.publish(event("b", "k", "h"));
                  synchronized (commitOrder) {
                    tx.commit();
                    commitOrder.add("b");
                  }
                }
              });
      Thread.sleep(300);
      synchronized (commitOrder) {
        a.commit();
        commitOrder.add("a");
      }
      b.get(10, TimeUnit.SECONDS);
    } finally {
      pool.shutdownNow();
    }

    assertThat(commitOrder).hasSize(2);
    assertThat(eventIds(store.claim("A", leaseAll(store, "A", GROUP), 10))).isEqualTo(commitOrder);
  }

  // ---------------------------------------------------------------- timers

  private static final String TIMERS = "timers";

  private static OutboxEvent timerEvent(String id) {
    return event(id, null, TIMERS);
  }

  private static Timer due() {
    return Timer.at(java.time.Instant.now().minusSeconds(1));
  }

  private static Timer later() {
    return Timer.in(Duration.ofHours(1));
  }

  private List<ClaimedDelivery> claimAll() {
    return store.claim("A", leaseAll(store, "A", GROUP), 100);
  }

  private static TimerResult result(TimerOutcome outcome, String eventId) {
    return new TimerResult(outcome, eventId);
  }

  @Test
  void timerIsNotClaimableBeforeItsDeadline() {
    assertThat(store.schedule(timerEvent("t1"), later().named("t", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.ARMED, "t1"));
    assertThat(store.schedule(timerEvent("anon"), later()))
        .isEqualTo(result(TimerOutcome.ARMED, "anon"));

    assertThat(claimAll()).isEmpty();
    assertThat(all()).extracting(DeliveryView::eventId).containsExactlyInAnyOrder("t1", "anon");
  }

  @Test
  void timerIsClaimableOnceItsDeadlinePassed() {
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.EXTEND));
    store.schedule(event("anon", null, "a", "b"), due());

    List<ClaimedDelivery> batch = claimAll();

    assertThat(batch)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler)
        .containsExactlyInAnyOrder(
            org.assertj.core.groups.Tuple.tuple("t1", TIMERS),
            org.assertj.core.groups.Tuple.tuple("anon", "a"),
            org.assertj.core.groups.Tuple.tuple("anon", "b"));
    ClaimedDelivery t1 =
        batch.stream().filter(d -> d.eventId().equals("t1")).findFirst().orElseThrow();
    assertThat(new String(t1.payload(), StandardCharsets.UTF_8)).isEqualTo("payload of t1");
  }

  @Test
  void timerFiresWhenItsDeadlinePasses() {
    store.schedule(
        timerEvent("t1"), Timer.in(Duration.ofSeconds(2)).named("t", TimerConflict.FAIL));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);

    assertThat(store.claim("A", leases, 10)).as("2 s before its deadline").isEmpty();
    List<ClaimedDelivery> fired = new ArrayList<>();
    await()
        .atMost(Duration.ofSeconds(10))
        .pollInterval(Duration.ofMillis(100))
        .until(() -> fired.addAll(store.claim("A", leases, 10)));
    assertThat(eventIds(fired)).containsExactly("t1");
  }

  @Test
  void extendMovesTheDeadlineAndKeepsTheEvent() {
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.EXTEND));

    assertThat(store.schedule(timerEvent("t2"), later().named("t", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "t1"));
    assertThat(claimAll()).as("due by its first deadline, re-armed for the new one").isEmpty();
    assertThat(claimAll()).as("still waiting after the re-arm").isEmpty();

    assertThat(store.schedule(timerEvent("t3"), due().named("t", TimerConflict.EXTEND)))
        .as("a deadline moved earlier")
        .isEqualTo(result(TimerOutcome.EXTENDED, "t1"));
    List<ClaimedDelivery> fired = claimAll();
    assertThat(eventIds(fired)).containsExactly("t1");
    assertThat(new String(fired.get(0).payload(), StandardCharsets.UTF_8))
        .isEqualTo("payload of t1");
    assertThat(all()).hasSize(1);
  }

  @Test
  void replaceArmsTheNewEventInsteadOfThePendingOne() {
    store.schedule(timerEvent("t1"), later().named("t", TimerConflict.REPLACE));

    assertThat(store.schedule(timerEvent("t2"), due().named("t", TimerConflict.REPLACE)))
        .isEqualTo(result(TimerOutcome.REPLACED, "t2"));

    assertThat(eventIds(claimAll())).containsExactly("t2");
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("t2");
    // the replaced event had no other route: its id is free again
    assertThat(store.schedule(timerEvent("t1"), later()))
        .isEqualTo(result(TimerOutcome.ARMED, "t1"));
  }

  @Test
  void keepLeavesThePendingTimerAsItIs() {
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.KEEP));

    assertThat(store.schedule(timerEvent("t2"), later().named("t", TimerConflict.KEEP)))
        .isEqualTo(result(TimerOutcome.KEPT, "t1"));

    assertThat(eventIds(claimAll())).containsExactly("t1");
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("t1");
  }

  @Test
  void failRefusesAPendingTimerNamingIt() {
    store.schedule(timerEvent("t1"), later().named("session-9", TimerConflict.FAIL));

    assertThatThrownBy(
            () -> store.schedule(timerEvent("t2"), due().named("session-9", TimerConflict.FAIL)))
        .isInstanceOf(TimerExistsException.class)
        .hasMessageContaining("timer 'session-9' of handler 'timers' is already pending")
        .hasMessageContaining("event 't1'");

    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("t1");
    assertThat(claimAll()).isEmpty();
  }

  @Test
  void cancelRemovesThePendingTimerAndFreesItsId() {
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.FAIL));

    assertThat(store.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "t1"));
    assertThat(store.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.NOT_FOUND, null));
    assertThat(store.cancelTimer(TIMERS, "never")).isEqualTo(result(TimerOutcome.NOT_FOUND, null));
    assertThat(claimAll()).isEmpty();
    assertThat(all()).isEmpty();

    assertThat(store.schedule(timerEvent("t2"), due().named("t", TimerConflict.FAIL)))
        .isEqualTo(result(TimerOutcome.ARMED, "t2"));
  }

  @Test
  void timerInFlightIsLeftToItsTask() {
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.EXTEND));
    List<ClaimedDelivery> fired = claimAll();
    assertThat(eventIds(fired)).containsExactly("t1");

    TimerResult firing = result(TimerOutcome.ALREADY_FIRING, "t1");
    for (TimerConflict policy : TimerConflict.values()) {
      assertThat(store.schedule(timerEvent("x-" + policy), later().named("t", policy)))
          .as(policy.name())
          .isEqualTo(firing);
    }
    assertThat(store.cancelTimer(TIMERS, "t")).isEqualTo(firing);
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("t1");

    assertThat(store.complete(tokens(fired))).hasSize(1);
    assertThat(store.schedule(timerEvent("t2"), later().named("t", TimerConflict.FAIL)))
        .as("a fired timer frees its id")
        .isEqualTo(result(TimerOutcome.ARMED, "t2"));
  }

  @Test
  void timerIdsAreUniquePerHandler() {
    assertThat(store.schedule(event("a", null, "h1"), later().named("t", TimerConflict.FAIL)))
        .isEqualTo(result(TimerOutcome.ARMED, "a"));
    assertThat(store.schedule(event("b", null, "h2"), later().named("t", TimerConflict.FAIL)))
        .isEqualTo(result(TimerOutcome.ARMED, "b"));
    assertThat(store.cancelTimer("h1", "t")).isEqualTo(result(TimerOutcome.CANCELLED, "a"));
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("b");
  }

  @Test
  void badTimerCallsAreRefusedNamingTheRule() {
    assertThatThrownBy(
            () ->
                store.schedule(
                    event("e", null, "h1", "h2"), later().named("t", TimerConflict.EXTEND)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("exactly one handler")
        .hasMessageContaining("timer 't'");
    assertThatThrownBy(() -> later().named(" t", TimerConflict.EXTEND))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("timer id must not start or end with white space");
    assertThatThrownBy(() -> Timer.in(Duration.ofSeconds(-1)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("timer in must not be negative, but was PT-1S");
    assertThatThrownBy(() -> store.cancelTimer("bad handler", "t"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler must match");
    store.publish(timerEvent("taken"));
    assertThatThrownBy(() -> store.schedule(timerEvent("taken"), later()))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("event id 'taken' exists already");
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("taken");
  }

  @Test
  void keyedTimerHoldsBackItsKeyUntilItFires() {
    store.schedule(event("timer", "k", TIMERS), later().named("t", TimerConflict.EXTEND));
    store.publish(event("after", "k", TIMERS));

    assertThat(claimAll()).as("the later event of the key waits for the timer").isEmpty();

    store.schedule(timerEvent("x"), due().named("t", TimerConflict.EXTEND));
    assertThat(eventIds(claimAll())).containsExactly("timer", "after");
  }

  /**
   * A claim and an extend of the same due timer, at the same time, over and over: each round
   * exactly one wins. Either the record goes out and the extend says ALREADY_FIRING, or the extend
   * says EXTENDED and the record stays pending for the new deadline; never both, never neither.
   */
  @Test
  void extendRacingTheFiringHasExactlyOneWinner() throws Exception {
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ExecutorService pool = Executors.newFixedThreadPool(2);
    int fired = 0;
    int extended = 0;
    try {
      for (int round = 0; round < 30; round++) {
        String id = "race-" + round;
        store.schedule(timerEvent(id), due().named(id, TimerConflict.EXTEND));
        CountDownLatch start = new CountDownLatch(1);
        Future<List<ClaimedDelivery>> claim =
            pool.submit(
                () -> {
                  start.await();
                  return store.claim("A", leases, 10);
                });
        Future<TimerResult> extend =
            pool.submit(
                () -> {
                  start.await();
                  return store.schedule(
                      timerEvent(id + "-ping"), later().named(id, TimerConflict.EXTEND));
                });
        start.countDown();
        boolean claimed = eventIds(claim.get(10, TimeUnit.SECONDS)).contains(id);
        TimerResult outcome = extend.get(10, TimeUnit.SECONDS);
        if (claimed) {
          assertThat(outcome).as(id).isEqualTo(result(TimerOutcome.ALREADY_FIRING, id));
          fired++;
        } else {
          assertThat(outcome).as(id).isEqualTo(result(TimerOutcome.EXTENDED, id));
          assertThat(eventIds(store.claim("A", leases, 10))).as(id).doesNotContain(id);
          extended++;
        }
        DeliveryView row =
            all().stream().filter(d -> d.eventId().equals(id)).findFirst().orElseThrow();
        assertThat(row.inFlight()).as(id).isEqualTo(claimed);
      }
    } finally {
      pool.shutdownNow();
    }
    assertThat(fired + extended).isEqualTo(30);
  }

  /**
   * An extend in an open transaction and a claim of the same due timer: the store either makes the
   * claim pass it by (and the extend commits), or hands it out and fails the extend's commit
   * (transient). Exactly one of fire and extend wins.
   */
  @Test
  void extendInAnOpenTransactionAndTheClaimHaveExactlyOneWinner() {
    assumeTransactions();
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.EXTEND));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    List<ClaimedDelivery> claimed;
    boolean committed;
    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(timerEvent("t2"), later().named("t", TimerConflict.EXTEND)))
          .isEqualTo(result(TimerOutcome.EXTENDED, "t1"));
      claimed = store.claim("A", leases, 10);
      try {
        tx.commit();
        committed = true;
      } catch (OutboxStoreException e) {
        assertThat(e.isTransient()).isTrue();
        committed = false;
      }
    }
    if (committed) {
      assertThat(claimed).isEmpty();
      assertThat(store.claim("A", leases, 10)).as("extended: waits for its new deadline").isEmpty();
      assertThat(all()).singleElement().extracting(DeliveryView::inFlight).isEqualTo(false);
    } else {
      assertThat(eventIds(claimed)).containsExactly("t1");
    }
  }

  @Test
  void claimFirstThenTheTransactionSeesTheTimerFiring() {
    assumeTransactions();
    store.schedule(timerEvent("t1"), due().named("t", TimerConflict.EXTEND));
    assertThat(eventIds(claimAll())).containsExactly("t1");

    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(timerEvent("t2"), later().named("t", TimerConflict.EXTEND)))
          .isEqualTo(result(TimerOutcome.ALREADY_FIRING, "t1"));
      assertThat(tx.cancelTimer(TIMERS, "other")).isEqualTo(result(TimerOutcome.NOT_FOUND, null));
      tx.commit();
    }
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("t1");
  }

  @Test
  void rolledBackTimerCallsChangeNothing() {
    assumeTransactions();
    store.schedule(timerEvent("t1"), later().named("t", TimerConflict.EXTEND));
    try (Tx tx = begin(store)) {
      assertThat(tx.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "t1"));
      assertThat(tx.schedule(timerEvent("t2"), due().named("u", TimerConflict.FAIL)))
          .isEqualTo(result(TimerOutcome.ARMED, "t2"));
      tx.rollback();
    }
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("t1");
    assertThat(claimAll()).isEmpty();
  }

  @Test
  void committedTimerCallsTakeEffect() {
    assumeTransactions();
    store.schedule(timerEvent("t1"), later().named("t", TimerConflict.EXTEND));
    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(timerEvent("t2"), due().named("t", TimerConflict.REPLACE)))
          .isEqualTo(result(TimerOutcome.REPLACED, "t2"));
      assertThat(tx.schedule(timerEvent("t3"), due().named("u", TimerConflict.FAIL)))
          .isEqualTo(result(TimerOutcome.ARMED, "t3"));
      tx.commit();
    }
    assertThat(eventIds(claimAll())).containsExactlyInAnyOrder("t2", "t3");
  }

  // ---------------------------------------------------------------- claim and the per-key rule

  @Test
  void aRunOfOneKeyGoesInOneBatchInSequenceOrder() {
    for (int i = 1; i <= 5; i++) {
      store.publish(event("k" + i, "hot", "h"));
    }
    List<LaneLease> leases = leaseAll(store, "A", GROUP);

    List<ClaimedDelivery> firstThree = store.claim("A", leases, 3);
    List<ClaimedDelivery> rest = store.claim("A", leases, 10);

    assertThat(eventIds(firstThree)).containsExactly("k1", "k2", "k3");
    assertThat(eventIds(rest)).containsExactly("k4", "k5");
    assertThat(store.claim("A", leases, 10)).as("everything is in flight").isEmpty();
  }

  @Test
  void lanesTakeTurnsBetweenClaims() {
    store.publishAll(
        List.of(event("e1", "k1", "h"), event("e2", "k2", "h"), event("e3", "k1", "h")));
    int lane1 = Lanes.laneOf("k1", "e1");
    int lane2 = Lanes.laneOf("k2", "e2");
    assertThat(lane1).isNotEqualTo(lane2);
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane1, lane2), LEASE);
    List<Integer> lanes = new ArrayList<>();

    for (int i = 0; i < 3; i++) {
      ClaimedDelivery claimed = store.claim("A", leases, 1).get(0);
      lanes.add(claimed.lane());
      store.release(List.of(claimed.token()));
    }

    // lane1 has two deliveries, yet lane2 gets its turn in between
    int low = Math.min(lane1, lane2);
    int high = Math.max(lane1, lane2);
    assertThat(lanes).containsExactly(low, high, low);
  }

  @Test
  void keyWaitsForItsRetryingPredecessor() {
    OutboxStore s =
        open(new RetryPolicy(5, Duration.ofMillis(400), Duration.ofMillis(400), 0), false);
    s.publish(event("first", "k", "h"));
    s.publish(event("second", "k", "h"));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);
    ClaimedDelivery first = s.claim("A", leases, 1).get(0);

    assertThat(s.reschedule(first.token(), "downstream said no"))
        .isEqualTo(FailOutcome.RESCHEDULED);

    assertThat(s.claim("A", leases, 10)).as("second is blocked by the retrying first").isEmpty();
    List<ClaimedDelivery> retried = new ArrayList<>();
    await().atMost(Duration.ofSeconds(5)).until(() -> retried.addAll(s.claim("A", leases, 10)));
    assertThat(eventIds(retried)).containsExactly("first", "second");
    assertThat(retried.get(0).attempts()).isEqualTo(1);
  }

  @Test
  void deadDeliveryDoesNotBlockItsKey() {
    store.publish(event("poison", "k", "h"));
    store.publish(event("next", "k", "h"));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery poison = store.claim("A", leases, 1).get(0);

    assertThat(store.bury(poison.token(), "payload is not JSON")).isTrue();

    assertThat(eventIds(store.claim("A", leases, 10))).containsExactly("next");
    DeliveryView dead =
        store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items().get(0);
    assertThat(dead.eventId()).isEqualTo("poison");
    assertThat(dead.lastError()).isEqualTo("payload is not JSON");
    assertThat(dead.attempts()).isEqualTo(1);
  }

  // ---------------------------------------------------------------- no head-of-line blocking

  /** Keys other than {@code key} whose deliveries go to the same lane (for a publish by key). */
  private static List<String> keysInTheLaneOf(String key, int count) {
    int lane = Lanes.laneOf(key, "any");
    List<String> keys = new ArrayList<>();
    for (int i = 0; keys.size() < count; i++) {
      if (Lanes.laneOf("other-" + i, "any") == lane) {
        keys.add("other-" + i);
      }
    }
    return keys;
  }

  private static String keyInAnotherLaneThan(String key) {
    for (int i = 0; ; i++) {
      if (Lanes.laneOf("elsewhere-" + i, "any") != Lanes.laneOf(key, "any")) {
        return "elsewhere-" + i;
      }
    }
  }

  /**
   * Publishes behind {@code key}'s (not yet due) head more followers than a claim's limit, then two
   * other keys of the same lane and one of another lane: the claim must hand out the other keys at
   * once, and after {@code unblock} the key's whole run in sequence order within a few claims.
   */
  private void blockedKeyDelaysNoOtherKey(
      OutboxStore s, String key, String handler, int followers, Runnable unblock) {
    List<String> sameLane = keysInTheLaneOf(key, 2);
    String otherLane = keyInAnotherLaneThan(key);
    for (int i = 1; i <= followers; i++) {
      s.publish(event("f" + i, key, handler));
    }
    s.publish(event("a1", sameLane.get(0), handler));
    s.publish(event("b1", sameLane.get(1), handler));
    s.publish(event("a2", sameLane.get(0), handler));
    s.publish(event("c1", otherLane, handler));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);

    List<ClaimedDelivery> first = s.claim("A", leases, 5);

    assertThat(eventIds(first))
        .as("the blocked key holds back no other key, in its lane or another")
        .containsExactlyInAnyOrder("a1", "b1", "a2", "c1");
    assertThat(eventIds(first).indexOf("a1")).isLessThan(eventIds(first).indexOf("a2"));
    s.complete(tokens(first));
    assertThat(s.claim("A", leases, 5)).as("the key still waits for its head").isEmpty();

    unblock.run();
    List<String> run = new ArrayList<>();
    int claims = 0;
    while (run.size() < followers + 1 && claims < 10) {
      List<ClaimedDelivery> batch = s.claim("A", leases, 5);
      claims++;
      run.addAll(eventIds(batch));
      s.complete(tokens(batch));
    }
    List<String> expected = new ArrayList<>(List.of("head"));
    IntStream.rangeClosed(1, followers).forEach(i -> expected.add("f" + i));
    assertThat(run).as("the key's run, in sequence order").isEqualTo(expected);
    assertThat(claims)
        .as("claims to drain %d deliveries 5 at a time", expected.size())
        .isLessThanOrEqualTo((expected.size() + 4) / 5 + 1);
  }

  @Test
  void keyedTimerNotYetDueDelaysNoOtherKey() {
    store.schedule(event("head", "blocked", TIMERS), later().named("t", TimerConflict.EXTEND));
    blockedKeyDelaysNoOtherKey(
        store,
        "blocked",
        TIMERS,
        12,
        () -> store.schedule(timerEvent("x"), due().named("t", TimerConflict.EXTEND)));
  }

  @Test
  void retryingHeadDelaysNoOtherKey() {
    OutboxStore s =
        open(new RetryPolicy(5, Duration.ofSeconds(3), Duration.ofSeconds(3), 0), false);
    s.publish(event("head", "blocked", "h"));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);
    ClaimedDelivery head = s.claim("A", leases, 1).get(0);
    assertThat(s.reschedule(head.token(), "downstream said no")).isEqualTo(FailOutcome.RESCHEDULED);
    blockedKeyDelaysNoOtherKey(
        s,
        "blocked",
        "h",
        12,
        () ->
            await()
                .atMost(Duration.ofSeconds(15))
                .until(
                    () ->
                        s.listDeliveries(DeliveryQuery.all()).items().stream()
                            .filter(d -> d.eventId().equals("head"))
                            .allMatch(d -> !d.availableAt().isAfter(java.time.Instant.now()))));
  }

  /**
   * Followers held back behind a retry, whose retry was delivered before they went: they go before
   * the events of their key published after it. (On PostgreSQL they wait in the log window they
   * were read in and are moved behind their key only when the next window opens, in the statement
   * that reads the newer events: found by the exactly-once fault suite.)
   */
  @Test
  void followersHeldBehindADeliveredRetryGoBeforeTheKeysNewerEvents() {
    OutboxStore s = open(new RetryPolicy(5, Duration.ZERO, Duration.ZERO, 0), false);
    s.publish(event("head", "k", "h"));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);
    ClaimedDelivery head = s.claim("A", leases, 1).get(0);
    assertThat(s.reschedule(head.token(), "downstream said no")).isEqualTo(FailOutcome.RESCHEDULED);
    s.publish(event("f1", "k", "h"));
    s.publish(event("f2", "k", "h"));
    List<ClaimedDelivery> retry = s.claim("A", leases, 1);
    assertThat(eventIds(retry)).as("the retry goes first").containsExactly("head");
    assertThat(s.complete(tokens(retry))).hasSize(1);
    s.publish(event("n1", "k", "h"));

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 6 && out.size() < 3; claims++) {
      List<ClaimedDelivery> batch = s.claim("A", leases, 1);
      out.addAll(eventIds(batch));
      s.complete(tokens(batch));
    }
    assertThat(out).containsExactly("f1", "f2", "n1");
  }

  /**
   * The blocker goes away early: a keyed timer held back more followers than a claim's limit, then
   * is cancelled (or moved earlier). Its followers go at the next claims, in order, not at the
   * timer's old deadline.
   */
  @Test
  void followersOfACancelledOrAdvancedTimerGoAtOnce() {
    store.schedule(event("t1", "k1", TIMERS), later().named("t1", TimerConflict.EXTEND));
    store.schedule(event("t2", "k2", TIMERS), later().named("t2", TimerConflict.EXTEND));
    for (int i = 1; i <= 7; i++) {
      store.publish(event("a" + i, "k1", TIMERS));
      store.publish(event("b" + i, "k2", TIMERS));
    }
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    assertThat(store.claim("A", leases, 5)).as("both keys wait for their timers").isEmpty();

    assertThat(store.cancelTimer(TIMERS, "t1").outcome()).isEqualTo(TimerOutcome.CANCELLED);
    store.schedule(timerEvent("x"), due().named("t2", TimerConflict.EXTEND));

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 5; claims++) {
      List<ClaimedDelivery> batch = store.claim("A", leases, 5);
      out.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }
    assertThat(out.stream().filter(id -> id.startsWith("a")))
        .containsExactly("a1", "a2", "a3", "a4", "a5", "a6", "a7");
    assertThat(out.stream().filter(id -> id.startsWith("b") || id.equals("t2")))
        .containsExactly("t2", "b1", "b2", "b3", "b4", "b5", "b6", "b7");
  }

  /**
   * A transaction that started earlier publishes the key's followers after a short one published
   * its head: the followers are older (by the transaction's time) than their head. The key must
   * still go, in sequence order, and not stall behind more followers than a claim's limit.
   */
  @Test
  void followersOlderThanTheirHeadDoNotStallTheKey() throws Exception {
    assumeTransactions();
    try (Tx early = begin(store)) {
      early.publish(event("z", keyInAnotherLaneThan("k"), "h"));
      Thread.sleep(20);
      store.publish(event("head", "k", "h"));
      for (int i = 1; i <= 8; i++) {
        early.publish(event("f" + i, "k", "h"));
      }
      early.commit();
    }
    List<LaneLease> leases =
        store.acquireLanes("A", GROUP, List.of(Lanes.laneOf("k", "any")), LEASE);

    List<String> run = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      List<ClaimedDelivery> batch = store.claim("A", leases, 5);
      run.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }

    assertThat(run).containsExactly("head", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8");
  }

  @Test
  void rescheduleBuriesOnceAttemptsAreSpent() {
    OutboxStore s = open(new RetryPolicy(2, Duration.ZERO, Duration.ZERO, 0), false);
    s.publish(event("e", null, "h"));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);

    assertThat(s.reschedule(s.claim("A", leases, 1).get(0).token(), "boom 1"))
        .isEqualTo(FailOutcome.RESCHEDULED);
    ClaimedDelivery second = s.claim("A", leases, 1).get(0);
    assertThat(second.attempts()).isEqualTo(1);
    assertThat(s.reschedule(second.token(), "boom 2")).isEqualTo(FailOutcome.DEAD);

    assertThat(s.claim("A", leases, 1)).isEmpty();
    DeliveryView dead = s.listDeliveries(DeliveryQuery.all()).items().get(0);
    assertThat(dead.status()).isEqualTo(DeliveryStatus.DEAD);
    assertThat(dead.attempts()).isEqualTo(2);
    assertThat(dead.lastError()).isEqualTo("boom 2");
  }

  @Test
  void releasedDeliveriesComeBackWithoutChargingAnAttempt() {
    store.publish(event("e", "k", "h"));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery claimed = store.claim("A", leases, 1).get(0);

    assertThat(store.release(List.of(claimed.token()))).isEqualTo(1);
    ClaimedDelivery again = store.claim("A", leases, 1).get(0);

    assertThat(again.deliveryId()).isEqualTo(claimed.deliveryId());
    assertThat(again.attempts()).isZero();
    assertThat(store.complete(List.of(claimed.token()))).as("the released token is dead").isEmpty();
    assertThat(store.complete(List.of(again.token()))).containsExactly(again.deliveryId());
  }

  @Test
  void completeDeletesTheRowAndOnlyOnce() {
    store.publishAll(List.of(event("e1", null, "h"), event("e2", null, "h")));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);

    Set<Long> done = store.complete(tokens(batch));

    assertThat(done)
        .containsExactlyInAnyOrderElementsOf(
            batch.stream().map(ClaimedDelivery::deliveryId).toList());
    assertThat(store.complete(tokens(batch))).isEmpty();
    assertThat(all()).isEmpty();
    assertThat(
            store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.COMPLETED)).items())
        .as("no history unless enabled")
        .isEmpty();
  }

  // ---------------------------------------------------------------- leases and fencing

  @Test
  void staleLeaseChangesNothing() {
    store.publish(event("e", "k", "h"));
    int lane = Lanes.laneOf("k", "e");
    List<LaneLease> oldLeases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    ClaimedDelivery claimed = store.claim("A", oldLeases, 1).get(0);

    // a new incarnation of the same group takes the lane over at once
    List<LaneLease> newLeases = store.acquireLanes("A2", GROUP, List.of(lane), LEASE);
    assertThat(newLeases).hasSize(1);
    assertThat(newLeases.get(0).takenOver()).isTrue();
    assertThat(newLeases.get(0).charged()).isEqualTo(1);
    assertThat(newLeases.get(0).epoch()).isGreaterThan(oldLeases.get(0).epoch());

    assertThat(store.complete(List.of(claimed.token()))).isEmpty();
    assertThat(store.reschedule(claimed.token(), "late")).isEqualTo(FailOutcome.LOST);
    assertThat(store.bury(claimed.token(), "late")).isFalse();
    assertThat(store.release(List.of(claimed.token()))).isZero();
    assertThat(store.renewLanes("A", oldLeases, LEASE)).isEmpty();
    assertThat(store.claim("A", oldLeases, 10)).isEmpty();
    assertThat(store.relinquishLanes("A", oldLeases)).isZero();

    ClaimedDelivery redelivered = store.claim("A2", newLeases, 10).get(0);
    assertThat(redelivered.deliveryId()).isEqualTo(claimed.deliveryId());
    assertThat(redelivered.attempts()).as("the takeover charged the lost attempt").isEqualTo(1);
  }

  @Test
  void liveLaneOfAnotherGroupIsTakenOnlyAfterExpiry() {
    store.publish(event("e", "k", "h"));
    int lane = Lanes.laneOf("k", "e");
    List<LaneLease> shortLease =
        store.acquireLanes("A", GROUP, List.of(lane), Duration.ofMillis(500));
    assertThat(store.claim("A", shortLease, 1)).hasSize(1);

    assertThat(store.acquireLanes("B", "other-connector", List.of(lane), LEASE)).isEmpty();

    List<LaneLease> taken = new ArrayList<>();
    await()
        .atMost(Duration.ofSeconds(5))
        .until(
            () -> taken.addAll(store.acquireLanes("B", "other-connector", List.of(lane), LEASE)));
    assertThat(taken.get(0).takenOver()).isTrue();
    assertThat(taken.get(0).charged()).isEqualTo(1);
    assertThat(store.claim("B", taken, 10))
        .extracting(ClaimedDelivery::attempts)
        .containsExactly(1);
  }

  @Test
  void acquireFreeLanesTakesNoLiveLeaseNotEvenOfTheSameGroup() {
    store.publish(event("e", "k", "h"));
    int lane = Lanes.laneOf("k", "e");
    List<LaneLease> held = store.acquireLanes("A", GROUP, List.of(lane), Duration.ofMillis(500));
    assertThat(store.claim("A", held, 1)).hasSize(1);

    assertThat(store.acquireFreeLanes("B", GROUP, List.of(lane), LEASE)).isEmpty();
    assertThat(store.acquireFreeLanes("A", GROUP, List.of(lane), Duration.ofMillis(500)))
        .extracting(LaneLease::epoch, LaneLease::takenOver)
        .containsExactly(tuple(held.get(0).epoch(), false));

    List<LaneLease> taken = new ArrayList<>();
    await()
        .atMost(Duration.ofSeconds(5))
        .until(() -> taken.addAll(store.acquireFreeLanes("B", GROUP, List.of(lane), LEASE)));
    assertThat(taken.get(0).takenOver()).isTrue();
    assertThat(taken.get(0).charged()).isEqualTo(1);
    assertThat(store.renewLanes("A", held, LEASE)).isEmpty();
    assertThat(store.relinquishLanes("B", taken)).isEqualTo(1);
    assertThat(store.acquireFreeLanes("A", GROUP, List.of(lane), LEASE))
        .extracting(LaneLease::lane, LaneLease::takenOver)
        .containsExactly(tuple(lane, false));
  }

  @Test
  void renewKeepsTheEpochAndExtends() {
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(3, 4), Duration.ofMillis(500));
    List<LaneLease> renewed = store.renewLanes("A", leases, LEASE);

    assertThat(renewed).extracting(LaneLease::lane).containsExactly(3, 4);
    assertThat(renewed)
        .extracting(LaneLease::epoch)
        .containsExactlyElementsOf(leases.stream().map(LaneLease::epoch).toList());
    assertThat(renewed.get(0).expiresAt()).isAfter(leases.get(0).expiresAt());
    // acquiring again as the same owner is a renewal too: no takeover, same epoch
    List<LaneLease> again = store.acquireLanes("A", GROUP, List.of(3), LEASE);
    assertThat(again.get(0).epoch()).isEqualTo(leases.get(0).epoch());
    assertThat(again.get(0).takenOver()).isFalse();
  }

  @Test
  void poisonDeliveryEndsDeadThroughRepeatedTakeovers() {
    OutboxStore s = open(new RetryPolicy(3, Duration.ZERO, Duration.ZERO, 0), false);
    s.publish(event("poison", "k", "h"));
    s.publish(event("healthy", "k", "h"));
    int lane = Lanes.laneOf("k", "poison");

    // each incarnation claims the poison record and "crashes"; the next one takes over
    for (int incarnation = 1; incarnation <= 3; incarnation++) {
      List<LaneLease> leases = s.acquireLanes("task-" + incarnation, GROUP, List.of(lane), LEASE);
      assertThat(leases.get(0).charged()).isEqualTo(incarnation == 1 ? 0 : 1);
      assertThat(eventIds(s.claim("task-" + incarnation, leases, 1))).containsExactly("poison");
    }
    List<LaneLease> last = s.acquireLanes("task-4", GROUP, List.of(lane), LEASE);

    assertThat(last.get(0).charged()).isEqualTo(1);
    assertThat(eventIds(s.claim("task-4", last, 10))).containsExactly("healthy");
    DeliveryView dead =
        s.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items().get(0);
    assertThat(dead.eventId()).isEqualTo("poison");
    assertThat(dead.attempts()).isEqualTo(3);
    assertThat(dead.lastError()).contains("attempts exhausted").contains("taken over");
  }

  @Test
  void relinquishHandsLanesBackWithoutCharging() {
    store.publish(event("e", "k", "h"));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery claimed = store.claim("A", leases, 1).get(0);

    assertThat(store.relinquishLanes("A", leases)).isEqualTo(256);

    // another group gets the lanes at once: they are free, not expired
    List<LaneLease> taken = leaseAll(store, "B", "other-connector");
    assertThat(taken).hasSize(256);
    assertThat(taken).allSatisfy(l -> assertThat(l.takenOver()).isFalse());
    assertThat(taken).extracting(LaneLease::charged).containsOnly(0);
    ClaimedDelivery again = store.claim("B", taken, 1).get(0);
    assertThat(again.deliveryId()).isEqualTo(claimed.deliveryId());
    assertThat(again.attempts()).isZero();
    assertThat(store.complete(List.of(claimed.token()))).as("the old token is dead").isEmpty();
  }

  @Test
  void twoClaimersNeverGetTheSameLaneOrDelivery() throws Exception {
    List<OutboxEvent> events = new ArrayList<>();
    for (int i = 0; i < 400; i++) {
      events.add(event("e" + i, i % 3 == 0 ? null : "key-" + (i % 40), "h"));
    }
    store.publishAll(events);

    ExecutorService pool = Executors.newFixedThreadPool(2);
    CountDownLatch start = new CountDownLatch(1);
    ConcurrentLinkedQueue<Long> claimedIds = new ConcurrentLinkedQueue<>();
    List<Future<Set<Integer>>> workers = new ArrayList<>();
    for (String owner : List.of("A", "B")) {
      workers.add(
          pool.submit(
              () -> {
                start.await();
                Set<Integer> lanes = new HashSet<>();
                for (int round = 0; round < 20; round++) {
                  List<LaneLease> leases =
                      store.acquireLanes(owner, "group-" + owner, ALL_LANES, LEASE);
                  leases.forEach(l -> lanes.add(l.lane()));
                  List<ClaimedDelivery> batch = store.claim(owner, leases, 25);
                  batch.forEach(d -> claimedIds.add(d.deliveryId()));
                  store.complete(tokens(batch));
                }
                return lanes;
              }));
    }
    start.countDown();
    Set<Integer> lanesA = workers.get(0).get(30, TimeUnit.SECONDS);
    Set<Integer> lanesB = workers.get(1).get(30, TimeUnit.SECONDS);
    pool.shutdownNow();

    Set<Integer> both = new HashSet<>(lanesA);
    both.retainAll(lanesB);
    assertThat(both).as("lanes granted to both").isEmpty();
    assertThat(lanesA.size() + lanesB.size()).isEqualTo(256);
    assertThat(new HashSet<>(claimedIds)).hasSameSizeAs(claimedIds);
  }

  // ---------------------------------------------------------------- admin

  @Test
  void requeueGivesDeadDeliveriesAFreshBudget() {
    store.publishAll(List.of(event("e1", null, "billing"), event("e2", null, "shipping")));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);
    batch.forEach(d -> store.bury(d.token(), "broken"));
    long billingId =
        batch.stream()
            .filter(d -> d.handler().equals("billing"))
            .findFirst()
            .orElseThrow()
            .deliveryId();

    assertThat(store.requeue(List.of(billingId, 999_999L))).isEqualTo(1);
    assertThat(store.requeueDead("shipping")).isEqualTo(1);
    assertThat(store.requeueDead(null)).isZero();

    List<ClaimedDelivery> again = store.claim("A", leases, 10);
    assertThat(again).extracting(ClaimedDelivery::attempts).containsOnly(0);
    assertThat(again).extracting(ClaimedDelivery::eventId).containsExactlyInAnyOrder("e1", "e2");
  }

  @Test
  void listingFiltersAndPages() {
    for (int i = 0; i < 5; i++) {
      store.publish(event("e" + i, i < 3 ? "k" : null, "billing", "shipping"));
    }
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery claimed = store.claim("A", leases, 1).get(0);

    DeliveryPage first =
        store.listDeliveries(DeliveryQuery.all().withHandler("billing").withLimit(2));
    DeliveryPage second =
        store.listDeliveries(
            DeliveryQuery.all().withHandler("billing").withLimit(2).after(first.nextAfterId()));
    DeliveryPage third =
        store.listDeliveries(
            DeliveryQuery.all().withHandler("billing").withLimit(2).after(second.nextAfterId()));

    assertThat(first.items()).hasSize(2);
    assertThat(second.items()).hasSize(2);
    assertThat(third.items()).hasSize(1);
    assertThat(third.nextAfterId()).isNull();
    List<DeliveryView> billing = new ArrayList<>(first.items());
    billing.addAll(second.items());
    billing.addAll(third.items());
    assertThat(billing)
        .extracting(DeliveryView::eventId)
        .containsExactly("e0", "e1", "e2", "e3", "e4");
    assertThat(billing).extracting(DeliveryView::id).isSorted();

    assertThat(store.listDeliveries(DeliveryQuery.all().withKey("k")).items()).hasSize(6);
    assertThat(store.listDeliveries(DeliveryQuery.all().withEventId("e4")).items())
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("billing", "shipping");
    List<DeliveryView> inFlight = all().stream().filter(DeliveryView::inFlight).toList();
    assertThat(inFlight).extracting(DeliveryView::id).containsExactly(claimed.deliveryId());
  }

  @Test
  void statisticsCountPerHandlerAndLane() {
    store.publishAll(List.of(event("e1", "k", "billing", "shipping"), event("e2", "k", "billing")));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ClaimedDelivery shipping =
        store.claim("A", leases, 10).stream()
            .filter(d -> d.handler().equals("shipping"))
            .findFirst()
            .orElseThrow();
    store.bury(shipping.token(), "no route");

    OutboxStatistics stats = store.statistics();

    assertThat(stats.handlers())
        .containsEntry("billing", new OutboxStatistics.HandlerCounts(2, 2, 0, 0))
        .containsEntry("shipping", new OutboxStatistics.HandlerCounts(0, 0, 1, 0));
    assertThat(stats.laneBacklog()).hasSize(256);
    assertThat(stats.laneBacklog().get(Lanes.laneOf("k", "e1"))).isEqualTo(2L);
    assertThat(stats.laneBacklog().stream().mapToLong(Long::longValue).sum()).isEqualTo(2L);
    assertThat(stats.oldestPendingAge())
        .isGreaterThanOrEqualTo(Duration.ZERO)
        .isLessThan(Duration.ofMinutes(1));
  }

  @Test
  void retentionPurgesOnlyWhatIsFinishedAndOldEnough() {
    store.publishAll(
        List.of(event("done", null, "h"), event("waiting", null, "h"), event("broken", "k", "h")));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    for (ClaimedDelivery d : store.claim("A", leases, 10)) {
      switch (d.eventId()) {
        case "done" -> store.complete(List.of(d.token()));
        case "broken" -> store.bury(d.token(), "bad");
        default -> store.release(List.of(d.token()));
      }
    }

    assertThat(store.purge(RetentionPolicy.defaults())).isEqualTo(new PurgeResult(0, 0, 0, 0));
    PurgeResult purged =
        store.purge(new RetentionPolicy(Duration.ZERO, Duration.ZERO, Duration.ZERO));

    // "done" has no delivery left; "broken" lost its dead letter, then its event in the same pass
    assertThat(purged.deadLetters()).isEqualTo(1);
    assertThat(purged.events()).isEqualTo(2);
    assertThat(all()).extracting(DeliveryView::eventId).containsExactly("waiting");
    assertThat(store.publish(event("done", null, "h")).newEvent()).as("purged: new again").isTrue();
    assertThat(store.publish(event("waiting", null, "h")).newEvent()).isFalse();
  }

  @Test
  void completionHistoryRecordsEveryCompletion() {
    OutboxStore s = open(RetryPolicy.defaults(), true);
    s.publishAll(List.of(event("e1", "k", "h"), event("e2", null, "h")));
    List<ClaimedDelivery> batch = s.claim("A", leaseAll(s, "A", GROUP), 10);
    s.complete(tokens(batch));

    List<DeliveryView> history =
        s.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.COMPLETED)).items();
    assertThat(history).extracting(DeliveryView::eventId).containsExactly("e1", "e2");
    assertThat(history).extracting(DeliveryView::status).containsOnly(DeliveryStatus.COMPLETED);
    assertThat(s.statistics().handlers().get("h").completed()).isEqualTo(2);
    assertThat(s.listDeliveries(DeliveryQuery.all()).items())
        .as("deleted from deliveries")
        .isEmpty();

    assertThat(
            s.purge(new RetentionPolicy(Duration.ofDays(1), Duration.ofDays(1), Duration.ZERO))
                .completionHistory())
        .isEqualTo(2);
    assertThat(s.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.COMPLETED)).items())
        .isEmpty();
  }

  // ---------------------------------------------------------------- inbox

  /** Records {@code handler} for {@code received} in a transaction of its own. */
  private InboxOutcome recordCommitted(OutboxEvent received, String handler) {
    try (Tx tx = begin(store)) {
      InboxOutcome outcome = tx.recordHandled(received, handler);
      tx.commit();
      return outcome;
    }
  }

  @Test
  void firstRecordOfAHandlerIsFirstAndItsRedeliveryIsNot() {
    assumeTransactions();
    OutboxEvent received = event("in-1", "order-1", "billing");

    assertThat(recordCommitted(received, "billing.charge")).isEqualTo(InboxOutcome.FIRST);
    assertThat(recordCommitted(received, "billing.charge")).isEqualTo(InboxOutcome.REDELIVERY);
    assertThat(recordCommitted(received, "billing.charge")).isEqualTo(InboxOutcome.REDELIVERY);
    assertThat(recordCommitted(received, "audit.log"))
        .as("another handler")
        .isEqualTo(InboxOutcome.FIRST);
    assertThat(recordCommitted(received, "audit.log")).isEqualTo(InboxOutcome.REDELIVERY);
    assertThat(all()).as("an inbox record creates no delivery").isEmpty();
    assertThat(store.statistics().totalPending()).isZero();
  }

  @Test
  void rolledBackRecordLeavesNothingSoTheNextDeliveryIsFirst() {
    assumeTransactions();
    OutboxEvent received = event("in-1", null, "billing");
    try (Tx tx = begin(store)) {
      assertThat(tx.recordHandled(received, "billing.charge")).isEqualTo(InboxOutcome.FIRST);
      tx.rollback();
    }

    assertThat(recordCommitted(received, "billing.charge")).isEqualTo(InboxOutcome.FIRST);
  }

  @Test
  void handlerRecordedByTheInboxIsNotPublishedToAgain() {
    assumeTransactions();
    recordCommitted(event("in-1", "order-1", "billing"), "billing");

    PublishResult forwarded = store.publish(event("in-1", "order-1", "billing", "shipping"));

    assertThat(forwarded).isEqualTo(new PublishResult("in-1", false, List.of("shipping")));
    assertThat(all()).extracting(DeliveryView::handler).containsExactly("shipping");
    assertThat(recordCommitted(event("in-1", "order-1", "shipping"), "shipping"))
        .as("a published route counts as handled: routes and inbox handlers share one list")
        .isEqualTo(InboxOutcome.REDELIVERY);
  }

  @Test
  void recordAndPublishInOneTransactionForwardOnlyNewRoutes() {
    assumeTransactions();
    store.publish(event("in-1", "k", "audit"));
    try (Tx tx = begin(store)) {
      assertThat(tx.recordHandled(event("in-1", "k", "x"), "forwarder"))
          .isEqualTo(InboxOutcome.FIRST);
      assertThat(tx.publish(event("in-1", "k", "audit", "billing")))
          .isEqualTo(new PublishResult("in-1", false, List.of("billing")));
      tx.commit();
    }

    assertThat(all())
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("audit", "billing");
    assertThat(recordCommitted(event("in-1", "k", "x"), "forwarder"))
        .isEqualTo(InboxOutcome.REDELIVERY);
  }

  @Test
  void ofTwoRacingTransactionsExactlyOneCommitsAsFirst() throws Exception {
    assumeTransactions();
    // B records while A's record is not committed yet. PostgreSQL makes B wait for A and then
    // answers REDELIVERY; the in-memory store answers FIRST at once, B commits first and A's commit
    // fails. Either way exactly one committed transaction was told FIRST.
    OutboxEvent received = event("raced", null, "billing");
    List<InboxOutcome> committedOutcomes = Collections.synchronizedList(new ArrayList<>());
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (Tx a = begin(store)) {
      InboxOutcome first = a.recordHandled(received, "billing.charge");
      CountDownLatch bRecorded = new CountDownLatch(1);
      Future<?> b =
          pool.submit(
              () -> {
                try (Tx tx = begin(store)) {
                  InboxOutcome outcome = tx.recordHandled(received, "billing.charge");
                  bRecorded.countDown();
                  tx.commit();
                  committedOutcomes.add(outcome);
                } catch (OutboxStoreException e) {
                  assertThat(e.isTransient()).as(e.getMessage()).isTrue();
                }
                return null;
              });
      // Give B the chance to record before A commits (it does at once where it does not block).
      bRecorded.await(500, TimeUnit.MILLISECONDS);
      try {
        a.commit();
        committedOutcomes.add(first);
      } catch (OutboxStoreException e) {
        assertThat(e.isTransient()).as(e.getMessage()).isTrue();
      }
      b.get(10, TimeUnit.SECONDS);
    } finally {
      pool.shutdownNow();
    }

    assertThat(committedOutcomes).containsOnlyOnce(InboxOutcome.FIRST);
    assertThat(recordCommitted(received, "billing.charge")).isEqualTo(InboxOutcome.REDELIVERY);
  }

  @Test
  void manyConcurrentConsumersRunEachEventOnce() throws Exception {
    assumeTransactions();
    // Eight consumers get the same 20 events, as after a rebalance storm, and retry a transaction
    // whose commit failed as a consumer would: per event, exactly one committed FIRST.
    List<OutboxEvent> events =
        IntStream.range(0, 20).mapToObj(i -> event("dup-" + i, "k" + (i % 3), "billing")).toList();
    ConcurrentLinkedQueue<String> firsts = new ConcurrentLinkedQueue<>();
    ExecutorService pool = Executors.newFixedThreadPool(8);
    try {
      CountDownLatch start = new CountDownLatch(1);
      List<Future<?>> consumers = new ArrayList<>();
      for (int c = 0; c < 8; c++) {
        consumers.add(
            pool.submit(
                () -> {
                  start.await();
                  for (OutboxEvent e : events) {
                    for (int attempt = 1; ; attempt++) {
                      try (Tx tx = begin(store)) {
                        InboxOutcome outcome = tx.recordHandled(e, "billing.charge");
                        tx.commit();
                        if (outcome == InboxOutcome.FIRST) {
                          firsts.add(e.id());
                        }
                        break;
                      } catch (OutboxStoreException failed) {
                        if (!failed.isTransient() || attempt == 10) {
                          throw failed;
                        }
                      }
                    }
                  }
                  return null;
                }));
      }
      start.countDown();
      for (Future<?> consumer : consumers) {
        consumer.get(60, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }

    assertThat(firsts).hasSize(20);
    assertThat(new HashSet<>(firsts)).hasSize(20);
  }

  @Test
  void retentionPurgesInboxRecordsAfterWhichTheIdIsNewAgain() {
    assumeTransactions();
    recordCommitted(event("in-old", null, "billing"), "billing.charge");

    assertThat(store.purge(RetentionPolicy.defaults()).events()).as("younger than 7 days").isZero();
    assertThat(
            store.purge(new RetentionPolicy(Duration.ZERO, Duration.ZERO, Duration.ZERO)).events())
        .isEqualTo(1);
    assertThat(recordCommitted(event("in-old", null, "billing"), "billing.charge"))
        .as("purged: the same id counts as new")
        .isEqualTo(InboxOutcome.FIRST);
  }

  @Test
  void inboxRejectsBadArgumentsNamingTheRule() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      assertThatThrownBy(() -> tx.recordHandled(event("e", null, "h"), "no spaces"))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("handler must match");
      assertThatThrownBy(() -> tx.recordHandled(null, "h"))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("received");
    }
  }

  // ---------------------------------------------------------------- bad arguments

  @Test
  void badArgumentsAreRejectedNamingTheRule() {
    assertThatThrownBy(() -> event("e", null, " "))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler");
    assertThatThrownBy(() -> event("x".repeat(201), null, "h"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("event id must be at most 200 characters");
    assertThatThrownBy(() -> event("e", null, "h; drop table x"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler must match");
    assertThatThrownBy(() -> DeliveryStatus.parse("finished"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("status must be one of pending, dead, completed, but was 'finished'");
    assertThatThrownBy(() -> store.acquireLanes("A", GROUP, List.of(256), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("lanes must be between 0 and 255");
    assertThatThrownBy(() -> store.acquireLanes(" ", GROUP, List.of(1), LEASE))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("owner");
    assertThatThrownBy(() -> store.claim("A", leaseAll(store, "A", GROUP), 0))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("limit must be positive");
    assertThatThrownBy(() -> store.listDeliveries(DeliveryQuery.all().withHandler("")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler");
  }

  /** Hot keys and many keys at once: every claim respects per-key order, nothing twice. */
  @Test
  void drainingManyKeysKeepsEveryKeyInSequenceOrder() {
    List<OutboxEvent> events =
        IntStream.range(0, 600)
            .mapToObj(i -> event("e" + i, i % 5 == 0 ? null : "key-" + (i % 7), "h1", "h2"))
            .toList();
    for (int from = 0; from < events.size(); from += 100) {
      store.publishAll(events.subList(from, from + 100));
    }
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    List<ClaimedDelivery> emitted = new ArrayList<>();
    for (int round = 0; round < 200; round++) {
      List<ClaimedDelivery> batch = store.claim("A", leases, 37);
      if (batch.isEmpty()) {
        break;
      }
      emitted.addAll(batch);
      store.complete(tokens(batch));
    }

    assertThat(emitted).hasSize(1200);
    assertThat(emitted.stream().map(ClaimedDelivery::deliveryId).collect(Collectors.toSet()))
        .hasSize(1200);
    for (String handler : List.of("h1", "h2")) {
      for (int k = 0; k < 7; k++) {
        String key = "key-" + k;
        List<Long> sequences =
            emitted.stream()
                .filter(d -> key.equals(d.key()) && d.handler().equals(handler))
                .map(ClaimedDelivery::sequence)
                .toList();
        assertThat(sequences).as(handler + "/" + key).isSorted().doesNotHaveDuplicates();
      }
    }
    assertThat(all()).isEmpty();
  }

  // ---------------------------------------------------------------- operator views

  @Test
  void backlogSplitsDueScheduledInFlightAndDead() {
    OutboxStore s = open(new RetryPolicy(10, Duration.ofHours(1), Duration.ofHours(1), 0), false);
    s.publishAll(
        List.of(
            event("b1", "k", "billing"),
            event("b2", "k", "billing"),
            event("b3", null, "billing"),
            event("s1", null, "shipping")));
    s.schedule(
        event("t1", null, "billing"), Timer.in(Duration.ofHours(1)).named("t", TimerConflict.FAIL));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);
    List<ClaimedDelivery> batch = s.claim("A", leases, 10);
    assertThat(eventIds(batch)).containsExactlyInAnyOrder("b1", "b2", "b3", "s1");
    ClaimedDelivery b2 =
        batch.stream().filter(d -> d.eventId().equals("b2")).findFirst().orElseThrow();
    ClaimedDelivery b3 =
        batch.stream().filter(d -> d.eventId().equals("b3")).findFirst().orElseThrow();
    ClaimedDelivery s1 =
        batch.stream().filter(d -> d.eventId().equals("s1")).findFirst().orElseThrow();
    assertThat(s.release(List.of(b2.token()))).isEqualTo(1);
    assertThat(s.reschedule(b3.token(), "timeout")).isEqualTo(FailOutcome.RESCHEDULED);
    assertThat(s.bury(s1.token(), "no route")).isTrue();

    List<HandlerBacklog> backlog = s.backlog();

    assertThat(backlog).extracting(HandlerBacklog::handler).containsExactly("billing", "shipping");
    HandlerBacklog billing = backlog.get(0);
    // pending b1 (in flight), b2 (due), b3 (retry in 1 h), t1 (timer in 1 h)
    assertThat(billing.pending()).isEqualTo(4);
    assertThat(billing.due()).isEqualTo(2);
    assertThat(billing.inFlight()).isEqualTo(1);
    assertThat(billing.scheduledTimers()).isEqualTo(1);
    assertThat(billing.scheduledRetries()).isEqualTo(1);
    assertThat(billing.dead()).isZero();
    assertThat(billing.oldestPendingAge())
        .isGreaterThanOrEqualTo(Duration.ZERO)
        .isLessThan(Duration.ofMinutes(1));
    assertThat(billing.oldestDueAge())
        .isGreaterThanOrEqualTo(Duration.ZERO)
        .isLessThan(Duration.ofMinutes(1));
    HandlerBacklog shipping = backlog.get(1);
    assertThat(shipping)
        .isEqualTo(new HandlerBacklog("shipping", 0, 0, 0, 0, 0, 1, Duration.ZERO, Duration.ZERO));
  }

  @Test
  void laneStatusShowsHolderEpochExpiryAndCounts() {
    store.publishAll(List.of(event("e1", "k", "h"), event("e2", "k", "h")));
    int lane = Lanes.laneOf("k", "e1");
    int other = (lane + 1) % Lanes.COUNT;
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    assertThat(store.claim("A", leases, 1)).hasSize(1);

    List<LaneStatus> lanes = store.laneStatus();

    assertThat(lanes).hasSize(256);
    assertThat(lanes).extracting(LaneStatus::lane).containsExactlyElementsOf(ALL_LANES);
    LaneStatus held = lanes.get(lane);
    assertThat(held.owner()).isEqualTo("A");
    assertThat(held.group()).isEqualTo(GROUP);
    assertThat(held.epoch()).isEqualTo(leases.get(0).epoch());
    assertThat(held.leaseExpiresAt()).isEqualTo(leases.get(0).expiresAt());
    assertThat(held.held()).isTrue();
    assertThat(held.inFlight()).isEqualTo(1);
    assertThat(held.pending()).isEqualTo(2);
    LaneStatus free = lanes.get(other);
    assertThat(free.owner()).isNull();
    assertThat(free.held()).isFalse();
    assertThat(free.inFlight()).isZero();
    assertThat(lanes.stream().filter(LaneStatus::held).count()).isEqualTo(1);

    store.relinquishLanes("A", leases);
    LaneStatus released = store.laneStatus().get(lane);
    assertThat(released.owner()).isNull();
    assertThat(released.held()).isFalse();
    assertThat(released.inFlight()).isZero();
    assertThat(released.pending()).isEqualTo(2);
  }

  /** Three dead letters: billing "http 500", billing "schema mismatch", shipping "HTTP 503". */
  private List<Long> threeDeadLetters() {
    store.publishAll(
        List.of(
            event("d1", "k1", "billing"),
            event("d2", null, "billing"),
            event("d3", "k3", "shipping"),
            event("alive", null, "billing")));
    List<ClaimedDelivery> batch = store.claim("A", leaseAll(store, "A", GROUP), 10);
    List<Long> ids = new ArrayList<>();
    for (String id : List.of("d1", "d2", "d3")) {
      ClaimedDelivery d =
          batch.stream().filter(c -> c.eventId().equals(id)).findFirst().orElseThrow();
      String reason =
          switch (id) {
            case "d1" -> "http 500 from billing";
            case "d2" -> "schema mismatch";
            default -> "HTTP 503 (busy)";
          };
      assertThat(store.bury(d.token(), reason)).isTrue();
      ids.add(d.deliveryId());
    }
    ids.sort(null);
    return ids;
  }

  @Test
  void deadLettersAreFilteredByHandlerReasonAndAgeWithTheirEventType() {
    List<Long> ids = threeDeadLetters();

    DeadLetterPage all = store.listDeadLetters(DeadLetterFilter.all(), null, 100);
    assertThat(all.items()).extracting(DeadLetter::id).containsExactlyElementsOf(ids);
    assertThat(all.nextAfterId()).isNull();
    DeadLetter first =
        all.items().stream().filter(d -> d.eventId().equals("d1")).findFirst().orElseThrow();
    assertThat(first.eventId()).isEqualTo("d1");
    assertThat(first.eventType()).isEqualTo("test.happened");
    assertThat(first.handler()).isEqualTo("billing");
    assertThat(first.key()).isEqualTo("k1");
    assertThat(first.sequence()).isPositive();
    assertThat(first.lane()).isEqualTo(Lanes.laneOf("k1", "d1"));
    assertThat(first.reason()).isEqualTo("http 500 from billing");
    assertThat(first.attempts()).as("the burial charged one").isEqualTo(1);
    assertThat(first.diedAt()).isAfterOrEqualTo(first.createdAt());

    assertThat(
            store.listDeadLetters(DeadLetterFilter.all().withHandler("billing"), null, 100).items())
        .extracting(DeadLetter::eventId)
        .containsExactlyInAnyOrder("d1", "d2");
    assertThat(
            store
                .listDeadLetters(DeadLetterFilter.all().withReasonContaining("http 50"), null, 100)
                .items())
        .as("ignoring case")
        .extracting(DeadLetter::eventId)
        .containsExactlyInAnyOrder("d1", "d3");
    assertThat(
            store
                .listDeadLetters(DeadLetterFilter.all().withReasonContaining("(busy)"), null, 100)
                .items())
        .as("taken literally")
        .extracting(DeadLetter::eventId)
        .containsExactly("d3");
    assertThat(store.countDeadLetters(DeadLetterFilter.all().withReasonContaining(".*"))).isZero();
    assertThat(store.countDeadLetters(DeadLetterFilter.all().diedWithin(Duration.ofHours(1))))
        .isEqualTo(3);
    assertThat(store.countDeadLetters(DeadLetterFilter.all().diedBefore(Duration.ofHours(1))))
        .isZero();
    assertThat(store.countDeadLetters(DeadLetterFilter.all().diedBefore(Duration.ZERO)))
        .isEqualTo(3);
    assertThat(
            store.countDeadLetters(
                DeadLetterFilter.all().withHandler("billing").withReasonContaining("HTTP")))
        .isEqualTo(1);

    DeadLetterPage page1 = store.listDeadLetters(DeadLetterFilter.all(), null, 2);
    DeadLetterPage page2 = store.listDeadLetters(DeadLetterFilter.all(), page1.nextAfterId(), 2);
    assertThat(page1.items()).extracting(DeadLetter::id).containsExactly(ids.get(0), ids.get(1));
    assertThat(page2.items()).extracting(DeadLetter::id).containsExactly(ids.get(2));
    assertThat(page2.nextAfterId()).isNull();
    assertThatThrownBy(() -> store.listDeadLetters(DeadLetterFilter.all(), null, 0))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("limit must be between 1 and 10000, but was 0");
    assertThatThrownBy(() -> DeadLetterFilter.all().diedBefore(Duration.ofSeconds(-1)))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("olderThan");
  }

  @Test
  void requeueMatchingMovesExactlyWhatTheCountPreviewed() {
    threeDeadLetters();
    DeadLetterFilter http = DeadLetterFilter.all().withReasonContaining("HTTP");

    assertThat(store.countDeadLetters(http)).isEqualTo(2);
    assertThat(store.requeueMatching(http)).isEqualTo(2);
    assertThat(store.requeueMatching(http)).as("nothing left to match").isZero();

    assertThat(store.listDeadLetters(DeadLetterFilter.all(), null, 100).items())
        .extracting(DeadLetter::eventId)
        .containsExactly("d2");
    List<ClaimedDelivery> again = store.claim("A", leaseAll(store, "A", GROUP), 10);
    assertThat(eventIds(again)).containsExactlyInAnyOrder("d1", "d3");
    assertThat(again).extracting(ClaimedDelivery::attempts).containsOnly(0);
    assertThat(store.requeueMatching(DeadLetterFilter.all().diedBefore(Duration.ofHours(1))))
        .isZero();
    assertThat(store.requeueMatching(DeadLetterFilter.all().withHandler("billing"))).isEqualTo(1);
  }

  /**
   * An operator requeueing by filter while the connector claims and buries: every delivery ends
   * exactly once, each key in sequence order.
   */
  @Test
  void requeueMatchingRacingClaimsLosesNothingAndKeepsKeyOrder() throws Exception {
    int events = 40;
    List<OutboxEvent> published = new ArrayList<>();
    for (int i = 0; i < events; i++) {
      published.add(event("r" + i, "key-" + (i % 4), "h"));
    }
    store.publishAll(published);
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    ExecutorService operator = Executors.newSingleThreadExecutor();
    java.util.concurrent.atomic.AtomicBoolean stop =
        new java.util.concurrent.atomic.AtomicBoolean();
    try {
      Future<Long> requeued =
          operator.submit(
              () -> {
                long n = 0;
                while (!stop.get()) {
                  n += store.requeueMatching(DeadLetterFilter.all().withReasonContaining("flaky"));
                }
                return n;
              });
      // the connector buries every delivery once, each as soon as it is claimed
      Set<String> buried = new HashSet<>();
      await()
          .atMost(Duration.ofSeconds(60))
          .until(
              () -> {
                for (ClaimedDelivery d : store.claim("A", leases, 10)) {
                  if (buried.add(d.eventId())) {
                    store.bury(d.token(), "flaky downstream");
                  } else {
                    store.release(List.of(d.token()));
                  }
                }
                return buried.size() == events;
              });
      stop.set(true);
      requeued.get(60, TimeUnit.SECONDS);
    } finally {
      stop.set(true);
      operator.shutdownNow();
    }
    store.requeueMatching(DeadLetterFilter.all());

    List<ClaimedDelivery> delivered = new ArrayList<>();
    await()
        .atMost(Duration.ofSeconds(60))
        .until(
            () -> {
              List<ClaimedDelivery> batch = store.claim("A", leases, 100);
              store.complete(tokens(batch));
              delivered.addAll(batch);
              return batch.isEmpty() && all().isEmpty();
            });
    assertThat(delivered).hasSize(events);
    assertThat(eventIds(delivered)).doesNotHaveDuplicates();
    for (int k = 0; k < 4; k++) {
      String key = "key-" + k;
      assertThat(
              delivered.stream()
                  .filter(d -> key.equals(d.key()))
                  .map(ClaimedDelivery::sequence)
                  .toList())
          .as("sequence order of %s", key)
          .isSorted()
          .hasSize(events / 4);
    }
  }
}
