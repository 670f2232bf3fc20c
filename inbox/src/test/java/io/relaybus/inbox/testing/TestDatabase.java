package io.relaybus.inbox.testing;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;

/**
 * The consumer's database: the embedded PostgreSQL 17 of the test JVM, outbox tables under a table
 * prefix of their own per call, so tests do not see each other's events.
 */
public final class TestDatabase {
  private static final AtomicInteger PREFIXES = new AtomicInteger();

  private TestDatabase() {}

  /** A set-up outbox (and so inbox) store on fresh tables. */
  public static PostgresOutboxStore freshStore() {
    return freshStore("");
  }

  /**
   * A set-up store on fresh tables whose connections carry {@code urlParameters} (for example
   * {@code &options=-c%20lock_timeout%3D200}), appended to the server's JDBC URL.
   */
  public static PostgresOutboxStore freshStore(String urlParameters) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl() + urlParameters)
            .schema("inbox_test")
            .tablePrefix("t" + PREFIXES.incrementAndGet() + "_")
            .poolSize(8)
            .build();
    store.setup();
    return store;
  }

  public static DataSource dataSource() {
    return EmbeddedPostgres17.dataSource();
  }
}
