package io.relaybus.store.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.zip.ZipFile;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.postgresql.PostgreSQLContainer;

/**
 * Real PostgreSQL servers of several major versions, each started once per test JVM on first use.
 *
 * <ul>
 *   <li>{@link #embedded(int)}: the embedded binaries of that major. 17 comes from the classpath
 *       (as {@link EmbeddedPostgres17}); the others from the jars the build copies to {@value
 *       #BINARIES_DIR} ({@code postgres-<major>.jar}, see the outbox-store pom).
 *   <li>{@link #container(int)}: a Testcontainers {@code postgres:<major>} image when Docker runs,
 *       else none (with {@link #containerUnavailableReason(int)}).
 * </ul>
 *
 * {@value #MAJOR_PROPERTY} picks the major the PostgreSQL contract suite runs on (default 17).
 */
public final class PostgresServers {
  /** The majors the store claims (README, docs/outbox-store.md), oldest first. */
  public static final List<Integer> SUPPORTED = List.of(13, 14, 15, 16, 17, 18);

  public static final String MAJOR_PROPERTY = "relaybus.postgres.major";
  public static final String BINARIES_DIR = "target/postgres-binaries";

  private static final Map<Integer, EmbeddedPostgres> EMBEDDED = new HashMap<>();
  private static final Map<Integer, Optional<PostgreSQLContainer>> CONTAINERS = new HashMap<>();

  private PostgresServers() {}

  /** The major selected with {@value #MAJOR_PROPERTY}, 17 when not set. */
  public static int selectedMajor() {
    return Integer.parseInt(System.getProperty(MAJOR_PROPERTY, "17").strip());
  }

  /** The JDBC URL of an embedded server of {@code major}, superuser {@code postgres}. */
  public static String embeddedJdbcUrl(int major) {
    return embedded(major).getJdbcUrl("postgres", "postgres");
  }

  public static synchronized EmbeddedPostgres embedded(int major) {
    if (major == 17) {
      return EmbeddedPostgres17.server();
    }
    return EMBEDDED.computeIfAbsent(major, PostgresServers::start);
  }

  private static EmbeddedPostgres start(int major) {
    Path jar = Path.of(BINARIES_DIR, "postgres-" + major + ".jar").toAbsolutePath();
    if (!Files.isRegularFile(jar)) {
      throw new IllegalStateException(
          "no embedded PostgreSQL "
              + major
              + " binaries at "
              + jar
              + ": the outbox-store build copies them (maven-dependency-plugin, phase"
              + " generate-test-resources); run the tests through Maven");
    }
    try {
      EmbeddedPostgres server =
          EmbeddedPostgres.builder()
              .setPgBinaryResolver(
                  (system, hardware) -> {
                    ZipFile zip = new ZipFile(jar.toFile());
                    String entry =
                        "postgres-" + system.toLowerCase(java.util.Locale.ROOT) + "-x86_64.txz";
                    if (zip.getEntry(entry) == null) {
                      zip.close();
                      throw new IOException(jar + " has no " + entry + " (linux x86_64 only)");
                    }
                    InputStream in = zip.getInputStream(zip.getEntry(entry));
                    return new java.io.FilterInputStream(in) {
                      @Override
                      public void close() throws IOException {
                        super.close();
                        zip.close();
                      }
                    };
                  })
              .setServerConfig("max_connections", "200")
              .start();
      int found = majorOf(server);
      if (found != major) {
        server.close();
        throw new IllegalStateException(jar + " started PostgreSQL " + found + ", not " + major);
      }
      Runtime.getRuntime()
          .addShutdownHook(
              new Thread(
                  () -> {
                    try {
                      server.close();
                    } catch (IOException ignored) {
                      // the JVM is going away
                    }
                  },
                  "embedded-postgres-" + major + "-stop"));
      return server;
    } catch (IOException e) {
      throw new UncheckedIOException("could not start the embedded PostgreSQL " + major, e);
    }
  }

  private static int majorOf(EmbeddedPostgres server) {
    try (Connection c = server.getPostgresDatabase().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SHOW server_version_num")) {
      rs.next();
      return Integer.parseInt(rs.getString(1)) / 10000;
    } catch (SQLException e) {
      throw new IllegalStateException("could not read the server version", e);
    }
  }

  /** A {@code postgres:<major>} container, if Docker can start one. */
  public static synchronized Optional<PostgreSQLContainer> container(int major) {
    return CONTAINERS.computeIfAbsent(
        major,
        m -> {
          if (!dockerAvailable()) {
            return Optional.empty();
          }
          PostgreSQLContainer container =
              new PostgreSQLContainer("postgres:" + m)
                  .withCommand("postgres", "-c", "max_connections=200");
          container.start();
          Runtime.getRuntime()
              .addShutdownHook(new Thread(container::stop, "postgres-" + m + "-container-stop"));
          return Optional.of(container);
        });
  }

  public static String containerUnavailableReason(int major) {
    return "needs Docker to run the postgres:"
        + major
        + " image (Testcontainers found no Docker environment); without Docker the embedded"
        + " binaries run the same suite: -D"
        + MAJOR_PROPERTY
        + "="
        + major
        + " -Dtest=PostgresOutboxStoreContractTest";
  }

  private static boolean dockerAvailable() {
    try {
      return DockerClientFactory.instance().isDockerAvailable();
    } catch (RuntimeException | Error e) {
      return false;
    }
  }
}
