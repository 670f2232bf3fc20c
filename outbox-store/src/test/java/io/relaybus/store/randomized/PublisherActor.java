package io.relaybus.store.randomized;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerExistsException;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import java.util.function.Supplier;

/**
 * An application publishing: single events and batches, keyed (a skewed pool of keys) and unkeyed,
 * to one to three handlers; republishes of its earlier events, sometimes with a new handler (after
 * a purge the id counts as new again); named timers with every conflict policy, unnamed delayed
 * events, and cancels. Each publisher owns its timer ids, so it knows which event a pending timer
 * is and can check every timer answer.
 */
final class PublisherActor implements Runnable {
  private final World world;
  private final int index;
  private final Random random;
  private final List<OutboxEvent> published = new ArrayList<>();

  /** Timer id to the event this publisher last armed under it. */
  private final Map<String, String> armed = new HashMap<>();

  private long counter;

  PublisherActor(World world, int index) {
    this.world = world;
    this.index = index;
    this.random = new Random(world.seed * 31 + 300 + index);
  }

  @Override
  public void run() {
    while (world.running()) {
      int roll = random.nextInt(100);
      if (roll < 40) {
        publish(List.of(newEvent(handlers(), key())), true, true);
      } else if (roll < 55) {
        List<OutboxEvent> batch = new ArrayList<>();
        int size = 2 + random.nextInt(4);
        String sharedKey = world.key(random);
        for (int i = 0; i < size; i++) {
          batch.add(newEvent(handlers(), random.nextBoolean() ? sharedKey : key()));
        }
        publish(batch, false, true);
      } else if (roll < 63 && !published.isEmpty()) {
        republish();
      } else if (roll < 90) {
        schedule();
      } else {
        cancel();
      }
    }
  }

  private String key() {
    return random.nextInt(100) < 65 ? world.key(random) : null;
  }

  private List<String> handlers() {
    List<String> chosen = new ArrayList<>();
    for (String handler : World.HANDLERS) {
      if (random.nextInt(3) > 0) {
        chosen.add(handler);
      }
    }
    return chosen.isEmpty() ? List.of(World.HANDLERS.get(0)) : chosen;
  }

  private OutboxEvent newEvent(List<String> handlers, String key) {
    String id = world.eventId("p" + index + "-" + ++counter);
    return OutboxEvent.builder("random.happened")
        .id(id)
        .key(key)
        .payload(id.getBytes(StandardCharsets.UTF_8), "text/plain")
        .handlers(handlers.toArray(String[]::new))
        .build();
  }

  private void republish() {
    OutboxEvent earlier = published.get(random.nextInt(published.size()));
    List<String> handlers = new ArrayList<>(earlier.handlers());
    if (random.nextBoolean()) {
      World.HANDLERS.stream()
          .filter(h -> !handlers.contains(h))
          .findFirst()
          .ifPresent(handlers::add);
    }
    OutboxEvent again =
        OutboxEvent.builder(earlier.type())
            .id(earlier.id())
            .key(earlier.key())
            .payload(earlier.payload(), earlier.contentType())
            .handlers(handlers.toArray(String[]::new))
            .build();
    publish(List.of(again), true, false);
  }

  /**
   * Publishes ({@code fresh}: ids never published before); a transient failure rolled the
   * transaction back, so it is simply tried again.
   */
  private void publish(List<OutboxEvent> events, boolean single, boolean fresh) {
    for (int attempt = 0; attempt < 5; attempt++) {
      long start = Journal.now();
      List<PublishResult> results =
          world.call(
              "publishing",
              () ->
                  single
                      ? List.of(world.store.publish(events.get(0)))
                      : world.store.publishAll(events),
              null);
      long end = Journal.now();
      if (results == null) {
        continue;
      }
      long callId = world.journal.callIds.incrementAndGet();
      for (int i = 0; i < events.size(); i++) {
        OutboxEvent event = events.get(i);
        PublishResult result = results.get(i);
        if (!result.eventId().equals(event.id())) {
          world.journal.violations.add(
              "publish result %d is %s, not for event %s".formatted(i, result, event.id()));
        }
        for (String handler : result.addedHandlers()) {
          world.journal.instances.add(
              new Journal.Instance(
                  event.id(), handler, event.key(), result.newEvent(), callId, i, start, end));
        }
        if (fresh) {
          if (!result.newEvent() || !result.addedHandlers().equals(event.handlers())) {
            world.journal.violations.add(
                "first publish of %s answered %s".formatted(event.id(), result));
          }
          published.add(event);
        }
      }
      return;
    }
    world.journal.violations.add("publishing %s failed 5 times in a row".formatted(events));
  }

  private void schedule() {
    boolean named = random.nextInt(5) > 0;
    String key = random.nextInt(10) < 3 ? world.key(random) : null;
    Timer timer = Timer.in(Duration.ofMillis(random.nextInt((int) World.LONGEST_TIMER.toMillis())));
    OutboxEvent event;
    String timerId = null;
    if (named) {
      timerId = "t" + index + "-" + random.nextInt(4);
      TimerConflict conflict =
          TimerConflict.values()[random.nextInt(TimerConflict.values().length)];
      timer = timer.named(timerId, conflict);
      event = newEvent(List.of(World.TIMERS), key);
    } else {
      event = newEvent(handlers(), key);
    }
    Timer t = timer;
    long start = Journal.now();
    TimerResult result;
    try {
      result = retrying("scheduling a timer", () -> world.store.schedule(event, t));
    } catch (TimerExistsException refused) {
      if (t.onConflict() != TimerConflict.FAIL) {
        world.journal.violations.add("schedule with %s refused: %s".formatted(t, refused));
      }
      return;
    }
    long end = Journal.now();
    if (result == null) {
      return;
    }
    long callId = world.journal.callIds.incrementAndGet();
    TimerOutcome outcome = result.outcome();
    if (outcome == TimerOutcome.ARMED || outcome == TimerOutcome.REPLACED) {
      if (!event.id().equals(result.eventId())) {
        world.journal.violations.add(
            "timer %s armed %s, answered %s".formatted(timerId, event.id(), result));
      }
      for (String handler : event.handlers()) {
        world.journal.instances.add(
            new Journal.Instance(event.id(), handler, key, true, callId, 0, start, end));
      }
      if (outcome == TimerOutcome.REPLACED) {
        String previous = armed.get(timerId);
        if (previous == null) {
          world.journal.violations.add(
              "timer %s answered %s, but nothing armed under it is known"
                  .formatted(timerId, result));
        } else {
          world.journal.removals.add(new Journal.Removal(previous, World.TIMERS, start, end));
        }
      }
      if (timerId != null) {
        armed.put(timerId, event.id());
      }
    } else if (!Objects.equals(result.eventId(), armed.get(timerId))) {
      world.journal.violations.add(
          "timer %s answered %s, but the event armed under it is %s"
              .formatted(timerId, result, armed.get(timerId)));
    }
  }

  private void cancel() {
    String timerId = "t" + index + "-" + random.nextInt(4);
    long start = Journal.now();
    TimerResult result =
        retrying("cancelling a timer", () -> world.store.cancelTimer(World.TIMERS, timerId));
    long end = Journal.now();
    if (result == null) {
      return;
    }
    switch (result.outcome()) {
      case CANCELLED -> {
        if (!Objects.equals(result.eventId(), armed.get(timerId))) {
          world.journal.violations.add(
              "cancel of %s removed %s, but the event armed under it is %s"
                  .formatted(timerId, result.eventId(), armed.get(timerId)));
        }
        world.journal.removals.add(new Journal.Removal(result.eventId(), World.TIMERS, start, end));
        armed.remove(timerId);
      }
      case NOT_FOUND -> armed.remove(timerId);
      case ALREADY_FIRING -> {
        if (!Objects.equals(result.eventId(), armed.get(timerId))) {
          world.journal.violations.add(
              "cancel of %s answered %s, but the event armed under it is %s"
                  .formatted(timerId, result, armed.get(timerId)));
        }
      }
      default ->
          world.journal.violations.add("cancel of %s answered %s".formatted(timerId, result));
    }
  }

  /** A timer call rolled back by a transient failure is tried again; null after five failures. */
  private TimerResult retrying(String what, Supplier<TimerResult> call) {
    for (int attempt = 0; attempt < 5; attempt++) {
      world.journal.operations.incrementAndGet();
      try {
        return call.get();
      } catch (TimerExistsException refused) {
        throw refused;
      } catch (OutboxStoreException e) {
        if (!e.isTransient()) {
          world.journal.violations.add("permanent store error while " + what + ": " + e);
          return null;
        }
        world.journal.transientErrors.add(what + ": " + e.getMessage());
      }
    }
    world.journal.violations.add(what + " failed 5 times in a row");
    return null;
  }
}
