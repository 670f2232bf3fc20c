package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/**
 * The inbox: a handler's first record of an event, its redeliveries, and races between consumers.
 *
 * <p>The contract's parts are chained only so that each store runs them as one test class (see
 * {@link OutboxStoreContractTest}).
 */
public abstract class InboxContract extends AdminContract {
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
}
