package io.relaybus.quickstart;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;

/**
 * A real PostgreSQL from the embedded binaries (no installation), on a port of localhost, user
 * {@code postgres} with trust authentication. The quickstart's ({@link #start(Path, Path)}) is
 * PostgreSQL 17: with {@code keepData} its data directory survives the run; otherwise it is a fresh
 * one, removed at the end. The integration tests' harness (integration-tests' {@code
 * PostgresServer}) starts its servers with {@link #start(EmbeddedPostgres.Builder)}.
 */
public final class LocalPostgres implements AutoCloseable {
  public static final String USER = "postgres";

  private final EmbeddedPostgres server;
  private final boolean reused;
  private final Path pidFile; // null: not recorded

  private LocalPostgres(EmbeddedPostgres server, boolean reused, Path pidFile) {
    this.server = server;
    this.reused = reused;
    this.pidFile = pidFile;
  }

  /** A server as {@code builder} says (binaries, settings, data directory, port). */
  public static LocalPostgres start(EmbeddedPostgres.Builder builder) throws IOException {
    return new LocalPostgres(builder.start(), false, null);
  }

  /**
   * Starts the quickstart's PostgreSQL and records its postmaster in {@code runDir} (see {@link
   * PidFiles}): it runs in a session of its own (pg_ctl detaches it), so a quickstart killed with
   * SIGKILL leaves it running until the next run stops it.
   */
  static LocalPostgres start(Path keepData, Path runDir) throws IOException, SQLException {
    EmbeddedPostgres.Builder builder =
        EmbeddedPostgres.builder()
            // The quickstart stops PostgreSQL itself, last, after the worker handed its lanes back.
            .setRegisterShutdownHook(false)
            .setServerConfig("max_connections", "100");
    boolean reused = false;
    if (keepData != null) {
      reused = Files.isRegularFile(keepData.resolve("PG_VERSION"));
      Files.createDirectories(keepData);
      builder.setDataDirectory(keepData).setCleanDataDirectory(false);
    }
    EmbeddedPostgres server = builder.start();
    String dataDirectory;
    try (Connection connection = server.getPostgresDatabase().getConnection();
        Statement statement = connection.createStatement();
        ResultSet rs = statement.executeQuery("SHOW data_directory")) {
      rs.next();
      dataDirectory = rs.getString(1);
    }
    // postmaster.pid: the postmaster's pid on its first line.
    String pid = Files.readAllLines(Path.of(dataDirectory, "postmaster.pid")).get(0).strip();
    Path pidFile = PidFiles.write(runDir, "postgres", Long.parseLong(pid), "-D " + dataDirectory);
    return new LocalPostgres(server, reused, pidFile);
  }

  /** Whether the data directory held a database from an earlier run. */
  boolean reused() {
    return reused;
  }

  public int port() {
    return server.getPort();
  }

  public String jdbcUrl() {
    return "jdbc:postgresql://localhost:" + server.getPort() + "/postgres";
  }

  public DataSource dataSource() {
    return server.getPostgresDatabase();
  }

  /** The application's side of the outbox, with the default schema and table prefix. */
  PostgresOutboxStore store() {
    return store(PostgresOutboxStore.builder(), 4, "relaybus-quickstart");
  }

  /** The application's side of the outbox as {@code builder} says, on this server, set up. */
  public PostgresOutboxStore store(
      PostgresOutboxStore.Builder builder, int poolSize, String applicationName) {
    PostgresOutboxStore store =
        builder
            .jdbcUrl(jdbcUrl())
            .user(USER)
            .poolSize(poolSize)
            .applicationName(applicationName)
            .build();
    store.setup();
    return store;
  }

  /** Stops the server ({@code pg_ctl stop -m fast}). */
  @Override
  public void close() throws IOException {
    server.close();
    if (pidFile != null) {
      PidFiles.delete(pidFile);
    }
  }
}
