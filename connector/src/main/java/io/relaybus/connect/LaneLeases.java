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
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The lanes one task incarnation holds, and the named background thread that keeps them.
 *
 * <p>Every third of the lease duration the thread renews the held leases; a lease the store does
 * not renew was taken over (a newer incarnation of this task, or anyone after expiry) and is
 * dropped at once: {@link #held()} no longer returns it, so nothing more is claimed from it, and
 * {@link #takeLost()} tells the task thread to forget what it had sent from it. A lost lane is not
 * taken back: the taker is a newer incarnation, and fighting it would fence both in turn. Lanes of
 * the range never acquired (held live by another group) are asked for again each round and are
 * granted after the holder's lease expires.
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
  private final Set<Integer> lostForGood = ConcurrentHashMap.newKeySet();
  private final ConcurrentLinkedQueue<Integer> lost = new ConcurrentLinkedQueue<>();
  private final ScheduledExecutorService renewer;
  private Instant lastStatistics = Instant.MIN;

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
    this.renewer =
        Executors.newSingleThreadScheduledExecutor(
            runnable -> {
              Thread thread = new Thread(runnable, threadName);
              thread.setDaemon(true);
              return thread;
            });
  }

  /** Leases the range once, on the caller's thread; then renews in the background. */
  void start() {
    acquireMissing();
    long period = Math.max(1, duration.toMillis() / 3);
    renewer.scheduleWithFixedDelay(this::renewQuietly, period, period, TimeUnit.MILLISECONDS);
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
          lostForGood.add(lease.lane());
          lost.add(lease.lane());
          gone.add(lease.lane());
        }
      }
      if (!gone.isEmpty()) {
        log.info(
            "{} lost lanes {} to another holder; no more records from them, their unacknowledged"
                + " records will be sent again by the new holder",
            owner,
            gone);
      }
    }
    acquireMissing();
    refreshStatistics();
  }

  private void renewQuietly() {
    try {
      renew();
    } catch (OutboxStoreException | IllegalStateException e) {
      log.warn(
          "{} could not renew its lane leases; retrying in {} ms. Leases lapse at their expiry and"
              + " the task stops emitting from them",
          owner,
          Math.max(1, duration.toMillis() / 3),
          e);
    } catch (RuntimeException e) {
      log.error("{} lease renewal failed unexpectedly; retrying", owner, e);
    }
  }

  private void acquireMissing() {
    List<Integer> missing = new ArrayList<>();
    for (int lane : range.lanes()) {
      if (!held.containsKey(lane) && !lostForGood.contains(lane)) {
        missing.add(lane);
      }
    }
    if (!missing.isEmpty()) {
      Instant before = clock.instant();
      List<LaneLease> granted = store.acquireLanes(owner, group, missing, duration);
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

  private void refreshStatistics() {
    Instant now = clock.instant();
    if (Duration.between(lastStatistics, now).compareTo(STATISTICS_INTERVAL) < 0) {
      return;
    }
    lastStatistics = now;
    OutboxStatistics statistics = store.statistics();
    long backlog = 0;
    for (int lane : range.lanes()) {
      backlog += statistics.laneBacklog().get(lane);
    }
    metrics.backlog(backlog, statistics.oldestPendingAge().toMillis());
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
    // shutdown(), not shutdownNow(): a renewal in progress finishes rather than being interrupted
    // inside a JDBC call; the periodic schedule is cancelled.
    renewer.shutdown();
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
