package io.relaybus.store.randomized;

import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import java.time.Duration;
import java.util.List;
import java.util.Random;

/**
 * The operator: requeues dead letters (one id at a time, so the journal knows which came back, and
 * now and then all of a handler's), purges with a retention of a few milliseconds (so purges race
 * with requeues, publishes and republishes), reads statistics and listings.
 */
final class OperatorActor implements Runnable {
  private final World world;
  private final Random random;

  OperatorActor(World world) {
    this.world = world;
    this.random = new Random(world.seed * 31 + 202);
  }

  @Override
  public void run() {
    while (world.running()) {
      Sleep.millis(random.nextInt(3));
      int roll = random.nextInt(100);
      if (roll < 35) {
        requeueSome();
      } else if (roll < 42) {
        String handler =
            random.nextBoolean() ? null : World.HANDLERS.get(random.nextInt(World.HANDLERS.size()));
        long start = Journal.now();
        world.call("requeueing all dead", () -> world.store.requeueDead(handler), 0);
        world.journal.requeueAlls.add(new Journal.Window(start, Journal.now()));
      } else if (roll < 70) {
        RetentionPolicy retention =
            new RetentionPolicy(
                Duration.ofMillis(20L * random.nextInt(3)),
                Duration.ofMillis(20L * random.nextInt(3)),
                Duration.ZERO);
        long start = Journal.now();
        PurgeResult purged = world.call("purging", () -> world.store.purge(retention), null);
        world.journal.purges.add(new Journal.Window(start, Journal.now()));
        if (purged != null) {
          world.journal.purgedDeadLetters.addAndGet(purged.deadLetters());
          world.journal.purgedEvents.addAndGet(purged.events());
        }
      } else if (roll < 85) {
        world.call("reading statistics", world.store::statistics, null);
      } else {
        DeliveryQuery query = DeliveryQuery.all().withLimit(100);
        if (random.nextBoolean()) {
          query = query.withKey(world.key(random));
        }
        DeliveryQuery q = query;
        world.call("listing", () -> world.store.listDeliveries(q), null);
      }
    }
  }

  private void requeueSome() {
    var page =
        world.call(
            "listing dead letters",
            () ->
                world.store.listDeliveries(
                    DeliveryQuery.all().withStatus(DeliveryStatus.DEAD).withLimit(20)),
            null);
    List<DeliveryView> dead = page == null ? List.of() : page.items();
    for (DeliveryView view : dead) {
      if (random.nextInt(10) < 6) {
        long start = Journal.now();
        int requeued = world.call("requeueing", () -> world.store.requeue(List.of(view.id())), 0);
        world.journal.requeues.add(
            new Journal.Requeue(view.id(), requeued == 1, start, Journal.now()));
        if (requeued > 1) {
          world.journal.violations.add(
              "requeue of the single id %d returned %d".formatted(view.id(), requeued));
        }
      }
    }
  }
}
