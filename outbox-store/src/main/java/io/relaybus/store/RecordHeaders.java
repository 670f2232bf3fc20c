package io.relaybus.store;

import java.util.regex.Pattern;

/**
 * The names of the headers that carry an event's identity to its consumers: {@code
 * <prefix><suffix>} with the suffixes below. The connector writes them on every Kafka record; the
 * inbox reads the event id from the same name on Kafka records and RabbitMQ messages, so one event
 * reaching a service through both brokers runs once per handler. Producer and consumers must use
 * the same prefix. Defined here, in the Kafka-free store, so the connector and the inbox share one
 * definition without the inbox depending on Kafka Connect.
 *
 * <p>Worked example with the default prefix: {@code relaybus-event-id: 0b6f…}, {@code
 * relaybus-event-type: order.placed}, {@code relaybus-content-type: application/json}, {@code
 * relaybus-handler: billing}, {@code relaybus-sequence: 42} (only for keyed events), {@code
 * relaybus-attempt: 1} (1 on the first try).
 *
 * @param prefix 1 to {@value #MAX_PREFIX_LENGTH} characters of {@code [A-Za-z0-9._-]}
 */
public record RecordHeaders(String prefix) {
  public static final String DEFAULT_PREFIX = "relaybus-";
  public static final String EVENT_ID = "event-id";
  public static final String EVENT_TYPE = "event-type";
  public static final String CONTENT_TYPE = "content-type";
  public static final String HANDLER = "handler";
  public static final String SEQUENCE = "sequence";
  public static final String ATTEMPT = "attempt";
  public static final int MAX_PREFIX_LENGTH = 64;

  private static final Pattern PREFIX = Pattern.compile("[A-Za-z0-9._-]+");

  public RecordHeaders {
    validatePrefix(prefix);
  }

  /** The names with {@link #DEFAULT_PREFIX}. */
  public static RecordHeaders defaults() {
    return new RecordHeaders(DEFAULT_PREFIX);
  }

  /**
   * Checks a prefix; the message says the rule but not the value or the setting, which the caller
   * names (a connector config key, a builder property).
   */
  public static void validatePrefix(String prefix) {
    if (prefix == null
        || prefix.isEmpty()
        || prefix.length() > MAX_PREFIX_LENGTH
        || !PREFIX.matcher(prefix).matches()) {
      throw new IllegalArgumentException(
          "must be 1 to %d characters of [A-Za-z0-9._-], so the connector's headers cannot be"
                  .formatted(MAX_PREFIX_LENGTH)
              + " mistaken for the event's own");
    }
  }

  public String eventId() {
    return prefix + EVENT_ID;
  }

  public String eventType() {
    return prefix + EVENT_TYPE;
  }

  public String contentType() {
    return prefix + CONTENT_TYPE;
  }

  public String handler() {
    return prefix + HANDLER;
  }

  public String sequence() {
    return prefix + SEQUENCE;
  }

  public String attempt() {
    return prefix + ATTEMPT;
  }

  /** Whether {@code name} is one of these headers rather than one of the event's own. */
  public boolean isConnectorHeader(String name) {
    return name.startsWith(prefix);
  }
}
