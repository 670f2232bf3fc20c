package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The connector in a real Connect worker over a real broker and PostgreSQL, deployed through the
 * REST API from config/postgres-outbox-source.json. One cluster and one database for the class;
 * each test has its own connector, table prefix and topics.
 */
class OutboxConnectorIT {
  private static final Duration DELIVERY_TIMEOUT = Duration.ofSeconds(60);
  private static final ObjectMapper JSON = new ObjectMapper();

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(() -> ConnectCluster.start("relaybus-it", 1, Map.of()));

  private static PostgresServer postgres;
  private static ConnectCluster connect;

  private static List<String> topics(String suffix) {
    return Publishers.HANDLERS.stream().map(h -> h + suffix).toList();
  }

  private static Map<String, String> overrides(String... pairs) {
    Map<String, String> map = new LinkedHashMap<>();
    for (int i = 0; i < pairs.length; i += 2) {
      map.put(pairs[i], pairs[i + 1]);
    }
    return map;
  }

  @Test
  void deliversEveryEventHandlerPairOnceInKeyOrderThenDeletesTheRows() throws Exception {
    String prefix = "deliver_";
    List<String> topics = topics("-deliver");
    connect.createTopics(3, topics.toArray(String[]::new));
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
      connect.deploy(
          "deliver",
          DeployedConfig.connector(
              postgres,
              prefix,
              overrides("tasks.max", "2", "topic.template", "${handler}-deliver")));
      connect.awaitRunning("deliver", 2);

      List<OutboxEvent> events =
          new Publishers(store, postgres.dataSource(), "d", 40).run(4, 25, 4, Duration.ZERO);
      Set<String> expected = Publishers.pairs(events);

      collector.awaitAll(expected, DELIVERY_TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(events).hasSize(400);
      assertThat(received).hasSize(expected.size());
      assertThat(collector.pairs()).isEqualTo(expected);
      RecordCollector.assertPerKeyOrder(received);
      await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
      assertThat(store.statistics().totalDead()).isZero();
    } finally {
      connect.delete("deliver");
    }
  }

  @Test
  void restartsOfConnectorAndTaskLoseNothingAndKeepKeyOrder() throws Exception {
    String prefix = "restart_";
    List<String> topics = topics("-restart");
    connect.createTopics(3, topics.toArray(String[]::new));
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
      connect.deploy(
          "restart",
          DeployedConfig.connector(
              postgres,
              prefix,
              overrides(
                  "tasks.max", "2", "topic.template", "${handler}-restart", "batch.size", "50")));
      connect.awaitRunning("restart", 2);

      CompletableFuture<List<OutboxEvent>> publishing =
          CompletableFuture.supplyAsync(
              () -> {
                try {
                  return new Publishers(store, postgres.dataSource(), "r", 30)
                      .run(3, 40, 3, Duration.ofMillis(100));
                } catch (Exception e) {
                  throw new IllegalStateException(e);
                }
              });
      await().atMost(DELIVERY_TIMEOUT).until(() -> collector.drain(Duration.ZERO).size() > 100);
      connect.restartConnectorAndTasks("restart");
      connect.awaitRunning("restart", 2);
      await().atMost(DELIVERY_TIMEOUT).until(() -> collector.drain(Duration.ZERO).size() > 300);
      connect.restartTask("restart", 0);
      connect.awaitRunning("restart", 2);
      List<OutboxEvent> events = publishing.get();
      Set<String> expected = Publishers.pairs(events);

      collector.awaitAll(expected, DELIVERY_TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(collector.pairs()).isEqualTo(expected);
      RecordCollector.assertPerKeyOrder(received);
      // A graceful restart waits for outstanding records before stopping the task, so at most the
      // records in flight at a restart (4 batches of 50 per task, two tasks, two restarts) repeat.
      assertThat(RecordCollector.duplicates(received)).hasSizeLessThanOrEqualTo(2 * 2 * 4 * 50);
      await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
    } finally {
      connect.delete("restart");
    }
  }

  @Test
  void badPayloadIsDeadLetteredWithItsReasonAndTheRecordsAfterItArrive() throws Exception {
    String prefix = "dead_";
    List<String> topics = List.of("billing-dead");
    connect.createTopics(1, "billing-dead");
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
      connect.deploy(
          "dead",
          DeployedConfig.connector(
              postgres,
              prefix,
              overrides(
                  "tasks.max", "1",
                  "topic.template", "${handler}-dead",
                  "value.format", "json",
                  "value.converter", "org.apache.kafka.connect.json.JsonConverter",
                  "value.converter.schemas.enable", "false")));
      connect.awaitRunning("dead", 1);

      store.publish(
          OutboxEvent.builder("t")
              .id("ok-1")
              .key("k")
              .json("{\"n\":1}")
              .handlers("billing")
              .build());
      store.publish(
          OutboxEvent.builder("t").id("bad").key("k").json("{\"n\":").handlers("billing").build());
      store.publish(
          OutboxEvent.builder("t")
              .id("ok-2")
              .key("k")
              .json("{\"n\":2}")
              .handlers("billing")
              .build());

      collector.awaitAll(Set.of("ok-1/billing", "ok-2/billing"), DELIVERY_TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(received).extracting(Received::eventId).containsExactly("ok-1", "ok-2");
      await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
      List<DeliveryView> dead =
          store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items();
      assertThat(dead).extracting(DeliveryView::eventId).containsExactly("bad");
      assertThat(dead.get(0).lastError())
          .startsWith("payload is not valid JSON (value.format=json)");
    } finally {
      connect.delete("dead");
    }
  }

  @Test
  void validateThroughRestNamesTheKeyOfEveryBadValue() throws Exception {
    Map<String, String> config =
        DeployedConfig.connector(
            postgres,
            "validate_",
            overrides(
                "value.format", "xml",
                "outbox.table.prefix", "Bad-Prefix",
                "lease.duration.ms", "-1",
                "completion.flush.interval.ms", "-5"));

    Map<String, List<String>> errors = validate(config);

    assertThat(errors)
        .containsOnlyKeys(
            "value.format",
            "outbox.table.prefix",
            "lease.duration.ms",
            "completion.flush.interval.ms");
    errors.forEach(
        (key, messages) -> assertThat(messages).allSatisfy(m -> assertThat(m).contains(key)));
    assertThat(errors.get("value.format"))
        .containsExactly(
            "Invalid value xml for configuration value.format: must be one of bytes, string, json");
  }

  @Test
  void validateThroughRestReportsAnUnreachableDatabaseAgainstTheUrl() throws Exception {
    Map<String, String> config =
        DeployedConfig.connector(
            postgres,
            "validate_",
            overrides(
                "connection.url", "jdbc:postgresql://127.0.0.1:1/nowhere",
                "connection.timeout.ms", "1000"));

    Map<String, List<String>> errors = validate(config);

    assertThat(errors).containsOnlyKeys("connection.url");
    assertThat(errors.get("connection.url").get(0))
        .startsWith(
            "connection.url: cannot connect to the database at jdbc:postgresql://127.0.0.1:1/nowhere");
  }

  @Test
  void rejectedDeploymentNamesTheKeyInTheRestError() {
    Map<String, String> config =
        DeployedConfig.connector(postgres, "rejected_", overrides("key.format", "avro"));

    HttpResponse<String> response =
        connect.put("connectors/rejected/config", DeployedConfig.toJson(config));

    assertThat(response.statusCode()).isEqualTo(400);
    assertThat(response.body())
        .contains("Invalid value avro for configuration key.format: must be one of string, bytes");
  }

  /** PUT /connector-plugins/OutboxSourceConnector/config/validate; errors per key. */
  private static Map<String, List<String>> validate(Map<String, String> config) throws Exception {
    config.put("name", "validate");
    HttpResponse<String> response =
        connect.put(
            "connector-plugins/OutboxSourceConnector/config/validate",
            DeployedConfig.toJson(config));
    assertThat(response.statusCode()).as(response.body()).isEqualTo(200);
    JsonNode body = JSON.readTree(response.body());
    Map<String, List<String>> errors = new HashMap<>();
    for (JsonNode entry : body.get("configs")) {
      JsonNode value = entry.get("value");
      List<String> messages = new ArrayList<>();
      value.get("errors").forEach(e -> messages.add(e.asText()));
      if (!messages.isEmpty()) {
        errors.put(value.get("name").asText(), messages);
      }
    }
    assertThat(body.get("error_count").asInt())
        .isEqualTo(errors.values().stream().mapToInt(List::size).sum());
    return errors;
  }
}
