package io.relaybus.store.memory;

import java.time.Instant;
import java.util.LinkedHashSet;
import java.util.TreeMap;

/**
 * One of the 256 lane rows: the lease ({@link #epoch}, owner, group, expiry) and the ids its holder
 * has claimed and not yet finished ({@link #inFlight}, in claim order). Also indexes the lane's
 * deliveries by id, which the SQL store does with its {@code (lane, available_at, id)} index.
 */
final class LaneState {
  final int lane;

  /** Fencing token: +1 every time the lane changes hands. */
  long epoch;

  String owner;
  String group;
  Instant expiresAt;
  final LinkedHashSet<Long> inFlight = new LinkedHashSet<>();
  final TreeMap<Long, StoredDelivery> deliveries = new TreeMap<>();

  LaneState(int lane) {
    this.lane = lane;
  }

  boolean isHeldBy(String owner, long epoch) {
    return owner.equals(this.owner) && this.epoch == epoch;
  }

  boolean isLive(Instant now) {
    return owner != null && expiresAt.isAfter(now);
  }
}
