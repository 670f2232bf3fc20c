package io.relaybus.connect;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The task's bookkeeping between "returned from poll()" and "deleted from the outbox".
 *
 * <ul>
 *   <li>{@link #emitted} (task thread) marks a delivery sent; {@link #offset} gives a lane's
 *       offset: its sent, not yet settled deliveries ({@link LaneOffsets}), kept only when offsets
 *       are trusted (exactly-once), else the constant {@link LaneOffsets#UNTRACKED}.
 *   <li>{@link #acknowledged} / {@link #notAcknowledged} (producer thread, from {@code
 *       commitRecord}) only record; nothing touches the database there.
 *   <li>The task thread drains them in batches ({@link #drainAcknowledged} when {@link #flushDue})
 *       and reports what the store settled ({@link #settled}).
 * </ul>
 *
 * A delivery is in exactly one of: outstanding, acknowledged, unacknowledged, to release (claimed,
 * never sent), settled.
 */
final class Acknowledgements {
  private final int flushSize;
  private final Duration flushInterval;
  private final Clock clock;
  private final boolean tracksOffsets;

  private final Set<DeliveryToken> outstanding = ConcurrentHashMap.newKeySet();
  private final ConcurrentLinkedQueue<DeliveryToken> acknowledged = new ConcurrentLinkedQueue<>();
  private final AtomicInteger acknowledgedCount = new AtomicInteger();
  private final ConcurrentLinkedQueue<DeliveryToken> unacknowledged = new ConcurrentLinkedQueue<>();
  private final List<DeliveryToken> toRelease = new ArrayList<>(); // task thread only

  // Task thread only. sentByLane: lane -> delivery id -> offset entry, in emission order.
  private final Map<Integer, Map<Long, String>> sentByLane = new HashMap<>();
  private final Set<String> inKafkaBeforeStart = new HashSet<>();
  private Instant lastFlush;

  /**
   * @param tracksOffsets whether offsets list the sent deliveries (exactly-once); when false no
   *     offset is computed at all
   */
  Acknowledgements(int flushSize, Duration flushInterval, Clock clock, boolean tracksOffsets) {
    this.flushSize = flushSize;
    this.flushInterval = flushInterval;
    this.clock = clock;
    this.tracksOffsets = tracksOffsets;
    this.lastFlush = clock.instant();
  }

  /**
   * Deliveries a previous incarnation sent in committed exactly-once transactions (from the
   * offsets): when claimed again they are completed, not sent again.
   */
  void inKafkaBeforeStart(Collection<String> entries) {
    inKafkaBeforeStart.addAll(entries);
  }

  /**
   * If the committed offsets say this delivery is in Kafka already, queues it for deletion and
   * returns true: the caller must not send it.
   */
  boolean completeIfSentBefore(ClaimedDelivery delivery) {
    if (inKafkaBeforeStart.isEmpty()) {
      return false;
    }
    String entry = LaneOffsets.entry(delivery);
    if (!inKafkaBeforeStart.remove(entry)) {
      return false;
    }
    DeliveryToken token = delivery.token();
    // Still listed by this lane's offsets until deleted, should the task die again first.
    if (tracksOffsets) {
      sent(token.lane()).put(token.deliveryId(), entry);
    }
    acknowledged.add(token);
    acknowledgedCount.incrementAndGet();
    return true;
  }

  /** Marks a delivery sent (its record is about to be returned from poll). Task thread. */
  void emitted(ClaimedDelivery delivery) {
    outstanding.add(delivery.token());
    if (tracksOffsets) {
      sent(delivery.lane()).put(delivery.deliveryId(), LaneOffsets.entry(delivery));
    }
  }

  /**
   * The offset for a record of {@code lane} now: its sent and unsettled deliveries, or {@link
   * LaneOffsets#UNTRACKED} when offsets are not trusted. Task thread.
   */
  Map<String, Object> offset(int lane) {
    if (!tracksOffsets) {
      return LaneOffsets.UNTRACKED;
    }
    Map<Long, String> sent = sentByLane.get(lane);
    return LaneOffsets.offset(sent == null ? List.of() : sent.values());
  }

  boolean tracksOffsets() {
    return tracksOffsets;
  }

  private Map<Long, String> sent(int lane) {
    return sentByLane.computeIfAbsent(lane, l -> new LinkedHashMap<>());
  }

  /** Kafka acknowledged the record: queue the delivery for deletion. Any thread. */
  void acknowledged(DeliveryToken token) {
    if (outstanding.remove(token)) {
      acknowledged.add(token);
      acknowledgedCount.incrementAndGet();
    }
  }

  /**
   * Connect reported no metadata: a transform dropped the record or the producer failed under
   * {@code errors.tolerance=all}. Kafka may not have it, so it must not be deleted. Any thread.
   */
  void notAcknowledged(DeliveryToken token) {
    if (outstanding.remove(token)) {
      unacknowledged.add(token);
    }
  }

  boolean flushDue() {
    int pending = acknowledgedCount.get();
    return pending >= flushSize
        || (pending > 0
            && Duration.between(lastFlush, clock.instant()).compareTo(flushInterval) >= 0);
  }

  /** Up to {@code completion.flush.size} acknowledged deliveries, oldest first. */
  List<DeliveryToken> drainAcknowledged() {
    lastFlush = clock.instant();
    List<DeliveryToken> batch = new ArrayList<>();
    DeliveryToken token;
    while (batch.size() < flushSize && (token = acknowledged.poll()) != null) {
      acknowledgedCount.decrementAndGet();
      batch.add(token);
    }
    return batch;
  }

  /** Puts back a drained batch whose deletion failed, to be flushed again. Task thread. */
  void acknowledgedAgain(List<DeliveryToken> batch) {
    for (DeliveryToken token : batch) {
      acknowledged.add(token);
      acknowledgedCount.incrementAndGet();
    }
  }

  int acknowledgedCount() {
    return acknowledgedCount.get();
  }

  List<DeliveryToken> drainUnacknowledged() {
    List<DeliveryToken> batch = new ArrayList<>();
    DeliveryToken token;
    while ((token = unacknowledged.poll()) != null) {
      batch.add(token);
    }
    return batch;
  }

  /** Puts back drained tokens the store did not reschedule, to be tried again. Task thread. */
  void unacknowledgedAgain(List<DeliveryToken> tokens) {
    unacknowledged.addAll(tokens);
  }

  /** A claimed delivery that was never sent and must be handed back (task thread). */
  void releaseLater(DeliveryToken token) {
    toRelease.add(token);
  }

  List<DeliveryToken> drainToRelease() {
    List<DeliveryToken> batch = List.copyOf(toRelease);
    toRelease.clear();
    return batch;
  }

  /** The store deleted, rescheduled or released these: later offsets no longer list them. */
  void settled(Collection<DeliveryToken> tokens) {
    for (DeliveryToken token : tokens) {
      Map<Long, String> sent = sentByLane.get(token.lane());
      if (sent != null) {
        sent.remove(token.deliveryId());
      }
    }
  }

  /**
   * The lane was taken over: its deliveries are fenced, the new holder sends them again, and
   * acknowledgements still to come for them are ignored.
   */
  void laneLost(int lane) {
    sentByLane.remove(lane);
    outstanding.removeIf(token -> token.lane() == lane);
  }

  int outstandingCount() {
    return outstanding.size();
  }
}
