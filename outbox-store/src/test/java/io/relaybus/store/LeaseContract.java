package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.tuple;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Lane leases and fencing: epochs, expiry, takeover, renew and relinquish.
 *
 * <p>The contract's parts are chained only so that each store runs them as one test class (see
 * {@link OutboxStoreContractTest}).
 */
public abstract class LeaseContract extends ClaimContract {
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

  /**
   * A token names its event: one with the delivery's id, lane, epoch and claim counter but another
   * event (what a token from before a failover to an asynchronous standby is, once the new primary
   * gave the id to another event) changes nothing.
   */
  @Test
  void aTokenOfAnotherEventChangesNothing() {
    store.publish(event("e", "k", "h"));
    int lane = Lanes.laneOf("k", "e");
    List<LaneLease> leases = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    DeliveryToken token = store.claim("A", leases, 1).get(0).token();
    DeliveryToken another =
        new DeliveryToken(
            token.deliveryId(), token.lane(), token.epoch(), token.claims(), "another-event");

    assertThat(store.complete(List.of(another))).isEmpty();
    assertThat(store.reschedule(another, "late")).isEqualTo(FailOutcome.LOST);
    assertThat(store.bury(another, "late")).isFalse();
    assertThat(store.release(List.of(another))).isZero();

    assertThat(store.complete(List.of(token))).containsExactly(token.deliveryId());
    assertThat(store.claim("A", leases, 10)).isEmpty();
  }

  /**
   * Symptom (PostgreSQL): a takeover charged an attempt to a delivery nobody had in flight: the
   * first holder had handed it out and relinquished the lane (handing it back), a second holder
   * leased the lane and never claimed, and the third holder's takeover charged what the first
   * holder's cursor named.
   */
  @Test
  void takeoverChargesNothingHandedBackBefore() {
    store.publish(event("e", "k", "h"));
    int lane = Lanes.laneOf("k", "e");
    List<LaneLease> first = store.acquireLanes("A", GROUP, List.of(lane), LEASE);
    assertThat(store.claim("A", first, 10)).hasSize(1);
    assertThat(store.relinquishLanes("A", first)).isEqualTo(1);
    assertThat(store.acquireLanes("B", "other-connector", List.of(lane), LEASE)).hasSize(1);

    List<LaneLease> third = store.acquireLanes("C", "other-connector", List.of(lane), LEASE);

    assertThat(third).hasSize(1);
    assertThat(third.get(0).charged()).isZero();
    assertThat(store.claim("C", third, 10))
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::attempts)
        .containsExactly(org.assertj.core.groups.Tuple.tuple("e", 0));
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
    // 2 s: long enough that A's lease is still live at B's first call on a loaded machine (with
    // 500 ms, a load average of 36 let it lapse between the two calls), short enough to wait out
    Duration shortLease = Duration.ofSeconds(2);
    List<LaneLease> held = store.acquireLanes("A", GROUP, List.of(lane), shortLease);
    assertThat(store.claim("A", held, 1)).hasSize(1);

    assertThat(store.acquireFreeLanes("B", GROUP, List.of(lane), LEASE)).isEmpty();
    assertThat(store.acquireFreeLanes("A", GROUP, List.of(lane), shortLease))
        .extracting(LaneLease::epoch, LaneLease::takenOver)
        .containsExactly(tuple(held.get(0).epoch(), false));

    List<LaneLease> taken = new ArrayList<>();
    await()
        .atMost(Duration.ofSeconds(15))
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
}
