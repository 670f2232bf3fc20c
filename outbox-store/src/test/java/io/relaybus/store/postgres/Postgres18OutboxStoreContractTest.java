package io.relaybus.store.postgres;

import io.relaybus.store.testing.PostgresServers;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

/**
 * The contract suite on PostgreSQL 18 (embedded binaries), the newest major the store claims. The
 * others (14 to 16) run on demand: {@code -Drelaybus.postgres.major=N
 * -Dtest=PostgresOutboxStoreContractTest}.
 *
 * <p>Not in the default build, which runs the suite on PostgreSQL 17 directly (and the connector
 * end to end on 13, 18 and behind PgBouncer): {@code -Drelaybus.store.matrix=true}
 * (docs/testing.md).
 */
@EnabledIfSystemProperty(named = "relaybus.store.matrix", matches = "true")
class Postgres18OutboxStoreContractTest extends PostgresOutboxStoreContractTest {
  @Override
  protected String jdbcUrl() {
    return PostgresServers.embeddedJdbcUrl(18);
  }
}
