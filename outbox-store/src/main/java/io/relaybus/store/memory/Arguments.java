package io.relaybus.store.memory;

import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;

/**
 * Argument checks of the in-memory store. Each failure is an {@link IllegalArgumentException} that
 * names the argument, the value and the rule, like {@link io.relaybus.store.Validation}.
 */
final class Arguments {
  private Arguments() {}

  static <T> T notNull(String argument, T value) {
    if (value == null) {
      throw new IllegalArgumentException(argument + " must not be null");
    }
    return value;
  }

  static String notBlank(String argument, String value) {
    if (value == null || value.isBlank()) {
      throw new IllegalArgumentException(
          argument + " must not be blank, but was " + (value == null ? "null" : "'" + value + "'"));
    }
    return value;
  }

  static Duration positive(String argument, Duration value) {
    if (value == null || value.isZero() || value.isNegative()) {
      throw new IllegalArgumentException(argument + " must be positive, but was " + value);
    }
    return value;
  }

  /** The elements, none null; {@code argument} names the collection in the message. */
  static <T, C extends Collection<T>> C elements(String argument, C values) {
    notNull(argument, values);
    for (T value : values) {
      if (value == null) {
        throw new IllegalArgumentException(argument + " must not contain null");
      }
    }
    return values;
  }

  /** Lane numbers, distinct and in lane order. */
  static SortedSet<Integer> lanes(Collection<Integer> lanes) {
    SortedSet<Integer> sorted = new TreeSet<>();
    for (Integer lane : elements("lanes", lanes)) {
      sorted.add(lane(lane));
    }
    return sorted;
  }

  static <C extends Collection<LaneLease>> C leases(C leases) {
    for (LaneLease lease : elements("leases", leases)) {
      lane(lease.lane());
    }
    return leases;
  }

  /** Rejects a batch that names one event twice: which of the two would win is undefined. */
  static List<OutboxEvent> events(List<OutboxEvent> events) {
    Set<String> ids = new HashSet<>();
    for (OutboxEvent event : elements("events", events)) {
      if (!ids.add(event.id())) {
        throw new IllegalArgumentException(
            "events must have distinct ids, but event id '" + event.id() + "' is listed twice");
      }
    }
    return events;
  }

  private static int lane(int lane) {
    if (lane < 0 || lane >= Lanes.COUNT) {
      throw new IllegalArgumentException(
          "lanes must be between 0 and %d, but was %d".formatted(Lanes.COUNT - 1, lane));
    }
    return lane;
  }
}
