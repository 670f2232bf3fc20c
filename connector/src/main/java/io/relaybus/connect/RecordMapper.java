package io.relaybus.connect;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.RecordHeaders;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;

/**
 * Turns a claimed delivery into a {@link DeliveryRecord}: topic from the {@link TopicRouter}, key =
 * ordering key, value per {@link ValueFormat}, timestamp = event time, headers = the event's own
 * headers, then the connector's ({@link RecordHeaders}). Kafka keeps every header of a name and
 * consumers read the last one, so an event header named like one of ours cannot shadow it.
 *
 * <p>A delivery that cannot become a record raises {@link UndeliverableException} with the reason
 * to dead-letter it with.
 */
final class RecordMapper {
  /**
   * What Kafka's size bound (the producer checks it against max.request.size) adds to a record's
   * fields: a record batch v2 header (61 bytes) and a record's own attributes, length, timestamp
   * and offset deltas (at most 21 bytes). Kafka's constants are in an internal package that moved
   * in Kafka 4 (org.apache.kafka.common.record.internal), so they are copied here.
   */
  static final int BATCH_OVERHEAD_BYTES = 61;

  static final int RECORD_OVERHEAD_BYTES = 21;

  /** The worker's default header converter, which the headers' values are measured with. */
  private static final SimpleHeaderConverter HEADER_CONVERTER = new SimpleHeaderConverter();

  private final TopicRouter router;
  private final KeyFormat keyFormat;
  private final ValueFormat valueFormat;
  private final RecordHeaders headerNames;
  private final int maxRecordBytes;
  private final ConvertedSize converted;
  private final DebeziumOutboxRecords debezium; // null: record.format=relaybus

  RecordMapper(
      TopicRouter router,
      KeyFormat keyFormat,
      ValueFormat valueFormat,
      RecordHeaders headerNames,
      int maxRecordBytes) {
    this(router, keyFormat, valueFormat, headerNames, maxRecordBytes, ConvertedSize.unknown());
  }

  RecordMapper(
      TopicRouter router,
      KeyFormat keyFormat,
      ValueFormat valueFormat,
      RecordHeaders headerNames,
      int maxRecordBytes,
      ConvertedSize converted) {
    this(router, keyFormat, valueFormat, headerNames, maxRecordBytes, converted, null);
  }

  /** {@code debezium} null: relaybus's records; else Debezium's outbox router's. */
  RecordMapper(
      TopicRouter router,
      KeyFormat keyFormat,
      ValueFormat valueFormat,
      RecordHeaders headerNames,
      int maxRecordBytes,
      ConvertedSize converted,
      DebeziumOutboxRecords debezium) {
    this.router = router;
    this.keyFormat = keyFormat;
    this.valueFormat = valueFormat;
    this.headerNames = headerNames;
    this.maxRecordBytes = maxRecordBytes;
    this.converted = converted;
    this.debezium = debezium;
  }

  static RecordMapper from(OutboxSourceConfig config) {
    return new RecordMapper(
        config.topicRouter(),
        config.keyFormat(),
        config.valueFormat(),
        config.headerNames(),
        config.maxRecordBytes(),
        ConvertedSize.from(config.originals()),
        switch (config.recordFormat()) {
          case RELAYBUS -> null;
          case DEBEZIUM_OUTBOX -> DebeziumOutboxRecords.from(config);
        });
  }

  /**
   * The record of {@code delivery}. {@code sourceOffset} is asked for only once the delivery is
   * known to be deliverable (it marks the delivery sent).
   */
  DeliveryRecord toRecord(
      ClaimedDelivery delivery,
      Map<String, ?> sourcePartition,
      Supplier<Map<String, ?>> sourceOffset)
      throws UndeliverableException {
    String topic = router.topicFor(delivery.handler(), delivery.type());
    byte[] payload = delivery.payload();
    // measured as built: record.format=debezium_outbox writes Debezium's headers, not relaybus's
    ConnectHeaders headers = debezium == null ? headers(delivery) : debezium.headers(delivery);
    long headerBytes = headerBytes(topic, headers);
    checkSize(delivery, payload.length, headerBytes);
    SchemaAndValue value = value(payload);
    if (converted.known()) {
      checkConvertedSize(delivery, topic, value, headerBytes, payload.length);
    }
    return new DeliveryRecord(
        delivery.token(),
        sourcePartition,
        sourceOffset.get(),
        topic,
        keySchema(delivery.key()),
        key(delivery.key()),
        value.schema(),
        value.value(),
        delivery.eventTime().toEpochMilli(),
        headers);
  }

  private Schema keySchema(String key) {
    if (debezium != null) {
      return debezium.keySchema(key);
    }
    return switch (keyFormat) {
      case STRING -> Schema.OPTIONAL_STRING_SCHEMA;
      case BYTES -> Schema.OPTIONAL_BYTES_SCHEMA;
    };
  }

  private Object key(String key) {
    if (key == null || debezium != null) {
      return key;
    }
    return switch (keyFormat) {
      case STRING -> key;
      case BYTES -> key.getBytes(StandardCharsets.UTF_8);
    };
  }

  private SchemaAndValue value(byte[] payload) throws UndeliverableException {
    if (debezium != null) {
      return new SchemaAndValue(
          DebeziumOutboxRecords.VALUE_SCHEMA,
          utf8(
              payload,
              "payload is not valid UTF-8 (record.format=debezium_outbox sends it as Debezium sends"
                  + " a json column); send binary payloads with record.format=relaybus"));
    }
    return switch (valueFormat) {
      case BYTES -> new SchemaAndValue(Schema.BYTES_SCHEMA, payload);
      case STRING ->
          new SchemaAndValue(
              Schema.STRING_SCHEMA,
              utf8(
                  payload,
                  "payload is not valid UTF-8 (value.format=string); use value.format=bytes for binary"
                      + " payloads"));
      case JSON -> JsonPayloads.toConnect(payload);
    };
  }

  private static String utf8(byte[] payload, String invalidReason) throws UndeliverableException {
    try {
      return StandardCharsets.UTF_8
          .newDecoder()
          .onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(payload))
          .toString();
    } catch (CharacterCodingException e) {
      throw new UndeliverableException(invalidReason);
    }
  }

  private ConnectHeaders headers(ClaimedDelivery delivery) {
    ConnectHeaders headers = new ConnectHeaders();
    delivery.headers().forEach(headers::addString);
    headers.addString(headerNames.eventId(), delivery.eventId());
    headers.addString(headerNames.eventType(), delivery.type());
    headers.addString(headerNames.contentType(), delivery.contentType());
    headers.addString(headerNames.handler(), delivery.handler());
    if (delivery.sequence() != null) {
      headers.addLong(headerNames.sequence(), delivery.sequence());
    }
    // Attempt number of this send, 1-based: failed attempts so far plus this one.
    headers.addInt(headerNames.attempt(), delivery.attempts() + 1);
    return headers;
  }

  /**
   * Checks the record's size before conversion (key, payload, headers, Kafka's overhead) against
   * {@code max.record.bytes}: a record the producer would refuse is dead-lettered here instead of
   * failing the task. Converters that add a schema envelope make the real record larger than this:
   * where the connector names a converter Kafka ships, {@link #checkConvertedSize} measures it.
   */
  private void checkSize(ClaimedDelivery delivery, int payloadBytes, long headerBytes)
      throws UndeliverableException {
    long keyBytes = delivery.key() == null ? -1 : utf8Length(delivery.key());
    long size = kafkaSize(keyBytes, payloadBytes, headerBytes);
    if (size > maxRecordBytes) {
      throw new UndeliverableException(
          "record of about %d bytes is larger than max.record.bytes=%d (keep it below the"
                  .formatted(size, maxRecordBytes)
              + " producer's max.request.size and the topic's max.message.bytes)");
    }
  }

  /**
   * The same check with the key and value as the connector's converters write them ({@link
   * ConvertedSize}), e.g. {@code JsonConverter}'s base64 and schema envelope.
   */
  private void checkConvertedSize(
      ClaimedDelivery delivery,
      String topic,
      SchemaAndValue value,
      long headerBytes,
      int payloadBytes)
      throws UndeliverableException {
    long keyEstimate = delivery.key() == null ? -1 : utf8Length(delivery.key());
    long keyBytes =
        delivery.key() == null
            ? -1
            : converted.keyBytes(
                topic, keySchema(delivery.key()), key(delivery.key()), keyEstimate);
    long size =
        kafkaSize(
            keyBytes,
            converted.valueBytes(topic, value.schema(), value.value(), payloadBytes),
            headerBytes);
    if (size > maxRecordBytes) {
      throw new UndeliverableException(
          "record of about %d bytes as the connector's converters write it is larger than"
                  .formatted(size)
              + " max.record.bytes=%d (keep it below the producer's max.request.size and the"
                  .formatted(maxRecordBytes)
              + " topic's max.message.bytes)");
    }
  }

  /**
   * Kafka's upper bound of a one-record batch (DefaultRecordBatch.estimateBatchSizeUpperBound),
   * what the producer compares with max.request.size; a length of -1 is a null key or value.
   */
  private static long kafkaSize(long keyBytes, long valueBytes, long headerBytes) {
    return BATCH_OVERHEAD_BYTES
        + RECORD_OVERHEAD_BYTES
        + lengthPrefixed(keyBytes)
        + lengthPrefixed(valueBytes)
        + headerBytes;
  }

  /**
   * The headers' part of a record as Kafka's record format writes it: their count, then per header
   * its name and its value (as {@link SimpleHeaderConverter}, the worker's default, writes it),
   * each after its length as a varint.
   */
  private static long headerBytes(String topic, ConnectHeaders headers) {
    long size = sizeOfVarint(headers.size());
    for (Header header : headers) {
      byte[] value =
          HEADER_CONVERTER.fromConnectHeader(topic, header.key(), header.schema(), header.value());
      size += lengthPrefixed(utf8Length(header.key()));
      size += lengthPrefixed(value == null ? -1 : value.length);
    }
    return size;
  }

  /** A length varint (-1: null) followed by that many bytes. */
  private static long lengthPrefixed(long length) {
    if (length < 0) {
      return sizeOfVarint(-1);
    }
    return length + (length > Integer.MAX_VALUE ? 5 : sizeOfVarint((int) length));
  }

  /**
   * The bytes of {@code value} as a zigzag varint, as Kafka's record format writes lengths and
   * counts. Written here, not taken from kafka-clients: its {@code ByteUtils} is not in the workers
   * of every supported version (Kafka Connect 4.4 has none: ClassNotFoundException).
   */
  static int sizeOfVarint(int value) {
    int v = (value << 1) ^ (value >> 31);
    int bytes = 1;
    while ((v & 0xffffff80) != 0) {
      bytes++;
      v >>>= 7;
    }
    return bytes;
  }

  private static long utf8Length(String text) {
    return text.getBytes(StandardCharsets.UTF_8).length;
  }
}
