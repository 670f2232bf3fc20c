package io.relaybus.inbox;

/**
 * A message that can never be handled, however often it is tried: it has no event id, its id or
 * fields break the outbox's rules, or the consumer's work says so. The adapters do not retry it:
 * the RabbitMQ consumer rejects it to the queue's dead-letter exchange at once, the Kafka consumer
 * sends it to a dead-letter topic (or skips it with a log, or stops, as configured: {@link
 * io.relaybus.inbox.kafka.InvalidRecordPolicy}).
 */
public class PoisonMessageException extends RuntimeException {
  public PoisonMessageException(String message) {
    super(message);
  }

  public PoisonMessageException(String message, Throwable cause) {
    super(message, cause);
  }
}
