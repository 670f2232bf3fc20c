package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DebeziumOutboxSetup;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * relaybus's {@code record.format=debezium_outbox} against Debezium 3.6.1's PostgreSQL connector
 * with its outbox {@code EventRouter} at its defaults, on the same events: each application
 * transaction writes every event to both outboxes (Debezium's table as its documentation gives it,
 * and relaybus's publish with handler = aggregatetype, key = aggregateid, id = the row's id). Both
 * connectors run in one Connect worker with the same converters and write to the same topics,
 * Debezium first, then relaybus; the records are compared field by field as Kafka stores them:
 * topic, partition, key bytes, value bytes, header names and value bytes in order, and the order of
 * each key's events.
 *
 * <p>Differs by design, not compared exactly: the {@code __debezium.context.runId} header (each
 * side's id of its task's run, a version 7 UUID on both), the record timestamp (Debezium's default
 * is the time its connector processed the change, relaybus's the event time; both are checked to
 * lie between the commit and the read), and the value bytes of a payload not written in
 * PostgreSQL's jsonb text form (jsonb rewrites it: one such event per run, whose JSON is checked
 * equal and bytes unequal).
 */
class DebeziumOutboxCompatibilityIT {
  private static final Duration TIMEOUT = Duration.ofSeconds(120);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String MARKER_TOPIC = "outbox.event.relaybus-cutover";
  private static final List<String> TOPICS =
      List.of("outbox.event.Order", "outbox.event.Customer", MARKER_TOPIC);
  private static final String LOGICAL_NAME = "shop";
  private static final String RUN_ID = "__debezium.context.runId";

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::startForBenchmark) // wal_level=logical
          .and(
              () ->
                  ConnectCluster.start(
                      "relaybus-debezium",
                      1,
                      Map.of(
                          "plugin.path",
                          Path.of(System.getProperty("relaybus.debezium.plugin.path"))
                              .toAbsolutePath()
                              .toString())));

  private static PostgresServer postgres;
  private static ConnectCluster connect;
  private static KafkaConsumer<byte[], byte[]> consumer;

  @BeforeAll
  static void start() {
    connect.createTopics(3, TOPICS.toArray(String[]::new));
    consumer =
        new KafkaConsumer<>(
            Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG,
                connect.bootstrapServers(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG,
                "earliest",
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
                "false"),
            new ByteArrayDeserializer(),
            new ByteArrayDeserializer());
    List<TopicPartition> partitions = new ArrayList<>();
    for (String topic : TOPICS) {
      for (int p = 0; p < 3; p++) {
        partitions.add(new TopicPartition(topic, p));
      }
    }
    consumer.assign(partitions);
    consumer.seekToBeginning(partitions);
  }

  @AfterAll
  static void stop() {
    if (consumer != null) {
      consumer.close();
    }
  }

  /** One event as the application writes it to both outboxes. */
  record Event(
      String id,
      String aggregateType,
      String aggregateId,
      String type,
      String payload,
      boolean jsonbText) {}

  /** A record as Kafka stores it. */
  record Stored(
      String topic,
      int partition,
      byte[] key,
      byte[] value,
      List<Map.Entry<String, byte[]>> headers,
      long timestamp) {
    /** The text of the last header {@code name}, unwrapped from JsonConverter's envelope. */
    String header(String name) {
      String value = null;
      for (Map.Entry<String, byte[]> h : headers) {
        if (h.getKey().equals(name)) {
          value = new String(h.getValue(), StandardCharsets.UTF_8);
        }
      }
      if (value != null && value.startsWith("{")) {
        try {
          return JSON.readTree(value).get("payload").asText();
        } catch (java.io.IOException e) {
          throw new AssertionError("header " + name + ": " + value, e);
        }
      }
      return value;
    }

    String describe() {
      return "%s/%d key=%s value=%s headers=%s"
          .formatted(
              topic,
              partition,
              text(key),
              text(value),
              headers.stream()
                  .map(h -> h.getKey() + "=" + text(h.getValue()))
                  .collect(Collectors.joining(", ", "[", "]")));
    }

    private static String text(byte[] bytes) {
      return bytes == null ? "null" : new String(bytes, StandardCharsets.UTF_8);
    }
  }

  @Test
  void stringKeysAndSchemalessJsonValuesAreEqualByteForByte() throws Exception {
    compare(
        "plain",
        Map.of(
            "key.converter", "org.apache.kafka.connect.storage.StringConverter",
            "value.converter", "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable", "false",
            "header.converter", "org.apache.kafka.connect.storage.SimpleHeaderConverter"),
        events("plain"));
  }

  @Test
  void schemasOfKeyValueAndHeadersAreEqualToo() throws Exception {
    compare(
        "schemas",
        Map.of(
            "key.converter", "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable", "true",
            "value.converter", "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable", "true",
            "header.converter", "org.apache.kafka.connect.json.JsonConverter",
            "header.converter.schemas.enable", "true"),
        events("schemas"));
  }

  /** Keys interleaved over transactions, several events per key, two aggregate types. */
  private static List<Event> events(String run) throws SQLException {
    List<Event> events = new ArrayList<>();
    for (int seq = 1; seq <= 4; seq++) {
      for (int order = 1; order <= 3; order++) {
        events.add(
            new Event(
                UUID.randomUUID().toString(),
                "Order",
                run + "-order-" + order,
                seq == 1 ? "OrderCreated" : "OrderLineAdded",
                jsonb(
                    "{\"orderId\":\"%s-order-%d\",\"seq\":%d,\"lines\":[{\"sku\":\"A-1\",\"qty\":%d}],\"note\":\"Grüße\"}"
                        .formatted(run, order, seq, seq)),
                true));
      }
      events.add(
          new Event(
              UUID.randomUUID().toString(),
              "Customer",
              run + "-customer-1",
              "CustomerUpdated",
              jsonb("{\"customerId\":\"%s-customer-1\",\"seq\":%d}".formatted(run, seq)),
              true));
    }
    // As an application may have written it: jsonb sorts the keys and respaces it for Debezium.
    String asWritten = "{\"seq\":5,\"customerId\":\"%s-customer-1\"}".formatted(run);
    assertThat(jsonb(asWritten)).isNotEqualTo(asWritten);
    events.add(
        new Event(
            UUID.randomUUID().toString(),
            "Customer",
            run + "-customer-1",
            "CustomerUpdated",
            asWritten,
            false));
    return events;
  }

  /** {@code json} as PostgreSQL writes it back from a jsonb column, so both sides send one text. */
  private static String jsonb(String json) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s = c.prepareStatement("SELECT ?::jsonb::text")) {
      s.setString(1, json);
      try (ResultSet rs = s.executeQuery()) {
        rs.next();
        return rs.getString(1);
      }
    }
  }

  private void compare(String run, Map<String, String> converters, List<Event> events)
      throws Exception {
    String table = run + "_dbz_outbox";
    DebeziumOutboxSetup.createTable(postgres.dataSource(), table);
    String debeziumConnector = run + "-debezium";
    connect.deploy(debeziumConnector, debeziumConfig(run, table, converters));
    connect.awaitRunning(debeziumConnector, 1);
    awaitSlot(run); // events committed before the slot exists are not streamed

    long committed = System.currentTimeMillis();
    try (PostgresOutboxStore store = postgres.store(run + "_")) {
      write(store, table, events, 5);
      List<Stored> debezium = read(events.size());

      String relaybusConnector = run + "-relaybus";
      connect.deploy(relaybusConnector, relaybusConfig(run, converters));
      connect.awaitRunning(relaybusConnector, 1);
      List<Stored> relaybus = read(events.size());
      long readAt = System.currentTimeMillis();

      assertSameRecords(events, debezium, relaybus);
      for (Stored record : debezium) {
        assertThat(record.timestamp()).isBetween(committed, readAt);
      }
      for (Stored record : relaybus) {
        assertThat(record.timestamp()).isBetween(committed - 1, readAt);
      }
      connect.delete(relaybusConnector);
    } finally {
      connect.delete(debeziumConnector);
    }
  }

  private static Map<String, String> relaybusConfig(String run, Map<String, String> converters) {
    Map<String, String> overrides = new LinkedHashMap<>(converters);
    overrides.put("tasks.max", "1");
    overrides.put("record.format", "debezium_outbox");
    overrides.put("topic.template", "outbox.event.${handler}");
    overrides.put("debezium.logical.name", LOGICAL_NAME);
    return DeployedConfig.connector(postgres, run + "_", overrides);
  }

  /**
   * docs/migrating-from-debezium.md's cut-over, step by step: relaybus created STOPPED; the old
   * application writes Debezium's table, the new one relaybus; a marker row, its record in Kafka
   * and Debezium's committed offset past it; relaybus resumed. Every event arrives exactly once,
   * each key's events in publish order across the switch, and relaybus sends nothing while stopped.
   */
  @Test
  void theDocumentedCutOverLosesAndDuplicatesNothingAndKeepsKeyOrder() throws Exception {
    String run = "cut";
    Map<String, String> converters =
        Map.of(
            "key.converter", "org.apache.kafka.connect.storage.StringConverter",
            "value.converter", "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable", "false");
    String table = run + "_dbz_outbox";
    DebeziumOutboxSetup.createTable(postgres.dataSource(), table);
    connect.deploy("cut-debezium", debeziumConfig(run, table, converters));
    connect.awaitRunning("cut-debezium", 1);
    awaitSlot(run);
    try (PostgresOutboxStore store = postgres.store(run + "_")) {
      // 1. relaybus deployed stopped (POST /connectors with initial_state STOPPED)
      Map<String, Object> create = new LinkedHashMap<>();
      create.put("name", "cut-relaybus");
      create.put("initial_state", "STOPPED");
      create.put("config", relaybusConfig(run, converters));
      assertThat(post("connectors", JSON.writeValueAsString(create))).isEqualTo(201);

      List<Event> events = events(run);
      List<Event> before = events.subList(0, events.size() / 2);
      List<Event> after = events.subList(events.size() / 2, events.size());
      write(null, table, before, 3); // the old version
      write(store, null, after, 3); // 2. the new version, after a stop-then-start deployment

      // 4. the marker row; its record in Kafka, and Connect's committed offset of Debezium at or
      // past the WAL insert position before it (GET /connectors/{name}/offsets: only acknowledged
      // records): a record there was inserted after this read. Not the write position: on a
      // server that commits durably nothing lags behind it, the marker's record starts exactly
      // there, and with asynchronous commits records of before the marker may lie past it.
      long lsnBefore =
          Long.parseLong(text("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text"));
      write(
          null,
          table,
          List.of(
              new Event(
                  UUID.randomUUID().toString(),
                  "relaybus-cutover",
                  "cutover",
                  "CutoverMarker",
                  "{}",
                  true)),
          1);
      List<Stored> debezium = read(before.size() + 1); // nothing from the stopped relaybus
      assertThat(debezium.stream().filter(r -> r.topic().equals(MARKER_TOPIC))).hasSize(1);
      await()
          .atMost(TIMEOUT)
          .untilAsserted(
              () -> {
                String offsets = get("connectors/cut-debezium/offsets");
                assertThat(JSON.readTree(offsets).at("/offsets/0/offset/lsn").asLong())
                    .as(offsets)
                    .isGreaterThanOrEqualTo(lsnBefore);
              });
      assertThat(connect.taskState("cut-relaybus", 0)).isNull(); // stopped: no task

      // 5. relaybus resumed: the events that waited since the switch
      assertThat(connect.put("connectors/cut-relaybus/resume", "").statusCode()).isEqualTo(202);
      List<Stored> relaybus = read(after.size());

      List<Stored> all =
          new ArrayList<>(debezium.stream().filter(r -> !r.topic().equals(MARKER_TOPIC)).toList());
      all.addAll(relaybus);
      assertThat(byId(all).keySet())
          .containsExactlyInAnyOrderElementsOf(events.stream().map(Event::id).toList());
      assertThat(orderPerKey(all)).isEqualTo(publishOrder(events));
      connect.delete("cut-relaybus");
    } finally {
      connect.delete("cut-debezium");
    }
  }

  private static int post(String path, String json) throws Exception {
    java.net.http.HttpResponse<String> response =
        java.net.http.HttpClient.newHttpClient()
            .send(
                java.net.http.HttpRequest.newBuilder(java.net.URI.create(connect.restUrl() + path))
                    .header("Content-Type", "application/json")
                    .POST(java.net.http.HttpRequest.BodyPublishers.ofString(json))
                    .build(),
                java.net.http.HttpResponse.BodyHandlers.ofString());
    assertThat(response.statusCode()).as(response.body()).isLessThan(300);
    return response.statusCode();
  }

  private static String get(String path) throws Exception {
    java.net.http.HttpResponse<String> response =
        java.net.http.HttpClient.newHttpClient()
            .send(
                java.net.http.HttpRequest.newBuilder(java.net.URI.create(connect.restUrl() + path))
                    .GET()
                    .build(),
                java.net.http.HttpResponse.BodyHandlers.ofString());
    assertThat(response.statusCode()).as(response.body()).isEqualTo(200);
    return response.body();
  }

  private static String text(String sql) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      return rs.next() ? rs.getString(1) : null;
    }
  }

  /**
   * Field by field, record by record (matched by the {@code id} header): both sides hold each event
   * exactly once, and each (topic, key) lists its events in publish order.
   */
  private static void assertSameRecords(
      List<Event> events, List<Stored> debezium, List<Stored> relaybus) {
    Map<String, Stored> debeziumById = byId(debezium);
    Map<String, Stored> relaybusById = byId(relaybus);
    assertThat(debeziumById.keySet())
        .containsExactlyInAnyOrderElementsOf(events.stream().map(Event::id).toList());
    assertThat(relaybusById.keySet()).isEqualTo(debeziumById.keySet());
    for (Event event : events) {
      Stored d = debeziumById.get(event.id());
      Stored r = relaybusById.get(event.id());
      String what =
          "event " + event.id() + "\nDebezium: " + d.describe() + "\nrelaybus: " + r.describe();
      assertThat(r.topic())
          .as(what)
          .isEqualTo(d.topic())
          .isEqualTo("outbox.event." + event.aggregateType());
      assertThat(r.partition()).as(what).isEqualTo(d.partition());
      assertThat(r.key()).as(what).isEqualTo(d.key());
      if (event.jsonbText()) {
        assertThat(r.value()).as(what).isEqualTo(d.value());
      } else {
        assertThat(r.value()).as(what).isNotEqualTo(d.value());
        assertThat(payloadJson(r.value())).as(what).isEqualTo(payloadJson(d.value()));
      }
      assertThat(r.headers().stream().map(Map.Entry::getKey).toList())
          .as(what)
          .isEqualTo(d.headers().stream().map(Map.Entry::getKey).toList())
          .containsExactly(
              "__debezium.context.connectorLogicalName",
              "__debezium.context.taskId",
              "__debezium.context.connectorName",
              "__debezium.context.runId",
              "id");
      for (int i = 0; i < d.headers().size(); i++) {
        if (d.headers().get(i).getKey().equals(RUN_ID)) {
          continue; // each side's own run: compared below
        }
        assertThat(r.headers().get(i).getValue())
            .as(what + "\nheader " + d.headers().get(i).getKey())
            .isEqualTo(d.headers().get(i).getValue());
      }
    }
    // The run id differs by design: one per task start, a UUID on both sides.
    for (List<Stored> side : List.of(debezium, relaybus)) {
      assertThat(side.stream().map(record -> record.header(RUN_ID)).distinct().toList())
          .singleElement()
          .satisfies(id -> assertThat(UUID.fromString(id).version()).isEqualTo(7));
    }
    assertThat(relaybus.get(0).header(RUN_ID)).isNotEqualTo(debezium.get(0).header(RUN_ID));
    assertThat(orderPerKey(relaybus))
        .isEqualTo(orderPerKey(debezium))
        .isEqualTo(publishOrder(events));
  }

  /** The payload JSON inside a value JsonConverter wrote (a string, or a schema envelope). */
  private static JsonNode payloadJson(byte[] value) {
    try {
      JsonNode written = JSON.readTree(value);
      JsonNode text = written.isObject() ? written.get("payload") : written;
      return JSON.readTree(text.asText());
    } catch (java.io.IOException e) {
      throw new AssertionError(new String(value, StandardCharsets.UTF_8), e);
    }
  }

  private static Map<String, Stored> byId(List<Stored> records) {
    Map<String, Stored> byId = new HashMap<>();
    for (Stored record : records) {
      assertThat(byId.put(record.header("id"), record))
          .as("duplicate " + record.describe())
          .isNull();
    }
    return byId;
  }

  /** Event ids per (topic, partition, key bytes), in the order the partition holds them. */
  private static Map<String, List<String>> orderPerKey(List<Stored> records) {
    Map<String, List<String>> order = new LinkedHashMap<>();
    for (Stored record : records) {
      String topic = record.topic().substring("outbox.event.".length());
      order
          .computeIfAbsent(topic + "/" + keyOf(record), k -> new ArrayList<>())
          .add(record.header("id"));
    }
    return new java.util.TreeMap<>(order);
  }

  /** The aggregate id in a key written by StringConverter or by JsonConverter with a schema. */
  private static String keyOf(Stored record) {
    String key = new String(record.key(), StandardCharsets.UTF_8);
    if (key.startsWith("{")) {
      try {
        return JSON.readTree(key).get("payload").asText();
      } catch (java.io.IOException e) {
        throw new AssertionError("key " + key, e);
      }
    }
    return key;
  }

  private static Map<String, List<String>> publishOrder(List<Event> events) {
    Map<String, List<String>> order = new java.util.TreeMap<>();
    for (Event event : events) {
      order
          .computeIfAbsent(
              event.aggregateType() + "/" + event.aggregateId(), k -> new ArrayList<>())
          .add(event.id());
    }
    return order;
  }

  /** Reads exactly {@code count} new records, then checks that nothing more arrives for a while. */
  private static List<Stored> read(int count) {
    List<Stored> read = new ArrayList<>();
    await()
        .atMost(TIMEOUT)
        .pollInterval(Duration.ZERO)
        .until(
            () -> {
              poll(read);
              return read.size() >= count;
            });
    long quietUntil = System.nanoTime() + Duration.ofSeconds(2).toNanos();
    while (System.nanoTime() < quietUntil) {
      poll(read);
    }
    assertThat(read).as("records read").hasSize(count);
    return read;
  }

  private static void poll(List<Stored> into) {
    for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
      List<Map.Entry<String, byte[]>> headers = new ArrayList<>();
      for (Header h : record.headers()) {
        headers.add(Map.entry(h.key(), h.value()));
      }
      into.add(
          new Stored(
              record.topic(),
              record.partition(),
              record.key(),
              record.value(),
              headers,
              record.timestamp()));
    }
  }

  /**
   * The application's transactions: each writes its events to Debezium's table (insert and delete,
   * as its users do: the WAL keeps the insert, the table stays empty) and publishes them to
   * relaybus; a null {@code store} or {@code table} leaves that outbox out.
   */
  private static void write(
      PostgresOutboxStore store, String table, List<Event> events, int perTransaction)
      throws SQLException {
    String insert =
        "INSERT INTO "
            + table
            + " (id, aggregatetype, aggregateid, type, payload) VALUES (?::uuid, ?, ?, ?, ?::jsonb)";
    String delete = "DELETE FROM " + table + " WHERE id = ?::uuid";
    try (Connection c = postgres.dataSource().getConnection()) {
      c.setAutoCommit(false);
      for (int from = 0; from < events.size(); from += perTransaction) {
        for (Event e : events.subList(from, Math.min(events.size(), from + perTransaction))) {
          if (table != null) {
            try (PreparedStatement ins = c.prepareStatement(insert);
                PreparedStatement del = c.prepareStatement(delete)) {
              ins.setString(1, e.id());
              ins.setString(2, e.aggregateType());
              ins.setString(3, e.aggregateId());
              ins.setString(4, e.type());
              ins.setString(5, e.payload());
              ins.executeUpdate();
              del.setString(1, e.id());
              del.executeUpdate();
            }
          }
          if (store != null) {
            store.publish(
                c,
                OutboxEvent.builder(e.type())
                    .id(e.id())
                    .key(e.aggregateId())
                    .payload(e.payload().getBytes(StandardCharsets.UTF_8), "application/json")
                    .handlers(e.aggregateType())
                    .build());
          }
        }
        c.commit();
      }
    }
  }

  /** Debezium's PostgreSQL connector with the EventRouter at its defaults. */
  private static Map<String, String> debeziumConfig(
      String slot, String table, Map<String, String> converters) {
    Map<String, String> config =
        DebeziumOutboxSetup.connectorConfig(
            postgres.port(), PostgresServer.USER, table, slot, LOGICAL_NAME);
    config.putAll(converters);
    config.put("poll.interval.ms", "100");
    return config;
  }

  private static void awaitSlot(String slot) {
    await()
        .atMost(TIMEOUT)
        .until(
            () -> {
              try (Connection c = postgres.dataSource().getConnection();
                  PreparedStatement s =
                      c.prepareStatement(
                          "SELECT count(*) FROM pg_replication_slots WHERE slot_name = ? AND active")) {
                s.setString(1, slot);
                try (ResultSet rs = s.executeQuery()) {
                  rs.next();
                  return rs.getLong(1) == 1;
                }
              }
            });
  }
}
