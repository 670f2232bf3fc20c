package io.relaybus.inbox.kafka;

/**
 * What the Kafka consumer does with a record it can never handle (a poison record). Exactly these
 * count as poison, under every policy:
 *
 * <ul>
 *   <li>the record has no event id header ({@code relaybus-event-id}, or the configured prefix);
 *   <li>what it carries breaks the outbox's rules for an event (id, type or key too long or empty,
 *       a header too large): {@link io.relaybus.inbox.InboxMessage} rejects it;
 *   <li>the work throws {@link io.relaybus.inbox.PoisonMessageException} (or a subclass).
 * </ul>
 *
 * <p>Anything else the work or the database throws (the database down, a lock timeout, a
 * serialization failure, a checked exception of the work wrapped in an {@link
 * io.relaybus.inbox.InboxException}, any other runtime exception) is a failure, never poison: the
 * record is retried from its offset after {@code retryBackoff}, up to {@code maxAttempts}, and then
 * the loop stops with the offset uncommitted, whatever the policy.
 */
public enum InvalidRecordPolicy {
  /**
   * The default. Send a copy of the record (key, value, headers) with {@link DeadLetterHeaders}
   * naming the reason and the record's origin to the dead-letter topic ({@code <topic>.DLT} unless
   * configured), wait for the broker's acknowledgement, then commit past it and go on. If the send
   * fails (no such topic, broker down), the record is not committed past: it counts as a failure
   * and is retried like one, so it is never lost. Nothing is recorded in the inbox.
   */
  DEAD_LETTER,

  /**
   * Log it at ERROR with its topic, partition, offset and the reason (never the payload), commit
   * past it and go on. Nothing is recorded in the inbox, and the record is kept only as long as the
   * topic's retention.
   */
  SKIP,

  /**
   * Stop: {@link KafkaInboxConsumer#run()} commits the records before it and throws; its offset is
   * not committed, so the consumer group meets it again after a restart.
   */
  FAIL
}
