package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/**
 * Claims and the per-key rule: a key's run in sequence order, lanes taking turns, no head-of-line
 * blocking, reschedule, release and complete.
 *
 * <p>The contract's parts are chained only so that each store runs them as one test class (see
 * {@link OutboxStoreContractTest}).
 */
public abstract class ClaimContract extends TimerContract {
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
   * A claim of one while a retry is due at every claim (a handler that keeps failing, no backoff):
   * the retry went first with "half" the room, which at one is all of it, and the new event waited
   * as long as the retry kept coming back.
   */
  @Test
  void aRetryDueAtEveryClaimOfOneDoesNotStarveNewEvents() {
    OutboxStore s = open(new RetryPolicy(1_000, Duration.ZERO, Duration.ZERO, 0), false);
    s.publish(event("failing", "a", "h"));
    List<LaneLease> leases = leaseAll(s, "A", GROUP);
    for (int attempt = 0; attempt < 2; attempt++) {
      // first from the log, then as a retry: the last claim took a retry
      ClaimedDelivery failing = s.claim("A", leases, 1).get(0);
      assertThat(s.reschedule(failing.token(), "downstream said no"))
          .isEqualTo(FailOutcome.RESCHEDULED);
    }
    s.publish(event("new", "b", "h"));

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 6 && !out.contains("new"); claims++) {
      for (ClaimedDelivery d : s.claim("A", leases, 1)) {
        out.add(d.eventId());
        if (d.eventId().equals("failing")) {
          assertThat(s.reschedule(d.token(), "downstream said no"))
              .isEqualTo(FailOutcome.RESCHEDULED);
        } else {
          assertThat(s.complete(List.of(d.token()))).hasSize(1);
        }
      }
    }
    assertThat(out).as("claimed, in order").contains("new");
    assertThat(out.indexOf("new")).as("claims before the new event went").isLessThanOrEqualTo(2);
  }

  /**
   * The claim's contract: "a claim visits the held lanes in lane order, starting after the last
   * lane the same owner's previous claim took deliveries from". Two owners share the store (two
   * tasks): A holds lanes la < lb, B a lane lc above both; la has a retry due at every claim (zero
   * backoff), lb a new event; A claims one at a time and B claims between A's claims.
   *
   * <p>Symptom (in memory): the turn is one for the whole store, so B's claim moves A's start to
   * lc, past A's lanes, and A starts again at la every time: lb's event waits as long as la's retry
   * keeps coming back.
   */
  @Test
  void anotherOwnersClaimsDoNotResetAnOwnersLaneTurn() {
    OutboxStore s = open(new RetryPolicy(1_000, Duration.ZERO, Duration.ZERO, 0), false);
    String a = keyInLanes("a", 0, 80);
    String b = keyInLanes("b", 100, 180);
    String c = keyInLanes("c", 200, 255);
    int la = Lanes.laneOf(a, "x");
    int lb = Lanes.laneOf(b, "x");
    int lc = Lanes.laneOf(c, "x");
    List<LaneLease> ownerA = s.acquireLanes("A", GROUP, List.of(la, lb), LEASE);
    List<LaneLease> ownerB = s.acquireLanes("B", GROUP + "-b", List.of(lc), LEASE);
    assertThat(ownerA).hasSize(2);
    assertThat(ownerB).hasSize(1);
    s.publish(event("failing", a, "h"));
    s.publish(event("new", b, "h"));
    s.publish(event("other", c, "h"));

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 6 && !out.contains("new"); claims++) {
      for (ClaimedDelivery d : s.claim("A", ownerA, 1)) {
        out.add(d.eventId());
        if (d.eventId().equals("failing")) {
          assertThat(s.reschedule(d.token(), "downstream said no"))
              .isEqualTo(FailOutcome.RESCHEDULED);
        } else {
          assertThat(s.complete(List.of(d.token()))).hasSize(1);
        }
      }
      // B polls too (it took "other" at its first claim; then it finds nothing)
      s.claim("B", ownerB, 1);
    }
    assertThat(out).as("A's claims, in order").contains("new");
    assertThat(out.indexOf("new"))
        .as("A's claims before the new event went")
        .isLessThanOrEqualTo(1);
  }

  private static String keyInLanes(String prefix, int from, int to) {
    for (int i = 0; ; i++) {
      int lane = Lanes.laneOf(prefix + i, "x");
      if (lane >= from && lane <= to) {
        return prefix + i;
      }
    }
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
}
