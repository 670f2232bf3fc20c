package io.relaybus.store.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;

/**
 * A real PgBouncer (Debian's {@code pgbouncer}, which {@code .ci/run} installs where missing) in
 * transaction pooling in front of a PostgreSQL (the embedded 17 unless told), on a port of its own:
 * what many deployments put between the applications and the database. Trust authentication, one
 * database ({@code postgres}), the client's {@code extra_float_digits} (pgjdbc sends it) ignored as
 * its documentation advises; {@code options} is refused, as PgBouncer does.
 */
public final class PgBouncer implements AutoCloseable {
  private static final List<String> BINARIES = List.of("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer");

  private final Process process;
  private final int port;

  private PgBouncer(Process process, int port) {
    this.process = process;
    this.port = port;
  }

  private static PgBouncer shared;

  /**
   * The JVM's one PgBouncer, started at the first call and stopped when the JVM ends: answering, or
   * an exception saying why not (never a skip).
   */
  public static synchronized PgBouncer shared() {
    if (shared == null) {
      PgBouncer started = inFrontOf(EmbeddedPostgres17.server().getPort());
      Runtime.getRuntime().addShutdownHook(new Thread(started::close, "pgbouncer-stop"));
      shared = started;
    }
    return shared;
  }

  /**
   * One in front of the server on {@code serverPort} (database and user {@code postgres}, trust):
   * answering, or an exception saying why not; {@link #close()} stops it.
   */
  public static PgBouncer inFrontOf(int serverPort) {
    String binary =
        BINARIES.stream()
            .filter(b -> Files.isExecutable(Path.of(b)))
            .findFirst()
            .orElseThrow(
                () ->
                    new IllegalStateException(
                        "pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)"));
    try {
      // readable by the user PgBouncer drops to when started as root (it refuses to run as root)
      Path dir =
          Files.createTempDirectory(
              "pgbouncer",
              PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwxrwxrwx")));
      dir.toFile().setWritable(true, false);
      int port = freePort();
      Path ini = dir.resolve("pgbouncer.ini");
      Files.writeString(dir.resolve("users.txt"), "\"postgres\" \"\"\n");
      Files.writeString(
          ini,
          """
          [databases]
          postgres = host=127.0.0.1 port=%d dbname=postgres
          [pgbouncer]
          listen_addr = 127.0.0.1
          listen_port = %d
          unix_socket_dir =
          auth_type = trust
          auth_file = %s
          pool_mode = transaction
          max_client_conn = 200
          default_pool_size = 20
          ignore_startup_parameters = extra_float_digits
          logfile = %s
          """
              .formatted(serverPort, port, dir.resolve("users.txt"), dir.resolve("pgbouncer.log")));
      for (Path file : List.of(ini, dir.resolve("users.txt"))) {
        file.toFile().setReadable(true, false);
      }
      List<String> command = new ArrayList<>(List.of(binary));
      if ("root".equals(System.getProperty("user.name"))) {
        command.addAll(List.of("-u", "nobody"));
      }
      command.add(ini.toString());
      Process process =
          new ProcessBuilder(command)
              .redirectErrorStream(true)
              .redirectOutput(dir.resolve("stdout.log").toFile())
              .start();
      Instant deadline = Instant.now().plus(Duration.ofSeconds(20));
      while (!answers(port)) {
        if (!process.isAlive() || Instant.now().isAfter(deadline)) {
          process.destroyForcibly();
          throw new IllegalStateException(
              "pgbouncer did not start on port %d: %s"
                  .formatted(port, Files.readString(dir.resolve("stdout.log"))));
        }
        Thread.sleep(50);
      }
      return new PgBouncer(process, port);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** The embedded server's {@code postgres} database through PgBouncer, with {@code parameters}. */
  public String jdbcUrl(String parameters) {
    return "jdbc:postgresql://127.0.0.1:%d/postgres?user=postgres%s"
        .formatted(port, parameters.isEmpty() ? "" : "&" + parameters);
  }

  @Override
  public void close() {
    process.destroy();
  }

  private static boolean answers(int port) {
    try (Socket socket = new Socket()) {
      socket.connect(new InetSocketAddress("127.0.0.1", port), 200);
      return true;
    } catch (IOException e) {
      return false;
    }
  }

  private static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    }
  }
}
