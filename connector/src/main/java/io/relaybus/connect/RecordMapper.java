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
  /** Per-record overhead Kafka adds to key, value and headers (record batch v2, generous). */
  static final int RECORD_OVERHEAD_BYTES = 128;

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
    long estimate = checkSize(delivery, payload.length);
    SchemaAndValue value = value(payload);
    if (converted.known()) {
      checkConvertedSize(delivery, topic, value, estimate, payload.length);
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
        debezium == null ? headers(delivery) : debezium.headers(delivery));
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
   * Estimates the record's size before conversion (key, payload, headers, overhead) against {@code
   * max.record.bytes}: a record the producer would refuse is dead-lettered here instead of failing
   * the task. Converters that add a schema envelope make the real record larger than this estimate:
   * where the connector names a converter Kafka ships, {@link #checkConvertedSize} measures it.
   * Returns the estimate.
   */
  private long checkSize(ClaimedDelivery delivery, int payloadBytes) throws UndeliverableException {
    long size = RECORD_OVERHEAD_BYTES + payloadBytes;
    if (delivery.key() != null) {
      size += utf8Length(delivery.key());
    }
    for (Map.Entry<String, String> header : delivery.headers().entrySet()) {
      size += utf8Length(header.getKey()) + utf8Length(header.getValue());
    }
    size +=
        utf8Length(delivery.eventId())
            + utf8Length(delivery.type())
            + utf8Length(delivery.contentType())
            + utf8Length(delivery.handler())
            + 6L * (headerNames.prefix().length() + 16);
    if (size > maxRecordBytes) {
      throw new UndeliverableException(
          "record of about %d bytes is larger than max.record.bytes=%d (keep it below the"
                  .formatted(size, maxRecordBytes)
              + " producer's max.request.size and the topic's max.message.bytes)");
    }
    return size;
  }

  /**
   * The same check with the key and value as the connector's converters write them ({@link
   * ConvertedSize}), e.g. {@code JsonConverter}'s base64 and schema envelope.
   */
  private void checkConvertedSize(
      ClaimedDelivery delivery, String topic, SchemaAndValue value, long estimate, int payloadBytes)
      throws UndeliverableException {
    long keyEstimate = delivery.key() == null ? 0 : utf8Length(delivery.key());
    long size =
        estimate
            - keyEstimate
            - payloadBytes
            + converted.keyBytes(topic, keySchema(delivery.key()), key(delivery.key()), keyEstimate)
            + converted.valueBytes(topic, value.schema(), value.value(), payloadBytes);
    if (size > maxRecordBytes) {
      throw new UndeliverableException(
          "record of about %d bytes as the connector's converters write it is larger than"
                  .formatted(size)
              + " max.record.bytes=%d (keep it below the producer's max.request.size and the"
                  .formatted(maxRecordBytes)
              + " topic's max.message.bytes)");
    }
  }

  private static long utf8Length(String text) {
    return text.getBytes(StandardCharsets.UTF_8).length;
  }
}
