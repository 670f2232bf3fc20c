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
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The offsets the loop may commit: only those of records whose database transaction committed. Also
 * the rebalance listener, since what a partition change must do is about those offsets. Used by the
 * loop thread only (rebalance callbacks run inside its poll).
 *
 * <p>A commit that fails while the consumer keeps its partitions (a timeout, {@code
 * RetriableCommitFailedException}, {@code RebalanceInProgressException}) is tried again at the next
 * commit, the one before the next poll or on the way out. One that fails because the consumer was
 * put out of the group ({@code CommitFailedException}), and the offsets of partitions revoked or
 * lost, are dropped: the partitions' next owner reads those records again and the inbox skips them.
 * That is the inbox's whole point, so it is logged at INFO, not as an error.
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
   * the way out. A failure after which the consumer may still own the partitions (a timeout, a
   * rebalance in progress) keeps them for the next commit; any other Kafka failure (the consumer
   * was put out of the group: {@code CommitFailedException}) drops them (see the class comment).
   */
  void commit() {
    if (handled.isEmpty()) {
      return;
    }
    Map<TopicPartition, OffsetAndMetadata> offsets = Map.copyOf(handled);
    try {
      consumer.commitSync(offsets);
      // Only what was sent: nothing is added meanwhile (loop thread), but stay exact.
      offsets.forEach(handled::remove);
      log.trace("Kafka inbox of handler {} committed {}", handler, offsets);
    } catch (WakeupException | InterruptException e) {
      throw e;
    } catch (RetriableException | RebalanceInProgressException e) {
      log.info(
          "Kafka inbox of handler {} could not commit offsets {} ({}): trying again at the next"
              + " commit while the partitions are still ours",
          handler,
          offsets,
          e.toString());
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
    // Not committed now, never by us: a later commit could move the next owner's offset back.
    handled.keySet().removeAll(partitions);
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
