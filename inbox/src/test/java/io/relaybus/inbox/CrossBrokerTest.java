package io.relaybus.inbox;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.rabbitmq.client.Channel;
import io.relaybus.inbox.kafka.KafkaInboxConsumer;
import io.relaybus.inbox.rabbitmq.RabbitInboxConsumer;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestKafka;
import io.relaybus.inbox.testing.TestRabbitMq;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.Connection;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * One event reaching a service through Kafka and through RabbitMQ: the event id in the same header
 * is the join, so the work runs once per handler, whichever broker brings it first.
 */
class CrossBrokerTest {
  private static final Duration TIMEOUT = Duration.ofSeconds(60);

  private PostgresOutboxStore store;
  private Inbox<Connection> inbox;
  private Ledger ledger;
  private com.rabbitmq.client.Connection rabbit;
  private Channel admin;
  private String name;
  private KafkaInboxConsumer<Connection> kafkaConsumer;
  private RabbitInboxConsumer<Connection> rabbitConsumer;
  private Thread kafkaThread;

  @BeforeEach
  void open() throws Exception {
    store = TestDatabase.freshStore();
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), "ledger_cross");
    rabbit = TestRabbitMq.connect("inbox-cross-broker");
    admin = rabbit.createChannel();
    name = "orders-cross-" + System.nanoTime();
    TestKafka.createTopic(name, 1);
    TestRabbitMq.declareWithDeadLetters(admin, name);
  }

  @AfterEach
  void close() throws Exception {
    if (kafkaConsumer != null) {
      kafkaConsumer.close();
      kafkaThread.join(30_000);
    }
    if (rabbitConsumer != null) {
      rabbitConsumer.close();
    }
    TestRabbitMq.deleteQueues(admin, name);
    TestRabbitMq.closeQuietly(rabbit);
    store.close();
  }

  private void consume(String kafkaHandler, String rabbitHandler) {
    kafkaConsumer =
        KafkaInboxConsumer.builder(inbox)
            .consumerConfig(TestKafka.consumerConfig("group-" + name))
            .topics(List.of(name))
            .handler(kafkaHandler)
            .work(ledger.work(kafkaHandler))
            .pollTimeout(Duration.ofMillis(200))
            .build();
    kafkaThread = new Thread(kafkaConsumer, "cross-kafka-inbox");
    kafkaThread.start();
    rabbitConsumer =
        RabbitInboxConsumer.builder(inbox)
            .connection(rabbit)
            .queue(name)
            .handler(rabbitHandler)
            .work(ledger.work(rabbitHandler))
            .build();
    rabbitConsumer.start();
  }

  private long received() {
    InboxCounts k = kafkaConsumer.counts();
    InboxCounts r = rabbitConsumer.counts();
    return k.handled() + k.skipped() + r.handled() + r.skipped();
  }

  @Test
  void oneEventThroughBothBrokersToOneHandlerRunsOnce() throws Exception {
    consume("billing.charge", "billing.charge");

    TestKafka.send(name, "order-1", "e-1", "{\"n\":1}");
    TestRabbitMq.publish(admin, name, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> received() == 2);
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(kafkaConsumer.counts().handled() + rabbitConsumer.counts().handled()).isEqualTo(1);
    assertThat(kafkaConsumer.counts().skipped() + rabbitConsumer.counts().skipped()).isEqualTo(1);
  }

  @Test
  void oneEventThroughBothBrokersToTwoHandlersRunsOnceEach() throws Exception {
    consume("billing.charge", "shipping.reserve");

    TestKafka.send(name, "order-1", "e-1", "{\"n\":1}");
    TestRabbitMq.publish(admin, name, "e-1", "{\"n\":1}");
    TestKafka.send(name, "order-1", "e-1", "{\"n\":1}"); // and a redelivery through each
    TestRabbitMq.publish(admin, name, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> received() == 4);
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-1", "shipping.reserve");
    assertThat(ledger.committed())
        .containsOnly(Map.entry("e-1/billing.charge", 1), Map.entry("e-1/shipping.reserve", 1));
    assertThat(kafkaConsumer.counts().skipped()).isEqualTo(1);
    assertThat(rabbitConsumer.counts().skipped()).isEqualTo(1);
  }
}
