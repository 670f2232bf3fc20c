package io.relaybus.connect;

/** How the ordering key becomes the record key ({@code key.format}); no key gives a null key. */
enum KeyFormat {
  /** An optional string; pair it with {@code StringConverter}. */
  STRING,
  /** The key's UTF-8 bytes, optional bytes schema; pair it with {@code ByteArrayConverter}. */
  BYTES
}
