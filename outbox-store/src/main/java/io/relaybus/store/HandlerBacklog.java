package io.relaybus.store;

import java.time.Duration;

/**
 * The backlog of one handler, split by why each pending delivery waits.
 *
 * @param handler the handler
 * @param pending pending deliveries (= due + scheduledTimers + scheduledRetries)
 * @param due pending deliveries whose time has come (in flight included)
 * @param inFlight due deliveries a lane holder has claimed and not finished
 * @param scheduledTimers pending deliveries not due yet and never attempted: timers (named or not)
 *     waiting for their deadline
 * @param scheduledRetries pending deliveries not due yet after a failed attempt: waiting out the
 *     retry backoff
 * @param dead dead letters
 * @param oldestPendingAge age (by publication) of the oldest pending delivery, {@link
 *     Duration#ZERO} when none
 * @param oldestDueAge how long the longest-waiting due delivery has been due, {@link Duration#ZERO}
 *     when none: the handler's lag
 */
public record HandlerBacklog(
    String handler,
    long pending,
    long due,
    long inFlight,
    long scheduledTimers,
    long scheduledRetries,
    long dead,
    Duration oldestPendingAge,
    Duration oldestDueAge) {}
