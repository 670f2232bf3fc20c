package io.relaybus.store.memory;

import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.RetryPolicy;
import java.time.Instant;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.Set;

/**
 * How a claim ends: complete, reschedule, bury, release (requeueing dead letters is admin work,
 * {@link MemoryAdmin}, as in the other stores). Every claim-ending change is fenced by its {@link
 * DeliveryToken} and bumps the delivery's claim counter (completion deletes the row instead), so a
 * token works at most once. Callers hold the store's lock.
 */
final class MemoryCompletion {
  private final MemoryTables tables;
  private final RetryPolicy retryPolicy;
  private final boolean completionHistory;

  MemoryCompletion(MemoryTables tables, RetryPolicy retryPolicy, boolean completionHistory) {
    this.tables = tables;
    this.retryPolicy = retryPolicy;
    this.completionHistory = completionHistory;
  }

  Set<Long> complete(Collection<DeliveryToken> tokens, Instant now) {
    Set<Long> completed = new LinkedHashSet<>();
    for (DeliveryToken token : tokens) {
      StoredDelivery delivery = tables.heldBy(token);
      if (delivery == null) {
        continue;
      }
      tables.deleteDelivery(delivery);
      if (completionHistory) {
        tables.history.put(delivery.id, delivery.completedView(now));
      }
      completed.add(delivery.id);
    }
    return Collections.unmodifiableSet(completed);
  }

  FailOutcome reschedule(DeliveryToken token, String reason, Instant now) {
    StoredDelivery delivery = endClaim(token);
    if (delivery == null) {
      return FailOutcome.LOST;
    }
    delivery.chargeAttempt(now);
    if (delivery.attempts >= retryPolicy.maxAttempts()) {
      delivery.kill(reason, now);
      return FailOutcome.DEAD;
    }
    delivery.lastError = reason;
    delivery.availableAt = now.plus(retryPolicy.backoff(delivery.attempts));
    return FailOutcome.RESCHEDULED;
  }

  boolean bury(DeliveryToken token, String reason, Instant now) {
    StoredDelivery delivery = endClaim(token);
    if (delivery == null) {
      return false;
    }
    delivery.chargeAttempt(now);
    delivery.kill(reason, now);
    return true;
  }

  /** Gives claims back untouched: no attempt charged, due as before. */
  int release(Collection<DeliveryToken> tokens) {
    int released = 0;
    for (DeliveryToken token : tokens) {
      StoredDelivery delivery = endClaim(token);
      if (delivery != null) {
        delivery.claims++;
        released++;
      }
    }
    return released;
  }

  /** Takes the delivery out of its lane's in-flight set if the token holds; null if it does not. */
  private StoredDelivery endClaim(DeliveryToken token) {
    StoredDelivery delivery = tables.heldBy(token);
    if (delivery != null) {
      tables.lanes[delivery.lane].inFlight.remove(delivery.id);
    }
    return delivery;
  }
}
