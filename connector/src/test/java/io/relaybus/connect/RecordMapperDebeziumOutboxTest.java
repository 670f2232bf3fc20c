package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.header.Header;
import org.junit.jupiter.api.Test;

/** record.format=debezium_outbox: the mapping; OutboxDebeziumCompatibilityIT compares it live. */
class RecordMapperDebeziumOutboxTest {
  private static final Instant EVENT_TIME = Instant.parse("2025-03-01T10:15:30.123456Z");
  private static final String EVENT_ID = "0b6f8e4e-5d5c-4c8e-9b7a-2f1c3d4e5f60";
  private static final DeliveryToken TOKEN = new DeliveryToken(41, 7, 3, 1, EVENT_ID);
  private static final String RUN_ID = "01a23237-af89-7d79-82c7-212862e71938";

  private static ClaimedDelivery delivery(String key, Map<String, String> headers, byte[] payload) {
    return new ClaimedDelivery(
        TOKEN,
        EVENT_ID,
        "order",
        key,
        key == null ? null : 42L,
        2,
        "order.placed",
        payload,
        "application/json",
        headers,
        EVENT_TIME);
  }

  private static RecordMapper mapper(DebeziumOutboxRecords debezium) {
    return new RecordMapper(
        new TopicRouter("outbox.event.${handler}", Map.of()),
        KeyFormat.BYTES, // ignored in this format
        ValueFormat.BYTES, // ignored in this format
        new RecordHeaders("relaybus-"),
        1_000_000,
        ConvertedSize.unknown(),
        debezium);
  }

  private static List<String> headers(DeliveryRecord record) {
    List<String> headers = new ArrayList<>();
    for (Header h : record.headers()) {
      headers.add(h.key() + "=" + h.value() + " (" + h.schema().name() + ")");
    }
    return headers;
  }

  @Test
  void writesTheRecordOfDebeziumsEventRouterDefaults() throws Exception {
    String payload = "{\"total\": 5, \"customer\": \"c-1\"}";
    DeliveryRecord record =
        mapper(new DebeziumOutboxRecords("shop", "0", "postgresql", RUN_ID, true))
            .toRecord(
                delivery("order-7", Map.of(), payload.getBytes(StandardCharsets.UTF_8)),
                LaneOffsets.partition(7),
                () -> Map.of("emitted", "41"));

    assertThat(record.topic()).isEqualTo("outbox.event.order");
    assertThat(record.kafkaPartition()).isNull();
    assertThat(record.keySchema()).isEqualTo(Schema.STRING_SCHEMA);
    assertThat(record.key()).isEqualTo("order-7");
    assertThat(record.valueSchema().type()).isEqualTo(Schema.Type.STRING);
    assertThat(record.valueSchema().name()).isEqualTo("io.debezium.data.Json");
    assertThat(record.valueSchema().version()).isEqualTo(1);
    assertThat(record.valueSchema().isOptional()).isTrue();
    assertThat(record.value()).isEqualTo(payload);
    assertThat(record.timestamp()).isEqualTo(EVENT_TIME.toEpochMilli());
    assertThat(record.token()).isEqualTo(TOKEN);
    assertThat(headers(record))
        .containsExactly(
            "__debezium.context.connectorLogicalName=shop (null)",
            "__debezium.context.taskId=0 (null)",
            "__debezium.context.connectorName=postgresql (null)",
            "__debezium.context.runId=" + RUN_ID + " (null)",
            "id=" + EVENT_ID + " (io.debezium.data.Uuid)");
  }

  @Test
  void eventHeadersFollowTheIdAndNoRelaybusHeaderIsWritten() throws Exception {
    Map<String, String> own = new LinkedHashMap<>();
    own.put("traceparent", "00-abc-def-01");
    own.put("tenant", "t-9");
    DeliveryRecord record =
        mapper(new DebeziumOutboxRecords("shop", "3", "postgresql", RUN_ID, false))
            .toRecord(
                delivery("order-7", own, "{}".getBytes(StandardCharsets.UTF_8)),
                LaneOffsets.partition(7),
                () -> Map.of("emitted", "41"));

    assertThat(headers(record))
        .containsExactly(
            "id=" + EVENT_ID + " (io.debezium.data.Uuid)",
            "traceparent=00-abc-def-01 (null)",
            "tenant=t-9 (null)");
  }

  @Test
  void anEventWithoutKeyGetsANullKeyOfOptionalSchema() throws Exception {
    DeliveryRecord record =
        mapper(new DebeziumOutboxRecords("shop", "0", "postgresql", RUN_ID, true))
            .toRecord(
                delivery(null, Map.of(), "{}".getBytes(StandardCharsets.UTF_8)),
                LaneOffsets.partition(7),
                () -> Map.of("emitted", "41"));

    assertThat(record.key()).isNull();
    assertThat(record.keySchema()).isEqualTo(Schema.OPTIONAL_STRING_SCHEMA);
  }

  @Test
  void aPayloadThatIsNotUtf8IsUndeliverableWithItsReason() {
    assertThatThrownBy(
            () ->
                mapper(new DebeziumOutboxRecords("shop", "0", "postgresql", RUN_ID, true))
                    .toRecord(
                        delivery("k", Map.of(), new byte[] {(byte) 0xC3, (byte) 0x28}),
                        LaneOffsets.partition(7),
                        () -> Map.of("emitted", "41")))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageContaining("record.format=debezium_outbox");
  }

  @Test
  void configSelectsTheFormatAndFillsTheContextHeaders() throws Exception {
    Map<String, String> props = new HashMap<>();
    props.put("name", "orders-outbox");
    props.put("connection.url", "jdbc:postgresql://localhost/app");
    props.put("record.format", "debezium_outbox");
    props.put("topic.template", "outbox.event.${handler}");
    props.put("task.lanes", "0-63");
    props.put("task.index", "2");
    RecordMapper mapper = RecordMapper.from(new OutboxSourceTaskConfig(props));
    DeliveryRecord record =
        mapper.toRecord(
            delivery("order-7", Map.of(), "{}".getBytes(StandardCharsets.UTF_8)),
            LaneOffsets.partition(7),
            () -> Map.of("emitted", "41"));
    assertThat(headers(record))
        .containsExactly(
            "__debezium.context.connectorLogicalName=orders-outbox (null)",
            "__debezium.context.taskId=2 (null)",
            "__debezium.context.connectorName=postgresql (null)",
            "__debezium.context.runId="
                + record.headers().lastWithName("__debezium.context.runId").value()
                + " (null)",
            "id=" + EVENT_ID + " (io.debezium.data.Uuid)");
    UUID runId =
        UUID.fromString((String) record.headers().lastWithName("__debezium.context.runId").value());
    assertThat(runId.version()).isEqualTo(7);
    assertThat(runId.variant()).isEqualTo(2);

    props.put("debezium.logical.name", "dbserver1");
    props.put("debezium.context.headers", "true");
    assertThat(
            headers(
                    RecordMapper.from(new OutboxSourceTaskConfig(props))
                        .toRecord(
                            delivery("order-7", Map.of(), "{}".getBytes(StandardCharsets.UTF_8)),
                            LaneOffsets.partition(7),
                            () -> Map.of("emitted", "41")))
                .get(0))
        .isEqualTo("__debezium.context.connectorLogicalName=dbserver1 (null)");

    props.put("record.format", "relaybus");
    assertThat(
            RecordMapper.from(new OutboxSourceTaskConfig(props))
                .toRecord(
                    delivery("order-7", Map.of(), "{}".getBytes(StandardCharsets.UTF_8)),
                    LaneOffsets.partition(7),
                    () -> Map.of("emitted", "41"))
                .headers()
                .lastWithName("relaybus-event-id"))
        .isNotNull();
  }

  @Test
  void theRunIdIsAVersion7UuidOfTheStartTime() {
    UUID id =
        DebeziumOutboxRecords.timeOrderedUuid(
            Instant.parse("2026-12-01T15:00:00Z").toEpochMilli(), new java.util.Random(1));
    assertThat(id.version()).isEqualTo(7);
    assertThat(id.variant()).isEqualTo(2);
    assertThat(id.getMostSignificantBits() >>> 16)
        .isEqualTo(Instant.parse("2026-12-01T15:00:00Z").toEpochMilli());
  }

  @Test
  void anUnknownRecordFormatNamesTheAllowedValues() {
    Map<String, String> props = new HashMap<>();
    props.put("connection.url", "jdbc:postgresql://localhost/app");
    props.put("record.format", "debezium");
    assertThatThrownBy(() -> new OutboxSourceConfig(props))
        .hasMessageContaining("record.format")
        .hasMessageContaining("relaybus, debezium_outbox");
  }

  /**
   * The size check of record.format=debezium_outbox counts the relaybus headers this format does
   * not write, and not Debezium's context headers it does write (their names alone are 133
   * characters, the logical name as long as debezium.logical.name or the connector's name). With a
   * logical name as long as a Debezium topic.prefix may be, the largest record max.record.bytes
   * lets through is above max.request.size by Kafka's own measure, so the producer refuses it and
   * the task fails, where the record should be dead-lettered.
   */
  @Test
  void largestRecordTheMapperLetsThroughFitsTheProducersMaxRequestSize() throws Exception {
    int maxRequestSize = 1_048_576;
    RecordMapper mapper =
        new RecordMapper(
            new TopicRouter("outbox.event.${handler}", Map.of()),
            KeyFormat.BYTES,
            ValueFormat.BYTES,
            new RecordHeaders("relaybus-"),
            maxRequestSize,
            ConvertedSize.from(
                Map.of(
                    "key.converter", "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter", "org.apache.kafka.connect.storage.StringConverter")),
            new DebeziumOutboxRecords("s".repeat(249), "0", "postgresql", RUN_ID, true));

    int low = 0;
    int high = maxRequestSize;
    while (low < high) {
      int size = (low + high + 1) / 2;
      try {
        mapper.toRecord(
            delivery("order-7", Map.of(), "a".repeat(size).getBytes(StandardCharsets.UTF_8)),
            LaneOffsets.partition(7),
            Map::of);
        low = size;
      } catch (UndeliverableException e) {
        high = size - 1;
      }
    }
    DeliveryRecord largest =
        mapper.toRecord(
            delivery("order-7", Map.of(), "a".repeat(low).getBytes(StandardCharsets.UTF_8)),
            LaneOffsets.partition(7),
            Map::of);

    assertThat(RecordMapperTest.kafkaUpperBound(largest))
        .as(
            "Kafka's size bound of the largest record max.record.bytes=%d lets through (payload %d"
                + " bytes); above max.request.size=%d the producer refuses it and the task fails",
            maxRequestSize, low, maxRequestSize)
        .isLessThanOrEqualTo(maxRequestSize);
  }
}
