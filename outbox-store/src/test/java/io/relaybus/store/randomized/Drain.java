package io.relaybus.store.randomized;

import static org.awaitility.Awaitility.await;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxStatistics;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;

/**
 * After the chaos: one holder of a new group takes every lane once the old leases lapse, waits
 * until everything pending is due, and drains (claim, complete all); then requeues every dead
 * letter and drains again. Checks on the way:
 *
 * <ul>
 *   <li><b>No delivery in flight without a holder</b>: a lane granted without a takeover (it was
 *       free) had nothing listed in flight; a lane taken over was charged exactly for what was
 *       listed in flight on it.
 *   <li><b>Bounded polls</b>: with nothing in flight and everything due, every claim returns at
 *       least one delivery while any is pending (N = 1: with nothing in flight and nothing waiting
 *       for a retry, the per-key rule lets the head of every key go, so an empty claim is a stall
 *       that no amount of polling ends).
 *   <li>At the end the store holds nothing: no pending, no dead delivery.
 * </ul>
 */
final class Drain extends Owner {
  static final String OWNER = "drainer";
  static final int LIMIT = 10;

  int claims;
  List<DeliveryView> left = List.of();

  Drain(World world) {
    super(world);
  }

  void run() {
    // every timer's deadline passes: an extended timer still shows its old due time until a claim
    // re-arms it, so "everything due" below could not tell
    Sleep.millis(World.LONGEST_TIMER.toMillis() + 100);
    Map<Integer, List<DeliveryView>> inFlight =
        world.listAll(null).stream()
            .filter(DeliveryView::inFlight)
            .collect(Collectors.groupingBy(DeliveryView::lane));
    List<LaneLease> leases = new ArrayList<>();
    await()
        .atMost(Duration.ofSeconds(60))
        .pollInterval(Duration.ofMillis(100))
        .until(
            () -> {
              Set<Integer> have = World.lanesOf(leases);
              List<Integer> missing = world.lanes.stream().filter(l -> !have.contains(l)).toList();
              for (LaneLease lease : acquire(OWNER, "drain", missing, Duration.ofMinutes(10))) {
                checkHolder(lease, inFlight.getOrDefault(lease.lane(), List.of()));
                leases.add(lease);
              }
              return leases.size() == world.lanes.size();
            });
    awaitEverythingDue();
    if (!drain(leases)) {
      left = world.listAll(null);
      return;
    }
    for (DeliveryView dead : world.listAll(DeliveryStatus.DEAD)) {
      long start = Journal.now();
      int requeued = world.store.requeue(List.of(dead.id()));
      world.journal.requeues.add(
          new Journal.Requeue(dead.id(), requeued == 1, start, Journal.now()));
    }
    if (!drain(leases)) {
      left = world.listAll(null);
      return;
    }
    left = world.listAll(null);
    if (!left.isEmpty()) {
      world.journal.violations.add(
          "after the drain the store still holds %d deliveries: %s"
              .formatted(left.size(), describe(left)));
    }
  }

  private void checkHolder(LaneLease lease, List<DeliveryView> listed) {
    if (!lease.takenOver() && !listed.isEmpty()) {
      world.journal.violations.add(
          "in flight without a holder: lane %d was free, yet listed in flight %s"
              .formatted(lease.lane(), describe(listed)));
    }
    if (lease.takenOver() && lease.charged() != listed.size()) {
      world.journal.violations.add(
          "lane %d taken over charged %d deliveries, but %d were listed in flight: %s"
              .formatted(lease.lane(), lease.charged(), listed.size(), describe(listed)));
    }
  }

  private void awaitEverythingDue() {
    await()
        .atMost(Duration.ofSeconds(60))
        .pollInterval(Duration.ofMillis(100))
        .until(
            () -> {
              OutboxStatistics stats = world.store.statistics();
              return stats.handlers().values().stream().allMatch(c -> c.due() == c.pending());
            });
  }

  /** Claims and completes until nothing is pending; false when it stalled. */
  private boolean drain(List<LaneLease> leases) {
    int max = 1000 + world.listAll(DeliveryStatus.PENDING).size();
    for (int i = 0; i < max; i++) {
      claims++;
      List<ClaimedDelivery> batch = claim(OWNER, leases, LIMIT);
      if (batch.isEmpty()) {
        List<DeliveryView> pending = world.listAll(DeliveryStatus.PENDING);
        if (!pending.isEmpty()) {
          world.journal.violations.add(
              "stall: with nothing in flight and everything due, a claim over all lanes returned"
                  + " nothing while %d deliveries are pending: %s"
                      .formatted(pending.size(), describe(pending)));
          return false;
        }
        return true;
      }
      Set<Long> done = complete(batch);
      if (done.size() != batch.size()) {
        world.journal.violations.add("drain: completed %s of the batch %s".formatted(done, batch));
      }
    }
    world.journal.violations.add("drain did not finish within %d claims".formatted(max));
    return false;
  }

  static String describe(List<DeliveryView> views) {
    return views.stream()
            .limit(12)
            .map(
                v ->
                    "[id=%d event=%s handler=%s lane=%d key=%s seq=%s %s%s attempts=%d due=%s]"
                        .formatted(
                            v.id(),
                            v.eventId(),
                            v.handler(),
                            v.lane(),
                            v.key(),
                            v.sequence(),
                            v.status().label(),
                            v.inFlight() ? " in-flight" : "",
                            v.attempts(),
                            v.availableAt()))
            .collect(Collectors.joining(", "))
        + (views.size() > 12 ? " and " + (views.size() - 12) + " more" : "");
  }
}
