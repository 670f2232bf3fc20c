package io.relaybus.connect;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BiFunction;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.source.SourceTask;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Sends the deliveries of one lane range to Kafka.
 *
 * <ul>
 *   <li>{@code start}: leases its lanes ({@link LaneLeases}; the connector name is the lease group,
 *       so a restarted incarnation or a task of a newer configuration takes over at once).
 *   <li>{@code poll}: deletes what Kafka acknowledged (batched, fenced), retries what it did not,
 *       claims a batch from the lanes still held, maps each delivery ({@link RecordMapper}), and
 *       dead-letters the ones that cannot become a record. When a claim found nothing it waits for
 *       the store's wake-up ({@link OutboxStore#awaitWork}: a publish committed) or {@code
 *       poll.interval.ms}, whichever comes first, and returns within about a second when idle. With
 *       {@code poll.linger.ms}, a claim that could have taken more is followed by the next no
 *       sooner than that long after it began, wake-up or not: fewer, fuller claims.
 *   <li>{@code commitRecord}: only records the acknowledgement ({@link Acknowledgements}).
 *   <li>{@code stop}: deletes what was acknowledged, charges one attempt to each record Kafka never
 *       acknowledged, then relinquishes the lanes, which hands back what was claimed but never
 *       returned from {@code poll} without charging it.
 * </ul>
 *
 * <p><b>A record that fails its task</b> (under {@code errors.tolerance=none}: the broker or
 * producer rejects it, a transform or converter throws on it) never gets a {@code commitRecord}:
 * Connect stops sending at the failure, waits up to {@code offset.flush.timeout.ms} for the
 * producer, and then calls {@code stop()}. So at stop the records still unacknowledged are the
 * culprit, the records of its batch Connect never sent, and records stuck behind an unreachable
 * broker; each is charged one attempt ({@link #STOPPED_UNACKNOWLEDGED}), and a delivery whose
 * attempts are spent is dead-lettered with that reason. After a <b>retry</b> (a delivery with a
 * failed attempt) nothing more of its key is sent until Kafka acknowledged it, so the key's later
 * records never reach Kafka before it is settled; a <b>suspect</b> (two failed attempts or more)
 * goes out alone, once nothing else is in flight, so if it fails its task again it is the only
 * record charged. So the culprit ends dead after {@code retry.max.attempts} task failures, and a
 * bystander (a record Connect had not sent yet when the culprit failed) is charged at most twice.
 * If Kafka acknowledged a later record of the key while the record stayed unacknowledged (possible
 * at its first failure only), a retry would land after it: it is dead-lettered at once ({@link
 * #OVERTAKEN}). The cost: a graceful stop charges an attempt to the records Kafka did not
 * acknowledge within {@code offset.flush.timeout.ms} (a broker outage); suspects go out one at a
 * time; a retried key's later records wait for one acknowledgement.
 *
 * <p><b>{@code commitRecord} with {@code metadata == null}</b> means Kafka may not have the record:
 * a transform filtered it, or the producer failed under {@code errors.tolerance=all}. The delivery
 * is then never deleted: it is rescheduled with backoff and, once {@code retry.max.attempts} are
 * spent, dead-lettered with the reason, where {@code requeue} can bring it back. Connect reports it
 * before the later records of its key, which its producer goes on sending: while one of them is in
 * flight the decision waits, and if Kafka acknowledges one, the record is dead-lettered as {@link
 * #OVERTAKEN} instead (a retry would land after it). So do not filter outbox records with a
 * transform (route handlers with {@code topic.map} instead, or do not publish to them): every
 * filtered record costs all its attempts and ends as a dead letter ({@code validate()} refuses
 * Kafka's {@code Filter}). In exactly-once mode the lane's offset committed with the transaction
 * would name a dropped record as sent, so offsets are not trusted where anything may drop one
 * ({@link OutboxSourceTaskConfig#resumeFromOffsets()}).
 */
public class OutboxSourceTask extends SourceTask {
  private static final Logger log = LoggerFactory.getLogger(OutboxSourceTask.class);

  /** poll() never waits longer than this, so Connect can pause, stop or commit in time. */
  static final Duration MAX_IDLE_WAIT = Duration.ofSeconds(1);

  /**
   * After a claim that found nothing while records are outstanding, the task claims again once
   * Kafka acknowledged them or after this wait, whichever comes first; each further empty claim
   * doubles it, up to {@link #MAX_IDLE_WAIT}, and a claim that takes something resets it.
   */
  static final Duration FIRST_EMPTY_CLAIM_WAIT = Duration.ofMillis(10);

  /**
   * After a poll that failed (the store threw), the next one waits this long before it touches the
   * store, doubling while polls keep failing, up to poll.interval.ms; a poll that succeeds resets
   * it. Connect polls again at once after a RetriableException.
   */
  static final Duration FIRST_FAILURE_BACKOFF = Duration.ofMillis(100);

  /** A delivery that failed this many attempts goes out alone (see takeSendable). */
  static final int SUSPECT_ATTEMPTS = 2;

  /** Unacknowledged records a task keeps at most, in batches. */
  static final int MAX_IN_FLIGHT_BATCHES = 4;

  static final String STOPPED_UNACKNOWLEDGED =
      "the task stopped with the record unacknowledged by Kafka: the broker or producer rejected it"
          + " (larger than the topic's max.message.bytes or the producer's max.request.size, not"
          + " authorized for the topic), a transform or converter failed on it under"
          + " errors.tolerance=none, or Kafka was unreachable; see the worker log";

  static final String OVERTAKEN =
      "Kafka never acknowledged the record but acknowledged a later record of its key sent after"
          + " it: the broker or producer rejected it (larger than the topic's max.message.bytes or"
          + " the producer's max.request.size, not authorized for the topic; see the worker log)"
          + " or a transform dropped it, and sending it again would put it after its key's later"
          + " events. Requeue it to send it out of order";

  static final String NOT_ACKNOWLEDGED =
      "Kafka did not acknowledge the record: a transform filtered it or the producer failed under"
          + " errors.tolerance=all";

  private final BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory;
  private final Clock clock;
  private final ReentrantLock lock = new ReentrantLock();
  private final CountDownLatch stopRequested = new CountDownLatch(1);

  private OutboxSourceTaskConfig config;
  private OutboxStore store;
  private String owner;
  private TaskMetrics metrics;
  private LaneLeases lanes;
  private RecordMapper mapper;
  private Acknowledgements acks;

  /** Claimed, not yet returned from poll (in claim order); handed back uncharged at stop. */
  private final Deque<ClaimedDelivery> claimed = new ArrayDeque<>();

  private DeliveryToken isolated; // the suspect last returned alone

  /** Per order key, its retry returned from poll and not yet acknowledged. Task thread. */
  private final Map<String, DeliveryToken> retriesInFlight = new HashMap<>();

  private Instant nextClaimAt = Instant.MIN;

  /**
   * No claim before this (poll.linger.ms after a claim that could have taken more began), not even
   * after a wake-up; {@link Instant#MIN} when not lingering.
   */
  private Instant lingerUntil = Instant.MIN;

  private long emptyClaimWaitMs = FIRST_EMPTY_CLAIM_WAIT.toMillis();

  /** Task thread: the next backoff after a failed poll, and no store work before retryAt. */
  private long failureBackoffMs = FIRST_FAILURE_BACKOFF.toMillis();

  private long retryAt = System.nanoTime();
  private boolean stopped;

  /** start() has yet to hold the store and its lanes (a transient failure): poll() tries again. */
  private boolean starting;

  public OutboxSourceTask() {
    this(
        (config, name) -> OutboxStores.open(config, name, config.connectionPoolSize()),
        Clock.systemUTC());
  }

  // visible for testing
  OutboxSourceTask(BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory, Clock clock) {
    this.storeFactory = storeFactory;
    this.clock = clock;
  }

  @Override
  public String version() {
    return Version.get();
  }

  @Override
  public void start(Map<String, String> props) {
    long started = System.nanoTime();
    OutboxSourceTaskConfig parsed = new OutboxSourceTaskConfig(props);
    // Connect starts a task from its stored configuration even when its connector failed on it
    ConnectorValidation.requireValid(props);
    config = parsed;
    // stamped with this start, not a retried one's: a later start is a newer incarnation
    owner = LaneLeases.owner(taskName(), clock.instant());
    try {
      mapper = RecordMapper.from(config);
      acks =
          new Acknowledgements(
              config.completionFlushSize(),
              config.completionFlushInterval(),
              clock,
              config.resumeFromOffsets());
      metrics = new TaskMetrics(config.connectorName(), config.taskIndex());
      metrics.completionLag(acks::acknowledgedCount);
      if (config.exactlyOnceRequired() && !config.transformsThatMayDrop().isEmpty()) {
        log.warn(
            "{}: exactly-once: the transforms {} may drop records, and Connect commits the offsets"
                + " of a poll's other records before it tells the task of a drop; so the lanes'"
                + " offsets are not trusted to say which deliveries Kafka has, and after a restart"
                + " the deliveries in flight go out again (at least once) rather than a dropped one"
                + " being deleted unsent. Kafka's own transforms other than Filter keep every"
                + " record.",
            taskName(),
            config.transformsThatMayDrop());
      }
      starting = true;
      tryToStart();
    } catch (RuntimeException e) {
      stopped = true;
      closeQuietly();
      throw e;
    }
    if (!starting) {
      log.info(
          "Starting {} (lanes {}, owner {}) took {} ms.",
          taskName(),
          config.lanes(),
          owner,
          TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
    }
  }

  private String taskName() {
    return config.connectorName() + "/task-" + config.taskIndex();
  }

  /**
   * The part of the start that needs the store: open it, check its schema, read the exactly-once
   * offsets, lease the lanes. Kafka Connect never calls {@code start()} again, so a transient
   * failure (the server restarting or failing over, a deadlock) does not fail the task: it stays
   * RUNNING with no lane, says so, and {@link #poll()} tries again after a backoff. A permanent
   * failure (no schema, no permission) fails the task at once.
   */
  private void tryToStart() {
    String task = taskName();
    try {
      if (store == null) {
        store = storeFactory.apply(config, "relaybus-connect " + task);
      }
      store.verifySchema();
      if (lanes == null) {
        lanes =
            new LaneLeases(
                store,
                owner,
                config.connectorName(),
                config.lanes(),
                config.leaseDuration(),
                clock,
                metrics,
                "relaybus-lease-renewal-" + task);
      }
      if (config.resumeFromOffsets()) {
        Map<Integer, Set<String>> listed =
            LaneOffsets.read(context.offsetStorageReader(), config.lanes());
        // what was deleted after the offsets were committed is never handed out again: named
        // still, it would stay in the lanes' offsets for good, growing with every restart
        Map<Integer, Set<String>> sent = LaneOffsets.remaining(store, listed);
        acks.inKafkaBeforeStart(sent);
        int inKafka = sent.values().stream().mapToInt(Set::size).sum();
        log.info(
            "{}: exactly-once: {} deliveries already in Kafka per committed offsets will be"
                + " deleted, not sent again ({} more the offsets named were deleted already)",
            task,
            inKafka,
            listed.values().stream().mapToInt(Set::size).sum() - inKafka);
      }
      lanes.start();
      starting = false;
      failureBackoffMs = FIRST_FAILURE_BACKOFF.toMillis();
    } catch (OutboxStoreException e) {
      if (!e.isTransient()) {
        throw OutboxStores.translate("Starting task " + task, e);
      }
      long backoffMs = backOffAfterFailure();
      log.warn(
          "Starting {} failed on a transient store error; trying again in {} ms (the task stays"
              + " RUNNING and emits nothing until it holds its lanes): {}",
          task,
          backoffMs,
          e.getMessage());
    }
  }

  /**
   * After a failed store call: no store work for the current backoff, and the next one doubled (at
   * most the poll interval, at least the first backoff). Returns the backoff now in force, in ms.
   */
  private long backOffAfterFailure() {
    long backoffMs = failureBackoffMs;
    retryAt = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs);
    failureBackoffMs =
        Math.min(
            2 * backoffMs,
            Math.max(FIRST_FAILURE_BACKOFF.toMillis(), config.pollInterval().toMillis()));
    return backoffMs;
  }

  @Override
  public List<SourceRecord> poll() throws InterruptedException {
    long backoff = retryAt - System.nanoTime();
    if (backoff > 0) { // the last poll failed: not again at once (stop() ends the wait)
      stopRequested.await(Math.min(backoff, MAX_IDLE_WAIT.toNanos()), TimeUnit.NANOSECONDS);
      if (retryAt - System.nanoTime() > 0) {
        return null;
      }
    }
    Duration idle;
    boolean waitForWork = false;
    boolean emptyClaimHadRoom = false;
    OutboxStoreException failure = null;
    lock.lock();
    try {
      if (stopped) {
        return null;
      }
      if (starting) {
        tryToStart();
        if (starting) {
          return null;
        }
        log.info("Started {} (lanes {}, owner {}).", taskName(), config.lanes(), owner);
      }
      housekeeping();
      Instant now = clock.instant();
      if (!claimed.isEmpty()) {
        List<ClaimedDelivery> next = takeSendable();
        if (!next.isEmpty()) {
          return send(next);
        }
      }
      // Claimed deliveries that all wait (a key's later ones behind its retry awaiting Kafka's
      // acknowledgement, or their lane) do not stop the claim: what it takes goes after them in
      // claim order, so takeSendable keeps a waiting key's later deliveries behind it.
      if ((claimed.isEmpty() || mayClaimBehindWaiting()) && !now.isBefore(nextClaimAt)) {
        takeWakeUps();
        int limit =
            hasRoom() ? Math.max(0, Math.min(config.batchSize(), room() - claimed.size())) : 0;
        boolean room = limit > 0;
        List<ClaimedDelivery> batch = claim(limit);
        boolean full = batch.size() >= limit; // more may be waiting: claim again at once
        Duration linger = config.pollLinger();
        lingerUntil = !room || full || linger.isZero() ? Instant.MIN : now.plus(linger);
        if (batch.isEmpty()) {
          // With records outstanding, claim again once Kafka acknowledged them (a key's later
          // deliveries off the happy path wait for its earlier ones to be done), or, when the
          // claim had room, after a short wait (emptyClaimWaitMs) if that comes first: an event
          // published meanwhile must not wait for the last batch's acknowledgements.
          nextClaimAt = acks.outstandingCount() > 0 ? now : now.plus(config.pollInterval());
          emptyClaimHadRoom = room;
        } else {
          emptyClaimWaitMs = FIRST_EMPTY_CLAIM_WAIT.toMillis();
          if (lingerUntil.isAfter(nextClaimAt)) {
            nextClaimAt = lingerUntil; // fewer, fuller claims (an empty one waits as above)
          }
        }
        Set<DeliveryToken> kept = new HashSet<>();
        claimed.forEach(delivery -> kept.add(delivery.token()));
        for (ClaimedDelivery delivery : batch) {
          // handed out again under a token this task has on its way (the store read the lane
          // again): not kept for later, where the copy on its way might be settled first; nor
          // twice when it still waits here
          if (!acks.inHand(delivery) && kept.add(delivery.token())) {
            claimed.add(delivery);
          }
        }
        if (!claimed.isEmpty()) {
          List<ClaimedDelivery> next = takeSendable();
          if (!next.isEmpty()) {
            return send(next);
          }
        }
      }
      if (!claimed.isEmpty()) {
        idle = null; // what is left waits for acknowledgements (or for its lane)
      } else if (acks.outstandingCount() > 0 && !nextClaimAt.isAfter(now)) {
        idle = null; // wait for the acknowledgements, then claim
      } else {
        idle = Duration.between(now, nextClaimAt);
        // lingering, the next claim is due when the linger ends whatever is published meanwhile:
        // nothing to listen for (a listener makes the publishers notify)
        waitForWork = nextClaimAt.isAfter(lingerUntil);
      }
    } catch (OutboxStoreException e) {
      failure = e;
      throw OutboxStores.translate("Polling the outbox", e);
    } finally {
      if (failure == null) {
        failureBackoffMs = FIRST_FAILURE_BACKOFF.toMillis();
      } else {
        backOffAfterFailure();
      }
      lock.unlock();
    }
    if (idle == null) { // claimed deliveries wait: for Kafka's acknowledgements, or for their lane
      if (acks.outstandingCount() > 0) {
        if (emptyClaimHadRoom) {
          long waitMs = emptyClaimWaitMs;
          emptyClaimWaitMs = Math.min(2 * waitMs, MAX_IDLE_WAIT.toMillis());
          acks.awaitNoneOutstanding(Duration.ofMillis(waitMs));
        } else {
          // Also without room: claiming again as soon as one batch fits was tried and raised p99
          // at 4,000 and 8,000/s in every paired run (docs/benchmarks.md, 2026-12-05).
          acks.awaitNoneOutstanding(MAX_IDLE_WAIT);
        }
        return null;
      }
      idle = config.pollInterval();
    }
    if (lanes.held().isEmpty()) {
      // Holding no lane, the task has nothing to claim and its store has never claimed: a wait for
      // work would take any row as news and return at once, and the empty claims' short waits
      // would make it poll as fast; it sleeps a poll interval (at most MAX_IDLE_WAIT) instead.
      idle = config.pollInterval();
      waitForWork = false;
    }
    long waitMs = Math.min(idle.toMillis(), MAX_IDLE_WAIT.toMillis());
    if (waitMs <= 0 || stopRequested.getCount() == 0) {
      return null;
    }
    if (!waitForWork) {
      stopRequested.await(waitMs, TimeUnit.MILLISECONDS);
    } else if (awaitWork(Duration.ofMillis(waitMs))) {
      lock.lock();
      try {
        // claim at the next poll, which Connect makes at once (or once a linger ends)
        nextClaimAt = lingerUntil;
      } finally {
        lock.unlock();
      }
    }
    return null;
  }

  /** Maps {@code next} to records; null when none is left (Connect polls again at once). */
  private List<SourceRecord> send(List<ClaimedDelivery> next) {
    List<SourceRecord> records = toRecords(next);
    if (!records.isEmpty()) {
      CrashPoints.pass( // test only
          CrashPoints.Point.BEFORE_SEND, config.connectorName(), records.size());
    }
    // A batch whose every delivery was dead-lettered or already sent returns null: Connect
    // polls again at once.
    return records.isEmpty() ? null : records;
  }

  /**
   * Whether the task may claim while every claimed delivery waits. Not while a suspect waits to go
   * alone, or is out alone: it needs nothing else in flight, and more records sent meanwhile could
   * keep it waiting for good.
   */
  private boolean mayClaimBehindWaiting() {
    if (isolated != null && acks.isOutstanding(isolated)) {
      return false;
    }
    for (ClaimedDelivery delivery : claimed) {
      if (delivery.attempts() >= SUSPECT_ATTEMPTS) {
        return false;
      }
    }
    return true;
  }

  /**
   * Waits for the store's sign of new deliveries ({@link OutboxStore#awaitWork}: on PostgreSQL a
   * NOTIFY from the publishing commit), at most {@code timeout}, which keeps the poll interval as
   * the safety net for what comes due without a publish (timers, retries, requeues, regained
   * lanes). stop() does not wait for it: it closes the store, which ends the wait. A failure here
   * never stops delivery: the task sleeps instead and claims at its next poll.
   */
  private boolean awaitWork(Duration timeout) throws InterruptedException {
    long started = System.nanoTime();
    try {
      boolean woken = store.awaitWork(timeout);
      if (woken) {
        metrics.wokenUp();
      }
      return woken;
    } catch (RuntimeException e) {
      log.warn("{} could not wait for new deliveries; sleeping instead", owner, e);
      long left = timeout.toNanos() - (System.nanoTime() - started);
      if (left > 0) {
        stopRequested.await(left, TimeUnit.NANOSECONDS);
      }
      return false;
    }
  }

  /**
   * Takes the wake-ups that came before this claim (it sees what they announced), so they do not
   * end the next idle wait for nothing; under load it also keeps the listener's socket drained.
   */
  private void takeWakeUps() throws InterruptedException {
    try {
      store.awaitWork(Duration.ZERO);
    } catch (RuntimeException e) {
      log.debug("{} could not take pending wake-ups", owner, e);
    }
  }

  /**
   * What poll may return now from the claimed deliveries, in claim order, skipping (for a later
   * poll) those that must wait:
   *
   * <ul>
   *   <li>a delivery of a key whose retry is unacknowledged: after a retry of a key (a delivery
   *       with a failed attempt) nothing more of that key is sent until Kafka acknowledged it, so a
   *       retry that is rejected again has nothing of its key after it in Kafka;
   *   <li>a suspect (failed {@link #SUSPECT_ATTEMPTS} attempts or more) and its key's later
   *       deliveries: a suspect goes out alone, once nothing is in flight, and nothing follows it
   *       until Kafka acknowledged it. If it fails the task again it is the only record
   *       unacknowledged at stop, so it alone is charged;
   *   <li>deliveries of a lane whose lease lapsed (sent if the lease is renewed, dropped if the
   *       lane is lost).
   * </ul>
   *
   * A first retry is not sent alone: after a crash every delivery the lost task had in flight is a
   * retry, and they must flow at full speed. So a record that fails its task is charged with the
   * records Connect had not sent yet at the first two failures (each of those bystanders at most
   * twice), then alone.
   */
  private List<ClaimedDelivery> takeSendable() {
    if (isolated != null && acks.isOutstanding(isolated)) {
      return List.of();
    }
    isolated = null;
    retriesInFlight.values().removeIf(token -> !acks.isOutstanding(token));
    Set<Integer> usable = new HashSet<>();
    lanes.held().forEach(lease -> usable.add(lease.lane()));
    Set<String> waiting = new HashSet<>(retriesInFlight.keySet());
    List<ClaimedDelivery> run = new ArrayList<>();
    for (Iterator<ClaimedDelivery> it = claimed.iterator(); it.hasNext(); ) {
      ClaimedDelivery delivery = it.next();
      String key = Acknowledgements.orderKey(delivery);
      if (!usable.contains(delivery.lane()) || (key != null && waiting.contains(key))) {
        continue; // the key's later deliveries are on the same lane and wait too
      }
      if (delivery.attempts() >= SUSPECT_ATTEMPTS) {
        if (run.isEmpty() && acks.outstandingCount() == 0) {
          it.remove();
          isolated = delivery.token();
          return List.of(delivery);
        }
        if (key != null) {
          waiting.add(key);
        }
        continue;
      }
      it.remove();
      run.add(delivery);
      if (delivery.attempts() > 0 && key != null) {
        retriesInFlight.put(key, delivery.token());
        waiting.add(key);
      }
    }
    return run;
  }

  /** How many more records may be in flight: at most {@link #MAX_IN_FLIGHT_BATCHES} batches. */
  private int room() {
    return MAX_IN_FLIGHT_BATCHES * config.batchSize() - acks.outstandingCount();
  }

  /** Whether a claim now could take anything: it holds lanes and has room. */
  private boolean hasRoom() {
    return !lanes.held().isEmpty() && room() > 0;
  }

  /** Claims at most {@code limit} deliveries from the lanes still held (none when 0). */
  private List<ClaimedDelivery> claim(int limit) {
    List<LaneLease> leases = lanes.held();
    if (leases.isEmpty() || limit <= 0) {
      return List.of();
    }
    List<ClaimedDelivery> batch = store.claim(owner, leases, limit);
    metrics.claimed(batch.size());
    if (!batch.isEmpty()) {
      log.debug("{} claimed {} deliveries from {} lanes", owner, batch.size(), leases.size());
    }
    return batch;
  }

  /**
   * Maps a claimed batch to records. Offsets (see {@link LaneOffsets}): a lane's records share the
   * lane's offset from before the batch, and its last record carries the offset that lists the
   * batch too: one offset computed per lane and batch, not one per record.
   */
  private List<SourceRecord> toRecords(List<ClaimedDelivery> batch) {
    List<SourceRecord> records = new ArrayList<>(batch.size());
    Map<Integer, Map<String, Object>> offsetBefore = new HashMap<>();
    Map<Integer, Integer> lastOfLane = new HashMap<>();
    int buried = 0;
    for (ClaimedDelivery delivery : batch) {
      if (acks.sentUnderAnotherToken(delivery)) {
        log.trace("{} sent before under another token; not sent twice", delivery);
        continue;
      }
      if (acks.completeIfSentBefore(delivery)) {
        log.trace("{} already in Kafka per committed offsets; deleting it", delivery);
        continue;
      }
      try {
        DeliveryRecord record =
            mapper.toRecord(
                delivery,
                LaneOffsets.partition(delivery.lane()),
                () -> {
                  Map<String, Object> before =
                      offsetBefore.computeIfAbsent(delivery.lane(), acks::offset);
                  acks.emitted(delivery);
                  return before;
                });
        acks.sentTo(delivery, record.topic());
        records.add(record);
        lastOfLane.put(delivery.lane(), records.size() - 1);
        log.trace("{} -> topic {}", delivery, record.topic());
      } catch (UndeliverableException e) {
        buried += bury(delivery, e.getMessage()) ? 1 : 0;
      } catch (RuntimeException e) {
        // A bug, not the data's fault; still never allowed to stop the stream. The exception's
        // message may quote the payload, so only its class goes into the reason and the log.
        log.debug("Mapping {} failed", delivery, e);
        buried +=
            bury(
                    delivery,
                    "unexpected error turning the delivery into a record: "
                        + e.getClass().getName())
                ? 1
                : 0;
      }
    }
    if (acks.tracksOffsets()) {
      lastOfLane.forEach(
          (lane, index) ->
              records.set(
                  index, ((DeliveryRecord) records.get(index)).withOffset(acks.offset(lane))));
    }
    metrics.emitted(records.size());
    metrics.deadLettered(buried);
    metrics.inFlight(acks.outstandingCount());
    return records;
  }

  /**
   * Dead-letters a delivery. If the store cannot do it now, the delivery is handed back at the next
   * poll instead (it was claimed but never sent, and would otherwise hold back its key).
   */
  private boolean bury(ClaimedDelivery delivery, String reason) {
    try {
      if (store.bury(delivery.token(), reason)) {
        log.warn("Dead-lettered {}: {}", delivery, reason);
        return true;
      }
      return false;
    } catch (OutboxStoreException e) {
      log.warn("Could not dead-letter {} ({}); handing it back to retry", delivery, reason, e);
      acks.releaseLater(delivery.token());
      return false;
    }
  }

  /** Lost lanes, deletions, retries: the source-side work, on the task thread, in batches. */
  private void housekeeping() {
    for (int lane : lanes.takeLost()) {
      acks.laneLost(lane);
      // Fenced: the lane's new holder claims them again.
      claimed.removeIf(delivery -> delivery.lane() == lane);
    }
    if (acks.flushDue()) {
      flushCompletions();
    }
    List<DeliveryToken> unsent = acks.drainToRelease();
    if (!unsent.isEmpty()) {
      try {
        store.release(unsent);
      } catch (OutboxStoreException e) {
        unsent.forEach(acks::releaseLater);
        throw e;
      }
    }
    rescheduleUnacknowledged();
  }

  /**
   * Reschedules what Kafka did not acknowledge. If the store fails part-way, the tokens not yet
   * rescheduled (the failed one included) are queued again for the next poll: dropped, they would
   * stay in their lane's in-flight set with nothing left to settle them until the lane changes
   * hands. Should the failed call have committed unheard, its second reschedule finds the token
   * stale and changes nothing.
   */
  private void rescheduleUnacknowledged() {
    List<DeliveryToken> drained = acks.drainUnacknowledged();
    Set<DeliveryToken> waiting = acks.withLaterOfTheirKeyOutstanding(drained);
    List<DeliveryToken> decided = new ArrayList<>();
    List<DeliveryToken> undecided = new ArrayList<>();
    for (DeliveryToken token : drained) {
      // Not overtaken yet, with a later record of its key in flight: decided once that one is
      // settled, since a retry sent now could land after it.
      (waiting.contains(token) && !acks.overtaken(token) ? undecided : decided).add(token);
    }
    acks.unacknowledgedAgain(undecided);
    int done = 0;
    int rescheduled = 0;
    int dead = 0;
    int overtaken = 0;
    try {
      for (DeliveryToken token : decided) {
        if (acks.overtaken(token)) {
          overtaken += buryAsOvertaken(token) ? 1 : 0;
        } else {
          FailOutcome outcome = store.reschedule(token, NOT_ACKNOWLEDGED);
          rescheduled += outcome == FailOutcome.RESCHEDULED ? 1 : 0;
          dead += outcome == FailOutcome.DEAD ? 1 : 0;
        }
        done++;
      }
    } catch (RuntimeException e) {
      acks.unacknowledgedAgain(decided.subList(done, decided.size()));
      throw e;
    } finally {
      if (done > 0) {
        acks.settled(decided.subList(0, done));
        metrics.rescheduled(rescheduled);
        metrics.deadLettered(dead + overtaken);
        log.warn(
            "{} records were not acknowledged by Kafka ({} rescheduled, {} dead-lettered): {}",
            done,
            rescheduled,
            dead + overtaken,
            NOT_ACKNOWLEDGED);
      }
    }
  }

  /** Deletes acknowledged deliveries, one fenced statement per batch, while a batch is full. */
  private void flushCompletions() {
    flushCompletions(false);
  }

  /**
   * Deletes acknowledged deliveries, one fenced statement per batch: while a batch is full, or
   * ({@code all}, at stop) until none is left.
   */
  private void flushCompletions(boolean all) {
    List<DeliveryToken> batch;
    while (!(batch = acks.drainAcknowledged()).isEmpty()) {
      Set<Long> deleted;
      CrashPoints.pass( // test only
          CrashPoints.Point.BEFORE_DELETE, config.connectorName(), batch.size());
      try {
        deleted = store.complete(batch);
      } catch (RuntimeException e) {
        // Kafka has these records: keep them queued so the next flush deletes them (a lost
        // connection must not leave delivered rows behind until the task restarts).
        acks.acknowledgedAgain(batch);
        throw e;
      }
      List<DeliveryToken> kept = new ArrayList<>();
      List<DeliveryToken> gone = new ArrayList<>(batch.size());
      for (DeliveryToken token : batch) {
        (deleted.contains(token.deliveryId()) ? gone : kept).add(token);
      }
      acks.settled(gone);
      acks.notDeleted(kept);
      acks.forgetOldAcknowledgements();
      metrics.deleted(deleted.size());
      if (!kept.isEmpty()) {
        log.info(
            "{}: {} of {} acknowledged deliveries were not deleted: their lanes were taken over, or"
                + " the store moved them meanwhile (read again after a failover); {}",
            owner,
            kept.size(),
            batch.size(),
            acks.tracksOffsets()
                ? "this task deletes them, not sends them, if it is handed them again, and its"
                    + " offsets list them for a task that takes the lanes after a restart"
                : "whoever holds the lanes sends them again (at-least-once duplicates)");
      } else {
        log.debug("{} deleted {} delivered rows", owner, deleted.size());
      }
      if (!all && acks.acknowledgedCount() < config.completionFlushSize()) {
        break;
      }
    }
    metrics.inFlight(acks.outstandingCount());
  }

  @Override
  public void commitRecord(SourceRecord record, RecordMetadata metadata) {
    if (!(record instanceof DeliveryRecord delivery)) {
      return;
    }
    if (metadata == null) {
      acks.notAcknowledged(delivery.token());
    } else {
      acks.acknowledged(delivery.token());
      metrics.acknowledged(1);
    }
  }

  /**
   * Connect calls this on the task thread once polling has ended (AbstractWorkerSourceTask#close),
   * after waiting up to offset.flush.timeout.ms for outstanding records; a record acknowledged
   * later than that is sent again by the next holder.
   */
  @Override
  public void stop() {
    stopRequested.countDown();
    if (acks != null) {
      acks.wakeUp();
    }
    lock.lock();
    try {
      if (stopped || config == null) {
        return;
      }
      stopped = true;
      if (starting) { // never held a lane nor claimed: nothing to settle or hand back
        closeQuietly();
        log.info("Stopping {}: it had not started (its store failed transiently).", owner);
        return;
      }
      long started = System.nanoTime();
      int released = 0;
      int charged = 0;
      // Every acknowledged delivery goes, not only full batches: one left would be sent again by
      // the lanes' next holder. Then what Kafka has not acknowledged is taken (an acknowledgement
      // after that is ignored), and what was acknowledged meanwhile goes too.
      flushAllWhileStopping();
      List<DeliveryToken> outstanding = acks.drainOutstanding();
      flushAllWhileStopping();
      try {
        charged = chargeUnacknowledged(outstanding);
      } catch (RuntimeException e) {
        log.warn(
            "{} could not charge its unacknowledged records while stopping; they are handed back"
                + " uncharged",
            owner,
            e);
      }
      try {
        released = lanes == null ? 0 : lanes.relinquish();
      } catch (RuntimeException e) {
        log.warn(
            "{} could not relinquish its lanes; they are free when the lease expires", owner, e);
      }
      closeQuietly();
      log.info(
          "Stopping {} took {} ms: {} records Kafka never acknowledged charged an attempt, {} lanes"
              + " relinquished, claimed records never sent handed back.",
          owner,
          TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started),
          charged,
          released);
    } finally {
      lock.unlock();
    }
  }

  private void flushAllWhileStopping() {
    try {
      flushCompletions(true);
    } catch (RuntimeException e) {
      log.warn("{} could not delete acknowledged deliveries while stopping", owner, e);
    }
  }

  /**
   * At stop: reschedules (charges) every record of {@code emitted} (drained from the outstanding:
   * emitted and never acknowledged), and every record reported unacknowledged and not yet
   * rescheduled. Returns how many were charged.
   */
  private int chargeUnacknowledged(List<DeliveryToken> emitted) {
    List<DeliveryToken> unsent = acks.drainToRelease();
    if (!unsent.isEmpty()) {
      store.release(unsent);
    }
    List<DeliveryToken> unacknowledged = new ArrayList<>();
    int charged = buryOvertaken(acks.drainUnacknowledged(), unacknowledged);
    charged += reschedule(unacknowledged, NOT_ACKNOWLEDGED);
    List<DeliveryToken> outstanding = new ArrayList<>();
    charged += buryOvertaken(emitted, outstanding);
    charged += reschedule(outstanding, STOPPED_UNACKNOWLEDGED);
    if (!outstanding.isEmpty()) {
      log.warn(
          "{} stopped with {} records Kafka never acknowledged; each is charged one attempt: {}",
          owner,
          outstanding.size(),
          STOPPED_UNACKNOWLEDGED);
    }
    return charged;
  }

  /**
   * Dead-letters each record of {@code tokens} Kafka never acknowledged while it acknowledged a
   * later record of its key ({@link Acknowledgements#overtaken}): a retry would land after that
   * one. Adds the others to {@code others}; returns how many were dead-lettered. Task thread.
   */
  private int buryOvertaken(List<DeliveryToken> tokens, List<DeliveryToken> others) {
    int buried = 0;
    for (DeliveryToken token : tokens) {
      if (!acks.overtaken(token)) {
        others.add(token);
        continue;
      }
      if (buryAsOvertaken(token)) {
        metrics.deadLettered(1);
        buried++;
      }
      acks.settled(List.of(token));
    }
    return buried;
  }

  /** Dead-letters the overtaken {@code token} ({@link #OVERTAKEN}); whether the store held it. */
  private boolean buryAsOvertaken(DeliveryToken token) {
    boolean buried = store.bury(token, OVERTAKEN);
    if (buried) {
      log.warn("Dead-lettered delivery {}: {}", token.deliveryId(), OVERTAKEN);
    }
    return buried;
  }

  /** Charges an attempt to each; returns how many the store still held. */
  private int reschedule(List<DeliveryToken> tokens, String reason) {
    int rescheduled = 0;
    int dead = 0;
    for (DeliveryToken token : tokens) {
      FailOutcome outcome = store.reschedule(token, reason);
      rescheduled += outcome == FailOutcome.RESCHEDULED ? 1 : 0;
      dead += outcome == FailOutcome.DEAD ? 1 : 0;
    }
    acks.settled(tokens);
    metrics.rescheduled(rescheduled);
    metrics.deadLettered(dead);
    return rescheduled + dead;
  }

  private void closeQuietly() {
    if (lanes != null) {
      lanes.close();
    }
    if (metrics != null) {
      metrics.close();
    }
    if (store != null) {
      try {
        store.close();
      } catch (RuntimeException e) {
        log.warn("{} could not close the store", owner, e);
      }
    }
  }

  // visible for testing
  TaskMetrics metrics() {
    return metrics;
  }

  /** Runs one renewal round now instead of waiting for the renewal thread. */
  // visible for testing
  void renewLeasesNow() {
    lanes.renew();
  }
}
