package io.relaybus.inbox.kafka;

import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The offsets the loop may commit: only those of records whose database transaction committed. Also
 * the rebalance listener, since what a partition change must do is about those offsets. Used by the
 * loop thread only (rebalance callbacks run inside its poll).
 *
 * <p>A commit that fails (the group rebalanced, the consumer was put out of the group) is not
 * retried: the partitions' next owner reads those records again and the inbox skips them. That is
 * the inbox's whole point, so it is logged at INFO, not as an error.
 */
final class HandledOffsets implements ConsumerRebalanceListener {
  private static final Logger log = LoggerFactory.getLogger(HandledOffsets.class);

  /** What else must forget a partition the consumer no longer owns (its retry state). */
  @FunctionalInterface
  interface PartitionsGone {
    void forget(Collection<TopicPartition> partitions);
  }

  private final Consumer<?, ?> consumer;
  private final String handler;
  private final PartitionsGone gone;
  private final Map<TopicPartition, OffsetAndMetadata> handled = new HashMap<>();

  HandledOffsets(Consumer<?, ?> consumer, String handler, PartitionsGone gone) {
    this.consumer = consumer;
    this.handler = handler;
    this.gone = gone;
  }

  /** The record's transaction committed: its offset may be committed. */
  void handled(ConsumerRecord<?, ?> record) {
    handled.put(
        new TopicPartition(record.topic(), record.partition()),
        new OffsetAndMetadata(record.offset() + 1));
  }

  /**
   * Commits the handled offsets. A wakeup or interrupt propagates and keeps them for the commit on
   * the way out; any other Kafka failure drops them (see the class comment).
   */
  void commit() {
    if (handled.isEmpty()) {
      return;
    }
    Map<TopicPartition, OffsetAndMetadata> offsets = Map.copyOf(handled);
    try {
      consumer.commitSync(offsets);
      handled.clear();
      log.trace("Kafka inbox of handler {} committed {}", handler, offsets);
    } catch (WakeupException | InterruptException e) {
      throw e;
    } catch (KafkaException e) {
      handled.clear();
      log.info(
          "Kafka inbox of handler {} could not commit offsets {} ({}): the partitions' next owner"
              + " gets those records again and the inbox skips them",
          handler,
          offsets,
          e.toString());
    }
  }

  /** {@link #commit()} while another failure is on its way out: attached to it, not thrown. */
  void commitQuietly(Throwable failure) {
    try {
      commit();
    } catch (RuntimeException e) {
      failure.addSuppressed(e);
    }
  }

  /**
   * Offsets are committed before every poll and this runs inside poll, so normally nothing is left
   * to commit; what is, is committed while the partitions are still ours.
   */
  @Override
  public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
    commit();
    gone.forget(partitions);
    if (!partitions.isEmpty()) {
      log.info("Kafka inbox of handler {} gave up partitions {}", handler, partitions);
    }
  }

  @Override
  public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
    if (!partitions.isEmpty()) {
      log.info("Kafka inbox of handler {} was assigned partitions {}", handler, partitions);
    }
  }

  /** Already owned by someone else: nothing may be committed for them. */
  @Override
  public void onPartitionsLost(Collection<TopicPartition> partitions) {
    handled.keySet().removeAll(partitions);
    gone.forget(partitions);
    log.info(
        "Kafka inbox of handler {} lost partitions {}: their next owner gets the uncommitted"
            + " records again and the inbox skips those handled",
        handler,
        partitions);
  }
}
