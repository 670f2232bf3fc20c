package io.relaybus.it.harness;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The classpath of a Connect worker of a given Kafka version, as Kafka's own distribution has it:
 * {@code connect-runtime} of that version and its transitive dependencies of that version (plus
 * slf4j-simple so the worker logs to its console). Resolved once per version by the Maven running
 * the build ({@code mvn -f src/test/connect-worker/pom.xml -Dconnect.version=V
 * dependency:build-classpath}, a POM without the build's parent so nothing pins Kafka to the
 * build's version), with the build's local repository and settings: once a version's jars are in
 * the local repository, it needs no network. Cached in {@code
 * target/connect-<version>/classpath.txt}.
 */
public final class ConnectWorkerClasspath {
  private ConnectWorkerClasspath() {}

  public static String of(String version) throws IOException, InterruptedException {
    Path dir = Path.of("target", "connect-" + version).toAbsolutePath();
    Path file = dir.resolve("classpath.txt");
    if (!Files.exists(file)) {
      Files.createDirectories(dir);
      resolve(version, dir, file);
    }
    String classpath = Files.readString(file).strip();
    if (!classpath.contains("connect-runtime-" + version + ".jar")) {
      throw new IllegalStateException("no connect-runtime " + version + " in " + file);
    }
    return classpath;
  }

  private static void resolve(String version, Path dir, Path file)
      throws IOException, InterruptedException {
    List<String> command = new ArrayList<>();
    command.add(Path.of(property("relaybus.maven.home"), "bin", "mvn").toString());
    command.add("-B");
    command.add("-q");
    command.add("-f");
    command.add(property("relaybus.connect.worker.pom"));
    command.add("-Dmaven.repo.local=" + property("relaybus.maven.repo"));
    command.add("-Dconnect.version=" + version);
    command.add("-Dmdep.includeScope=runtime");
    command.add("-Dmdep.outputFile=" + file);
    command.add("dependency:build-classpath");
    Path log = dir.resolve("resolve.log");
    Process process =
        new ProcessBuilder(command)
            .directory(dir.toFile())
            .redirectErrorStream(true)
            .redirectOutput(log.toFile())
            .start();
    if (!process.waitFor(10, TimeUnit.MINUTES) || process.exitValue() != 0 || !Files.exists(file)) {
      process.destroyForcibly();
      Files.deleteIfExists(file);
      throw new IllegalStateException(
          "could not resolve Connect " + version + " (" + command + "):\n" + Files.readString(log));
    }
  }

  private static String property(String name) {
    String value = System.getProperty(name);
    if (value == null || value.isBlank()) {
      throw new IllegalStateException("system property " + name + " is not set (see the pom)");
    }
    return value;
  }
}
