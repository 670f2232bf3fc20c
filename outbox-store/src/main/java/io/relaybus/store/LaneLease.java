package io.relaybus.store;

import java.time.Instant;

/**
 * A lease on one lane, the fencing token of everything claimed from it: every state change made
 * under this lease checks that the lane still has this {@code epoch}. A change of hands (a new
 * owner, a takeover) bumps the epoch, so the previous holder's writes take no effect.
 *
 * @param lane the lane
 * @param epoch the lane's epoch under this lease
 * @param expiresAt when the lease lapses unless renewed (database clock)
 * @param takenOver whether acquiring it took the lane from another live or expired holder
 * @param charged how many in-flight deliveries of the previous holder were charged one attempt
 */
public record LaneLease(int lane, long epoch, Instant expiresAt, boolean takenOver, int charged) {}
