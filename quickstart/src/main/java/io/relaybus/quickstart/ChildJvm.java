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
 * A Java main class run as a process of its own (a broker, a Connect worker), its output in {@code
 * <log directory>/<name>.log}. Used by the quickstart and, through {@link LocalKafka}, by the
 * integration tests' harness (integration-tests' {@code SeparateJvmKafka} and {@code
 * FaultCluster}).
 *
 * <p>The quickstart starts its children {@link Launcher#detached() detached}: where {@code setsid}
 * exists (Linux) each runs in a session of its own, so the Ctrl-C the terminal sends to the
 * quickstart does not reach it: the quickstart's shutdown hook stops the worker first (its tasks
 * hand their lanes back while the broker and the database are still up), then the broker, then
 * PostgreSQL. Each detached child is recorded in {@link PidFiles}, so that one left behind by a
 * quickstart killed with SIGKILL is stopped by the next run.
 */
public final class ChildJvm implements AutoCloseable {
  private static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);
  private static final Duration RUN_TIMEOUT = Duration.ofSeconds(120);
  private static final String RUN_MARKER = "relaybus.quickstart.run";

  private final String name;
  private final Process process;
  private final Path log;
  private final Path pidFile; // null: not recorded

  private ChildJvm(String name, Process process, Path log, Path pidFile) {
    this.name = name;
    this.process = process;
    this.log = log;
    this.pidFile = pidFile;
  }

  /** Child JVMs working in {@code dir} (their logs there too) on {@code classpath}. */
  public static Launcher in(Path dir, String classpath) {
    return new Launcher(dir, classpath, dir, List.of(), false);
  }

  /**
   * How child JVMs start: their working directory, classpath, log directory and JVM options before
   * the main class ({@code -Dname=value}, {@code -javaagent:}); {@code ownSession}: {@link
   * #detached()}.
   */
  public record Launcher(
      Path dir, String classpath, Path logDir, List<String> jvmOptions, boolean ownSession) {
    public Launcher {
      jvmOptions = List.copyOf(jvmOptions);
    }

    public Launcher logsIn(Path logDir) {
      return new Launcher(dir, classpath, logDir, jvmOptions, ownSession);
    }

    public Launcher withClasspath(String classpath) {
      return new Launcher(dir, classpath, logDir, jvmOptions, ownSession);
    }

    /** These JVM options after the ones set so far. */
    public Launcher withOptions(List<String> options) {
      List<String> all = new ArrayList<>(jvmOptions);
      all.addAll(options);
      return new Launcher(dir, classpath, logDir, all, ownSession);
    }

    /**
     * Children in a session of their own, recorded in {@link PidFiles} of {@code dir} (the
     * quickstart's run directory).
     */
    public Launcher detached() {
      return new Launcher(dir, classpath, logDir, jvmOptions, true);
    }

    public ChildJvm start(String name, String heap, String mainClass, String... args) {
      Path log = logDir.resolve(name + ".log");
      List<String> command = new ArrayList<>();
      if (ownSession) {
        setsid().ifPresent(command::add);
      }
      command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
      command.add("-Xmx" + heap);
      if (ownSession) {
        // Marks the process as this run's (see PidFiles).
        command.add("-D" + RUN_MARKER + "=" + dir);
      }
      command.addAll(jvmOptions);
      command.add("-cp");
      command.add(classpath);
      command.add(mainClass);
      command.addAll(List.of(args));
      try {
        Files.createDirectories(logDir);
        Process process =
            new ProcessBuilder(command)
                .directory(dir.toFile())
                .redirectErrorStream(true)
                // Appended: a process started again under its name (a broker restarted by a
                // test) keeps the earlier output.
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
                .start();
        Path pidFile =
            ownSession
                ? PidFiles.write(dir, name, process.pid(), "-D" + RUN_MARKER + "=" + dir)
                : null;
        return new ChildJvm(name, process, log, pidFile);
      } catch (IOException e) {
        throw new UncheckedIOException("could not start " + name + ": " + e.getMessage(), e);
      }
    }

    /** Runs to completion; fails with the end of the output when the exit code is not 0. */
    public void run(String name, String mainClass, String... args) throws InterruptedException {
      ChildJvm child = start(name, "256m", mainClass, args);
      boolean exited = child.awaitExit(RUN_TIMEOUT);
      child.close();
      if (!exited || child.exitValue() != 0) {
        throw new IllegalStateException(
            name + " failed; the end of " + child.log + ":\n" + child.tail());
      }
    }
  }

  public boolean isAlive() {
    return process.isAlive();
  }

  public long pid() {
    return process.pid();
  }

  /** Waits up to {@code timeout} for the process to end; true when it did. */
  public boolean awaitExit(Duration timeout) throws InterruptedException {
    return process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  /** The exit code of the ended process. */
  public int exitValue() {
    return process.exitValue();
  }

  public Path log() {
    return log;
  }

  public String output() {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return "(no output: " + e + ")";
    }
  }

  /** The last lines of the output, for an error message. */
  public String tail() {
    List<String> lines = output().lines().toList();
    return String.join("\n", lines.subList(Math.max(0, lines.size() - 25), lines.size()));
  }

  /** SIGKILL: no shutdown hook, no graceful stop, like a crashed machine. */
  public void kill() {
    process.destroyForcibly();
    try {
      process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt(); // SIGKILL is sent: only the wait for it is cut short
    }
    forget();
  }

  /**
   * SIGTERM and wait (the JVM's shutdown hooks run); SIGKILL if it does not end in time, or when
   * the waiting thread is interrupted (its interrupt status is kept, not thrown: see {@link
   * AutoCloseable#close()}).
   */
  @Override
  public void close() {
    process.destroy();
    try {
      if (!process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
      }
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
    }
    forget();
  }

  private void forget() {
    if (pidFile != null) {
      PidFiles.delete(pidFile);
    }
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
