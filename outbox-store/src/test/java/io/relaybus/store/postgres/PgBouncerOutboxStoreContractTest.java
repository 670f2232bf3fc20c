package io.relaybus.store.postgres;

import io.relaybus.store.testing.PgBouncer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/**
 * The contract suite through a real PgBouncer in transaction pooling: each transaction may run on
 * another server connection. The store sends no startup options (PgBouncer refuses them), and the
 * URL asks pgjdbc for no server-prepared statements ({@code prepareThreshold=0}: PgBouncer before
 * 1.21 does not follow them from one server connection to another).
 */
class PgBouncerOutboxStoreContractTest extends PostgresOutboxStoreContractTest {
  private static PgBouncer bouncer;

  @BeforeAll
  static void startPgBouncer() {
    bouncer = PgBouncer.inTransactionPooling();
  }

  @AfterAll
  static void stopPgBouncer() {
    bouncer.close();
  }

  @Override
  protected String jdbcUrl() {
    return bouncer.jdbcUrl("prepareThreshold=0");
  }

  @Override
  protected PostgresOutboxStore.Builder builder() {
    return super.builder().startupOptions(false);
  }
}
