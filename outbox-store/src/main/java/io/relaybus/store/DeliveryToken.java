package io.relaybus.store;

/**
 * Identifies one claim of one delivery: the lane lease it was claimed under ({@code lane}, {@code
 * epoch}), the delivery's claim counter at that moment and the event it delivers. A state change
 * through a token takes effect only while the lane still has that epoch, still lists the delivery
 * as in flight, and the delivery's counter is unchanged (so a token of an older claim cannot touch
 * a newer one). The event's id makes the token name that event's delivery alone: after a failover
 * to an asynchronous standby the database may give another event the delivery's id.
 */
public record DeliveryToken(long deliveryId, int lane, long epoch, int claims, String eventId) {}
