package io.relaybus.it.harness;

import io.relaybus.quickstart.LocalPostgres;
import io.relaybus.quickstart.Ports;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.DataDirectories;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import javax.sql.DataSource;

/**
 * One real PostgreSQL (embedded binaries) for one test class, the quickstart's {@link
 * LocalPostgres} with 300 connections; tests isolate by table prefix. Beyond the quickstart: other
 * majors ({@link #start(int)}), the benchmark's settings, and a server started with {@link
 * #startRestartable} can be restarted as a whole ({@link #restart}).
 */
public final class PostgresServer implements AutoCloseable {
  public static final String USER = LocalPostgres.USER;

  private volatile Path dataDirectory; // null: the embedded default, deleted at close
  private volatile LocalPostgres server;
  private volatile LocalPostgres standby; // streaming from this server, see addStandby
  private volatile Path standbyDirectory;

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
    if (!Files.isRegularFile(jar)) {
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
    requireDataDirectory();
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

  /** The standby's name in the primary's {@code synchronous_standby_names}. */
  private static final String STANDBY_NAME = "relaybus_standby";

  /**
   * Gives this server (started with {@link #startRestartable}) a standby that streams its WAL, and
   * makes every commit wait for the standby to have it on disk ({@code synchronous_standby_names}:
   * a failover then loses no commit a client saw). The standby is a copy of the data directory
   * taken while the server is stopped cleanly (the server is down for about a second), started in
   * recovery on a port of its own. Returns once the standby streams as the synchronous one.
   */
  public void addStandby() throws Exception {
    addStandby(true);
  }

  /**
   * As {@link #addStandby()}; not {@code synchronous}: commits do not wait for the standby (as
   * PostgreSQL ships), so a failover loses what the standby had not received yet (see {@link
   * #pauseTheStandby}). Returns once the standby streams.
   */
  public void addStandby(boolean synchronous) throws Exception {
    requireDataDirectory();
    int port = server.port();
    Path copy = dataDirectory.resolveSibling(dataDirectory.getFileName() + "-standby");
    server.close(); // pg_ctl stop -m fast: a shutdown checkpoint, nothing left to replay
    SeparateJvmKafka.deleteRecursively(copy);
    DataDirectories.copyAsStandby(dataDirectory, copy);
    appendSettings(
        copy,
        "primary_conninfo = 'host=127.0.0.1 port="
            + port
            + " user="
            + USER
            + " application_name="
            + STANDBY_NAME
            + "'");
    // only the primary: the copy must not wait for a standby of its own once promoted
    appendSettings(
        dataDirectory,
        "synchronous_standby_names = '" + (synchronous ? STANDBY_NAME : "") + "'",
        "wal_keep_size = '512MB'");
    standbyDirectory = copy;
    standby = start(copy, Ports.free());
    server = start(dataDirectory, port);
    long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    String streaming = synchronous ? "sync" : "async";
    while (!streaming.equals(replicationState())) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(
            "the standby does not stream as the " + streaming + " one: " + replicationState());
      }
      Thread.sleep(100);
    }
  }

  /** The WAL sender {@link #pauseTheStandby} froze (0: none): killed at the failover. */
  private volatile long frozenSender;

  /**
   * Freezes the WAL sender that streams to the standby (SIGSTOP): from now on the standby receives
   * nothing, and a failover loses every commit since, as one to an asynchronous standby that lags.
   * Commits do not wait for it only if the standby is not the synchronous one.
   */
  public void pauseTheStandby() throws Exception {
    String pid = ofTheStandby("pid");
    if (pid == null) {
      throw new IllegalStateException("no WAL sender streams to the standby");
    }
    frozenSender = Long.parseLong(pid);
    signal("STOP", frozenSender);
  }

  private static void signal(String signal, long pid) throws Exception {
    Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).start();
    if (kill.waitFor() != 0) {
      throw new IllegalStateException("kill -" + signal + " " + pid + " failed");
    }
  }

  private String replicationState() throws SQLException {
    String state = ofTheStandby("state || ' ' || sync_state");
    return state == null ? "not connected" : state.replace("streaming ", "");
  }

  /** {@code column} of the standby's row of {@code pg_stat_replication}; null without one. */
  private String ofTheStandby(String column) throws SQLException {
    try (Connection c = dataSource().getConnection();
        Statement s = c.createStatement();
        var rs =
            s.executeQuery(
                "SELECT "
                    + column
                    + " FROM pg_stat_replication WHERE application_name = '"
                    + STANDBY_NAME
                    + "'")) {
      return rs.next() ? rs.getString(1) : null;
    }
  }

  /**
   * The primary fails and its address moves to the standby, as a failover manager with a virtual
   * address does: the primary stopped as {@code pg_ctl stop -m immediate} does (SIGQUIT to the
   * postmaster: every session ends at once, no shutdown checkpoint), the standby restarted on the
   * primary's port (clients that reconnect meet it still in recovery) and promoted. From then on
   * this object is the new primary (on the same port), which has no standby. Returns how long the
   * address had no primary.
   */
  public Duration failOverToTheStandby() throws Exception {
    if (standby == null) {
      throw new IllegalStateException("no standby: addStandby first");
    }
    int port = server.port();
    long failing = System.nanoTime();
    long postmaster =
        Long.parseLong(Files.readAllLines(dataDirectory.resolve("postmaster.pid")).get(0).strip());
    signal("QUIT", postmaster);
    if (frozenSender != 0) {
      // killed, not woken: woken before the postmaster's SIGQUIT reached it, it would send on
      signal("KILL", frozenSender);
      frozenSender = 0;
    }
    ProcessHandle.of(postmaster).ifPresent(p -> p.onExit().orTimeout(30, TimeUnit.SECONDS).join());
    try {
      server.close(); // pg_ctl stop finds no server; frees what the embedded wrapper holds
    } catch (IOException | RuntimeException ignored) {
      // nothing left to stop
    }
    standby.close(); // still in recovery: a restartpoint, then down
    server = start(standbyDirectory, port);
    standby = null;
    dataDirectory = standbyDirectory;
    try (Connection c = dataSource().getConnection();
        Statement s = c.createStatement();
        var rs = s.executeQuery("SELECT pg_promote(true, 60)")) {
      rs.next();
      if (!rs.getBoolean(1)) {
        throw new IllegalStateException("the standby was not promoted within 60 s");
      }
    }
    return Duration.ofNanos(System.nanoTime() - failing);
  }

  private void requireDataDirectory() {
    if (dataDirectory == null) {
      throw new IllegalStateException("started without a data directory of its own");
    }
  }

  private static void appendSettings(Path dataDirectory, String... lines) throws IOException {
    Files.writeString(
        dataDirectory.resolve("postgresql.auto.conf"),
        String.join("\n", lines) + "\n",
        StandardOpenOption.APPEND,
        StandardOpenOption.CREATE);
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
    try {
      server.close();
    } finally {
      if (standby != null) {
        standby.close();
      }
    }
  }
}
