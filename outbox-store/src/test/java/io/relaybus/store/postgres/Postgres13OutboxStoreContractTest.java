package io.relaybus.store.postgres;

import io.relaybus.store.testing.PostgresServers;

/**
 * The contract suite on PostgreSQL 13 (embedded binaries), the oldest major the store claims. The
 * others (14 to 16) run on demand: {@code -Drelaybus.postgres.major=N
 * -Dtest=PostgresOutboxStoreContractTest}.
 */
class Postgres13OutboxStoreContractTest extends PostgresOutboxStoreContractTest {
  @Override
  protected String jdbcUrl() {
    return PostgresServers.embeddedJdbcUrl(13);
  }
}
