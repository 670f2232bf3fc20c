package io.relaybus.connect;

/** Which records the connector writes ({@code record.format}). */
enum RecordFormat {
  /**
   * relaybus's own: key per {@code key.format}, value per {@code value.format}, the event's headers
   * and the {@code <header.prefix>*} headers, timestamp = event time.
   */
  RELAYBUS,
  /**
   * The records Debezium's outbox {@code EventRouter} writes with its defaults, for consumers
   * written against it; see {@link DebeziumOutboxRecords}.
   */
  DEBEZIUM_OUTBOX
}
