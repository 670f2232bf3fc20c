package io.relaybus.inbox.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.inbox.testing.TestKafka;
import java.sql.Connection;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * A malformed record whose event id header holds a NUL byte passes the outbox's rules ({@code
 * InboxMessage} accepts it), but PostgreSQL cannot store U+0000 in a text column, so {@code
 * recordHandled} fails with SQLState 22021 on every attempt. The loop counts that as a failure, not
 * poison: after {@code maxAttempts} {@code run()} throws with the offset on the record, and every
 * restart stops there again. One malformed record holds the partition up for good, although the
 * default policy (DEAD_LETTER) exists for exactly such records.
 */
class KafkaRecordWithNulInEventIdStopsTheConsumerTest extends KafkaInboxFixture {

  KafkaRecordWithNulInEventIdStopsTheConsumerTest() {
    super("ledger_kafka_nul", "nul-", "inbox-nul-", 1);
  }

  @Test
  void recordWhoseEventIdNoStoreCanHoldIsDeadLetteredAndTheRecordsBehindItAreHandled() {
    TestKafka.createTopic(topic + ".DLT", 1);
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(topic, "order-1", "e-\u0000-2", "{\"n\":2}");
    TestKafka.send(topic, "order-1", "e-3", "{\"n\":3}");
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").maxAttempts(3).build();

    CompletableFuture<Void> done = start(consumer, "inbox-nul");
    await().atMost(TIMEOUT).until(() -> done.isDone() || consumer.counts().handled() == 2);

    assertThat(done).as("the consumer loop").isNotCompletedExceptionally();
    assertThat(consumer.counts().handled()).isEqualTo(2);
    ledger.assertRanOnce("e-3", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestKafka.read(topic + ".DLT").size() == 1);
  }
}
