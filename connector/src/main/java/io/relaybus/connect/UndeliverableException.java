package io.relaybus.connect;

/**
 * A delivery cannot become a record (payload invalid for {@code value.format}, no topic for its
 * handler, larger than {@code max.record.bytes}). Permanent: the delivery is dead-lettered with
 * {@link #getMessage()} as the reason, and the stream goes on. The message never holds payload
 * bytes.
 */
final class UndeliverableException extends Exception {
  UndeliverableException(String reason) {
    super(reason, null, false, false);
  }
}
