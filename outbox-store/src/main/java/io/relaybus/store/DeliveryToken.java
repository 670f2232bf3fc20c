package io.relaybus.store;

/**
 * Identifies one claim of one delivery: the lane lease it was claimed under ({@code lane}, {@code
 * epoch}) and the delivery's claim counter at that moment. A state change through a token takes
 * effect only while the lane still has that epoch, still lists the delivery as in flight, and the
 * delivery's counter is unchanged (so a token of an older claim cannot touch a newer one).
 */
public record DeliveryToken(long deliveryId, int lane, long epoch, int claims) {}
