package io.relaybus.store.memory;

import io.relaybus.store.OutboxStore;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.randomized.StoreConcurrencyTest;
import java.time.Clock;

/** The randomized concurrency test on the in-memory store, on the system clock. */
class InMemoryStoreConcurrencyTest extends StoreConcurrencyTest {
  @Override
  protected OutboxStore newStore(RetryPolicy policy) {
    return InMemoryOutboxStore.builder().clock(Clock.systemUTC()).retryPolicy(policy).build();
  }

  /** Ten times the PostgreSQL form: in memory a store call costs microseconds. */
  @Override
  protected long defaultOperations() {
    return 10 * DEFAULT_OPS;
  }
}
