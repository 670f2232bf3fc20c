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
    // the safety net under the chaos too: it must find nothing, nor move a row that is out
    store.sweepEvery(java.time.Duration.ofMillis(200));
    // a task here holds a few lanes: with the usual 8 every claim's first page would go to all
    store.firstPageLanes(1);
    return store;
  }

  /** The log's safety net must have found nothing: each row it moves is a stall. */
  @Override
  protected java.util.List<String> storeFindings(OutboxStore store) {
    long rescued = ((PostgresOutboxStore) store).rescuedRows();
    return rescued == 0
        ? java.util.List.of()
        : java.util.List.of(rescued + " log rows found behind their lane's cursor by the sweep");
  }
}
