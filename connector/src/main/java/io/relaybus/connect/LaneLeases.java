package io.relaybus.connect;

import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.TreeSet;
import java.util.UUID;
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
 * <p><b>Who takes over.</b> An incarnation's owner id carries its start stamp ({@link #owner}): the
 * worker's wall clock when Connect called the task's {@code start()}, so a task incarnation is
 * newer than another exactly when its stamp is later, across the task names of the group too (a
 * tasks.max change gives new ranges to new task names). A task takes a lane over from a live holder
 * of its group ({@link OutboxStore#acquireLanes}, which the store grants to any owner of the group)
 * only from an older one, and only when it starts ({@link #start()}, also a start retried after a
 * transient failure, which may come after a newer incarnation started) or when it lost the lane to
 * an older one (see below). It first asks for the lanes that are free or expired ({@link
 * OutboxStore#acquireFreeLanes}); for the ones still held it reads the lanes' holders ({@link
 * OutboxStore#laneStatus()}, which counts the pending deliveries per lane: a scan like the
 * statistics', so only when a lane is held) and takes over those held by an owner of its group with
 * an older stamp, or with none (a relaybus that did not stamp: an upgrade). The first start follows
 * the same rule as a retried one: it too can come after a newer incarnation's (its store took long
 * to open during a failover), and a first start after a graceful handover finds the lanes free and
 * reads nothing. Every renewal round asks only for the free or expired lanes of the range it lacks:
 * lost ones and ones never granted. So an older incarnation does not keep a lane of a newer one
 * (with three overlapping incarnations A, B, C, A cannot take a lane from C and later hand it back
 * unowned), and a lane lost to a holder that then relinquishes it or lets its lease lapse comes
 * back within a round or two.
 *
 * <p>The read and the takeover are two calls: a newer incarnation whose start took a lane over
 * between them (its own start does not take it over again afterwards: it is over) loses it to the
 * older one. It takes it back: a holder that lost a lane and is refused it by {@link
 * OutboxStore#acquireFreeLanes} reads the holders once, and takes it over from a holder older than
 * itself (an unstamped taker is a start of a relaybus that did not stamp, so newer). The older one,
 * losing it again, finds a newer holder and leaves it; a takeover only ever goes to the later
 * stamp, so two holders cannot take a lane back and forth. Stamps compare the wall clocks of
 * different workers: a skew larger than the time between two starts of one task (seconds at least:
 * Connect starts a newer one once it gave up on the older one's worker) is not expected. With one,
 * the incarnation stamped later counts as newer whichever started later; if that is the older one,
 * its retried start takes the lanes from the newer one as before the stamps (a duplicate per
 * in-flight delivery) and keeps them until Connect stops it.
 *
 * <p>The read of the holders after a loss runs on the renewal thread, in the round after the loss
 * only: a read longer than two thirds of the lease (a backlog of millions) lets the held leases
 * lapse locally until the next round renews them, a pause in emitting, nothing sent twice.
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

  /** Digits of the start stamp in an owner id (epoch microseconds, zero-padded: ids sort). */
  static final int STAMP_DIGITS = 16;

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

  /** Lanes lost since their holder was last checked: taken back if that holder is older. */
  private final Set<Integer> lostUnchecked = ConcurrentHashMap.newKeySet();

  private final OptionalLong started;
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
    this.started = startStamp(owner);
    this.group = group;
    this.range = range;
    this.duration = duration;
    this.clock = clock;
    this.metrics = metrics;
    this.renewer = daemon(threadName);
    String statisticsThread = threadName.replace("lease-renewal", "statistics");
    this.statistics =
        daemon(statisticsThread.equals(threadName) ? threadName + "-statistics" : statisticsThread);
    // read when scraped: a lease that lapsed while renewals failed stops counting at its expiry
    metrics.lanesHeld(this::usableCount);
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
   * An owner id for an incarnation of {@code task} that started at {@code started}: {@code
   * <task>/<start stamp>-<uuid>}, the stamp in epoch microseconds with {@link #STAMP_DIGITS}
   * digits.
   */
  static String owner(String task, Instant started) {
    long micros = ChronoUnit.MICROS.between(Instant.EPOCH, started);
    return task + "/" + String.format("%0" + STAMP_DIGITS + "d", micros) + "-" + UUID.randomUUID();
  }

  /**
   * The start stamp of an owner id made by {@link #owner}; empty for any other id (a relaybus that
   * did not stamp named its incarnations {@code <task>/<uuid>}, whose first group has 8 digits).
   */
  static OptionalLong startStamp(String owner) {
    if (owner == null) {
      return OptionalLong.empty();
    }
    String last = owner.substring(owner.lastIndexOf('/') + 1);
    if (last.length() <= STAMP_DIGITS || last.charAt(STAMP_DIGITS) != '-') {
      return OptionalLong.empty();
    }
    for (int i = 0; i < STAMP_DIGITS; i++) {
      if (last.charAt(i) < '0' || last.charAt(i) > '9') {
        return OptionalLong.empty();
      }
    }
    return OptionalLong.of(Long.parseLong(last.substring(0, STAMP_DIGITS)));
  }

  /**
   * Leases the range once, on the caller's thread, taking lanes over at once from older
   * incarnations of the group (not from newer ones: see the class doc); then renews in the
   * background.
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

  /** How many leases {@link #held()} returns now. */
  int usableCount() {
    return held().size();
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
          lostUnchecked.add(lease.lane());
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

  /**
   * Asks for the lanes of the range it lacks: the free or expired ones; then, at a start or for a
   * lane lost since its holder was last checked, those held by an older incarnation of the group.
   */
  private void acquireMissing(boolean starting) {
    List<Integer> missing = new ArrayList<>();
    for (int lane : range.lanes()) {
      // A lost lane whose loss the task thread has not taken yet waits a round (see class doc).
      if (!held.containsKey(lane) && !lost.contains(lane)) {
        missing.add(lane);
      }
    }
    if (!missing.isEmpty()) {
      List<LaneLease> granted = new ArrayList<>();
      Instant before = clock.instant();
      keep(store.acquireFreeLanes(owner, group, missing, duration), before, granted);
      List<Integer> refused = new ArrayList<>();
      for (int lane : missing) {
        if (!held.containsKey(lane) && (starting || lostUnchecked.contains(lane))) {
          refused.add(lane);
        }
      }
      if (!refused.isEmpty()) {
        List<Integer> fromOlder = heldByOlder(refused, starting);
        if (!fromOlder.isEmpty()) {
          // Between that read and this takeover a newer incarnation may have taken a lane over;
          // taking it from it here, this one loses it again at once: the newer one, refused it at
          // its next round, checks who took it and takes it back (see the class doc).
          Instant beforeTakeover = clock.instant();
          keep(store.acquireLanes(owner, group, fromOlder, duration), beforeTakeover, granted);
        }
      }
      lostUnchecked.removeAll(missing);
      int takenOver = 0;
      int charged = 0;
      for (LaneLease lease : granted) {
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
  }

  private void keep(List<LaneLease> leases, Instant before, List<LaneLease> granted) {
    for (LaneLease lease : leases) {
      held.put(lease.lane(), new Held(lease, before.plus(duration)));
      granted.add(lease);
    }
  }

  /**
   * Of {@code lanes}, those held live by an owner of the group that started before this one: by its
   * stamp; an owner without a stamp is a relaybus that did not stamp, older when this one starts
   * (an upgrade), newer when it took a lane from this one (only its start takes over).
   */
  private List<Integer> heldByOlder(List<Integer> lanes, boolean starting) {
    Set<Integer> asked = new TreeSet<>(lanes);
    List<Integer> older = new ArrayList<>();
    for (LaneStatus lane : store.laneStatus()) {
      if (asked.contains(lane.lane())
          && lane.held()
          && group.equals(lane.group())
          && !owner.equals(lane.owner())
          && startedBefore(lane.owner(), starting)) {
        older.add(lane.lane());
      }
    }
    return older;
  }

  private boolean startedBefore(String holder, boolean starting) {
    OptionalLong stamp = startStamp(holder);
    if (stamp.isEmpty() || started.isEmpty()) {
      // Unstamped: at a start, the holder is a relaybus that did not stamp (or this one is, in
      // tests): the later start wins, as before the stamps.
      return starting;
    }
    return stamp.getAsLong() < started.getAsLong();
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
