package io.relaybus.store.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.stream.Stream;

/** PostgreSQL data directories for tests of standbys and failovers. */
public final class DataDirectories {
  private DataDirectories() {}

  /**
   * Copies the data directory {@code primary} of a server stopped cleanly to {@code standby}, to be
   * started in recovery ({@code standby.signal}; no primary to follow unless the caller adds a
   * {@code primary_conninfo}).
   */
  public static void copyAsStandby(Path primary, Path standby) throws IOException {
    try (Stream<Path> files = Files.walk(primary)) {
      for (Path file : (Iterable<Path>) files::iterator) {
        Path target = standby.resolve(primary.relativize(file).toString());
        if (Files.isDirectory(file)) {
          Files.createDirectories(target);
        } else {
          Files.copy(file, target);
        }
      }
    }
    // PostgreSQL starts only on a data directory its owner alone may enter
    Files.setPosixFilePermissions(standby, PosixFilePermissions.fromString("rwx------"));
    Files.deleteIfExists(standby.resolve("postmaster.pid"));
    Files.createFile(standby.resolve("standby.signal"));
  }

  /**
   * A server on the data directory {@code data} (initialized when empty), on {@code port} (0: any).
   */
  public static EmbeddedPostgres startIn(Path data, int port) throws IOException {
    EmbeddedPostgres.Builder builder =
        EmbeddedPostgres.builder().setDataDirectory(data).setCleanDataDirectory(false);
    return (port == 0 ? builder : builder.setPort(port)).start();
  }
}
