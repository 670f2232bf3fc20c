package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.kafka.KafkaInboxConsumer;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.net.http.HttpResponse;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Outbox → connector → Kafka → inbox consumer, with duplicates forced: the connector keeps
 * acknowledged deliveries for a minute before deleting them ({@code completion.flush.interval.ms}),
 * and its worker is killed (SIGKILL) in that window, after Kafka acknowledged every record and the
 * consumers handled it. The new worker's tasks take the lanes over and send every undeleted
 * delivery again; the consumers' inboxes skip them all, so each (event, handler) ran once.
 *
 * <p>Producer and consumer are two services on one PostgreSQL: the producer's outbox under the
 * prefix {@code shop_}, the consumer's inbox and its own work under {@code billing_svc_}.
 */
class InboxEndToEndIT {
  private static final String CONNECTOR = "relaybus-inbox-e2e";
  private static final int EVENTS = 100;
  private static final Duration TIMEOUT = Duration.ofSeconds(120);

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(
              () ->
                  SeparateJvmKafka.start(
                      "separate-jvm-inbox", Map.of("scheduled.rebalance.max.delay.ms", "0")),
              SeparateJvmKafka::startWorker);

  private static PostgresServer postgres;
  private static SeparateJvmKafka kafka;

  @Test
  void connectorRestartBetweenKafkaAckAndDeleteRunsEachHandlerOncePerEvent() throws Exception {
    try (PostgresOutboxStore producer = postgres.store("shop_");
        PostgresOutboxStore consumerDb = postgres.store("billing_svc_")) {
      WorkLedger ledger = new WorkLedger(consumerDb);
      Inbox<Connection> inbox = Inbox.postgres(consumerDb);
      List<KafkaInboxConsumer<Connection>> consumers =
          List.of(
              consumer(inbox, "billing", "billing.charge", ledger),
              consumer(inbox, "shipping", "shipping.reserve", ledger));
      List<Thread> threads = new ArrayList<>();
      for (KafkaInboxConsumer<Connection> c : consumers) {
        Thread thread = new Thread(c, "e2e-inbox-" + threads.size());
        thread.start();
        threads.add(thread);
      }
      try {
        deploy(Map.of("completion.flush.interval.ms", "60000", "completion.flush.size", "10000"));
        publish(producer);

        await().atMost(TIMEOUT).until(() -> handled(consumers) == 2 * EVENTS);
        // Kafka acknowledged every record (the consumers read them all), none is deleted yet.
        assertThat(producer.statistics().totalPending())
            .as("acknowledged, not yet deleted")
            .isEqualTo(2 * EVENTS);

        kafka.killWorker();
        kafka.startWorker();
        kafka.awaitTasksRunning(CONNECTOR, 2);

        // The new tasks send every undeleted delivery again; each copy is skipped.
        await().atMost(TIMEOUT).until(() -> skipped(consumers) == 2 * EVENTS);
        deploy(Map.of("completion.flush.interval.ms", "500"));
        await().atMost(TIMEOUT).until(() -> producer.statistics().totalPending() == 0);

        assertThat(handled(consumers)).isEqualTo(2 * EVENTS);
        assertThat(ledger.invocations()).isEqualTo(2 * EVENTS);
        Map<String, Integer> committed = ledger.committed();
        assertThat(committed).hasSize(2 * EVENTS);
        assertThat(committed.values()).as("work per (event, handler)").containsOnly(1);
        assertThat(producer.statistics().totalDead()).isZero();
        assertThat(ledger.recordedContentTypes())
            .as("content type the inbox recorded, from the connector's header")
            .containsExactly("application/json");
      } finally {
        consumers.forEach(KafkaInboxConsumer::close);
        for (Thread thread : threads) {
          thread.join(30_000);
        }
      }
    }
  }

  private static long handled(List<KafkaInboxConsumer<Connection>> consumers) {
    return consumers.stream().mapToLong(c -> c.counts().handled()).sum();
  }

  private static long skipped(List<KafkaInboxConsumer<Connection>> consumers) {
    return consumers.stream().mapToLong(c -> c.counts().skipped()).sum();
  }

  private static KafkaInboxConsumer<Connection> consumer(
      Inbox<Connection> inbox, String topic, String handler, WorkLedger ledger) {
    Map<String, Object> config = new HashMap<>();
    config.put("bootstrap.servers", kafka.bootstrapServers());
    config.put("group.id", "e2e-" + handler);
    // The connector creates the topics after the consumer subscribed: notice them soon.
    config.put("metadata.max.age.ms", "500");
    return KafkaInboxConsumer.builder(inbox)
        .consumerConfig(config)
        .topics(List.of(topic))
        .handler(handler)
        .work(ledger.work(handler))
        .pollTimeout(Duration.ofMillis(200))
        .build();
  }

  /** config/postgres-outbox-source.json as README step 4, with the database and the overrides. */
  private static void deploy(Map<String, String> overrides) throws Exception {
    Map<String, String> config = DeployedConfig.json("postgres-outbox-source.json");
    config.put("connection.url", postgres.jdbcUrl());
    config.put("connection.user", PostgresServer.USER);
    config.put("connection.password", "");
    config.put("outbox.table.prefix", "shop_");
    config.put("tasks.max", "2");
    config.putAll(overrides);
    HttpResponse<String> response =
        kafka.put("connectors/" + CONNECTOR + "/config", DeployedConfig.toJson(config));
    assertThat(response.statusCode()).as(response.body()).isIn(200, 201);
    kafka.awaitTasksRunning(CONNECTOR, 2);
  }

  /** EVENTS events to billing and shipping, keyed by order, ten per application transaction. */
  private static void publish(PostgresOutboxStore producer) throws SQLException {
    for (int tx = 0; tx < EVENTS / 10; tx++) {
      List<OutboxEvent> events = new ArrayList<>();
      for (int i = tx * 10; i < tx * 10 + 10; i++) {
        events.add(
            OutboxEvent.builder("order.placed")
                .id("order-" + i + "-placed")
                .key("order-" + (i % 17))
                .json("{\"order\":" + i + "}")
                .handlers("billing", "shipping")
                .build());
      }
      try (Connection connection = postgres.dataSource().getConnection()) {
        connection.setAutoCommit(false);
        producer.publishAll(connection, events);
        connection.commit();
      }
    }
  }

  /** The consumer service's own work: one row per (event, handler), in the inbox's transaction. */
  private static final class WorkLedger {
    private final PostgresOutboxStore db;
    private final Map<String, AtomicInteger> invocations = new ConcurrentHashMap<>();

    WorkLedger(PostgresOutboxStore db) throws SQLException {
      this.db = db;
      try (Connection c = db.dataSource().getConnection();
          Statement s = c.createStatement()) {
        s.execute("CREATE TABLE billing_svc_work (event_id text NOT NULL, handler text NOT NULL)");
      }
    }

    InboxWork<Connection> work(String handler) {
      return (tx, message) -> {
        invocations.computeIfAbsent(handler, h -> new AtomicInteger()).incrementAndGet();
        try (PreparedStatement insert =
            tx.prepareStatement("INSERT INTO billing_svc_work (event_id, handler) VALUES (?, ?)")) {
          insert.setString(1, message.eventId());
          insert.setString(2, handler);
          insert.executeUpdate();
        }
      };
    }

    int invocations() {
      return invocations.values().stream().mapToInt(AtomicInteger::get).sum();
    }

    /** The content types of the events the inbox recorded in the consumer's database. */
    List<String> recordedContentTypes() throws SQLException {
      List<String> types = new ArrayList<>();
      try (Connection c = db.dataSource().getConnection();
          Statement s = c.createStatement();
          ResultSet rs =
              s.executeQuery(
                  "SELECT DISTINCT content_type FROM " + db.tableName("events") + " ORDER BY 1")) {
        while (rs.next()) {
          types.add(rs.getString(1));
        }
      }
      return types;
    }

    Map<String, Integer> committed() throws SQLException {
      Map<String, Integer> counts = new HashMap<>();
      try (Connection c = db.dataSource().getConnection();
          Statement s = c.createStatement();
          ResultSet rs =
              s.executeQuery(
                  "SELECT event_id || '/' || handler, count(*) FROM billing_svc_work GROUP BY 1")) {
        while (rs.next()) {
          counts.put(rs.getString(1), rs.getInt(2));
        }
      }
      return counts;
    }
  }
}
