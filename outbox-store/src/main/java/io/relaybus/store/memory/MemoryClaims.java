package io.relaybus.store.memory;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.PriorityQueue;

/**
 * Picks what one lane can hand out now, applying the per-key rule: a keyed delivery may go only
 * when every earlier pending delivery of its (handler, key) is in flight or earlier in the same
 * batch. Dead deliveries do not block their key.
 *
 * <p>So for each (handler, key) the claimable ones are the longest run, in sequence order, of its
 * pending deliveries that are not in flight and are due: the first one not yet due (waiting for a
 * retry) stops the run. Worked example: pending seq 1 (in flight), 2 (due), 3 (backing off), 4
 * (due) gives the run [2]; 4 waits for 3.
 *
 * <p>The runs and the unkeyed deliveries are then merged oldest first by (available at, id), taking
 * the head of a run only after its predecessor, so a batch lists each (handler, key) in sequence
 * order.
 */
final class MemoryClaims {
  private static final Comparator<StoredDelivery> DUE_ORDER =
      Comparator.comparing((StoredDelivery d) -> d.availableAt).thenComparingLong(d -> d.id);

  private MemoryClaims() {}

  /** Re-arms the lane's due timers whose deadline was extended beyond their due time. */
  static void rearm(LaneState lane, Instant now) {
    for (StoredDelivery delivery : lane.deliveries.values()) {
      if (delivery.fireAt != null
          && delivery.isPending()
          && !lane.inFlight.contains(delivery.id)
          && !delivery.availableAt.isAfter(now)
          && delivery.fireAt.isAfter(now)) {
        delivery.availableAt = delivery.fireAt;
      }
    }
  }

  static List<StoredDelivery> select(LaneState lane, Instant now, int limit) {
    List<List<StoredDelivery>> runs = new ArrayList<>();
    Map<HandlerKey, List<StoredDelivery>> byKey = new HashMap<>();
    for (StoredDelivery delivery : lane.deliveries.values()) {
      if (!delivery.isPending() || lane.inFlight.contains(delivery.id)) {
        continue;
      }
      if (delivery.key == null) {
        if (!delivery.availableAt.isAfter(now)) {
          runs.add(List.of(delivery));
        }
      } else {
        byKey
            .computeIfAbsent(new HandlerKey(delivery.handler, delivery.key), k -> new ArrayList<>())
            .add(delivery);
      }
    }
    for (List<StoredDelivery> waiting : byKey.values()) {
      waiting.sort(Comparator.comparingLong(d -> d.sequence));
      int due = 0;
      while (due < waiting.size() && !waiting.get(due).availableAt.isAfter(now)) {
        due++;
      }
      if (due > 0) {
        runs.add(waiting.subList(0, due));
      }
    }
    return merge(runs, limit);
  }

  private static List<StoredDelivery> merge(List<List<StoredDelivery>> runs, int limit) {
    PriorityQueue<Cursor> heads =
        new PriorityQueue<>(Comparator.comparing(Cursor::head, DUE_ORDER));
    runs.forEach(run -> heads.add(new Cursor(run)));
    List<StoredDelivery> batch = new ArrayList<>();
    while (batch.size() < limit && !heads.isEmpty()) {
      Cursor cursor = heads.poll();
      batch.add(cursor.head());
      if (cursor.advance()) {
        heads.add(cursor);
      }
    }
    return batch;
  }

  private record HandlerKey(String handler, String key) {}

  /** A position in one run; the run's next delivery may only follow the one before it. */
  private static final class Cursor {
    private final List<StoredDelivery> run;
    private int next;

    Cursor(List<StoredDelivery> run) {
      this.run = run;
    }

    StoredDelivery head() {
      return run.get(next);
    }

    boolean advance() {
      return ++next < run.size();
    }
  }
}
