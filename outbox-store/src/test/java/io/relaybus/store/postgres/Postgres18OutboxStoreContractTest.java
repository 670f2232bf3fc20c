package io.relaybus.store.postgres;

import io.relaybus.store.testing.PostgresServers;

/**
 * The contract suite on PostgreSQL 18 (embedded binaries), the newest major the store claims. The
 * others (14 to 16) run on demand: {@code -Drelaybus.postgres.major=N
 * -Dtest=PostgresOutboxStoreContractTest}.
 */
class Postgres18OutboxStoreContractTest extends PostgresOutboxStoreContractTest {
  @Override
  protected String jdbcUrl() {
    return PostgresServers.embeddedJdbcUrl(18);
  }
}
