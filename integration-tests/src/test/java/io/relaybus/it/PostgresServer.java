package io.relaybus.it;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;

/** One real PostgreSQL (embedded binaries) for one test class; tests isolate by table prefix. */
final class PostgresServer implements AutoCloseable {
  static final String USER = "postgres";

  private final EmbeddedPostgres server;

  private PostgresServer(EmbeddedPostgres server) {
    this.server = server;
  }

  static PostgresServer start() {
    try {
      return new PostgresServer(
          EmbeddedPostgres.builder().setServerConfig("max_connections", "300").start());
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL", e);
    }
  }

  /**
   * A server for the benchmark: logical decoding on (Debezium reads the WAL through a replication
   * slot) and pg_stat_statements loaded, so statements are counted per role.
   */
  static PostgresServer startForBenchmark() {
    try {
      EmbeddedPostgres server =
          EmbeddedPostgres.builder()
              .setServerConfig("max_connections", "300")
              .setServerConfig("wal_level", "logical")
              .setServerConfig("shared_preload_libraries", "pg_stat_statements")
              .setServerConfig("pg_stat_statements.track_utility", "off")
              .start();
      try (Connection c = server.getPostgresDatabase().getConnection();
          Statement s = c.createStatement()) {
        s.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      }
      return new PostgresServer(server);
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL", e);
    } catch (SQLException e) {
      throw new IllegalStateException("could not prepare the embedded PostgreSQL", e);
    }
  }

  int port() {
    return server.getPort();
  }

  String jdbcUrl() {
    return "jdbc:postgresql://localhost:" + server.getPort() + "/postgres";
  }

  DataSource dataSource() {
    return server.getPostgresDatabase();
  }

  /** The application's view of the outbox with this table prefix, set up. */
  PostgresOutboxStore store(String tablePrefix) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(jdbcUrl())
            .user(USER)
            .tablePrefix(tablePrefix)
            .poolSize(8)
            .applicationName("relaybus-it")
            .build();
    store.setup();
    return store;
  }

  @Override
  public void close() throws IOException {
    server.close();
  }
}
