package io.relaybus.store.randomized;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;

/**
 * A holder of another group (another connector over the same outbox): it gets only free or expired
 * lanes, claims a little, and hands the lanes back or lets them expire. It takes lanes whose task
 * renewed too late, and makes the tasks re-acquire lanes they lost.
 */
final class ForeignActor extends Owner implements Runnable {
  private final Random random;
  private int incarnation;

  ForeignActor(World world) {
    super(world);
    this.random = new Random(world.seed * 31 + 101);
  }

  @Override
  public void run() {
    while (world.running()) {
      Sleep.millis(5 + random.nextInt(25));
      List<Integer> lanes = new ArrayList<>(world.lanes);
      Collections.shuffle(lanes, random);
      String owner = "other/" + ++incarnation;
      List<LaneLease> got =
          acquire(owner, "other-connector", lanes.subList(0, 1 + random.nextInt(4)), World.LEASE);
      if (got.isEmpty()) {
        continue;
      }
      List<ClaimedDelivery> batch = claim(owner, got, 3);
      settleAtRandom(random, batch, 10);
      if (random.nextInt(10) < 7) {
        relinquish(owner, got);
      } else {
        world.journal.crashes.incrementAndGet();
      }
    }
  }
}
