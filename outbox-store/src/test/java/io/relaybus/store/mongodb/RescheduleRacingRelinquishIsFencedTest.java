package io.relaybus.store.mongodb;

import static org.assertj.core.api.Assertions.assertThat;

import com.mongodb.client.MongoClient;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.testing.MongoServers;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A reschedule by a token of epoch e must not land once the lane has moved on to another holder:
 * the docs say acquire/claim/complete/reschedule/release are "conditional writes ordered so that
 * the fencing is exact". Forced interleaving: owner a's reschedule passes its epoch check and reads
 * the delivery; then (hook in the store's clock, read by MongoCompletion.fail between that read and
 * its write) a relinquishes its lanes, b acquires them and claims the same delivery; then a's write
 * lands. A relinquish bumps the epoch but not the delivery's claim counter, and a claim does not
 * bump it either, so a's stale token (epoch e, claims 0) equals b's live one on the counter.
 */
class RescheduleRacingRelinquishIsFencedTest {
  private static MongoClient client;

  @BeforeAll
  static void connect() {
    client = MongoServers.client(MongoServers.inProcess());
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  /** A clock the test moves, that runs a hook once when read from MongoCompletion.fail. */
  static final class HookClock extends Clock {
    final AtomicReference<Runnable> onFail = new AtomicReference<>();
    volatile Instant now = Instant.parse("2026-01-01T00:00:00Z");

    @Override
    public Instant instant() {
      boolean inFail =
          StackWalker.getInstance()
              .walk(
                  s ->
                      s.anyMatch(
                          f ->
                              f.getClassName().equals(MongoCompletion.class.getName())
                                  && f.getMethodName().equals("fail")));
      if (inFail) {
        Runnable hook = onFail.getAndSet(null);
        if (hook != null) {
          hook.run();
        }
      }
      return now;
    }

    @Override
    public ZoneId getZone() {
      return ZoneOffset.UTC;
    }

    @Override
    public Clock withZone(ZoneId zone) {
      return this;
    }
  }

  @Test
  void aRescheduleThatLandsAfterTheLaneChangedHandsIsLostAndTheNewHolderCompletes() {
    HookClock clock = new HookClock();
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database("relinquish_race")
            .collectionPrefix("q1_")
            .retryPolicy(new RetryPolicy(5, Duration.ofSeconds(10), Duration.ofSeconds(10), 0))
            .clock(clock)
            .build();
    store.setup();
    store.publish(OutboxEvent.builder("t").id("e1").key("k1").json("{}").handler("h").build());

    List<LaneLease> a =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    List<ClaimedDelivery> aBatch = store.claim("a", a, 10);
    assertThat(aBatch).extracting(ClaimedDelivery::eventId).containsExactly("e1");

    AtomicReference<List<ClaimedDelivery>> bBatch = new AtomicReference<>();
    AtomicReference<List<LaneLease>> bLeases = new AtomicReference<>();
    clock.onFail.set(
        () -> {
          assertThat(store.relinquishLanes("a", a)).isEqualTo(a.size());
          bLeases.set(
              store.acquireLanes("b", "g", LaneRange.all().lanes(), Duration.ofSeconds(30)));
          bBatch.set(store.claim("b", bLeases.get(), 10));
        });
    FailOutcome aOutcome = store.reschedule(aBatch.get(0).token(), "a's send failed");

    // b got e1 in the middle of a's reschedule: b's copy is now in flight
    assertThat(bBatch.get()).extracting(ClaimedDelivery::eventId).containsExactly("e1");
    long id = bBatch.get().get(0).token().deliveryId();

    // a no longer held the lane when its write landed: its token is stale (another epoch)
    assertThat(aOutcome).as("a's reschedule with a stale-epoch token").isEqualTo(FailOutcome.LOST);
    // and b's claim, the live one, completes
    assertThat(store.complete(List.of(bBatch.get().get(0).token())))
        .as("b completes its in-flight copy")
        .containsExactly(id);
  }

  @Test
  void aStaleRescheduleDoesNotMakeTheNewHolderSendTheDeliveryTwice() {
    HookClock clock = new HookClock();
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database("relinquish_race")
            .collectionPrefix("q2_")
            .retryPolicy(new RetryPolicy(5, Duration.ofSeconds(10), Duration.ofSeconds(10), 0))
            .clock(clock)
            .build();
    store.setup();
    store.publish(OutboxEvent.builder("t").id("e1").key("k1").json("{}").handler("h").build());

    List<LaneLease> a =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    List<ClaimedDelivery> aBatch = store.claim("a", a, 10);
    AtomicReference<List<ClaimedDelivery>> bBatch = new AtomicReference<>();
    AtomicReference<List<LaneLease>> bLeases = new AtomicReference<>();
    clock.onFail.set(
        () -> {
          store.relinquishLanes("a", a);
          bLeases.set(
              store.acquireLanes("b", "g", LaneRange.all().lanes(), Duration.ofSeconds(30)));
          bBatch.set(store.claim("b", bLeases.get(), 10));
        });
    store.reschedule(aBatch.get(0).token(), "a's send failed");
    assertThat(bBatch.get()).extracting(ClaimedDelivery::eventId).containsExactly("e1");

    // b's copy of e1 is still in flight (b renews its leases); after a's backoff has passed,
    // b's next claim must not hand e1 out a second time
    clock.now = clock.now.plusSeconds(11);
    List<LaneLease> renewed = store.renewLanes("b", bLeases.get(), Duration.ofSeconds(30));
    assertThat(store.claim("b", renewed, 10))
        .as("e1 handed out again while b's first copy is in flight")
        .extracting(ClaimedDelivery::eventId)
        .isEmpty();
  }
}
