package io.relaybus.inbox.kafka;

/**
 * What the Kafka consumer does with a record it can never handle: one without the connector's event
 * id header, one whose fields break the outbox's rules, or one the work rejects with a {@link
 * io.relaybus.inbox.PoisonMessageException}.
 */
public enum InvalidRecordPolicy {
  /**
   * Log it at ERROR with its topic, partition, offset and the reason (never the payload), commit
   * past it and go on. Nothing is recorded in the inbox.
   */
  SKIP,

  /**
   * Stop: {@link KafkaInboxConsumer#run()} commits the records before it and throws; its offset is
   * not committed, so the consumer group meets it again after a restart.
   */
  FAIL
}
