package io.relaybus.inbox.rabbitmq;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestRabbitMq;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.time.Duration;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * docs/inbox.md: the RabbitMQ consumer "rejects a message to the dead-letter exchange after
 * maxFailures failures of any kind". A work that throws an {@link Error} (here a
 * StackOverflowError, as a parser of a deeply nested payload throws) escapes {@code
 * handleDelivery}, which catches only RuntimeException; the client's default exception handler then
 * closes the consumer's channel. The message goes back to the queue, nothing reopens the channel,
 * and the consumer never receives another message: every message behind it waits forever, and the
 * application is not told.
 */
class RabbitConsumerStopsForGoodWhenWorkThrowsAnErrorTest {
  private Connection rabbit;
  private Channel admin;
  private PostgresOutboxStore store;
  private Ledger ledger;
  private String queue;
  private RabbitInboxConsumer<java.sql.Connection> consumer;

  @BeforeEach
  void open() throws Exception {
    rabbit = TestRabbitMq.connect("inbox-error-test");
    admin = rabbit.createChannel();
    store = TestDatabase.freshStore();
    ledger = new Ledger(store.dataSource(), "ledger_rabbit_error");
    queue = "relaybus-inbox-error-test-" + ProcessHandle.current().pid();
    TestRabbitMq.declareWithDeadLetters(admin, queue);
  }

  @AfterEach
  void close() throws Exception {
    if (consumer != null) {
      consumer.close();
    }
    TestRabbitMq.deleteQueues(admin, queue);
    TestRabbitMq.closeQuietly(rabbit);
    store.close();
  }

  @Test
  void aMessageWhoseWorkThrowsAnErrorIsDeadLetteredAndTheMessagesBehindItAreHandled()
      throws Exception {
    InboxWork<java.sql.Connection> ledgerWork = ledger.work("billing.charge");
    consumer =
        RabbitInboxConsumer.builder(Inbox.postgres(store))
            .connection(rabbit)
            .queue(queue)
            .handler("billing.charge")
            .work(
                (tx, message) -> {
                  if (message.eventId().equals("e-deep")) {
                    throw new StackOverflowError("deeply nested payload");
                  }
                  ledgerWork.run(tx, message);
                })
            .maxFailures(2)
            .requeueDelay(Duration.ZERO)
            .build();
    consumer.start();

    TestRabbitMq.publish(admin, queue, "e-deep", "[[[[[[[[[[");
    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await()
        .atMost(Duration.ofSeconds(20))
        .untilAsserted(
            () ->
                assertThat(consumer.counts().handled())
                    .as(
                        "messages handled behind the one whose work threw an Error (queue still"
                            + " holds %d, dead-letter queue %d, failures counted %d)",
                        TestRabbitMq.messageCount(admin, queue),
                        TestRabbitMq.messageCount(admin, queue + ".dead"),
                        consumer.counts().failures())
                    .isEqualTo(1));
    ledger.assertRanOnce("e-1", "billing.charge");
    await()
        .atMost(Duration.ofSeconds(20))
        .until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
  }
}
