package io.relaybus.store.memory;

import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import java.time.Instant;

/**
 * A delivery row: one (event, handler). Only {@link DeliveryStatus#PENDING} and {@link
 * DeliveryStatus#DEAD} exist as rows; a completed delivery is deleted. Whether it is in flight is
 * not stored here but in its lane ({@link LaneState#inFlight}), exactly as in the SQL store.
 */
final class StoredDelivery {
  final long id;
  final String eventId;
  final String handler;
  final int lane;
  final String key;
  final Long sequence;
  final Instant createdAt;

  DeliveryStatus status = DeliveryStatus.PENDING;
  int attempts;

  /**
   * Bumped whenever a claim of this delivery ends, so a token of an older claim no longer holds.
   */
  int claims;

  Instant availableAt;
  String lastError;

  /** A named timer's id (unique per handler among pending deliveries), else null. */
  String timerId;

  /**
   * A named timer's deadline, else null. An extend moves it; when the delivery comes due ({@link
   * #availableAt}) while this is later, the claim re-arms it instead of handing it out, as the SQL
   * store does to keep its extends HOT.
   */
  Instant fireAt;

  /**
   * When the row last recorded a failure or a status change (dead-letter retention counts from
   * here). A claim, a release or a relinquish does not move it.
   */
  Instant updatedAt;

  StoredDelivery(
      long id,
      String eventId,
      String handler,
      int lane,
      String key,
      Long sequence,
      Instant createdAt) {
    this.id = id;
    this.eventId = eventId;
    this.handler = handler;
    this.lane = lane;
    this.key = key;
    this.sequence = sequence;
    this.createdAt = createdAt;
    this.availableAt = createdAt;
    this.updatedAt = createdAt;
  }

  boolean isPending() {
    return status == DeliveryStatus.PENDING;
  }

  /** Ends a claim with a failure: one more attempt spent, and the claim's token dies. */
  void chargeAttempt(Instant now) {
    attempts++;
    claims++;
    updatedAt = now;
  }

  void kill(String reason, Instant now) {
    status = DeliveryStatus.DEAD;
    lastError = reason;
    updatedAt = now;
  }

  /** The completion history row: as it was when completed, {@code updatedAt} = completion time. */
  DeliveryView completedView(Instant completedAt) {
    return new DeliveryView(
        id,
        eventId,
        handler,
        lane,
        key,
        sequence,
        DeliveryStatus.COMPLETED,
        false,
        attempts,
        availableAt,
        lastError,
        createdAt,
        completedAt);
  }

  DeliveryView view(boolean inFlight) {
    return new DeliveryView(
        id,
        eventId,
        handler,
        lane,
        key,
        sequence,
        status,
        inFlight,
        attempts,
        availableAt,
        lastError,
        createdAt,
        updatedAt);
  }
}
