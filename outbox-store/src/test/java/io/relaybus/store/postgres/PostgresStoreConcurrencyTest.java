package io.relaybus.store.postgres;

import io.relaybus.store.OutboxStore;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.randomized.StoreConcurrencyTest;
import io.relaybus.store.testing.EmbeddedPostgres17;

/** The randomized concurrency test on a real PostgreSQL 17, in a schema of its own. */
class PostgresStoreConcurrencyTest extends StoreConcurrencyTest {
  @Override
  protected OutboxStore newStore(RetryPolicy policy) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema("randomized")
            .tablePrefix("r" + Long.toString(System.nanoTime(), 36) + "_")
            .retryPolicy(policy)
            .poolSize(10)
            .build();
    store.setup();
    return store;
  }
}
