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
import java.util.LinkedHashSet;
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
 *
 * <p>At {@code stop()} the task takes what is still outstanding ({@link #drainOutstanding}):
 * Connect has already waited for the producer, so those records were rejected, never sent, or stuck
 * behind an unreachable broker, and each is charged an attempt.
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
  private final Object quiet = new Object(); // notified when nothing is outstanding any more

  /** Order key and emission number of each emitted keyed record not yet settled. */
  private record Emission(String orderKey, long number) {}

  private final Map<DeliveryToken, Emission> emissions = new ConcurrentHashMap<>();

  /** Per order key, the highest emission number Kafka acknowledged (pruned to the window). */
  private final Map<String, Long> lastAcknowledged = new ConcurrentHashMap<>();

  private long emissionCount; // task thread only

  // Task thread only. sentByLane: lane -> delivery id -> offset entry, in emission order.
  private final Map<Integer, Map<Long, String>> sentByLane = new HashMap<>();
  // Task thread only. Per lane, what the committed offsets listed at start and this task has not
  // claimed yet: each lane's offsets keep naming them, since Kafka has them until they are deleted.
  private final Map<Integer, Set<String>> inKafkaBeforeStart = new HashMap<>();
  // Task thread only: the tokens sent (or queued for deletion as in Kafka already), not yet
  // settled.
  private final Set<DeliveryToken> inHand = new HashSet<>();
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
   * offsets, per lane): when claimed again they are completed, not sent again. Until then each
   * lane's offsets keep listing them, or a later incarnation would send them again (this one
   * commits its own records' offsets over the ones it read).
   */
  void inKafkaBeforeStart(Map<Integer, ? extends Collection<String>> entriesByLane) {
    entriesByLane.forEach((lane, entries) -> inKafkaBefore(lane).addAll(entries));
  }

  private Set<String> inKafkaBefore(int lane) {
    return inKafkaBeforeStart.computeIfAbsent(lane, l -> new LinkedHashSet<>());
  }

  /**
   * Whether this task sent this very token (same lane lease, same claim) and has not settled it
   * yet: the store handed the delivery out again, as it does after it resumed its lanes from their
   * cursor rows because the server lost WAL (a crash, a failover). The copy sent before is in Kafka
   * or on its way there, and its acknowledgement deletes the delivery, so the caller must not send
   * it again (a second record, and in exactly-once mode a duplicate the offsets cannot catch). Task
   * thread.
   */
  boolean inHand(ClaimedDelivery delivery) {
    return inHand.contains(delivery.token());
  }

  /**
   * With offsets (exactly-once): whether this task sent this delivery under another token and has
   * not settled it. The store hands a delivery out under a new token when it moved it meanwhile (it
   * read the lane again after a failover and parked the delivery behind its key). Kafka has the
   * copy sent once it was acknowledged (in exactly-once mode, once its transaction committed): this
   * one is queued for deletion. A copy still on its way, or reported not acknowledged, may yet fail
   * to reach Kafka: this one is handed back, to be claimed again when that is settled. Either way
   * it returns true: the caller must not send it. Task thread.
   */
  boolean sentUnderAnotherToken(ClaimedDelivery delivery) {
    if (!tracksOffsets) {
      return false;
    }
    Map<Long, String> sent = sentByLane.get(delivery.lane());
    String entry = sent == null ? null : sent.get(delivery.deliveryId());
    if (entry == null || !entry.equals(LaneOffsets.entry(delivery))) {
      return false;
    }
    DeliveryToken token = delivery.token();
    if (sameDelivery(outstanding, token) || sameDelivery(unacknowledged, token)) {
      toRelease.add(token);
      return true;
    }
    inHand.add(token);
    acknowledged.add(token);
    acknowledgedCount.incrementAndGet();
    return true;
  }

  private static boolean sameDelivery(Collection<DeliveryToken> tokens, DeliveryToken token) {
    for (DeliveryToken t : tokens) {
      if (t.deliveryId() == token.deliveryId() && t.lane() == token.lane()) {
        return true;
      }
    }
    return false;
  }

  /**
   * If the committed offsets say this delivery is in Kafka already, queues it for deletion and
   * returns true: the caller must not send it.
   */
  boolean completeIfSentBefore(ClaimedDelivery delivery) {
    Set<String> before = inKafkaBeforeStart.get(delivery.lane());
    if (before == null) {
      return false;
    }
    String entry = LaneOffsets.entry(delivery);
    if (!before.remove(entry)) {
      return false;
    }
    if (before.isEmpty()) {
      inKafkaBeforeStart.remove(delivery.lane());
    }
    DeliveryToken token = delivery.token();
    // Still listed by this lane's offsets until deleted, should the task die again first.
    if (tracksOffsets) {
      sent(token.lane()).put(token.deliveryId(), entry);
    }
    inHand.add(token);
    acknowledged.add(token);
    acknowledgedCount.incrementAndGet();
    return true;
  }

  /**
   * The records that must reach Kafka in order: same handler and key (the key's partition of the
   * handler's topic, or of its topics when the template names the type: see {@link #sentTo}). Null
   * without a key.
   */
  static String orderKey(ClaimedDelivery delivery) {
    return delivery.key() == null ? null : delivery.handler() + '\u0000' + delivery.key();
  }

  /**
   * Marks a delivery sent (its record is about to be returned from poll). Task thread. A keyed one
   * is numbered under its {@link #orderKey}, for {@link #overtaken}.
   */
  void emitted(ClaimedDelivery delivery) {
    outstanding.add(delivery.token());
    inHand.add(delivery.token());
    String orderKey = orderKey(delivery);
    if (orderKey != null) {
      emissions.put(delivery.token(), new Emission(orderKey, ++emissionCount));
    }
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
    Set<String> before = inKafkaBeforeStart.get(lane);
    if (before == null) {
      return LaneOffsets.offset(sent == null ? List.of() : sent.values());
    }
    Set<String> entries = new LinkedHashSet<>(before);
    if (sent != null) {
      entries.addAll(sent.values());
    }
    return LaneOffsets.offset(entries);
  }

  boolean tracksOffsets() {
    return tracksOffsets;
  }

  private Map<Long, String> sent(int lane) {
    return sentByLane.computeIfAbsent(lane, l -> new LinkedHashMap<>());
  }

  /**
   * The topic the emitted {@code delivery}'s record goes to: its {@link #overtaken} compares it
   * with the later records of its key on that topic only, as only those share its partition (a
   * topic template with {@code ${type}} sends one key's records to several topics). Task thread,
   * before the record leaves poll.
   */
  void sentTo(ClaimedDelivery delivery, String topic) {
    emissions.computeIfPresent(
        delivery.token(),
        (token, emission) -> new Emission(topic + '\u0000' + delivery.key(), emission.number()));
  }

  /** Kafka acknowledged the record: queue the delivery for deletion. Any thread. */
  void acknowledged(DeliveryToken token) {
    if (outstanding.remove(token)) {
      Emission emission = emissions.remove(token);
      if (emission != null) {
        lastAcknowledged.merge(emission.orderKey(), emission.number(), Math::max);
      }
      acknowledged.add(token);
      acknowledgedCount.incrementAndGet();
      signalIfQuiet();
    }
  }

  /**
   * Whether Kafka acknowledged a record of the same order key emitted after this one. For a record
   * still unacknowledged that means it failed (Connect's producer sends one request at a time per
   * broker, so a partition's records are acknowledged in order) and that sending it now would put
   * it after its key's later records. Task thread.
   */
  boolean overtaken(DeliveryToken token) {
    Emission emission = emissions.get(token);
    if (emission == null) {
      return false;
    }
    Long last = lastAcknowledged.get(emission.orderKey());
    return last != null && last > emission.number();
  }

  /**
   * Forgets acknowledgements older than every record still unsettled: they can overtake nothing any
   * more. Keeps {@link #lastAcknowledged} to the keys of the in-flight window. Task thread.
   */
  void forgetOldAcknowledgements() {
    long oldest = Long.MAX_VALUE;
    for (Emission emission : emissions.values()) {
      oldest = Math.min(oldest, emission.number());
    }
    long threshold = oldest;
    lastAcknowledged.values().removeIf(number -> number < threshold);
  }

  /**
   * Connect reported no metadata: a transform dropped the record or the producer failed under
   * {@code errors.tolerance=all}. Kafka may not have it, so it must not be deleted. Its emission is
   * kept until it is settled: Connect's producer goes on with the key's later records, and whether
   * one of them is written decides between a retry and {@link #overtaken}. Any thread.
   */
  void notAcknowledged(DeliveryToken token) {
    if (outstanding.remove(token)) {
      unacknowledged.add(token);
      signalIfQuiet();
    }
  }

  /**
   * Of {@code tokens}, those with a record of their order key emitted after them still outstanding:
   * until it is settled, a retry could land after it, so whether the token is {@link #overtaken} is
   * not known yet. One pass over the emissions, however many tokens. Task thread.
   */
  Set<DeliveryToken> withLaterOfTheirKeyOutstanding(Collection<DeliveryToken> tokens) {
    Map<String, Long> lastOutstanding = new HashMap<>();
    for (Map.Entry<DeliveryToken, Emission> entry : emissions.entrySet()) {
      if (outstanding.contains(entry.getKey())) {
        Emission emission = entry.getValue();
        lastOutstanding.merge(emission.orderKey(), emission.number(), Math::max);
      }
    }
    Set<DeliveryToken> waiting = new HashSet<>();
    for (DeliveryToken token : tokens) {
      Emission emission = emissions.get(token);
      Long last = emission == null ? null : lastOutstanding.get(emission.orderKey());
      if (last != null && last > emission.number()) {
        waiting.add(token);
      }
    }
    return waiting;
  }

  /**
   * Waits up to {@code timeout} until no record is outstanding (or {@link #wakeUp}); returns
   * whether none is.
   */
  boolean awaitNoneOutstanding(Duration timeout) throws InterruptedException {
    synchronized (quiet) {
      if (!outstanding.isEmpty() && timeout.toMillis() > 0) {
        quiet.wait(timeout.toMillis());
      }
    }
    return outstanding.isEmpty();
  }

  /** Ends a wait in {@link #awaitNoneOutstanding} (the task is stopping). */
  void wakeUp() {
    synchronized (quiet) {
      quiet.notifyAll();
    }
  }

  private void signalIfQuiet() {
    if (outstanding.isEmpty()) {
      wakeUp();
    }
  }

  boolean isOutstanding(DeliveryToken token) {
    return outstanding.contains(token);
  }

  /**
   * Takes every record emitted and neither acknowledged nor reported unacknowledged (task thread,
   * at stop). Acknowledgements arriving for them later are ignored; {@link #overtaken} still
   * answers for them until they are {@link #settled}.
   */
  List<DeliveryToken> drainOutstanding() {
    List<DeliveryToken> batch = new ArrayList<>();
    for (DeliveryToken token : List.copyOf(outstanding)) {
      if (outstanding.remove(token)) {
        batch.add(token);
      }
    }
    signalIfQuiet();
    return batch;
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

  /**
   * Kafka has these (they were acknowledged) but the store did not delete them: their lanes were
   * taken over, or the store had moved them meanwhile (it read their lanes again after a failover
   * and parked them behind their keys). With offsets (exactly-once) each stays listed in its lane's
   * offset and is deleted, not sent, should this task be handed it again under any token, as a
   * restarted task does with its committed offsets; without, they are settled (whoever holds the
   * lane sends them again: at-least-once duplicates). Task thread.
   */
  void notDeleted(Collection<DeliveryToken> tokens) {
    if (!tracksOffsets) {
      settled(tokens);
      return;
    }
    for (DeliveryToken token : tokens) {
      emissions.remove(token);
      inHand.remove(token);
      Map<Long, String> sent = sentByLane.get(token.lane());
      String entry = sent == null ? null : sent.get(token.deliveryId());
      if (entry != null) {
        inKafkaBefore(token.lane()).add(entry);
      }
    }
  }

  /** The store deleted, rescheduled or released these: later offsets no longer list them. */
  void settled(Collection<DeliveryToken> tokens) {
    for (DeliveryToken token : tokens) {
      emissions.remove(token);
      inHand.remove(token);
      Map<Long, String> sent = sentByLane.get(token.lane());
      if (sent != null) {
        sent.remove(token.deliveryId());
      }
    }
  }

  /**
   * The lane was taken over: its deliveries are fenced, the new holder sends them again, and
   * acknowledgements still to come for them are ignored. With offsets (exactly-once) what this task
   * sent of the lane and Kafka acknowledged (committed) is in Kafka, so should this task take the
   * lane again and be handed those deliveries under the new lease, they are deleted, not sent
   * again, as a restarted task does with its committed offsets. Not so the records still
   * outstanding: with {@code transaction.boundary=interval} a poll's transaction may still be open
   * at the next poll, and may yet abort. They stay outstanding, listed by the lane's offsets: a
   * copy handed out again meanwhile is handed back ({@link #sentUnderAnotherToken}), and once their
   * transaction commits they are in Kafka like the rest. Records reported not acknowledged (a
   * transform dropped them) are not in Kafka.
   */
  void laneLost(int lane) {
    if (tracksOffsets) {
      Map<Long, String> sent = sentByLane.remove(lane);
      if (sent != null) {
        for (DeliveryToken token : unacknowledged) {
          if (token.lane() == lane) {
            sent.remove(token.deliveryId());
          }
        }
        Map<Long, String> uncommitted = new LinkedHashMap<>();
        for (DeliveryToken token : outstanding) {
          String entry = token.lane() == lane ? sent.remove(token.deliveryId()) : null;
          if (entry != null) {
            uncommitted.put(token.deliveryId(), entry);
          }
        }
        inKafkaBefore(lane).addAll(sent.values());
        if (!uncommitted.isEmpty()) {
          sentByLane.put(lane, uncommitted);
        }
      }
      inHand.removeIf(token -> token.lane() == lane && !outstanding.contains(token));
      emissions.keySet().removeIf(token -> token.lane() == lane && !outstanding.contains(token));
      return;
    }
    inHand.removeIf(token -> token.lane() == lane);
    outstanding.removeIf(token -> token.lane() == lane);
    emissions.keySet().removeIf(token -> token.lane() == lane);
    signalIfQuiet();
  }

  int outstandingCount() {
    return outstanding.size();
  }
}
