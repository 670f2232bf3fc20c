package io.relaybus.store;

import java.time.Instant;

/**
 * One delivery as the admin listing shows it.
 *
 * @param id the delivery id
 * @param eventId the event id
 * @param handler the route
 * @param lane the lane
 * @param key the ordering key or {@code null}
 * @param sequence the key's sequence or {@code null}
 * @param status pending, dead, or completed (history only)
 * @param inFlight pending and currently claimed by a lane holder
 * @param attempts failed attempts so far
 * @param availableAt when it is (or was) due
 * @param lastError the reason of the last failure or of the burial, or {@code null}
 * @param createdAt when it was published
 * @param updatedAt when it last failed, was charged, buried or requeued (its creation time until
 *     then; the completion time for history rows)
 */
public record DeliveryView(
    long id,
    String eventId,
    String handler,
    int lane,
    String key,
    Long sequence,
    DeliveryStatus status,
    boolean inFlight,
    int attempts,
    Instant availableAt,
    String lastError,
    Instant createdAt,
    Instant updatedAt) {}
