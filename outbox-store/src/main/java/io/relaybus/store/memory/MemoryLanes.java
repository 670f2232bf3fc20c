package io.relaybus.store.memory;

import io.relaybus.store.LaneLease;
import io.relaybus.store.RetryPolicy;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.SortedSet;

/**
 * Lease bookkeeping on the lane rows: acquire (with takeover), renew, relinquish. Callers hold the
 * store's lock and have validated the arguments.
 */
final class MemoryLanes {
  private final MemoryTables tables;
  private final RetryPolicy retryPolicy;

  MemoryLanes(MemoryTables tables, RetryPolicy retryPolicy) {
    this.tables = tables;
    this.retryPolicy = retryPolicy;
  }

  /**
   * Grants each lane that is free, expired, already held by {@code owner} (a renewal: same epoch)
   * or, when {@code takeOver}, held by another owner of {@code group} (a takeover at once: a newer
   * incarnation of the same task). Any other live lane is left out.
   */
  List<LaneLease> acquire(
      String owner,
      String group,
      SortedSet<Integer> lanes,
      Duration duration,
      boolean takeOver,
      Instant now) {
    List<LaneLease> granted = new ArrayList<>();
    Instant expiresAt = now.plus(duration);
    for (int number : lanes) {
      LaneState lane = tables.lanes[number];
      boolean renewal = owner.equals(lane.owner);
      if (!renewal && lane.isLive(now) && !(takeOver && group.equals(lane.group))) {
        continue;
      }
      boolean takenOver = !renewal && lane.owner != null;
      int charged = 0;
      if (!renewal) {
        // A relinquished lane has nothing in flight, so only a takeover can charge anything.
        charged = chargeInFlight(lane, now);
        lane.epoch++;
      }
      lane.owner = owner;
      lane.group = group;
      lane.expiresAt = expiresAt;
      granted.add(new LaneLease(number, lane.epoch, expiresAt, takenOver, charged));
    }
    return granted;
  }

  /** Extends the leases whose lane still has {@code owner} and the lease's epoch. */
  List<LaneLease> renew(
      String owner, Collection<LaneLease> leases, Duration duration, Instant now) {
    List<LaneLease> renewed = new ArrayList<>();
    Instant expiresAt = now.plus(duration);
    for (LaneLease lease : leases) {
      LaneState lane = tables.lanes[lease.lane()];
      if (lane.isHeldBy(owner, lease.epoch())) {
        lane.expiresAt = expiresAt;
        renewed.add(new LaneLease(lane.lane, lane.epoch, expiresAt, false, 0));
      }
    }
    return renewed;
  }

  /**
   * Frees the lanes still held under these leases. Their in-flight deliveries become claimable
   * again without an attempt charged (a graceful stop is no failure); their claim counters move on
   * so the old tokens die even though the epoch only moves at the next acquire.
   */
  int relinquish(String owner, Collection<LaneLease> leases) {
    int released = 0;
    for (LaneLease lease : leases) {
      LaneState lane = tables.lanes[lease.lane()];
      if (!lane.isHeldBy(owner, lease.epoch())) {
        continue;
      }
      for (long id : lane.inFlight) {
        StoredDelivery delivery = tables.deliveries.get(id);
        if (delivery != null) {
          delivery.claims++;
        }
      }
      lane.inFlight.clear();
      lane.owner = null;
      lane.group = null;
      lane.expiresAt = null;
      released++;
    }
    return released;
  }

  /**
   * A lane changing hands with deliveries in flight means their holder crashed or was replaced
   * mid-send: each is charged one attempt, so a delivery that kills its task again and again still
   * ends in the dead letters.
   */
  private int chargeInFlight(LaneState lane, Instant now) {
    int charged = 0;
    for (long id : lane.inFlight) {
      StoredDelivery delivery = tables.deliveries.get(id);
      if (delivery == null || !delivery.isPending()) {
        continue;
      }
      delivery.chargeAttempt(now);
      String reason =
          "lane %d taken over while in flight (attempt %d of %d)"
              .formatted(lane.lane, delivery.attempts, retryPolicy.maxAttempts());
      if (delivery.attempts >= retryPolicy.maxAttempts()) {
        delivery.kill("attempts exhausted: " + reason, now);
      } else {
        delivery.lastError = reason;
      }
      charged++;
    }
    lane.inFlight.clear();
    return charged;
  }
}
