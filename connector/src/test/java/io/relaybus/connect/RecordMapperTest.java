package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.internal.AbstractRecords;
import org.apache.kafka.common.record.internal.CompressionType;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;
import org.apache.kafka.connect.storage.StringConverter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

class RecordMapperTest {
  private static final Instant EVENT_TIME = Instant.parse("2025-03-01T10:15:30.123456Z");
  private static final DeliveryToken TOKEN = new DeliveryToken(41, 7, 3, 1, "evt-1");

  private static ClaimedDelivery delivery(String key, Long sequence, byte[] payload) {
    Map<String, String> headers = new LinkedHashMap<>();
    headers.put("traceparent", "00-abc-def-01");
    return new ClaimedDelivery(
        TOKEN,
        "evt-1",
        "billing",
        key,
        sequence,
        2,
        "order.placed",
        payload,
        "application/json",
        headers,
        EVENT_TIME);
  }

  private static RecordMapper mapper(KeyFormat key, ValueFormat value) {
    return new RecordMapper(
        new TopicRouter("${handler}", Map.of()),
        key,
        value,
        new RecordHeaders("relaybus-"),
        1_000_000);
  }

  private static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void mapsTopicKeyValueTimestampOffsetAndHeaders() throws Exception {
    DeliveryRecord record =
        mapper(KeyFormat.STRING, ValueFormat.BYTES)
            .toRecord(
                delivery("order-1", 42L, utf8("{\"a\":1}")),
                LaneOffsets.partition(7),
                () -> Map.of("emitted", "41"));

    assertThat(record.token()).isEqualTo(TOKEN);
    assertThat(record.topic()).isEqualTo("billing");
    assertThat(record.kafkaPartition()).isNull();
    assertThat(record.keySchema()).isEqualTo(Schema.OPTIONAL_STRING_SCHEMA);
    assertThat(record.key()).isEqualTo("order-1");
    assertThat(record.valueSchema()).isEqualTo(Schema.BYTES_SCHEMA);
    assertThat((byte[]) record.value()).isEqualTo(utf8("{\"a\":1}"));
    assertThat(record.timestamp()).isEqualTo(EVENT_TIME.toEpochMilli());
    assertThat(record.sourcePartition()).isEqualTo(Map.of("lane", 7));
    assertThat(record.sourceOffset()).isEqualTo(Map.of("emitted", "41"));

    List<String> headers = new ArrayList<>();
    for (Header h : record.headers()) {
      headers.add(h.key() + "=" + h.value());
    }
    assertThat(headers)
        .containsExactly(
            "traceparent=00-abc-def-01",
            "relaybus-event-id=evt-1",
            "relaybus-event-type=order.placed",
            "relaybus-content-type=application/json",
            "relaybus-handler=billing",
            "relaybus-sequence=42",
            "relaybus-attempt=3");
  }

  @Test
  void eventWithoutKeyHasNullKeyAndNoSequenceHeader() throws Exception {
    DeliveryRecord record =
        mapper(KeyFormat.BYTES, ValueFormat.STRING)
            .toRecord(delivery(null, null, utf8("héllo")), LaneOffsets.partition(7), Map::of);

    assertThat(record.keySchema()).isEqualTo(Schema.OPTIONAL_BYTES_SCHEMA);
    assertThat(record.key()).isNull();
    assertThat(record.value()).isEqualTo("héllo");
    assertThat(record.headers().lastWithName("relaybus-sequence")).isNull();
  }

  @Test
  void bytesKeyIsTheUtf8OfTheOrderingKey() throws Exception {
    DeliveryRecord record =
        mapper(KeyFormat.BYTES, ValueFormat.BYTES)
            .toRecord(delivery("clé", 1L, new byte[] {1}), LaneOffsets.partition(7), Map::of);

    assertThat((byte[]) record.key()).isEqualTo(utf8("clé"));
  }

  @Test
  void jsonValueCarriesItsSchema() throws Exception {
    DeliveryRecord record =
        mapper(KeyFormat.STRING, ValueFormat.JSON)
            .toRecord(
                delivery("k", 1L, utf8("{\"total\":12.5,\"id\":\"o-1\"}")),
                LaneOffsets.partition(7),
                Map::of);

    Struct value = (Struct) record.value();
    assertThat(record.valueSchema()).isSameAs(value.schema());
    assertThat(value.getString("id")).isEqualTo("o-1");
    assertThat(value.getFloat64("total")).isEqualTo(12.5);
  }

  @Test
  void invalidUtf8IsUndeliverableAsString() {
    assertThatThrownBy(
            () ->
                mapper(KeyFormat.STRING, ValueFormat.STRING)
                    .toRecord(
                        delivery("k", 1L, new byte[] {(byte) 0xc3, 0x28}),
                        LaneOffsets.partition(7),
                        Map::of))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageStartingWith("payload is not valid UTF-8 (value.format=string)");
  }

  @Test
  void recordLargerThanMaxRecordBytesIsUndeliverableAndMarksNothingSent() {
    RecordMapper mapper =
        new RecordMapper(
            new TopicRouter("${handler}", Map.of()),
            KeyFormat.STRING,
            ValueFormat.BYTES,
            new RecordHeaders("relaybus-"),
            2_048);
    List<String> offsetsAskedFor = new ArrayList<>();

    assertThatThrownBy(
            () ->
                mapper.toRecord(
                    delivery("k", 1L, new byte[4_096]),
                    LaneOffsets.partition(7),
                    () -> {
                      offsetsAskedFor.add("asked");
                      return Map.of();
                    }))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageMatching("record of about \\d+ bytes is larger than max.record.bytes=2048 .*");
    assertThat(offsetsAskedFor).isEmpty();
  }

  /**
   * JsonConverter writes bytes as base64 in a schema envelope: a payload well below
   * max.record.bytes by the unconverted estimate is a third larger once converted, and the producer
   * would refuse it. Measured with the connector's converter, it is dead-lettered instead.
   */
  @Test
  void recordLargerOnceTheConnectorsJsonConverterWritesItIsUndeliverable() throws Exception {
    Map<String, String> config =
        Map.of(
            "key.converter", "org.apache.kafka.connect.storage.StringConverter",
            "value.converter", "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable", "true");
    RecordMapper mapper =
        new RecordMapper(
            new TopicRouter("${handler}", Map.of()),
            KeyFormat.STRING,
            ValueFormat.BYTES,
            new RecordHeaders("relaybus-"),
            4_096,
            ConvertedSize.from(config));
    List<String> offsetsAskedFor = new ArrayList<>();

    DeliveryRecord small =
        mapper.toRecord(delivery("k", 1L, new byte[2_000]), LaneOffsets.partition(7), Map::of);
    assertThat(small.value()).isEqualTo(new byte[2_000]);
    assertThatThrownBy(
            () ->
                mapper.toRecord(
                    delivery("k", 1L, new byte[3_500]),
                    LaneOffsets.partition(7),
                    () -> {
                      offsetsAskedFor.add("asked");
                      return Map.of();
                    }))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageMatching(
            "record of about \\d+ bytes as the connector's converters write it is larger than"
                + " max.record.bytes=4096 .*");
    assertThat(offsetsAskedFor).isEmpty();
    // Without the converter named in the connector config the same record passes the estimate.
    assertThat(
            mapper(KeyFormat.STRING, ValueFormat.BYTES)
                .toRecord(delivery("k", 1L, new byte[3_500]), LaneOffsets.partition(7), Map::of))
        .isNotNull();
  }

  /**
   * Connect resolves a converter's simple class name, and that name without "Converter", as an
   * alias ("JsonConverter" and "Json" are org.apache.kafka.connect.json.JsonConverter): named so,
   * the converter writes the same base64 and schema envelope, so the record must be measured as it
   * writes it, or a record the producer refuses (failing the task) passes max.record.bytes.
   */
  @ParameterizedTest
  @ValueSource(strings = {"JsonConverter", "Json"})
  void convertersNamedByConnectsAliasesAreMeasured(String alias) {
    Map<String, String> config = Map.of("value.converter", alias);
    assertThat(ConvertedSize.from(config).known()).as(alias).isTrue();
    RecordMapper mapper =
        new RecordMapper(
            new TopicRouter("${handler}", Map.of()),
            KeyFormat.STRING,
            ValueFormat.BYTES,
            new RecordHeaders("relaybus-"),
            4_096,
            ConvertedSize.from(config));

    assertThatThrownBy(
            () ->
                mapper.toRecord(
                    delivery("k", 1L, new byte[3_500]), LaneOffsets.partition(7), Map::of))
        .isInstanceOf(UndeliverableException.class)
        .hasMessageMatching(
            "record of about \\d+ bytes as the connector's converters write it is larger than"
                + " max.record.bytes=4096 .*");
  }

  @Test
  void convertersNotShippedByKafkaOrNotNamedAreNotMeasured() {
    assertThat(ConvertedSize.from(Map.of()).known()).isFalse();
    assertThat(
            ConvertedSize.from(Map.of("value.converter", "io.confluent.connect.avro.AvroConverter"))
                .known())
        .isFalse();
    assertThat(
            ConvertedSize.from(
                    Map.of("value.converter", "org.apache.kafka.connect.json.NoSuchConverter"))
                .known())
        .isFalse();
  }

  /**
   * validate() accepts max.record.bytes equal to producer.override.max.request.size, and the
   * documentation promises that a record the mapper lets through is not one the producer refuses.
   * The producer refuses a record whose size by Kafka's own upper bound
   * (AbstractRecords.estimateSizeInBytesUpperBound, what KafkaProducer#doSend checks against
   * max.request.size) is larger than max.request.size: each header there costs its name and value
   * plus two length varints, which the mapper's estimate does not count. So the largest record the
   * mapper lets through must still fit Kafka's bound, with the converters measured as the worker
   * writes them (StringConverter, and the worker's default SimpleHeaderConverter).
   */
  @Test
  void largestRecordTheMapperLetsThroughFitsTheProducersMaxRequestSizeWhateverItsHeaders()
      throws Exception {
    int maxRequestSize = 1_048_576; // the producer's default; validate() allows the same here
    Map<String, String> converters =
        Map.of(
            "key.converter", "org.apache.kafka.connect.storage.StringConverter",
            "value.converter", "org.apache.kafka.connect.storage.StringConverter");
    RecordMapper mapper =
        new RecordMapper(
            new TopicRouter("${handler}", Map.of()),
            KeyFormat.STRING,
            ValueFormat.STRING,
            new RecordHeaders("relaybus-"),
            maxRequestSize,
            ConvertedSize.from(converters));
    Map<String, String> eventHeaders = new LinkedHashMap<>();
    for (int i = 0; i < 100; i++) {
      eventHeaders.put("h" + i, "v");
    }

    // the largest payload the mapper accepts
    int low = 0;
    int high = maxRequestSize;
    DeliveryRecord largest = null;
    while (low < high) {
      int size = (low + high + 1) / 2;
      try {
        largest =
            mapper.toRecord(withHeaders(eventHeaders, size), LaneOffsets.partition(7), Map::of);
        low = size;
      } catch (UndeliverableException e) {
        high = size - 1;
      }
    }
    DeliveryRecord record =
        mapper.toRecord(withHeaders(eventHeaders, low), LaneOffsets.partition(7), Map::of);

    int kafkaSize = kafkaUpperBound(record);
    assertThat(kafkaSize)
        .as(
            "Kafka's size bound of the largest record max.record.bytes=%d lets through (payload %d"
                + " bytes, %d event headers): the producer refuses it when it is above"
                + " max.request.size=%d and the task fails instead of dead-lettering it",
            maxRequestSize, low, eventHeaders.size(), maxRequestSize)
        .isLessThanOrEqualTo(maxRequestSize);
  }

  private static ClaimedDelivery withHeaders(Map<String, String> headers, int payloadBytes) {
    return new ClaimedDelivery(
        TOKEN,
        "evt-1",
        "billing",
        "order-1",
        9_000_000_000_000_000L,
        2,
        "order.placed",
        utf8("a".repeat(payloadBytes)),
        "application/json",
        headers,
        EVENT_TIME);
  }

  /**
   * What KafkaProducer#doSend compares with max.request.size, for the record as Connect converts
   * it.
   */
  static int kafkaUpperBound(DeliveryRecord record) {
    StringConverter keyConverter = new StringConverter();
    keyConverter.configure(Map.of(), true);
    StringConverter valueConverter = new StringConverter();
    valueConverter.configure(Map.of(), false);
    SimpleHeaderConverter headerConverter = new SimpleHeaderConverter();
    byte[] key = keyConverter.fromConnectData(record.topic(), record.keySchema(), record.key());
    byte[] value =
        valueConverter.fromConnectData(record.topic(), record.valueSchema(), record.value());
    List<org.apache.kafka.common.header.Header> headers = new ArrayList<>();
    for (Header header : record.headers()) {
      headers.add(
          new RecordHeader(
              header.key(),
              headerConverter.fromConnectHeader(
                  record.topic(), header.key(), header.schema(), header.value())));
    }
    return AbstractRecords.estimateSizeInBytesUpperBound(
        RecordBatch.CURRENT_MAGIC_VALUE,
        CompressionType.NONE,
        key,
        value,
        headers.toArray(new org.apache.kafka.common.header.Header[0]));
  }

  /**
   * The varint sizes the size check counts are Kafka's own (its ByteUtils is not in every worker).
   */
  @Test
  void varintSizesAreKafkas() {
    for (int value :
        new int[] {
          -1, 0, 1, 63, 64, -64, -65, 8191, 8192, 1 << 20, Integer.MAX_VALUE, Integer.MIN_VALUE
        }) {
      assertThat(RecordMapper.sizeOfVarint(value))
          .as("varint of %d", value)
          .isEqualTo(org.apache.kafka.common.utils.ByteUtils.sizeOfVarint(value));
    }
  }
}
