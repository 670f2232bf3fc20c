package io.relaybus.it.harness;

import io.relaybus.quickstart.LocalPostgres;
import io.relaybus.quickstart.Ports;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import javax.sql.DataSource;

/**
 * One real PostgreSQL (embedded binaries) for one test class, the quickstart's {@link
 * LocalPostgres} with 300 connections; tests isolate by table prefix. Beyond the quickstart: other
 * majors ({@link #start(int)}), the benchmark's settings, and a server started with {@link
 * #startRestartable} can be restarted as a whole ({@link #restart}).
 */
public final class PostgresServer implements AutoCloseable {
  public static final String USER = LocalPostgres.USER;

  private final Path dataDirectory; // null: the embedded default, deleted at close
  private volatile LocalPostgres server;

  private PostgresServer(LocalPostgres server, Path dataDirectory) {
    this.server = server;
    this.dataDirectory = dataDirectory;
  }

  /**
   * Whether the benchmark's server commits durably, as a production server does ({@code fsync=on},
   * {@code synchronous_commit=on}); {@code -Drelaybus.bench.durable=false} measures with the
   * embedded server's default, both off.
   */
  public static final boolean DURABLE =
      Boolean.parseBoolean(System.getProperty("relaybus.bench.durable", "true"));

  private static EmbeddedPostgres.Builder builder() {
    return EmbeddedPostgres.builder().setServerConfig("max_connections", "300");
  }

  public static PostgresServer start() {
    try {
      return new PostgresServer(LocalPostgres.start(builder()), null);
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL", e);
    }
  }

  /**
   * A server of PostgreSQL {@code major} from the embedded binaries the build copies to {@code
   * target/postgres-binaries} (17, the classpath's, when {@code major} is 17).
   */
  public static PostgresServer start(int major) {
    if (major == 17) {
      return start();
    }
    Path jar = Path.of("target/postgres-binaries/postgres-" + major + ".jar").toAbsolutePath();
    if (!java.nio.file.Files.isRegularFile(jar)) {
      throw new IllegalStateException(
          "no embedded PostgreSQL "
              + major
              + " binaries at "
              + jar
              + " (the integration-tests build copies 13-18 there): run through Maven");
    }
    try {
      return new PostgresServer(
          LocalPostgres.start(
              builder()
                  .setPgBinaryResolver(
                      (system, hardware) -> {
                        java.util.zip.ZipFile zip = new java.util.zip.ZipFile(jar.toFile());
                        var entry =
                            zip.getEntry(
                                "postgres-"
                                    + system.toLowerCase(java.util.Locale.ROOT)
                                    + "-x86_64.txz");
                        if (entry == null) {
                          zip.close();
                          throw new IOException(jar + " has no binaries for " + system + " x86_64");
                        }
                        return new java.io.FilterInputStream(zip.getInputStream(entry)) {
                          @Override
                          public void close() throws IOException {
                            super.close();
                            zip.close();
                          }
                        };
                      })),
          null);
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL " + major, e);
    }
  }

  /** The server's major version, from {@code server_version_num}. */
  public int major() throws SQLException {
    try (Connection c = dataSource().getConnection();
        Statement s = c.createStatement();
        var rs = s.executeQuery("SHOW server_version_num")) {
      rs.next();
      return Integer.parseInt(rs.getString(1)) / 10000;
    }
  }

  /**
   * A server for the benchmark: logical decoding on (Debezium reads the WAL through a replication
   * slot) and pg_stat_statements loaded, so statements are counted per role.
   */
  public static PostgresServer startForBenchmark() {
    try {
      EmbeddedPostgres.Builder settings =
          builder()
              .setServerConfig("wal_level", "logical")
              .setServerConfig("shared_preload_libraries", "pg_stat_statements")
              .setServerConfig("pg_stat_statements.track_utility", "off")
              // a production server's durability (the embedded default turns both off): a
              // commit waits for its WAL to reach the disk
              .setServerConfig("fsync", DURABLE ? "on" : "off")
              .setServerConfig("synchronous_commit", DURABLE ? "on" : "off");
      // -Drelaybus.bench.pg.settings="log_checkpoints=on,log_min_duration_statement=50": more
      // server settings for a run (diagnostics: what a stall was)
      for (String setting : System.getProperty("relaybus.bench.pg.settings", "").split(",")) {
        int eq = setting.indexOf('=');
        if (eq > 0) {
          settings.setServerConfig(
              setting.substring(0, eq).trim(), setting.substring(eq + 1).trim());
        } else if (!setting.isBlank()) {
          throw new IllegalArgumentException(
              "relaybus.bench.pg.settings: '" + setting + "' is not name=value");
        }
      }
      LocalPostgres server = LocalPostgres.start(settings);
      try (Connection c = server.dataSource().getConnection();
          Statement s = c.createStatement()) {
        s.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
      }
      return new PostgresServer(server, null);
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL", e);
    } catch (SQLException e) {
      throw new IllegalStateException("could not prepare the embedded PostgreSQL", e);
    }
  }

  public int port() {
    return server.port();
  }

  /**
   * A server on a fixed port whose data lives in {@code dataDirectory} (initialized there when
   * empty) and outlives a {@link #restart}.
   */
  public static PostgresServer startRestartable(Path dataDirectory) {
    return new PostgresServer(start(dataDirectory, Ports.free()), dataDirectory);
  }

  private static LocalPostgres start(Path dataDirectory, int port) {
    try {
      return LocalPostgres.start(
          builder()
              .setDataDirectory(dataDirectory)
              .setCleanDataDirectory(false)
              .setPort(port)
              // a commit returns once its WAL is written, as PostgreSQL ships (the embedded
              // default does not wait): a crashed backend's recovery then loses no commit a
              // publisher saw (fsync stays off: the kernel keeps what was written)
              .setServerConfig("synchronous_commit", "on"));
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL", e);
    }
  }

  /**
   * Restarts the whole server as an operator would: {@code pg_ctl stop -m fast} (every connection
   * closed, a shutdown checkpoint), {@code down} with nothing listening, then the {@code postgres}
   * binary started again on the same port and data directory. Returns how long the server was
   * unreachable.
   */
  public Duration restart(Duration down) throws InterruptedException {
    if (dataDirectory == null) {
      throw new IllegalStateException("started without a data directory of its own");
    }
    int port = server.port();
    long stopping = System.nanoTime();
    try {
      server.close(); // pg_ctl -D <data> stop -m fast -t 5 -w
    } catch (IOException e) {
      throw new UncheckedIOException("could not stop PostgreSQL", e);
    }
    Thread.sleep(down.toMillis());
    server = start(dataDirectory, port);
    return Duration.ofNanos(System.nanoTime() - stopping);
  }

  /** Kills backend {@code pid} of this server: its crash recovery ({@code BackendCrash}). */
  public Duration crashBackend(long pid) throws InterruptedException {
    return io.relaybus.store.testing.BackendCrash.kill(dataSource(), pid);
  }

  public String jdbcUrl() {
    return server.jdbcUrl();
  }

  public DataSource dataSource() {
    return server.dataSource();
  }

  /** The application's view of the outbox with this table prefix, set up. */
  public PostgresOutboxStore store(String tablePrefix) {
    return server.store(PostgresOutboxStore.builder().tablePrefix(tablePrefix), 8, "relaybus-it");
  }

  @Override
  public void close() throws IOException {
    server.close();
  }
}
