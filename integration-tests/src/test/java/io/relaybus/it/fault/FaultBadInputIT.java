package io.relaybus.it.fault;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.quickstart.Ports;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Bad input, each case with the clear error it must give and nothing lost: rows the connector
 * cannot turn into records are dead-lettered with their reason while the rest of their key arrives
 * in order; configurations that cannot work are refused by validation with the key to change. A
 * real broker and Connect worker in this JVM ({@link io.relaybus.it.harness.ConnectCluster}), a
 * real PostgreSQL.
 */
class FaultBadInputIT {
  private static final Duration TIMEOUT = Duration.ofSeconds(90);
  private static final ObjectMapper JSON = new ObjectMapper();

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(() -> ConnectCluster.start("relaybus-bad-input", 1, Map.of()));

  private static PostgresServer postgres;
  private static ConnectCluster connect;

  @Test
  void rowsThatCannotBecomeRecordsAreDeadLetteredWithTheirReasonAndTheKeyMovesOn()
      throws Exception {
    String prefix = "badrows_";
    connect.createTopics(1, "billing-badrows");
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector =
            new RecordCollector(connect.consumer(), List.of("billing-badrows"))) {
      connect.deploy(
          "badrows",
          DeployedConfig.connector(
              postgres,
              prefix,
              Map.of(
                  "tasks.max", "1",
                  // Only billing has a topic: any other handler has none.
                  "topic.template", "",
                  "topic.map", "billing:billing-badrows",
                  "value.format", "json",
                  "value.converter", "org.apache.kafka.connect.json.JsonConverter",
                  "value.converter.schemas.enable", "false",
                  "max.record.bytes", "2048")));
      connect.awaitRunning("badrows", 1);

      publish(store, "ok-1", "{\"n\":1}", "billing");
      publish(store, "not-json", "{\"n\":", "billing");
      publish(store, "ok-2", "{\"n\":2}", "billing");
      publish(store, "oversize", "{\"s\":\"" + "x".repeat(4000) + "\"}", "billing");
      publish(store, "ok-3", "{\"n\":3}", "billing");
      publish(store, "no-topic", "{\"n\":0}", "nowhere");
      publish(store, "ok-4", "{\"n\":4}", "billing");

      collector.awaitAll(
          Set.of("ok-1/billing", "ok-2/billing", "ok-3/billing", "ok-4/billing"), TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(received)
          .extracting(Received::eventId)
          .containsExactly("ok-1", "ok-2", "ok-3", "ok-4");
      assertThat(received).extracting(Received::sequence).isSorted();
      await().atMost(TIMEOUT).until(() -> store.statistics().totalPending() == 0);
      Map<String, String> reasons = deadLetters(store);
      assertThat(reasons).containsOnlyKeys("not-json", "oversize", "no-topic");
      assertThat(reasons.get("not-json"))
          .startsWith("payload is not valid JSON (value.format=json)");
      assertThat(reasons.get("oversize")).contains("is larger than max.record.bytes=2048");
      assertThat(reasons.get("no-topic"))
          .isEqualTo(
              "no topic for handler 'nowhere': it is not in topic.map and topic.template is empty");
      // Nothing lost: every published pair arrived or is a dead letter with its reason.
      assertThat(Verifier.rows(postgres.dataSource(), prefix)).containsExactly(3, 3);
    } finally {
      deleteQuietly("badrows");
    }
  }

  @Test
  void invalidHeadersAreRefusedAtPublishAndNothingIsWritten() {
    try (PostgresOutboxStore store = postgres.store("badheaders_")) {
      assertThatThrownBy(
              () ->
                  store.publish(
                      OutboxEvent.builder("t")
                          .id("blank-header")
                          .key("k")
                          .json("{}")
                          .header(" ", "v")
                          .handlers("billing")
                          .build()))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("header name");
      assertThatThrownBy(
              () ->
                  store.publish(
                      OutboxEvent.builder("t")
                          .id("null-header")
                          .key("k")
                          .json("{}")
                          .header("traceparent", null)
                          .handlers("billing")
                          .build()))
          .isInstanceOf(IllegalArgumentException.class)
          .hasMessageContaining("header 'traceparent' must have a value");
      assertThat(store.listDeliveries(DeliveryQuery.all()).items()).isEmpty();
    }
  }

  /**
   * An application publishing with plain SQL (README "Publishing from another language") can store
   * headers that are not a JSON object of strings; the connector must quarantine such a row with
   * its reason and deliver the key's later events, not stop.
   */
  @Test
  void headersNotAnObjectOfStringsFromPlainSqlAreDeadLetteredAndTheKeyMovesOn() throws Exception {
    deliversAroundSqlPublishedHeaders("sqlhdr", "{\"retries\": 3}");
  }

  /**
   * The same with headers that are JSON but not an object at all. Regression: the claim threw after
   * recording the batch, Connect killed the task and the whole lane range stopped.
   */
  @Test
  void headersThatAreAJsonArrayAreDeadLetteredAndTheKeyMovesOn() throws Exception {
    deliversAroundSqlPublishedHeaders("sqlarr", "[1, 2]");
  }

  private static void deliversAroundSqlPublishedHeaders(String name, String headersJson)
      throws Exception {
    String prefix = name + "_";
    String topic = "billing-" + name;
    connect.createTopics(1, topic);
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), List.of(topic))) {
      connect.deploy(
          name,
          DeployedConfig.connector(
              postgres, prefix, Map.of("tasks.max", "1", "topic.template", "${handler}-" + name)));
      connect.awaitRunning(name, 1);

      publish(store, "before", "{}", "billing");
      publishWithSql(prefix, "bad-headers", headersJson);
      publish(store, "after", "{}", "billing");

      collector.awaitAll(Set.of("before/billing", "after/billing"), TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(received).extracting(Received::eventId).containsExactly("before", "after");
      await().atMost(TIMEOUT).until(() -> store.statistics().totalPending() == 0);
      Map<String, String> reasons = deadLetters(store);
      assertThat(reasons).containsOnlyKeys("bad-headers");
      assertThat(reasons.get("bad-headers"))
          .startsWith("unreadable event: headers must be a JSON object of string values");
    } finally {
      deleteQuietly(name);
    }
  }

  @Test
  void tablePrefixOrSchemaWithSqlInItIsRefusedAndTouchesNothing() throws Exception {
    try (PostgresOutboxStore store = postgres.store("victim_")) {
      publish(store, "kept", "{}", "billing");
      Map<String, String> config = DeployedConfig.connector(postgres, "victim_", Map.of());
      config.put("outbox.table.prefix", "victim_events; DROP TABLE victim_events; --");
      config.put("outbox.schema", "public\"; DROP SCHEMA public CASCADE; --");

      Map<String, List<String>> errors = validate(new LinkedHashMap<>(config));
      HttpResponse<String> deployed =
          connect.put("connectors/injection/config", DeployedConfig.toJson(config));

      assertThat(errors).containsOnlyKeys("outbox.table.prefix", "outbox.schema");
      assertThat(errors.get("outbox.table.prefix").get(0))
          .startsWith(
              "Invalid value victim_events; DROP TABLE victim_events; -- for configuration outbox.table.prefix")
          .contains("[a-z_][a-z0-9_]*");
      assertThat(errors.get("outbox.schema").get(0)).contains("outbox.schema");
      assertThat(deployed.statusCode()).isEqualTo(400);
      assertThat(store.listDeliveries(DeliveryQuery.all()).items())
          .extracting(DeliveryView::eventId)
          .containsExactly("kept");
    }
  }

  @Test
  void databaseDownWhenTheConnectorStartsIsRefusedAgainstTheUrl() throws Exception {
    int closedPort = Ports.free();
    Map<String, String> config =
        DeployedConfig.connector(
            postgres,
            "down_",
            Map.of(
                "connection.url",
                "jdbc:postgresql://127.0.0.1:" + closedPort + "/postgres",
                "connection.timeout.ms",
                "1000"));

    Map<String, List<String>> errors = validate(new LinkedHashMap<>(config));
    HttpResponse<String> deployed =
        connect.put("connectors/down/config", DeployedConfig.toJson(config));

    assertThat(errors).containsOnlyKeys("connection.url");
    assertThat(errors.get("connection.url").get(0))
        .startsWith(
            "connection.url: cannot connect to the database at jdbc:postgresql://127.0.0.1:"
                + closedPort
                + "/postgres: the host refused the connection, nothing listens on that port");
    assertThat(deployed.statusCode()).isEqualTo(400);
    assertThat(deployed.body()).contains("connection.url: cannot connect to the database");
  }

  @Test
  void wrongCredentialsAreRefusedAgainstUserAndPassword() throws Exception {
    Map<String, String> config =
        DeployedConfig.connector(
            postgres, "creds_", Map.of("connection.user", "nobody", "connection.password", "x"));

    Map<String, List<String>> errors = validate(config);

    assertThat(errors).containsOnlyKeys("connection.user", "connection.password");
    assertThat(errors.get("connection.user").get(0))
        .startsWith("connection.user: the database at " + postgres.jdbcUrl())
        .contains("refused the login of user 'nobody' (SQLSTATE 28");
    assertThat(errors.get("connection.password").get(0)).startsWith("connection.password: ");
  }

  /** Producer overrides that could reorder a key's batches are refused through Connect's REST. */
  @Test
  void producerOverridesThatCanReorderAKeyAreRefused() throws Exception {
    Map<String, String> config =
        DeployedConfig.connector(
            postgres,
            "overrides_",
            Map.of(
                "producer.override.max.in.flight.requests.per.connection", "5",
                "producer.override.delivery.timeout.ms", "120000"));

    Map<String, List<String>> errors = validate(config);

    assertThat(errors)
        .containsOnlyKeys(
            "producer.override.max.in.flight.requests.per.connection",
            "producer.override.delivery.timeout.ms");
    assertThat(errors.get("producer.override.max.in.flight.requests.per.connection"))
        .singleElement()
        .asString()
        .startsWith(
            "Invalid value 5 for configuration"
                + " producer.override.max.in.flight.requests.per.connection: must be 1 unless");
    assertThat(errors.get("producer.override.delivery.timeout.ms"))
        .singleElement()
        .asString()
        .startsWith(
            "Invalid value 120000 for configuration producer.override.delivery.timeout.ms: must be"
                + " 2147483647");
  }

  @Test
  void schemaNeverSetUpIsRefusedUnlessTheConnectorMaySetItUp() throws Exception {
    Map<String, String> config =
        DeployedConfig.connector(postgres, "never_", Map.of("outbox.setup", "false"));

    Map<String, List<String>> errors = validate(config);

    assertThat(errors).containsOnlyKeys("outbox.schema", "outbox.table.prefix");
    assertThat(errors.get("outbox.table.prefix").get(0))
        .startsWith(
            "outbox.table.prefix: no usable relaybus outbox in schema 'public' with table prefix"
                + " 'never_'")
        .contains("is not set up")
        .endsWith("or set outbox.setup=true");
    config.put("outbox.setup", "true");
    assertThat(validate(config)).isEmpty();
  }

  @Test
  void lanesTableWithMissingRowsIsRefusedThenRestoredBySetupAndNothingIsLost() throws Exception {
    String prefix = "tamper_";
    connect.createTopics(1, "billing-tamper");
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector =
            new RecordCollector(connect.consumer(), List.of("billing-tamper"))) {
      // Events on lanes about to vanish: published before the tampering.
      List<String> ids = new ArrayList<>();
      for (int i = 0; ids.size() < 20; i++) {
        String key = "key-" + i;
        int lane = Lanes.laneOf(key, "unused");
        if (lane >= 10 && lane < 20) {
          String id = "tamper-" + i;
          store.publish(
              OutboxEvent.builder("t").id(id).key(key).json("{}").handlers("billing").build());
          ids.add(id);
        }
      }
      try (Connection c = postgres.dataSource().getConnection();
          Statement s = c.createStatement()) {
        assertThat(s.executeUpdate("DELETE FROM tamper_lanes WHERE lane BETWEEN 10 AND 19"))
            .isEqualTo(10);
      }
      Map<String, String> config =
          DeployedConfig.connector(
              postgres,
              prefix,
              Map.of(
                  "tasks.max",
                  "1",
                  "outbox.setup",
                  "false",
                  "topic.template",
                  "${handler}-tamper"));

      Map<String, List<String>> errors = validate(new LinkedHashMap<>(config));
      assertThat(errors).containsOnlyKeys("outbox.schema", "outbox.table.prefix");
      assertThat(errors.get("outbox.table.prefix").get(0))
          .contains("has 246 of the 256 lanes (lanes 0-255 must all exist): run setup()");

      config.put("outbox.setup", "true");
      connect.deploy("tamper", config);
      connect.awaitRunning("tamper", 1);
      Set<String> expected = new java.util.HashSet<>();
      ids.forEach(id -> expected.add(id + "/billing"));
      collector.awaitAll(expected, TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(received).hasSize(20);
      assertThat(lanes(prefix)).isEqualTo(256);
      await().atMost(TIMEOUT).until(() -> Verifier.rows(postgres.dataSource(), prefix)[0] == 0);
    } finally {
      deleteQuietly("tamper");
    }
  }

  // ---------------------------------------------------------------------------------------------

  private static void publish(PostgresOutboxStore store, String id, String json, String handler) {
    store.publish(OutboxEvent.builder("t").id(id).key("k").json(json).handlers(handler).build());
  }

  /** README "Publishing from another language": the documented statement, verbatim. */
  private static void publishWithSql(String prefix, String id, String headersJson)
      throws Exception {
    String sql =
        """
        WITH ev AS (
          INSERT INTO relaybus_events (id, type, key, payload, content_type, headers, handlers)
          VALUES (?, ?, ?, ?, ?, ?::json, ?::text[])
          ON CONFLICT (id) DO NOTHING
          RETURNING id, key
        ), seq AS (
          INSERT INTO relaybus_key_sequences AS k (key, sequence)
          SELECT key, 1 FROM ev WHERE key IS NOT NULL
          ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + 1, updated_at = now()
          RETURNING sequence
        )
        INSERT INTO relaybus_deliveries (event_id, handler, lane, key, sequence)
        SELECT ev.id, h.handler, relaybus_lane(coalesce(ev.key, ev.id)), ev.key,
          (SELECT sequence FROM seq)
        FROM ev CROSS JOIN unnest(?::text[]) AS h(handler)
        """
            .replace("relaybus_", prefix);
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s = c.prepareStatement(sql)) {
      s.setString(1, id);
      s.setString(2, "t");
      s.setString(3, "k");
      s.setBytes(4, "{}".getBytes(StandardCharsets.UTF_8));
      s.setString(5, "application/json");
      s.setString(6, headersJson);
      s.setString(7, "{billing}");
      s.setString(8, "{billing}");
      // a version-1 style insert: the schema's trigger turns the delivery row into a log row
      // (storage v2), so the statement reports no delivery row stored
      s.executeUpdate();
    }
    // In the log, or already moved to deliveries by the running connector (dead-lettered when
    // unreadable): one statement, one snapshot, and the move is one statement too.
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT (SELECT count(*) FROM "
                    + prefix
                    + "log WHERE event_id = ?) + (SELECT count(*) FROM "
                    + prefix
                    + "deliveries WHERE event_id = ?)")) {
      s.setString(1, id);
      s.setString(2, id);
      try (java.sql.ResultSet rs = s.executeQuery()) {
        rs.next();
        assertThat(rs.getLong(1)).as("log and delivery rows of " + id).isEqualTo(1);
      }
    }
  }

  /** Removes a test's connector; one never deployed (the test failed earlier) is no error. */
  private static void deleteQuietly(String connector) {
    try {
      connect.delete(connector);
    } catch (RuntimeException e) {
      System.out.println("[bad-input] deleting " + connector + ": " + e.getMessage());
    }
  }

  private static Map<String, String> deadLetters(PostgresOutboxStore store) {
    Map<String, String> reasons = new LinkedHashMap<>();
    for (DeliveryView d :
        store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items()) {
      reasons.put(d.eventId(), d.lastError());
    }
    return reasons;
  }

  private static int lanes(String prefix) throws Exception {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT count(*) FROM " + prefix + "lanes")) {
      rs.next();
      return rs.getInt(1);
    }
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
    return errors;
  }
}
