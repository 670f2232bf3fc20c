package io.relaybus.store.randomized;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Random;
import java.util.Set;

/**
 * One Connect task of the connector: holds its lane range, renews, re-acquires lanes it lost,
 * claims and ends its deliveries at random, keeps some in flight across claims, and now and then
 * crashes (a new incarnation takes over at once, the old one lives on as a zombie whose tokens must
 * be dead) or restarts gracefully (relinquishes first).
 */
final class TaskActor extends Owner implements Runnable {
  private final int slot;
  private final Random random;
  private final List<Integer> lanes;
  private int incarnation;
  private String owner;
  private List<LaneLease> held = List.of();
  private long lastRenew;
  private final List<ClaimedDelivery> outstanding = new ArrayList<>();
  private final List<ClaimedDelivery> zombie = new ArrayList<>();

  TaskActor(World world, int slot) {
    super(world);
    this.slot = slot;
    this.random = new Random(world.seed * 31 + slot);
    this.lanes = world.taskLanes.get(slot);
  }

  @Override
  public void run() {
    start();
    while (world.running()) {
      step();
    }
    if (random.nextBoolean()) {
      relinquish(owner, held);
    } else {
      world.journal.crashes.incrementAndGet();
    }
  }

  private void start() {
    owner = "task-" + slot + "/" + ++incarnation;
    held = List.of();
    outstanding.clear();
    acquireMissing();
    lastRenew = Journal.now();
  }

  private void step() {
    int roll = random.nextInt(1000);
    if (roll < 5) {
      // crash: nothing handed back; the next incarnation (same group) takes over at once
      world.journal.crashes.incrementAndGet();
      zombie.clear();
      zombie.addAll(outstanding);
      start();
      return;
    }
    if (roll < 9) {
      relinquish(owner, held);
      start();
      return;
    }
    if (roll < 40 && !zombie.isEmpty()) {
      // the previous incarnation, unaware it was replaced, ends what it had claimed
      settleAtRandom(random, new ArrayList<>(zombie), 0);
      zombie.clear();
      return;
    }
    if (Journal.now() - lastRenew > World.LEASE.toNanos() / 4) {
      renew();
    }
    if (!outstanding.isEmpty() && random.nextInt(4) == 0) {
      List<ClaimedDelivery> some = new ArrayList<>();
      outstanding.removeIf(d -> random.nextBoolean() && some.add(d));
      settleAtRandom(random, some, 0);
    } else {
      claim();
    }
  }

  private void renew() {
    lastRenew = Journal.now();
    if (!held.isEmpty()) {
      List<LaneLease> renewed =
          world.call("renewing", () -> world.store.renewLanes(owner, held, World.LEASE), held);
      Set<Integer> kept = World.lanesOf(renewed);
      // a lost lane's deliveries may no longer be emitted: they become the zombie's
      outstanding.removeIf(d -> !kept.contains(d.lane()) && zombie.add(d));
      held = renewed;
    }
    acquireMissing();
  }

  private void acquireMissing() {
    Set<Integer> have = World.lanesOf(held);
    List<Integer> missing = lanes.stream().filter(l -> !have.contains(l)).toList();
    if (missing.isEmpty()) {
      return;
    }
    List<LaneLease> got = acquire(owner, World.GROUP, missing, World.LEASE);
    if (!got.isEmpty()) {
      List<LaneLease> merged = new ArrayList<>(held);
      merged.addAll(got);
      merged.sort(Comparator.comparingInt(LaneLease::lane));
      held = merged;
    }
  }

  private void claim() {
    if (held.isEmpty()) {
      acquireMissing();
      return;
    }
    List<ClaimedDelivery> batch = claim(owner, held, 1 + random.nextInt(6));
    if (batch.isEmpty()) {
      Sleep.millis(1 + random.nextInt(3)); // an idle task pauses between polls
    }
    outstanding.addAll(settleAtRandom(random, batch, 20));
  }
}
