package io.relaybus.store;

import java.time.Instant;

/**
 * One dead letter as the admin listing shows it.
 *
 * @param id the delivery id (what {@link OutboxStore#requeue} takes)
 * @param eventId the event id
 * @param eventType the event's type
 * @param handler the route
 * @param lane the lane
 * @param key the ordering key or {@code null}
 * @param sequence the key's sequence or {@code null}
 * @param attempts failed attempts charged before it died
 * @param reason why it died
 * @param createdAt when it was published
 * @param diedAt when it died (dead-letter retention counts from here)
 */
public record DeadLetter(
    long id,
    String eventId,
    String eventType,
    String handler,
    int lane,
    String key,
    Long sequence,
    int attempts,
    String reason,
    Instant createdAt,
    Instant diedAt) {}
