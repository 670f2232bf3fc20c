package io.relaybus.connect;

import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The lanes one task incarnation holds, and the named background thread that keeps them.
 *
 * <p><b>Who takes over.</b> Only {@link #start()} takes lanes over at once from a live holder of
 * the same group ({@link OutboxStore#acquireLanes}): a task incarnation is newer than another
 * exactly when it started later. Every renewal round after that asks only for lanes that are free
 * or expired ({@link OutboxStore#acquireFreeLanes}), whichever lanes of the range it lacks: lost
 * ones and ones never granted. So an older incarnation does not take a lane from a newer one (with
 * three overlapping incarnations A, B, C, A cannot take a lane from C and later hand it back
 * unowned), but for a start the task retries after a transient failure: it takes over as a start
 * does, also from an incarnation that started meanwhile (the store cannot tell which is newer; a
 * duplicate per in-flight delivery, documented in guarantees.md). A lane lost to a holder that then
 * relinquishes it or lets its lease lapse comes back within a round or two.
 *
 * <p>Every third of the lease duration the thread renews the held leases; a lease the store does
 * not renew was taken over (a newer incarnation of this task, or anyone after expiry) and is
 * dropped at once: {@link #held()} no longer returns it, so nothing more is claimed from it, and
 * {@link #takeLost()} tells the task thread to forget what it had sent from it. The lane is asked
 * for again only after the task thread took that news, so tokens of the new lease are never
 * forgotten with the old ones.
 *
 * <p>The backlog metrics come from {@link OutboxStore#statistics()}, which scans the outbox. It
 * runs on a thread of its own, never on the renewal thread, so a slow scan cannot delay a renewal
 * past the lease; one at a time, at most every {@link #STATISTICS_INTERVAL} and no more than a
 * tenth of the time (a scan taking 3 s waits 30 s for the next). The same thread reads the
 * database's xmin horizon ({@link OutboxStore#xminHorizon()}) after each scan.
 *
 * <p>If renewals fail (database unreachable), leases lapse by the local clock: a lease whose
 * expiry, counted from before the renewal call that granted it, has passed is not returned by
 * {@link #held()}, so the task stops emitting before anyone else can legitimately take the lane.
 */
final class LaneLeases implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(LaneLeases.class);

  /** How often the task's backlog metrics are refreshed (one statistics query). */
  static final Duration STATISTICS_INTERVAL = Duration.ofSeconds(10);

  private record Held(LaneLease lease, Instant deadline) {}

  private final OutboxStore store;
  private final String owner;
  private final String group;
  private final LaneRange range;
  private final Duration duration;
  private final Clock clock;
  private final TaskMetrics metrics;
  private final Map<Integer, Held> held = new ConcurrentHashMap<>();
  private final ConcurrentLinkedQueue<Integer> lost = new ConcurrentLinkedQueue<>();
  private final ScheduledExecutorService renewer;
  private final ScheduledExecutorService statistics;

  /** Whether stopRenewing() has waited for the renewal thread: stop() waits once, not twice. */
  private final AtomicBoolean renewalStopped = new AtomicBoolean();

  LaneLeases(
      OutboxStore store,
      String owner,
      String group,
      LaneRange range,
      Duration duration,
      Clock clock,
      TaskMetrics metrics,
      String threadName) {
    this.store = store;
    this.owner = owner;
    this.group = group;
    this.range = range;
    this.duration = duration;
    this.clock = clock;
    this.metrics = metrics;
    this.renewer = daemon(threadName);
    String statisticsThread = threadName.replace("lease-renewal", "statistics");
    this.statistics =
        daemon(statisticsThread.equals(threadName) ? threadName + "-statistics" : statisticsThread);
  }

  private static ScheduledExecutorService daemon(String name) {
    return Executors.newSingleThreadScheduledExecutor(
        runnable -> {
          Thread thread = new Thread(runnable, name);
          thread.setDaemon(true);
          return thread;
        });
  }

  /**
   * Leases the range once, on the caller's thread, taking lanes over at once from older
   * incarnations of the group; then renews in the background.
   */
  void start() {
    acquireMissing(true);
    long period = Math.max(1, duration.toMillis() / 3);
    renewer.scheduleWithFixedDelay(this::renewQuietly, period, period, TimeUnit.MILLISECONDS);
    statistics.schedule(this::refreshStatistics, 0, TimeUnit.MILLISECONDS);
  }

  /** Leases usable now, in lane order: held, and not past their local deadline. */
  List<LaneLease> held() {
    Instant now = clock.instant();
    List<LaneLease> usable = new ArrayList<>();
    for (Held h : held.values()) {
      if (h.deadline().isAfter(now)) {
        usable.add(h.lease());
      }
    }
    usable.sort(Comparator.comparingInt(LaneLease::lane));
    return usable;
  }

  /** Lanes lost since the last call. */
  List<Integer> takeLost() {
    List<Integer> lanes = new ArrayList<>();
    Integer lane;
    while ((lane = lost.poll()) != null) {
      lanes.add(lane);
    }
    return lanes;
  }

  // visible for testing
  void renew() {
    Instant before = clock.instant();
    List<LaneLease> current = held.values().stream().map(Held::lease).toList();
    if (!current.isEmpty()) {
      List<LaneLease> renewed = store.renewLanes(owner, current, duration);
      Set<Integer> kept = new TreeSet<>();
      for (LaneLease lease : renewed) {
        held.put(lease.lane(), new Held(lease, before.plus(duration)));
        kept.add(lease.lane());
      }
      Set<Integer> gone = new TreeSet<>();
      for (LaneLease lease : current) {
        if (!kept.contains(lease.lane())) {
          held.remove(lease.lane());
          lost.add(lease.lane());
          gone.add(lease.lane());
        }
      }
      if (!gone.isEmpty()) {
        log.info(
            "{} lost lanes {} to another holder; no more records from them, their unacknowledged"
                + " records will be sent again by the new holder. Asking for them again once"
                + " they are free or expired",
            owner,
            gone);
      }
    }
    acquireMissing(false);
  }

  private void renewQuietly() {
    try {
      renew();
    } catch (OutboxStoreException | IllegalStateException e) {
      metrics.renewalFailed();
      log.warn(
          "{} could not renew its lane leases; retrying in {} ms. Leases lapse at their expiry and"
              + " the task stops emitting from them",
          owner,
          Math.max(1, duration.toMillis() / 3),
          e);
    } catch (RuntimeException e) {
      metrics.renewalFailed();
      log.error("{} lease renewal failed unexpectedly; retrying", owner, e);
    }
  }

  private void acquireMissing(boolean takeOver) {
    List<Integer> missing = new ArrayList<>();
    for (int lane : range.lanes()) {
      // A lost lane whose loss the task thread has not taken yet waits a round (see class doc).
      if (!held.containsKey(lane) && !lost.contains(lane)) {
        missing.add(lane);
      }
    }
    if (!missing.isEmpty()) {
      Instant before = clock.instant();
      List<LaneLease> granted =
          takeOver
              ? store.acquireLanes(owner, group, missing, duration)
              : store.acquireFreeLanes(owner, group, missing, duration);
      int takenOver = 0;
      int charged = 0;
      for (LaneLease lease : granted) {
        held.put(lease.lane(), new Held(lease, before.plus(duration)));
        takenOver += lease.takenOver() ? 1 : 0;
        charged += lease.charged();
      }
      metrics.takeovers(takenOver);
      if (!granted.isEmpty()) {
        log.info(
            "{} leased {} of {} lanes {}: {} taken over, {} in-flight deliveries of the previous"
                + " holders charged one attempt",
            owner,
            granted.size(),
            missing.size(),
            range,
            takenOver,
            charged);
      }
    }
    metrics.lanesHeld(held.size());
  }

  /** One statistics scan, then the next one scheduled: see the class doc for the spacing. */
  private void refreshStatistics() {
    long started = System.nanoTime();
    try {
      OutboxStatistics outbox = store.statistics();
      long backlog = 0;
      for (int lane : range.lanes()) {
        backlog += outbox.laneBacklog().get(lane);
      }
      metrics.backlog(backlog, outbox.oldestPendingAge().toMillis());
      metrics.outbox(outbox);
      metrics.xminHorizon(store.xminHorizon());
    } catch (RuntimeException e) {
      if (statistics.isShutdown()) {
        return; // stopping: the store is closing under the scan
      }
      log.warn("{} could not read the outbox statistics for its backlog metrics", owner, e);
    }
    long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
    long nextMs = Math.max(STATISTICS_INTERVAL.toMillis(), 10 * tookMs);
    try {
      statistics.schedule(this::refreshStatistics, nextMs, TimeUnit.MILLISECONDS);
    } catch (RejectedExecutionException e) {
      // stopping
    }
  }

  /**
   * Stops renewing and hands the held lanes back: their in-flight deliveries become pending again
   * with no attempt charged. Returns how many lanes were released.
   */
  int relinquish() {
    stopRenewing();
    List<LaneLease> leases = held.values().stream().map(Held::lease).toList();
    held.clear();
    metrics.lanesHeld(0);
    return leases.isEmpty() ? 0 : store.relinquishLanes(owner, leases);
  }

  private void stopRenewing() {
    // A scan in progress is not waited for: it only feeds metrics, and its connection is returned
    // when the store closes.
    statistics.shutdownNow();
    // shutdown(), not shutdownNow(): a renewal in progress finishes rather than being interrupted
    // inside a JDBC call; the periodic schedule is cancelled.
    renewer.shutdown();
    if (renewalStopped.getAndSet(true)) {
      return; // waited already (relinquish, then close): a hung renewal costs one wait
    }
    try {
      if (!renewer.awaitTermination(10, TimeUnit.SECONDS)) {
        log.warn("{} lease renewal thread did not stop within 10 s", owner);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void close() {
    stopRenewing();
  }
}
