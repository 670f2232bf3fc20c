package io.relaybus.store;

import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;

/**
 * Argument checks of the {@link OutboxStore} methods, shared by every store so they reject the same
 * input with the same message. Each failure is an {@link IllegalArgumentException} that names the
 * argument, the value and the rule.
 */
public final class StoreArguments {
  private StoreArguments() {}

  public static <T> T notNull(String argument, T value) {
    if (value == null) {
      throw new IllegalArgumentException(argument + " must not be null");
    }
    return value;
  }

  public static String notBlank(String argument, String value) {
    if (value == null || value.isBlank()) {
      throw new IllegalArgumentException(
          argument + " must not be blank, but was " + (value == null ? "null" : "'" + value + "'"));
    }
    return value;
  }

  public static Duration positive(String argument, Duration value) {
    if (value == null || value.isZero() || value.isNegative()) {
      throw new IllegalArgumentException(argument + " must be positive, but was " + value);
    }
    return value;
  }

  public static Duration notNegative(String argument, Duration value) {
    if (value == null || value.isNegative()) {
      throw new IllegalArgumentException(argument + " must be zero or more, but was " + value);
    }
    return value;
  }

  /** The elements, none null; {@code argument} names the collection in the message. */
  public static <T, C extends Collection<T>> C elements(String argument, C values) {
    notNull(argument, values);
    for (T value : values) {
      if (value == null) {
        throw new IllegalArgumentException(argument + " must not contain null");
      }
    }
    return values;
  }

  /** Lane numbers, distinct and in lane order. */
  public static SortedSet<Integer> lanes(Collection<Integer> lanes) {
    SortedSet<Integer> sorted = new TreeSet<>();
    for (Integer lane : elements("lanes", lanes)) {
      sorted.add(lane(lane));
    }
    return sorted;
  }

  public static <C extends Collection<LaneLease>> C leases(C leases) {
    for (LaneLease lease : elements("leases", leases)) {
      lane(lease.lane());
    }
    return leases;
  }

  /** Rejects a batch that names one event twice: which of the two would win is undefined. */
  public static List<OutboxEvent> events(List<OutboxEvent> events) {
    Set<String> ids = new HashSet<>();
    for (OutboxEvent event : elements("events", events)) {
      if (!ids.add(event.id())) {
        throw new IllegalArgumentException(
            "events must have distinct ids, but event id '" + event.id() + "' is listed twice");
      }
    }
    return events;
  }

  public static int lane(int lane) {
    if (lane < 0 || lane >= Lanes.COUNT) {
      throw new IllegalArgumentException(
          "lanes must be between 0 and %d, but was %d".formatted(Lanes.COUNT - 1, lane));
    }
    return lane;
  }

  /** A page size: 1 to {@link DeliveryQuery#MAX_LIMIT}. */
  public static int pageLimit(int limit) {
    if (limit < 1 || limit > DeliveryQuery.MAX_LIMIT) {
      throw new IllegalArgumentException(
          "limit must be between 1 and " + DeliveryQuery.MAX_LIMIT + ", but was " + limit);
    }
    return limit;
  }
}
