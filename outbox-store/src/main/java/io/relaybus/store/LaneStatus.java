package io.relaybus.store;

import java.time.Instant;

/**
 * Who holds one lane, as the admin lane map shows it.
 *
 * @param lane the lane, 0 to 255
 * @param epoch the lane's fencing epoch
 * @param owner the holder that last leased it, or {@code null} when it was never held or was handed
 *     back
 * @param group the holder's group (the connector name), or {@code null}
 * @param leaseExpiresAt when the lease lapses, or {@code null} without an owner
 * @param held whether the lease is live now (an owner whose lease has not expired)
 * @param inFlight deliveries its holder claimed and has not finished
 * @param pending pending deliveries of the lane (in flight included)
 */
public record LaneStatus(
    int lane,
    long epoch,
    String owner,
    String group,
    Instant leaseExpiresAt,
    boolean held,
    long inFlight,
    long pending) {}
