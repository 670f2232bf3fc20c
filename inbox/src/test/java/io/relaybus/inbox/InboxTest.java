package io.relaybus.inbox;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.PublishResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.memory.InMemoryOutboxStore;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The inbox API on a real PostgreSQL 17: once per (event, handler), in the consumer's transaction.
 */
class InboxTest {
  private PostgresOutboxStore store;
  private Inbox<Connection> inbox;
  private Ledger ledger;

  @BeforeEach
  void open() {
    store = TestDatabase.freshStore();
    inbox = Inbox.postgres(store, store.dataSource());
    ledger = new Ledger(store.dataSource(), "ledger_api");
  }

  @AfterEach
  void close() {
    store.close();
  }

  static InboxMessage message(String eventId) {
    return new InboxMessage(
        eventId,
        "order.placed",
        "order-42",
        ("{\"id\":\"" + eventId + "\"}").getBytes(StandardCharsets.UTF_8),
        "application/json",
        Map.of("traceparent", "00-" + eventId),
        "test");
  }

  /**
   * handleAll takes the inbox records of every message before the first work runs (so concurrent
   * batches take the rows in one order), then runs the works in the list's order; a repeated id and
   * an event handled before are skipped.
   */
  @Test
  void handleAllRecordsEveryMessageBeforeTheFirstWorkAndRunsTheWorksInListOrder() {
    inbox.handle(message("e-2"), "billing.charge", ledger.work("billing.charge"));
    List<String> ran = new ArrayList<>();
    List<Long> recordedAtFirstWork = new ArrayList<>();
    InboxWork<Connection> charge = ledger.work("billing.charge");
    String events = store.tableName("events");

    List<HandleOutcome> outcomes =
        inbox
            .transactions()
            .inTransaction(
                tx ->
                    inbox.handleAll(
                        tx,
                        List.of(message("e-3"), message("e-1"), message("e-3"), message("e-2")),
                        "billing.charge",
                        (work, m) -> {
                          if (ran.isEmpty()) {
                            try (var s =
                                    work.prepareStatement(
                                        "SELECT count(*) FROM "
                                            + events
                                            + " WHERE 'billing.charge' = ANY(handlers)");
                                var rs = s.executeQuery()) {
                              rs.next();
                              recordedAtFirstWork.add(rs.getLong(1));
                            }
                          }
                          ran.add(m.eventId());
                          charge.run(work, m);
                        }));

    assertThat(outcomes)
        .containsExactly(
            HandleOutcome.HANDLED,
            HandleOutcome.HANDLED,
            HandleOutcome.SKIPPED_REDELIVERY,
            HandleOutcome.SKIPPED_REDELIVERY);
    assertThat(ran).containsExactly("e-3", "e-1");
    assertThat(recordedAtFirstWork)
        .as("events recorded when the first work ran")
        .containsExactly(3L);
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-3", "billing.charge");
  }

  @Test
  void firstDeliveryRunsTheWorkAndRedeliveriesDoNot() {
    InboxMessage message = message("e-1");

    List<HandleOutcome> outcomes = new ArrayList<>();
    for (int delivery = 0; delivery < 3; delivery++) {
      outcomes.add(inbox.handle(message, "billing.charge", ledger.work("billing.charge")));
    }

    assertThat(outcomes)
        .containsExactly(
            HandleOutcome.HANDLED,
            HandleOutcome.SKIPPED_REDELIVERY,
            HandleOutcome.SKIPPED_REDELIVERY);
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(inbox.handle(message, "audit.log", ledger.work("audit.log")))
        .as("another handler of the same event")
        .isEqualTo(HandleOutcome.HANDLED);
    ledger.assertRanOnce("e-1", "audit.log");
    assertThat(store.listDeliveries(DeliveryQuery.all()).items()).as("no delivery").isEmpty();
  }

  @Test
  void failedWorkRollsBackTheRecordSoTheNextDeliveryRunsIt() {
    InboxMessage message = message("e-1");

    assertThatThrownBy(
            () ->
                inbox.handle(
                    message,
                    "billing.charge",
                    ledger.failingWork(
                        "billing.charge", new IllegalStateException("card declined"))))
        .isInstanceOf(IllegalStateException.class)
        .hasMessage("card declined");
    assertThat(ledger.committed()).as("the work's write rolled back").isEmpty();

    assertThat(inbox.handle(message, "billing.charge", ledger.work("billing.charge")))
        .isEqualTo(HandleOutcome.HANDLED);
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(2);
    assertThat(ledger.committed()).containsExactly(Map.entry("e-1/billing.charge", 1));
  }

  /**
   * A work that commits the inbox's connection itself (a DAO that commits, then a later step that
   * fails) commits the inbox record with its first half. {@code handle} reports the failure, the
   * message is tried again, and the retry is skipped as a redelivery: the second half never runs.
   * The work must not be able to end the inbox's transaction (or its failure must undo everything).
   */
  @Test
  void workThatCommitsTheConnectionItselfAndThenFailsRunsAgainOnTheNextDelivery() {
    InboxMessage message = message("e-1");
    InboxWork<Connection> firstHalf = ledger.work("billing.reserve");

    assertThatThrownBy(
            () ->
                inbox.handle(
                    message,
                    "billing.charge",
                    (tx, m) -> {
                      firstHalf.run(tx, m);
                      tx.commit(); // e.g. a repository method that commits
                      throw new IllegalStateException("card declined");
                    }))
        .isInstanceOf(RuntimeException.class);

    assertThat(inbox.handle(message, "billing.charge", ledger.work("billing.charge")))
        .as("the failed attempt must not leave the message recorded as handled")
        .isEqualTo(HandleOutcome.HANDLED);
    assertThat(ledger.committed()).containsEntry("e-1/billing.charge", 1);
  }

  /**
   * A work that rolls the inbox's connection back and returns (a "discard" path) rolls back the
   * inbox record too; {@code handle} still answers HANDLED ("ran and committed"), so a broker
   * adapter acknowledges a message of which nothing committed, as with the aborted transaction
   * (25P02) that {@code handle} already refuses.
   */
  @Test
  void workThatRollsTheConnectionBackItselfIsNotReportedHandled() {
    InboxMessage message = message("e-1");
    InboxWork<Connection> write = ledger.work("billing.charge");

    assertThatThrownBy(
            () ->
                inbox.handle(
                    message,
                    "billing.charge",
                    (tx, m) -> {
                      write.run(tx, m);
                      tx.rollback();
                    }))
        .as("handle of a work that rolled the inbox's transaction back")
        .isInstanceOf(InboxException.class);
    assertThat(ledger.committed()).isEmpty();
  }

  /**
   * The guard refuses {@code rollback()}; the same statement sent as SQL ends the transaction just
   * as well. A work that sends ROLLBACK and returns rolled back the inbox record and its own
   * writes: reported HANDLED, a broker adapter would acknowledge a message of which nothing
   * committed, and no delivery would ever run it again. It must fail, so that the message is tried
   * again.
   */
  @Test
  void workThatRollsTheTransactionBackWithSqlIsNotReportedHandledAndRunsAgain() {
    InboxMessage message = message("e-1");
    InboxWork<Connection> write = ledger.work("billing.charge");

    assertThatThrownBy(
            () ->
                inbox.handle(
                    message,
                    "billing.charge",
                    (tx, m) -> {
                      write.run(tx, m);
                      try (Statement discard = tx.createStatement()) {
                        discard.execute("ROLLBACK");
                      }
                    }))
        .as("handle of a work that sent ROLLBACK")
        .isInstanceOf(InboxException.class)
        .hasMessageContaining("ended the transaction with SQL");
    assertThat(ledger.committed()).isEmpty();

    assertThat(inbox.handle(message, "billing.charge", ledger.work("billing.charge")))
        .as("the next delivery of a message whose first attempt committed nothing")
        .isEqualTo(HandleOutcome.HANDLED);
    assertThat(ledger.committed()).containsOnly(Map.entry("e-1/billing.charge", 1));
  }

  @Test
  void handleInTheCallersTransactionCommitsAndRollsBackWithIt() throws Exception {
    InboxMessage message = message("e-1");
    try (Connection tx = TestDatabase.dataSource().getConnection()) {
      tx.setAutoCommit(false);
      assertThat(inbox.handle(tx, message, "billing.charge", ledger.work("billing.charge")))
          .isEqualTo(HandleOutcome.HANDLED);
      tx.rollback();
      assertThat(inbox.handle(tx, message, "billing.charge", ledger.work("billing.charge")))
          .as("the rollback took the record with it")
          .isEqualTo(HandleOutcome.HANDLED);
      tx.commit();
    }

    assertThat(inbox.handle(message, "billing.charge", ledger.work("billing.charge")))
        .isEqualTo(HandleOutcome.SKIPPED_REDELIVERY);
    assertThat(ledger.committed()).containsExactly(Map.entry("e-1/billing.charge", 1));
  }

  @Test
  void consumersRacingOnOneEventRunTheWorkOnce() throws Exception {
    InboxMessage message = message("raced");
    int racers = 6;
    ExecutorService pool = Executors.newFixedThreadPool(racers);
    List<HandleOutcome> outcomes = new ArrayList<>();
    try {
      CountDownLatch start = new CountDownLatch(1);
      List<Future<HandleOutcome>> running = new ArrayList<>();
      for (int i = 0; i < racers; i++) {
        running.add(
            pool.submit(
                () -> {
                  start.await();
                  return inbox.handle(message, "billing.charge", ledger.work("billing.charge"));
                }));
      }
      start.countDown();
      for (Future<HandleOutcome> f : running) {
        outcomes.add(f.get(30, TimeUnit.SECONDS));
      }
    } finally {
      pool.shutdownNow();
    }

    assertThat(outcomes).containsOnlyOnce(HandleOutcome.HANDLED).hasSize(racers);
    ledger.assertRanOnce("raced", "billing.charge");
  }

  @Test
  void forwardingAddsDeliveriesOnlyForRoutesNotListed() {
    store.publish(
        OutboxEvent.builder("order.placed").id("e-1").key("order-42").handlers("audit").build());
    List<PublishResult> forwarded = new ArrayList<>();
    InboxWork<Connection> forward =
        (tx, m) -> forwarded.add(inbox.forward(tx, m, List.of("audit", "billing")));

    assertThat(inbox.handle(message("e-1"), "orders.forwarder", forward))
        .isEqualTo(HandleOutcome.HANDLED);
    assertThat(inbox.handle(message("e-1"), "orders.forwarder", forward))
        .isEqualTo(HandleOutcome.SKIPPED_REDELIVERY);

    // The message carries its own payload, content type and headers, unlike the event published
    // above: the republish says so, and the stored event wins.
    assertThat(forwarded)
        .containsExactly(
            new PublishResult(
                "e-1", false, List.of("billing"), List.of("payload", "contentType", "headers")));
    List<DeliveryView> deliveries = store.listDeliveries(DeliveryQuery.all()).items();
    assertThat(deliveries)
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("audit", "billing");
    assertThat(deliveries).extracting(DeliveryView::key).containsOnly("order-42");
  }

  @Test
  void forwardingANewEventPublishesItWithTheReceivedFields() {
    AtomicInteger published = new AtomicInteger();
    inbox.handle(
        message("fresh"),
        "orders.forwarder",
        (tx, m) ->
            published.addAndGet(inbox.forward(tx, m, List.of("billing")).addedHandlers().size()));

    assertThat(published).hasValue(1);
    DeliveryView delivery = store.listDeliveries(DeliveryQuery.all()).items().get(0);
    assertThat(delivery.eventId()).isEqualTo("fresh");
    assertThat(delivery.key()).isEqualTo("order-42");
  }

  @Test
  void retentionPurgesInboxRecordsAfterWhichALateRedeliveryRunsAgain() {
    inbox.handle(message("e-1"), "billing.charge", ledger.work("billing.charge"));

    assertThat(store.purge(RetentionPolicy.defaults()).events()).isZero();
    assertThat(inbox.handle(message("e-1"), "billing.charge", ledger.work("billing.charge")))
        .isEqualTo(HandleOutcome.SKIPPED_REDELIVERY);
    assertThat(
            store.purge(new RetentionPolicy(Duration.ZERO, Duration.ZERO, Duration.ZERO)).events())
        .isEqualTo(1);
    assertThat(inbox.handle(message("e-1"), "billing.charge", ledger.work("billing.charge")))
        .as("retention shorter than the redelivery window: the late copy runs again")
        .isEqualTo(HandleOutcome.HANDLED);
  }

  @Test
  void messageThatCannotBeRecordedIsPoison() {
    assertThatThrownBy(
            () ->
                new InboxMessage(
                    " padded ", "t", null, new byte[0], "text/plain", Map.of(), "kafka t-0@7"))
        .isInstanceOf(PoisonMessageException.class)
        .hasMessageContaining("kafka t-0@7")
        .hasMessageContaining("event id must not start or end with white space");
    assertThatThrownBy(() -> inbox.handle(message("e"), "no spaces", ledger.work("x")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("handler must match");
  }

  @Test
  void inMemoryInboxFollowsTheSameRules() {
    InMemoryOutboxStore memory = InMemoryOutboxStore.create();
    Inbox<InMemoryOutboxStore.Transaction> unitTestInbox = Inbox.inMemory(memory);
    AtomicInteger ran = new AtomicInteger();

    assertThat(unitTestInbox.handle(message("e-1"), "h", (tx, m) -> ran.incrementAndGet()))
        .isEqualTo(HandleOutcome.HANDLED);
    assertThat(unitTestInbox.handle(message("e-1"), "h", (tx, m) -> ran.incrementAndGet()))
        .isEqualTo(HandleOutcome.SKIPPED_REDELIVERY);
    assertThat(ran).hasValue(1);
  }
}
