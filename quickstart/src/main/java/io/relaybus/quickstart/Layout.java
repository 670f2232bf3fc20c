package io.relaybus.quickstart;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Where things are. The build leaves everything next to the quickstart jar in {@code
 * quickstart/target/}: the Kafka classpath of the child JVMs, the unzipped plugin, and the run
 * directory (Kafka's data and every log, cleared at each start). The deployed configuration comes
 * from the repository's {@code config/}, the very files users deploy.
 *
 * @param home the directory of the quickstart jar (or of its classes, in an IDE)
 * @param configDir the repository's {@code config/}
 * @param runDir Kafka's data and every log of one run
 */
record Layout(Path home, Path configDir, Path runDir) {
  static final String CONNECTOR_CONFIG = "postgres-outbox-source.json";
  static final String WORKER_CONFIG = "connect-distributed.properties";

  /**
   * The layout around the running code; {@code configDir} null: look for {@code config/}; {@code
   * runDir} null: {@code quickstart-run} next to the jar.
   */
  static Layout find(Path configDir, Path runDir) {
    Path home = codeHome();
    Path run = runDir != null ? runDir : home.resolve("quickstart-run");
    if (configDir != null) {
      return new Layout(home, requireConfig(configDir), run);
    }
    List<Path> candidates = new ArrayList<>();
    candidates.add(Path.of("config").toAbsolutePath());
    // quickstart/target/ -> the repository root
    if (home.getParent() != null && home.getParent().getParent() != null) {
      candidates.add(home.getParent().getParent().resolve("config"));
    }
    for (Path candidate : candidates) {
      if (Files.isRegularFile(candidate.resolve(CONNECTOR_CONFIG))) {
        return new Layout(home, candidate.normalize(), run);
      }
    }
    throw new IllegalStateException(
        "cannot find the repository's config/ (looked in "
            + candidates
            + "): run from the repository root or pass --config-dir");
  }

  private static Path requireConfig(Path configDir) {
    if (!Files.isRegularFile(configDir.resolve(CONNECTOR_CONFIG))) {
      throw new IllegalArgumentException(
          "--config-dir must hold " + CONNECTOR_CONFIG + ", but " + configDir + " does not");
    }
    return configDir;
  }

  private static Path codeHome() {
    try {
      Path code = Path.of(Layout.class.getProtectionDomain().getCodeSource().getLocation().toURI());
      return code.getParent().toAbsolutePath().normalize();
    } catch (URISyntaxException e) {
      throw new IllegalStateException("cannot locate the quickstart's own jar", e);
    }
  }

  Path connectorConfig() {
    return configDir.resolve(CONNECTOR_CONFIG);
  }

  Path workerConfig() {
    return configDir.resolve(WORKER_CONFIG);
  }

  Path logDir() {
    return runDir().resolve("logs");
  }

  /** The worker's plugin.path: the packaged connector, unzipped. */
  Path pluginPath() {
    return requireBuilt(home.resolve("connect-plugins"));
  }

  /** The classpath of the broker and worker JVMs: Kafka's jars, none of relaybus. */
  String kafkaClasspath() {
    try {
      return Files.readString(requireBuilt(home.resolve("kafka-classpath.txt"))).strip();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static Path requireBuilt(Path path) {
    if (!Files.exists(path)) {
      throw new IllegalStateException(
          path + " is missing: build first with ./mvnw -q -pl quickstart -am package -DskipTests");
    }
    return path;
  }

  /** A path as the user may type it: relative to the working directory when it is below it. */
  static String show(Path path) {
    Path here = Path.of("").toAbsolutePath();
    Path absolute = path.toAbsolutePath().normalize();
    return absolute.startsWith(here) && !absolute.equals(here)
        ? here.relativize(absolute).toString()
        : absolute.toString();
  }
}
