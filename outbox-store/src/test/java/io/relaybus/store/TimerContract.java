package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Timers: deadlines, extend, replace, keep, fail, cancel, their ids, and races with the claim.
 *
 * <p>The contract's parts are chained only so that each store runs them as one test class (see
 * {@link OutboxStoreContractTest}).
 */
public abstract class TimerContract extends PublishContract {
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

  /**
   * Symptom (PostgreSQL, storage v2): the claim after one that handed out a timer returned nothing
   * although a timer scheduled since was due and nothing was in flight; the claim after it sent it.
   * Retries and timers went first with the log's coverage as the last claim left it, which did not
   * yet see the new timer's transaction, and were not asked again once this claim's log read had
   * covered it.
   */
  @Test
  void aTimerDueAfterOneWasHandedOutGoesAtTheVeryNextClaim() {
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    store.schedule(timerEvent("t1"), due());
    List<ClaimedDelivery> first = store.claim("A", leases, 10);
    assertThat(eventIds(first)).containsExactly("t1");
    assertThat(store.complete(tokens(first))).hasSize(1);

    store.schedule(timerEvent("t2"), due());

    assertThat(eventIds(store.claim("A", leases, 10))).containsExactly("t2");
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

  /**
   * A timer "in" a duration no clock can reach (a caller's "never": {@code Long.MAX_VALUE} seconds,
   * {@code ChronoUnit.FOREVER}, or just over 584,542 years) must not fire now: either the call is
   * refused, or the timer waits. None of them may be handed out a second later.
   */
  @Test
  void aTimerInADurationBeyondAnyClockIsRefusedOrWaitsButNeverFiresAtOnce() {
    List<Duration> forever =
        List.of(
            Duration.ofSeconds(Long.MAX_VALUE),
            java.time.temporal.ChronoUnit.FOREVER.getDuration(),
            Duration.ofSeconds(18_446_744_073_710L));
    List<String> armed = new ArrayList<>();
    for (int i = 0; i < forever.size(); i++) {
      String id = "forever-" + i;
      try {
        store.schedule(timerEvent(id), Timer.in(forever.get(i)).named(id, TimerConflict.FAIL));
        armed.add(id);
      } catch (IllegalArgumentException
          | OutboxStoreException
          | ArithmeticException
          | java.time.DateTimeException refused) {
        // refused: fine, as long as nothing fires
      }
    }

    try {
      Thread.sleep(1_000); // past a deadline that wrapped around to "in 0.45 s"
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    assertThat(eventIds(claimAll())).as("timers armed for %s, a second later", armed).isEmpty();
  }

  /**
   * No PostgreSQL text holds U+0000, so a timer id with one can never be stored there: the id is
   * refused before any store sees it, naming the field and where, as an event id with one is.
   */
  @Test
  void aTimerIdWithANulIsRefusedNamingTheField() {
    assertThatThrownBy(() -> later().named("t-\u0000", TimerConflict.EXTEND))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("timer id must not contain the character U+0000 (NUL), but did at index 2");
    assertThatThrownBy(() -> store.cancelTimer(TIMERS, "t-\u0000"))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("U+0000");
    assertThat(all()).isEmpty();
  }

  /**
   * {@code Timer.at} takes any instant. At the ends of {@code Instant} the store either arms the
   * timer (the past one fires at the next claim, as {@link Timer#at} promises; the future one
   * waits) or refuses it as bad input naming {@code timer at}, not with an exception from the
   * date-time library that names no argument.
   */
  @Test
  void aTimerAtTheEndsOfInstantIsArmedOrRefusedNamingTimerAt() {
    java.util.Map<String, java.time.Instant> ends =
        java.util.Map.of("min", java.time.Instant.MIN, "max", java.time.Instant.MAX);
    for (var end : ends.entrySet()) {
      try {
        assertThat(
                store.schedule(
                    timerEvent(end.getKey()),
                    Timer.at(end.getValue()).named(end.getKey(), TimerConflict.FAIL)))
            .isEqualTo(result(TimerOutcome.ARMED, end.getKey()));
      } catch (RuntimeException e) {
        assertThat(e)
            .as(end.getKey())
            .isInstanceOf(IllegalArgumentException.class)
            .hasMessageContaining("timer at");
      }
    }
  }

  /**
   * Timer ids that differ only in a lone surrogate (an id cut in the middle of a surrogate pair, as
   * {@code name.substring(0, 200)} does to an emoji) are different ids. A store must keep them
   * apart, or refuse them naming the field; PostgreSQL text cannot hold a lone surrogate, and the
   * driver turns each into '?', so there two such timers were one, and a cancel of {@code "s-?"}
   * cancelled the timer named {@code "s-\uD83D"}.
   */
  @Test
  void timerIdsThatDifferOnlyInALoneSurrogateAreKeptApartOrRefused() {
    List<TimerResult> results = new ArrayList<>();
    try {
      results.add(store.schedule(timerEvent("x1"), later().named("s-\uD83D", TimerConflict.FAIL)));
      results.add(store.schedule(timerEvent("x2"), later().named("s-\uD83E", TimerConflict.FAIL)));
      results.add(store.cancelTimer(TIMERS, "s-?"));
    } catch (IllegalArgumentException refused) {
      assertThat(refused).hasMessageContaining("timer id");
      assertThat(all()).isEmpty();
      return;
    }
    assertThat(results)
        .containsExactly(
            result(TimerOutcome.ARMED, "x1"),
            result(TimerOutcome.ARMED, "x2"),
            result(TimerOutcome.NOT_FOUND, null));
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
   * A keyed timer without an id behind a named keyed timer of its key: cancelling the named one, or
   * moving it earlier, lets the key's followers go sooner, but a follower that is itself a timer
   * still fires at its own deadline, not when the timer ahead of it went.
   */
  @Test
  void aKeyedTimerBehindATimerCancelledOrAdvancedStillWaitsForItsOwnDeadline() {
    store.schedule(event("first", "k", TIMERS), later().named("t", TimerConflict.EXTEND));
    store.schedule(event("second", "k", TIMERS), Timer.in(Duration.ofHours(5)));
    store.schedule(event("first-2", "k2", TIMERS), later().named("t2", TimerConflict.EXTEND));
    store.schedule(event("second-2", "k2", TIMERS), Timer.in(Duration.ofHours(5)));

    assertThat(store.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "first"));
    assertThat(store.schedule(timerEvent("x"), due().named("t2", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "first-2"));
    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      List<ClaimedDelivery> batch = claimAll();
      out.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }

    assertThat(out)
        .as("handed out; still pending: %s", pendingDueTimes())
        .containsExactly("first-2");
    assertThat(pendingDueTimes())
        .containsExactlyInAnyOrder("second due in 299 min", "second-2 due in 299 min");
  }

  /**
   * The same with the calls made in the caller's transaction (on PostgreSQL also through the SQL
   * functions, {@code SqlTimerFunctionsContractTest}).
   */
  @Test
  void aKeyedTimerBehindATimerCancelledOrAdvancedInATransactionStillWaitsForItsOwnDeadline() {
    assumeTransactions();
    store.schedule(event("first", "k", TIMERS), later().named("t", TimerConflict.EXTEND));
    store.schedule(event("second", "k", TIMERS), Timer.in(Duration.ofHours(5)));
    store.schedule(event("first-2", "k2", TIMERS), later().named("t2", TimerConflict.EXTEND));
    store.schedule(event("second-2", "k2", TIMERS), Timer.in(Duration.ofHours(5)));
    try (Tx tx = begin(store)) {
      assertThat(tx.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "first"));
      assertThat(tx.schedule(timerEvent("x"), due().named("t2", TimerConflict.EXTEND)))
          .isEqualTo(result(TimerOutcome.EXTENDED, "first-2"));
      tx.commit();
    }
    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      List<ClaimedDelivery> batch = claimAll();
      out.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }

    assertThat(out)
        .as("handed out; still pending: %s", pendingDueTimes())
        .containsExactly("first-2");
    assertThat(pendingDueTimes())
        .containsExactlyInAnyOrder("second due in 299 min", "second-2 due in 299 min");
  }

  /**
   * A retry of a keyed delivery behind a keyed timer of its key (handed out with the timer, which
   * was then given back unsent, or failed too): cancelling the timer, or moving it earlier, lets
   * its key's followers go sooner, but a follower that is a retry still waits for its own backoff.
   * A delivery never goes before its due time.
   */
  @Test
  void aRetryBehindATimerCancelledOrAdvancedStillWaitsForItsBackoff() {
    store = open(new RetryPolicy(10, Duration.ofHours(1), Duration.ofHours(1), 0), false);
    retriesBehindTimers();

    assertThat(store.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "first"));
    assertThat(store.schedule(timerEvent("x"), due().named("t2", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "first-2"));

    assertOnlyTheAdvancedTimerGoesAndTheRetriesWait();
  }

  /**
   * The same with the calls made in the caller's transaction (on PostgreSQL also through the SQL
   * functions, {@code SqlTimerFunctionsContractTest}).
   */
  @Test
  void aRetryBehindATimerCancelledOrAdvancedInATransactionStillWaitsForItsBackoff() {
    assumeTransactions();
    store = open(new RetryPolicy(10, Duration.ofHours(1), Duration.ofHours(1), 0), false);
    retriesBehindTimers();

    try (Tx tx = begin(store)) {
      assertThat(tx.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "first"));
      assertThat(tx.schedule(timerEvent("x"), due().named("t2", TimerConflict.EXTEND)))
          .isEqualTo(result(TimerOutcome.EXTENDED, "first-2"));
      tx.commit();
    }

    assertOnlyTheAdvancedTimerGoesAndTheRetriesWait();
  }

  /**
   * Key k: timer t ("first"), then "second"; key k2: timer t2 ("first-2"), then "second-2". One
   * claim hands out all four; the followers fail (an hour's backoff), t is given back unsent, t2
   * fails too.
   */
  private void retriesBehindTimers() {
    store.schedule(event("first", "k", TIMERS), due().named("t", TimerConflict.EXTEND));
    store.publish(event("second", "k", TIMERS));
    store.schedule(event("first-2", "k2", TIMERS), due().named("t2", TimerConflict.EXTEND));
    store.publish(event("second-2", "k2", TIMERS));
    List<ClaimedDelivery> batch = claimAll();
    assertThat(eventIds(batch)).containsExactlyInAnyOrder("first", "second", "first-2", "second-2");
    for (ClaimedDelivery d : batch) {
      if (d.eventId().equals("first")) {
        assertThat(store.release(List.of(d.token()))).isEqualTo(1);
      } else {
        assertThat(store.reschedule(d.token(), "failed")).isEqualTo(FailOutcome.RESCHEDULED);
      }
    }
  }

  private void assertOnlyTheAdvancedTimerGoesAndTheRetriesWait() {
    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 3; claims++) {
      List<ClaimedDelivery> batch = claimAll();
      out.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }

    assertThat(out)
        .as("handed out; still pending: %s", pendingDueTimes())
        .containsExactly("first-2");
    assertThat(pendingDueTimes())
        .containsExactlyInAnyOrder("second due in 59 min", "second-2 due in 59 min");
  }

  /**
   * A keyed timer scheduled in a transaction before an event of its key is published in the same
   * transaction comes first in its key's order, as two publishes of a transaction do: the event
   * waits for the timer.
   */
  @Test
  void anEventPublishedAfterAKeyedTimerInOneTransactionWaitsForTheTimer() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(event("timer", "k", TIMERS), later().named("t", TimerConflict.FAIL)))
          .isEqualTo(result(TimerOutcome.ARMED, "timer"));
      tx.publish(event("after", "k", TIMERS));
      tx.commit();
    }

    assertThat(claimAll()).as("the later event of the key waits for the timer").isEmpty();
    store.schedule(timerEvent("x"), due().named("t", TimerConflict.EXTEND));
    assertThat(eventIds(claimAll())).containsExactly("timer", "after");
  }

  /**
   * A timer arms a new event: an event id the same transaction published already exists for it, and
   * is refused as a committed one is. The transaction's event stays as it was published.
   */
  @Test
  void aTimerWithTheIdOfAnEventPublishedInItsTransactionIsRefused() {
    assumeTransactions();
    OutboxEvent timer =
        OutboxEvent.builder("timer.fired")
            .id("x")
            .payload("the timer's".getBytes(StandardCharsets.UTF_8), "text/plain")
            .handlers(TIMERS)
            .build();
    try (Tx tx = begin(store)) {
      tx.publish(event("x", null, "a"));
      assertThatThrownBy(() -> tx.schedule(timer, due()))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("event id 'x' exists already");
      tx.commit();
    }

    assertThat(claimAll())
        .extracting(
            ClaimedDelivery::eventId,
            ClaimedDelivery::handler,
            ClaimedDelivery::type,
            d -> new String(d.payload(), StandardCharsets.UTF_8))
        .containsExactly(
            org.assertj.core.groups.Tuple.tuple("x", "a", "test.happened", "payload of x"));
  }

  /**
   * An event published with the id of a timer armed earlier in the same transaction is a republish
   * of the timer's event, as it is once the timer committed: not a new event.
   */
  @Test
  void aPublishOfTheIdOfATimerArmedInItsTransactionIsARepublish() {
    assumeTransactions();
    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(timerEvent("x"), due())).isEqualTo(result(TimerOutcome.ARMED, "x"));
      assertThat(tx.publish(event("x", null, "a")))
          .isEqualTo(new PublishResult("x", false, List.of("a"), List.of()));
      tx.commit();
    }

    assertThat(claimAll())
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler)
        .containsExactlyInAnyOrder(
            org.assertj.core.groups.Tuple.tuple("x", TIMERS),
            org.assertj.core.groups.Tuple.tuple("x", "a"));
  }

  /**
   * A timer in flight whose lane its task hands back gracefully is pending again: the next call
   * changes it (every store), and a claim of the lane's next holder sends it only when due.
   */
  @Test
  void aTimerInFlightWhoseLaneIsHandedBackCanBeExtendedAndCancelledAgain() {
    store.schedule(timerEvent("t1"), due().named("t1", TimerConflict.EXTEND));
    store.schedule(timerEvent("t2"), due().named("t2", TimerConflict.EXTEND));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    assertThat(eventIds(store.claim("A", leases, 10))).containsExactlyInAnyOrder("t1", "t2");
    store.relinquishLanes("A", leases);

    assertThat(store.schedule(timerEvent("x"), later().named("t1", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "t1"));
    assertThat(store.cancelTimer(TIMERS, "t2")).isEqualTo(result(TimerOutcome.CANCELLED, "t2"));
    assertThat(store.claim("B", leaseAll(store, "B", GROUP), 10)).isEmpty();
    assertThat(pendingDueTimes()).containsExactly("t1 due in 59 min");
  }

  /**
   * Two named timers of one key are due, and the first was extended by an hour: the claim re-arms
   * the first and hands out neither (the second waits behind the first by the per-key rule). The
   * second is pending and not in flight, so a cancel cancels it, and an extend extends it: neither
   * is told ALREADY_FIRING for a timer no task has.
   */
  @Test
  void aTimerHeldBackBehindItsKeysReArmedTimerIsNotFiring() {
    store.schedule(event("a", "k", TIMERS), due().named("t1", TimerConflict.EXTEND));
    store.schedule(event("b", "k", TIMERS), due().named("t2", TimerConflict.EXTEND));
    store.schedule(event("c", "k2", TIMERS), due().named("t3", TimerConflict.EXTEND));
    store.schedule(event("d", "k2", TIMERS), due().named("t4", TimerConflict.EXTEND));
    assertThat(store.schedule(timerEvent("x1"), later().named("t1", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "a"));
    assertThat(store.schedule(timerEvent("x3"), later().named("t3", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "c"));

    assertThat(claimAll()).as("the first timers re-armed, the second ones behind them").isEmpty();

    assertThat(store.cancelTimer(TIMERS, "t2")).isEqualTo(result(TimerOutcome.CANCELLED, "b"));
    assertThat(store.schedule(timerEvent("x4"), later().named("t4", TimerConflict.EXTEND)))
        .isEqualTo(result(TimerOutcome.EXTENDED, "d"));
    assertThat(claimAll()).isEmpty();
    assertThat(all())
        .extracting(DeliveryView::eventId, DeliveryView::inFlight)
        .containsExactlyInAnyOrder(
            org.assertj.core.groups.Tuple.tuple("a", false),
            org.assertj.core.groups.Tuple.tuple("c", false),
            org.assertj.core.groups.Tuple.tuple("d", false));
  }

  /** Each pending delivery's event id and how long from now it is due. */
  private List<String> pendingDueTimes() {
    java.time.Instant now = java.time.Instant.now();
    return all().stream()
        .map(
            d ->
                d.eventId()
                    + " due in "
                    + Duration.between(now, d.availableAt()).toMinutes()
                    + " min")
        .toList();
  }

  /**
   * A keyed timer is cancelled in an application transaction, and claims run before it commits:
   * they still see the timer pending and hold its key's follower back (behind the timer's
   * deadline). Once the cancel commits nothing blocks the follower, and it must go within a claim
   * or two, not when the cancelled timer would have fired (an hour later).
   */
  @Test
  void theFollowerOfATimerCancelledInAnOpenTransactionGoesOnceTheCancelCommits() {
    assumeTransactions();
    store.schedule(event("timer", "k", TIMERS), later().named("t", TimerConflict.EXTEND));
    store.publish(event("f1", "k", TIMERS));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    List<String> out = new ArrayList<>();
    try (Tx tx = begin(store)) {
      assertThat(tx.cancelTimer(TIMERS, "t")).isEqualTo(result(TimerOutcome.CANCELLED, "timer"));
      for (int claims = 0; claims < 2; claims++) {
        List<ClaimedDelivery> during = store.claim("A", leases, 10);
        out.addAll(eventIds(during));
        store.complete(tokens(during));
      }
      tx.commit();
    }
    for (int claims = 0; claims < 2; claims++) {
      List<ClaimedDelivery> batch = store.claim("A", leases, 10);
      out.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }

    assertThat(out).as("handed out; still pending: %s", pendingDueTimes()).containsExactly("f1");
  }

  /**
   * The same with the timer's deadline moved earlier (to now) in the open transaction: once it
   * commits, the timer fires and its follower goes right behind it, not an hour later when the
   * timer's old deadline would have come.
   */
  @Test
  void theFollowerOfATimerAdvancedInAnOpenTransactionGoesRightBehindIt() {
    assumeTransactions();
    store.schedule(event("timer", "k", TIMERS), later().named("t", TimerConflict.EXTEND));
    store.publish(event("f1", "k", TIMERS));
    List<LaneLease> leases = leaseAll(store, "A", GROUP);
    List<String> out = new ArrayList<>();
    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(timerEvent("x"), due().named("t", TimerConflict.EXTEND)))
          .isEqualTo(result(TimerOutcome.EXTENDED, "timer"));
      for (int claims = 0; claims < 2; claims++) {
        List<ClaimedDelivery> during = store.claim("A", leases, 10);
        out.addAll(eventIds(during));
        store.complete(tokens(during));
      }
      tx.commit();
    }
    for (int claims = 0; claims < 3; claims++) {
      List<ClaimedDelivery> batch = store.claim("A", leases, 10);
      out.addAll(eventIds(batch));
      store.complete(tokens(batch));
    }

    assertThat(out)
        .as("handed out; still pending: %s", pendingDueTimes())
        .containsExactly("timer", "f1");
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

  /**
   * An application transaction asks to change a timer that is firing and is told ALREADY_FIRING: it
   * changed nothing, so it must hold nothing up. The task that sends the timer completes it (and
   * reschedules or releases it) while that transaction is still open, as it would without it.
   */
  @Test
  void aTransactionToldAlreadyFiringHoldsUpNeitherTheCompletionNorTheReleaseOfTheTimer()
      throws Exception {
    assumeTransactions();
    store.schedule(timerEvent("t1"), due().named("t1", TimerConflict.EXTEND));
    store.schedule(timerEvent("t2"), due().named("t2", TimerConflict.EXTEND));
    List<ClaimedDelivery> fired = claimAll();
    assertThat(eventIds(fired)).containsExactlyInAnyOrder("t1", "t2");
    ClaimedDelivery t1 = fired.stream().filter(d -> d.eventId().equals("t1")).findFirst().get();
    ClaimedDelivery t2 = fired.stream().filter(d -> d.eventId().equals("t2")).findFirst().get();
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try (Tx tx = begin(store)) {
      assertThat(tx.schedule(timerEvent("x"), later().named("t1", TimerConflict.EXTEND)))
          .isEqualTo(result(TimerOutcome.ALREADY_FIRING, "t1"));
      assertThat(tx.cancelTimer(TIMERS, "t2")).isEqualTo(result(TimerOutcome.ALREADY_FIRING, "t2"));

      Future<java.util.Set<Long>> completed =
          pool.submit(() -> store.complete(List.of(t1.token())));
      Future<Integer> released = pool.submit(() -> store.release(List.of(t2.token())));
      assertThat(completed)
          .as("completion of t1 while the transaction told ALREADY_FIRING is open")
          .succeedsWithin(Duration.ofSeconds(5))
          .satisfies(ids -> assertThat(ids).hasSize(1));
      assertThat(released)
          .as("release of t2 while the transaction told ALREADY_FIRING is open")
          .succeedsWithin(Duration.ofSeconds(5))
          .isEqualTo(1);
      tx.rollback(); // (the in-memory store would fail its commit: the answer changed)
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * The same transaction, told ALREADY_FIRING, must not hold up a takeover of the timer's lane
   * either: the new holder charges the timer an attempt and takes the lane at once.
   */
  @Test
  void aTransactionToldAlreadyFiringDoesNotHoldUpATakeoverOfTheTimersLane() throws Exception {
    assumeTransactions();
    store.schedule(timerEvent("t1"), due().named("t1", TimerConflict.EXTEND));
    List<ClaimedDelivery> fired = claimAll();
    assertThat(eventIds(fired)).containsExactly("t1");
    int lane = fired.get(0).token().lane();
    ExecutorService pool = Executors.newSingleThreadExecutor();
    try (Tx tx = begin(store)) {
      assertThat(tx.cancelTimer(TIMERS, "t1")).isEqualTo(result(TimerOutcome.ALREADY_FIRING, "t1"));

      Future<List<LaneLease>> takeover =
          pool.submit(() -> store.acquireLanes("A2", GROUP, List.of(lane), LEASE));
      assertThat(takeover)
          .as("takeover of lane %d while the transaction told ALREADY_FIRING is open", lane)
          .succeedsWithin(Duration.ofSeconds(5))
          .satisfies(
              leases ->
                  assertThat(leases)
                      .singleElement()
                      .extracting(LaneLease::takenOver, LaneLease::charged)
                      .containsExactly(true, 1));
      tx.rollback();
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * A REPLACE whose new event id exists already is refused (a timer arms a new event). A refused
   * call changes nothing: the caller that catches the refusal and commits its transaction still has
   * its pending timer, and the refusal is not a cancel in disguise.
   */
  @Test
  void aReplaceRefusedForAnEventIdThatExistsLeavesThePendingTimerInTheTransaction() {
    assumeTransactions();
    store.schedule(timerEvent("t1"), later().named("t", TimerConflict.REPLACE));
    store.publish(timerEvent("taken"));
    try (Tx tx = begin(store)) {
      assertThatThrownBy(
              () -> tx.schedule(timerEvent("taken"), due().named("t", TimerConflict.REPLACE)))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("event id 'taken' exists already");
      tx.commit();
    }

    assertThat(store.cancelTimer(TIMERS, "t"))
        .as("the pending timer after the refused replace")
        .isEqualTo(result(TimerOutcome.CANCELLED, "t1"));
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
}
