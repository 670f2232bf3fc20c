package io.relaybus.store.postgres;

import io.relaybus.store.testing.PgBouncer;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;

/**
 * The contract suite through a real PgBouncer in transaction pooling: each transaction may run on
 * another server connection. The store sends no startup options (PgBouncer refuses them), and the
 * URL asks pgjdbc for no server-prepared statements ({@code prepareThreshold=0}: PgBouncer before
 * 1.21 does not follow them from one server connection to another).
 *
 * <p>Not in the default build, which runs the suite on PostgreSQL 17 directly (and the connector
 * end to end on 13, 18 and behind PgBouncer): {@code -Drelaybus.store.matrix=true}
 * (docs/testing.md).
 */
@EnabledIfSystemProperty(named = "relaybus.store.matrix", matches = "true")
class PgBouncerOutboxStoreContractTest extends PostgresOutboxStoreContractTest {

  @Override
  protected String jdbcUrl() {
    return PgBouncer.shared().jdbcUrl("prepareThreshold=0");
  }

  @Override
  protected PostgresOutboxStore.Builder builder() {
    return super.builder().startupOptions(false);
  }
}
