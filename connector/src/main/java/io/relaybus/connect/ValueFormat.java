package io.relaybus.connect;

/** How the payload becomes the record value ({@code value.format}). */
enum ValueFormat {
  /**
   * The payload as published, bytes schema; never fails. Pair it with {@code ByteArrayConverter}.
   */
  BYTES,
  /** The payload decoded as strict UTF-8, string schema; invalid UTF-8 is dead-lettered. */
  STRING,
  /**
   * The payload parsed as one JSON value and given a schema inferred from it (objects become
   * structs), so schema-aware converters (JSON with schemas, Avro, Protobuf) write structured data.
   * A payload that is not JSON, or that has no such schema, is dead-lettered. See {@link
   * JsonPayloads}.
   */
  JSON
}
