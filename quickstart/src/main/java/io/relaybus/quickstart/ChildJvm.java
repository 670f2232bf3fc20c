package io.relaybus.quickstart;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * A Java main class run as a process of its own (the broker, the worker), its output in {@code
 * <logs>/<name>.log}.
 *
 * <p>Where {@code setsid} exists (Linux) the child runs in a session of its own, so the Ctrl-C the
 * terminal sends to the quickstart does not reach it: the quickstart's shutdown hook stops the
 * worker first (its tasks hand their lanes back while the broker and the database are still up),
 * then the broker, then PostgreSQL. Each child is recorded in {@link PidFiles}, so that one left
 * behind by a quickstart killed with SIGKILL is stopped by the next run.
 */
final class ChildJvm implements AutoCloseable {
  private static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);
  private static final String RUN_MARKER = "relaybus.quickstart.run";

  private final String name;
  private final Process process;
  private final Path log;
  private final Path pidFile;

  private ChildJvm(String name, Process process, Path log, Path pidFile) {
    this.name = name;
    this.process = process;
    this.log = log;
    this.pidFile = pidFile;
  }

  static ChildJvm start(
      String name, Path runDir, String classpath, String heap, String mainClass, String... args) {
    Path log = runDir.resolve("logs").resolve(name + ".log");
    List<String> command = new ArrayList<>();
    setsid().ifPresent(command::add);
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.add("-Xmx" + heap);
    // Marks the process as this run's (see PidFiles).
    command.add("-D" + RUN_MARKER + "=" + runDir);
    Path logConfig = runDir.resolve("log4j2.xml");
    if (Files.exists(logConfig)) {
      command.add("-Dlog4j2.configurationFile=" + logConfig);
    }
    command.add("-cp");
    command.add(classpath);
    command.add(mainClass);
    command.addAll(List.of(args));
    try {
      Files.createDirectories(log.getParent());
      Process process =
          new ProcessBuilder(command)
              .directory(runDir.toFile())
              .redirectErrorStream(true)
              .redirectOutput(log.toFile())
              .start();
      Path pidFile = PidFiles.write(runDir, name, process.pid(), "-D" + RUN_MARKER + "=" + runDir);
      return new ChildJvm(name, process, log, pidFile);
    } catch (IOException e) {
      throw new UncheckedIOException("could not start " + name + ": " + e.getMessage(), e);
    }
  }

  /** Runs to completion; fails with the end of the output when the exit code is not 0. */
  static void run(String name, Path runDir, String classpath, String mainClass, String... args)
      throws InterruptedException {
    ChildJvm child = start(name, runDir, classpath, "256m", mainClass, args);
    boolean exited = child.process.waitFor(120, TimeUnit.SECONDS);
    child.close();
    if (!exited || child.process.exitValue() != 0) {
      throw new IllegalStateException(
          name + " failed; the end of " + child.log + ":\n" + child.tail());
    }
  }

  boolean isAlive() {
    return process.isAlive();
  }

  long pid() {
    return process.pid();
  }

  Path log() {
    return log;
  }

  String output() {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return "(no output: " + e + ")";
    }
  }

  /** The last lines of the output, for an error message. */
  String tail() {
    List<String> lines = output().lines().toList();
    return String.join("\n", lines.subList(Math.max(0, lines.size() - 25), lines.size()));
  }

  /** SIGTERM and wait (the JVM's shutdown hooks run); SIGKILL if it does not end in time. */
  @Override
  public void close() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
    }
    PidFiles.delete(pidFile);
  }

  @Override
  public String toString() {
    return name + " (pid " + process.pid() + ")";
  }

  private static Optional<String> setsid() {
    for (String dir : List.of("/usr/bin", "/bin")) {
      Path setsid = Path.of(dir, "setsid");
      if (Files.isExecutable(setsid)) {
        return Optional.of(setsid.toString());
      }
    }
    return Optional.empty();
  }
}
