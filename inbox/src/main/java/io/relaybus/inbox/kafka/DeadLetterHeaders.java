package io.relaybus.inbox.kafka;

import io.relaybus.store.RecordHeaders;

/**
 * Names of the headers {@link KafkaInboxConsumer} adds to a record it dead-letters ({@link
 * InvalidRecordPolicy#DEAD_LETTER}), after the record's own headers, which it keeps. They carry the
 * connector's header prefix, so a dead-lettered record sent back to its topic reads as before: the
 * inbox does not take them for the event's own headers. Values are UTF-8 text; numbers in decimal.
 * They play the part of Spring Kafka's {@code kafka_dlt-*} headers ({@code
 * DeadLetterPublishingRecoverer}).
 *
 * <p>Worked example with the default prefix, for the record at offset 17 of {@code billing-2}:
 * {@code relaybus-dlt-reason: record kafka billing-2@17 has no 'relaybus-event-id' header, ...},
 * {@code relaybus-dlt-exception: io.relaybus.inbox.PoisonMessageException}, {@code
 * relaybus-dlt-original-topic: billing}, {@code relaybus-dlt-original-partition: 2}, {@code
 * relaybus-dlt-original-offset: 17}, {@code relaybus-dlt-original-timestamp: 1764600000000}, {@code
 * relaybus-dlt-original-consumer-group: billing}, {@code relaybus-dlt-handler:
 * billing.charge-card}.
 *
 * @param prefix the connector's header prefix, {@code relaybus-} by default
 */
public record DeadLetterHeaders(String prefix) {

  public DeadLetterHeaders {
    RecordHeaders.validatePrefix(prefix);
  }

  /** The names under the prefix of {@code headers}. */
  public static DeadLetterHeaders of(RecordHeaders headers) {
    return new DeadLetterHeaders(headers.prefix());
  }

  /** Why the record can never be handled: the exception's message, at most 4,000 characters. */
  public String reason() {
    return prefix + "dlt-reason";
  }

  /** Class name of the exception, e.g. {@code io.relaybus.inbox.PoisonMessageException}. */
  public String exception() {
    return prefix + "dlt-exception";
  }

  /** Class name of the exception's cause; present only when it has one. */
  public String exceptionCause() {
    return prefix + "dlt-exception-cause";
  }

  public String originalTopic() {
    return prefix + "dlt-original-topic";
  }

  public String originalPartition() {
    return prefix + "dlt-original-partition";
  }

  public String originalOffset() {
    return prefix + "dlt-original-offset";
  }

  /** The original record's timestamp, epoch milliseconds. */
  public String originalTimestamp() {
    return prefix + "dlt-original-timestamp";
  }

  public String originalConsumerGroup() {
    return prefix + "dlt-original-consumer-group";
  }

  /**
   * {@code true} on a copy sent without the record's value, because the whole copy was larger than
   * the producer's {@code max.request.size} or the topic's {@code max.message.bytes}.
   */
  public String valueDropped() {
    return prefix + "dlt-value-dropped";
  }

  /** On a copy without the value: the value's size in bytes. */
  public String originalValueSize() {
    return prefix + "dlt-original-value-size";
  }

  /**
   * {@code true} on a copy that was too large even without the value, so sent without the record's
   * key and headers too (the event id header kept).
   */
  public String keyAndHeadersDropped() {
    return prefix + "dlt-key-and-headers-dropped";
  }

  /** The inbox handler that could not handle it. */
  public String handler() {
    return prefix + "dlt-handler";
  }
}
