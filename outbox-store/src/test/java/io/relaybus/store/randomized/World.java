package io.relaybus.store.randomized;

import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.RetryPolicy;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Supplier;

/**
 * What the actors of one randomized run share: the store, the journal, the operation budget, and
 * the lanes and keys the run is confined to. A dozen lanes instead of 256 make every lane contested
 * (takeovers, claims racing publishes of the same key) and keep each claim cheap.
 */
final class World {
  static final String GROUP = "connector";
  static final List<String> HANDLERS = List.of("billing", "shipping", "audit");
  static final String TIMERS = "timers";

  /** Short, so late renewals, expiries and takeovers happen within a short run. */
  static final Duration LEASE = Duration.ofMillis(800);

  /**
   * Few attempts and short backoff: deliveries die (and are requeued and purged) often, and every
   * retry is due again within the run.
   */
  static final RetryPolicy POLICY =
      new RetryPolicy(4, Duration.ofMillis(20), Duration.ofMillis(120), 0.2);

  static final int TASKS = 3;
  static final int LANES = 12;
  static final int KEYS = 16;

  /** The longest a timer of the run waits; the drain waits this long for every timer to fire. */
  static final Duration LONGEST_TIMER = Duration.ofMillis(300);

  final OutboxStore store;
  final Journal journal = new Journal();
  final long seed;
  final long budget;
  final List<Integer> lanes;
  final List<List<Integer>> taskLanes = new ArrayList<>();
  final List<String> keys = new ArrayList<>();
  private volatile boolean stopped;

  World(OutboxStore store, long seed, long budget) {
    this.store = store;
    this.seed = seed;
    this.budget = budget;
    Random random = new Random(seed);
    TreeSet<Integer> chosen = new TreeSet<>();
    while (chosen.size() < LANES) {
      chosen.add(random.nextInt(Lanes.COUNT));
    }
    lanes = List.copyOf(chosen);
    int per = LANES / TASKS;
    for (int t = 0; t < TASKS; t++) {
      taskLanes.add(lanes.subList(t * per, (t + 1) * per));
    }
    for (int i = 0; keys.size() < KEYS; i++) {
      String key = "key-" + i;
      if (chosen.contains(Lanes.laneOf(key, key))) {
        keys.add(key);
      }
    }
  }

  boolean running() {
    return !stopped && journal.operations.get() < budget;
  }

  void stop() {
    stopped = true;
  }

  /** An event id unique in the run whose unkeyed lane is one of the run's lanes. */
  String eventId(String prefix) {
    for (int suffix = 0; ; suffix++) {
      String id = prefix + "." + suffix;
      if (lanes.contains(Lanes.laneOf(null, id))) {
        return id;
      }
    }
  }

  /** A key of the pool, skewed so a few keys are hot (long runs, retries holding keys back). */
  String key(Random random) {
    return keys.get(random.nextInt(random.nextInt(KEYS) + 1));
  }

  /**
   * Runs one store call, counting it against the budget. A transient failure (a deadlock, a
   * serialization failure: the call rolled back) is counted and answered with {@code fallback}; a
   * permanent one is a broken invariant.
   */
  <T> T call(String what, Supplier<T> action, T fallback) {
    journal.operations.incrementAndGet();
    try {
      return action.get();
    } catch (OutboxStoreException e) {
      if (e.isTransient()) {
        journal.transientErrors.add(what + ": " + e.getMessage());
      } else {
        journal.violations.add("permanent store error while " + what + ": " + e);
      }
      return fallback;
    }
  }

  void recordGrants(String owner, List<LaneLease> leases, long start, long end) {
    for (LaneLease lease : leases) {
      journal.grants.add(new Journal.Grant(owner, lease, start, end));
      if (lease.takenOver()) {
        journal.takeovers.incrementAndGet();
        journal.charged.addAndGet(lease.charged());
      }
    }
  }

  /** Records a claim's batch; checks every token is under a lease the caller passed. */
  long recordHandouts(
      String owner,
      List<LaneLease> passed,
      List<io.relaybus.store.ClaimedDelivery> batch,
      long start,
      long end) {
    long claimId = journal.callIds.incrementAndGet();
    for (int i = 0; i < batch.size(); i++) {
      io.relaybus.store.ClaimedDelivery d = batch.get(i);
      journal.handouts.add(new Journal.Handout(owner, claimId, i, d, start, end));
      boolean underLease =
          passed.stream().anyMatch(l -> l.lane() == d.lane() && l.epoch() == d.token().epoch());
      if (!underLease) {
        journal.violations.add(
            "fencing: claim by %s returned %s under lane %d epoch %d, not a lease it passed %s"
                .formatted(owner, d, d.lane(), d.token().epoch(), passed));
      }
    }
    return claimId;
  }

  /** Every delivery (of {@code status}, or all when null), page by page. */
  List<DeliveryView> listAll(DeliveryStatus status) {
    List<DeliveryView> all = new ArrayList<>();
    Long after = null;
    do {
      var page =
          store.listDeliveries(
              DeliveryQuery.all()
                  .withStatus(status)
                  .withLimit(DeliveryQuery.MAX_LIMIT)
                  .after(after));
      all.addAll(page.items());
      after = page.nextAfterId();
    } while (after != null);
    return all;
  }

  static Set<Integer> lanesOf(List<LaneLease> leases) {
    TreeSet<Integer> set = new TreeSet<>();
    leases.forEach(l -> set.add(l.lane()));
    return set;
  }
}
