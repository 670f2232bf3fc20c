package io.relaybus.inbox.kafka;

import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestKafka;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInfo;

/**
 * What the Kafka inbox tests share: per test a fresh PostgreSQL store and its inbox, a ledger, a
 * new topic and a group named after the test; consumer loops built for them, run on threads and
 * closed after the test.
 */
abstract class KafkaInboxFixture {
  static final Duration TIMEOUT = Duration.ofSeconds(60);
  private static final AtomicInteger TOPICS = new AtomicInteger();

  private final String ledgerTable;
  private final String topicPrefix;
  private final String groupPrefix;
  private final int partitions;

  PostgresOutboxStore store;
  Inbox<Connection> inbox;
  Ledger ledger;
  String topic;
  String group;
  private final ConcurrentLinkedQueue<KafkaInboxConsumer<Connection>> running =
      new ConcurrentLinkedQueue<>();

  KafkaInboxFixture(String ledgerTable, String topicPrefix, String groupPrefix, int partitions) {
    this.ledgerTable = ledgerTable;
    this.topicPrefix = topicPrefix;
    this.groupPrefix = groupPrefix;
    this.partitions = partitions;
  }

  @BeforeEach
  void open(TestInfo test) {
    store = TestDatabase.freshStore();
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), ledgerTable);
    topic = topicPrefix + TOPICS.incrementAndGet();
    group = groupPrefix + test.getTestMethod().orElseThrow().getName();
    TestKafka.createTopic(topic, partitions);
  }

  @AfterEach
  void close() {
    running.forEach(KafkaInboxConsumer::close);
    store.close();
  }

  KafkaInboxConsumer.Builder<Connection> builder(String handler) {
    return KafkaInboxConsumer.builder(inbox)
        .consumerConfig(TestKafka.consumerConfig(group))
        .topics(List.of(topic))
        .handler(handler)
        .work(ledger.work(handler))
        .retryBackoff(Duration.ofMillis(50))
        .pollTimeout(Duration.ofMillis(200));
  }

  /** Runs the loop on a named thread; the future ends with run()'s exception, if any. */
  CompletableFuture<Void> start(KafkaInboxConsumer<Connection> consumer, String name) {
    running.add(consumer);
    CompletableFuture<Void> done = new CompletableFuture<>();
    new Thread(
            () -> {
              try {
                consumer.run();
                done.complete(null);
              } catch (Throwable e) {
                done.completeExceptionally(e);
              }
            },
            name)
        .start();
    return done;
  }
}
