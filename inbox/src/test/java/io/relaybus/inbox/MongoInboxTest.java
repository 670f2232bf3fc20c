package io.relaybus.inbox;

import static com.mongodb.client.model.Filters.eq;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoCollection;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.PublishResult;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.testing.MongoServers;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.bson.Document;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The inbox API on MongoDB: once per (event, handler), in the consumer's transaction, with the
 * consumer's own writes (a ledger collection) committed together with the record. Needs a real
 * replica set ({@value MongoServers#URI_VARIABLE}, or Testcontainers with Docker): MongoDB has no
 * transactions elsewhere, so without one every test is skipped with the reason.
 */
class MongoInboxTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private static final String DATABASE = "relaybus_inbox_" + Long.toString(System.nanoTime(), 36);
  private static MongoClient client;

  private MongoOutboxStore store;
  private Inbox<ClientSession> inbox;
  private MongoCollection<Document> ledger;

  @BeforeEach
  void open() {
    assumeTrue(MongoServers.replicaSet().isPresent(), MongoServers.replicaSetUnavailableReason());
    synchronized (MongoInboxTest.class) {
      if (client == null) {
        client = MongoServers.client(MongoServers.replicaSet().orElseThrow());
      }
    }
    String prefix = "i" + PREFIXES.incrementAndGet() + "_";
    store =
        MongoOutboxStore.builder()
            .client(client)
            .database(DATABASE)
            .collectionPrefix(prefix)
            .build();
    store.setup();
    inbox = Inbox.mongodb(store);
    ledger = client.getDatabase(DATABASE).getCollection(prefix + "ledger");
    ledger.insertOne(new Document("_id", "created")); // collections exist before transactions
    ledger.deleteOne(eq("_id", "created"));
  }

  @AfterEach
  void close() {
    if (store != null) {
      store.close();
    }
  }

  @AfterAll
  static void dropDatabase() {
    if (client != null) {
      client.getDatabase(DATABASE).drop();
      client.close();
    }
  }

  private static InboxMessage message(String eventId) {
    return new InboxMessage(
        eventId,
        "order.placed",
        "order-42",
        ("{\"id\":\"" + eventId + "\"}").getBytes(StandardCharsets.UTF_8),
        "application/json",
        Map.of("traceparent", "00-" + eventId),
        "test");
  }

  private InboxWork<ClientSession> book() {
    return (session, m) -> ledger.insertOne(session, new Document("eventId", m.eventId()));
  }

  @Test
  void aRedeliveredMessageRunsTheHandlerOnce() {
    assertThat(inbox.handle(message("e1"), "billing", book())).isEqualTo(HandleOutcome.HANDLED);
    assertThat(inbox.handle(message("e1"), "billing", book()))
        .isEqualTo(HandleOutcome.SKIPPED_REDELIVERY);
    assertThat(inbox.handle(message("e1"), "audit", book())).isEqualTo(HandleOutcome.HANDLED);

    assertThat(ledger.countDocuments(eq("eventId", "e1"))).isEqualTo(2);
  }

  @Test
  void failedWorkRollsTheRecordBackSoTheNextDeliveryRunsIt() {
    assertThatThrownBy(
            () ->
                inbox.handle(
                    message("e1"),
                    "billing",
                    (session, m) -> {
                      ledger.insertOne(session, new Document("eventId", m.eventId()));
                      throw new IllegalStateException("downstream refused");
                    }))
        .isInstanceOf(IllegalStateException.class);

    assertThat(ledger.countDocuments()).as("rolled back with the record").isZero();
    assertThat(inbox.handle(message("e1"), "billing", book())).isEqualTo(HandleOutcome.HANDLED);
    assertThat(ledger.countDocuments()).isEqualTo(1);
  }

  @Test
  void forwardingAddsOnlyNewRoutesInTheConsumersTransaction() {
    List<PublishResult> forwarded = new ArrayList<>();
    inbox.handle(
        message("e1"),
        "forwarder",
        (session, m) -> forwarded.add(inbox.forward(session, m, List.of("billing", "shipping"))));
    inbox.handle(
        message("e1"),
        "forwarder",
        (session, m) -> forwarded.add(inbox.forward(session, m, List.of("billing"))));

    assertThat(forwarded)
        .containsExactly(new PublishResult("e1", true, List.of("billing", "shipping")));
    assertThat(store.listDeliveries(DeliveryQuery.all()).items())
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("billing", "shipping");
  }

  @Test
  void concurrentConsumersOfTheSameMessagesRunEachOnce() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(4);
    try {
      CountDownLatch start = new CountDownLatch(1);
      List<Future<?>> consumers = new ArrayList<>();
      for (int c = 0; c < 4; c++) {
        consumers.add(
            pool.submit(
                () -> {
                  start.await();
                  for (int i = 0; i < 10; i++) {
                    inbox.handle(message("dup-" + i), "billing", book());
                  }
                  return null;
                }));
      }
      start.countDown();
      for (Future<?> consumer : consumers) {
        consumer.get(120, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
    }

    assertThat(ledger.countDocuments()).isEqualTo(10);
    for (int i = 0; i < 10; i++) {
      assertThat(ledger.countDocuments(eq("eventId", "dup-" + i))).isEqualTo(1);
    }
  }
}
