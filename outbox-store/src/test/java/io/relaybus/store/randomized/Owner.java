package io.relaybus.store.randomized;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.randomized.Journal.Kind;
import io.relaybus.store.randomized.Journal.Settlement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Set;

/** A lane holder: leases, claims and ends claims, recording each call in the journal. */
abstract class Owner {
  protected final World world;

  Owner(World world) {
    this.world = world;
  }

  protected List<LaneLease> acquire(
      String owner, String group, Collection<Integer> lanes, Duration duration) {
    long start = Journal.now();
    List<LaneLease> got =
        world.call(
            "acquiring lanes",
            () -> world.store.acquireLanes(owner, group, lanes, duration),
            List.of());
    world.recordGrants(owner, got, start, Journal.now());
    return got;
  }

  protected int relinquish(String owner, List<LaneLease> leases) {
    if (leases.isEmpty()) {
      return 0;
    }
    long start = Journal.now();
    int released =
        world.call("relinquishing lanes", () -> world.store.relinquishLanes(owner, leases), 0);
    world.journal.relinquishes.add(
        new Journal.Relinquish(owner, List.copyOf(leases), released, start, Journal.now()));
    if (released > leases.size()) {
      world.journal.violations.add(
          "relinquish by %s released %d lanes of %d leases".formatted(owner, released, leases));
    }
    return released;
  }

  protected List<ClaimedDelivery> claim(String owner, List<LaneLease> leases, int limit) {
    if (leases.isEmpty()) {
      return List.of();
    }
    long start = Journal.now();
    List<ClaimedDelivery> batch =
        world.call("claiming deliveries", () -> world.store.claim(owner, leases, limit), List.of());
    long end = Journal.now();
    if (batch.size() > limit) {
      world.journal.violations.add(
          "claim by %s returned %d deliveries for limit %d".formatted(owner, batch.size(), limit));
    }
    world.recordHandouts(owner, leases, batch, start, end);
    return batch;
  }

  protected Set<Long> complete(List<ClaimedDelivery> deliveries) {
    if (deliveries.isEmpty()) {
      return Set.of();
    }
    List<DeliveryToken> tokens = deliveries.stream().map(ClaimedDelivery::token).toList();
    long start = Journal.now();
    Set<Long> done = world.call("completing", () -> world.store.complete(tokens), null);
    long end = Journal.now();
    for (DeliveryToken token : tokens) {
      // a transient failure (null) leaves the outcome unknown: recorded as not effective
      boolean effective = done != null && done.contains(token.deliveryId());
      world.journal.settlements.add(
          new Settlement(token, Kind.COMPLETE, effective, false, start, end));
    }
    if (done != null
        && !tokens.stream().map(DeliveryToken::deliveryId).toList().containsAll(done)) {
      world.journal.violations.add(
          "complete returned ids %s it was not given (%s)".formatted(done, tokens));
    }
    return done == null ? Set.of() : done;
  }

  protected FailOutcome reschedule(ClaimedDelivery delivery) {
    long start = Journal.now();
    FailOutcome outcome =
        world.call(
            "rescheduling",
            () -> world.store.reschedule(delivery.token(), "random failure"),
            FailOutcome.LOST);
    world.journal.settlements.add(
        new Settlement(
            delivery.token(),
            Kind.RESCHEDULE,
            outcome != FailOutcome.LOST,
            outcome == FailOutcome.DEAD,
            start,
            Journal.now()));
    return outcome;
  }

  protected boolean bury(ClaimedDelivery delivery) {
    long start = Journal.now();
    boolean buried =
        world.call("burying", () -> world.store.bury(delivery.token(), "random burial"), false);
    world.journal.settlements.add(
        new Settlement(delivery.token(), Kind.BURY, buried, buried, start, Journal.now()));
    return buried;
  }

  protected int release(List<ClaimedDelivery> deliveries) {
    if (deliveries.isEmpty()) {
      return 0;
    }
    List<DeliveryToken> tokens = deliveries.stream().map(ClaimedDelivery::token).toList();
    long start = Journal.now();
    int released = world.call("releasing", () -> world.store.release(tokens), 0);
    long end = Journal.now();
    // the count does not say which: each is known released only when all were
    for (DeliveryToken token : tokens) {
      world.journal.settlements.add(
          new Settlement(token, Kind.RELEASE, released == tokens.size(), false, start, end));
    }
    if (released > tokens.size()) {
      world.journal.violations.add(
          "release returned %d for %d tokens %s".formatted(released, tokens.size(), tokens));
    }
    return released;
  }

  /** Ends each delivery at random, in batch order, the way a task that sends them would. */
  protected List<ClaimedDelivery> settleAtRandom(
      java.util.Random random, List<ClaimedDelivery> batch, int keepPercent) {
    List<ClaimedDelivery> toComplete = new ArrayList<>();
    List<ClaimedDelivery> toRelease = new ArrayList<>();
    List<ClaimedDelivery> kept = new ArrayList<>();
    for (ClaimedDelivery d : batch) {
      int roll = random.nextInt(100);
      if (roll < keepPercent) {
        kept.add(d);
      } else if (roll < keepPercent + 12) {
        reschedule(d);
      } else if (roll < keepPercent + 15) {
        bury(d);
      } else if (roll < keepPercent + 23) {
        toRelease.add(d);
      } else {
        toComplete.add(d);
      }
    }
    complete(toComplete);
    release(toRelease);
    return kept;
  }
}
