package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.testing.PostgresServers;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import org.junit.jupiter.api.Test;

/**
 * setup() refuses a server older than the minimum, on a real PostgreSQL 12, and creates nothing.
 */
class PostgresServerVersionTest {
  @Test
  void setupRefusesPostgres12NamingTheVersionFoundAndTheOneNeeded() throws Exception {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(PostgresServers.embeddedJdbcUrl(12))
            .schema("too_old")
            .poolSize(1)
            .build();
    try {
      assertThatThrownBy(store::setup)
          .isInstanceOf(OutboxStoreException.class)
          .hasMessageMatching(
              "PostgreSQL 12\\.\\d+ \\(server_version_num 12\\d{4}\\) is too old: relaybus needs"
                  + " PostgreSQL 13 or later");
      assertThat(((OutboxStoreException) catchSetup(store)).isTransient()).isFalse();
    } finally {
      store.close();
    }
    try (Connection c = PostgresServers.embedded(12).getPostgresDatabase().getConnection();
        Statement s = c.createStatement();
        ResultSet rs =
            s.executeQuery("SELECT count(*) FROM pg_namespace WHERE nspname = 'too_old'")) {
      rs.next();
      assertThat(rs.getInt(1)).as("schemas created").isZero();
    }
  }

  private static Throwable catchSetup(PostgresOutboxStore store) {
    try {
      store.setup();
    } catch (RuntimeException e) {
      return e;
    }
    throw new AssertionError("setup() accepted PostgreSQL 12");
  }
}
