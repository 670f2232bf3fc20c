package io.relaybus.it.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** A Java main class run as a process of its own, output to {@code <dir>/<name>.log}. */
public final class JvmProcess implements AutoCloseable {
  private final String name;
  private final Process process;
  private final Path log;

  private JvmProcess(String name, Process process, Path log) {
    this.name = name;
    this.process = process;
    this.log = log;
  }

  public static JvmProcess start(
      String name, Path dir, String classpath, String heap, String mainClass, String... args) {
    return start(name, dir, classpath, heap, List.of(), mainClass, args);
  }

  /** As above, with JVM options ({@code -Dname=value}) before the main class. */
  public static JvmProcess start(
      String name,
      Path dir,
      String classpath,
      String heap,
      List<String> jvmOptions,
      String mainClass,
      String... args) {
    Path log = dir.resolve(name + ".log");
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.add("-Xmx" + heap);
    command.addAll(jvmOptions);
    command.add("-cp");
    command.add(classpath);
    command.add(mainClass);
    command.addAll(List.of(args));
    try {
      Process process =
          new ProcessBuilder(command)
              .directory(dir.toFile())
              .redirectErrorStream(true)
              .redirectOutput(log.toFile())
              .start();
      return new JvmProcess(name, process, log);
    } catch (IOException e) {
      throw new UncheckedIOException("could not start " + name, e);
    }
  }

  /** Runs to completion; fails with the output when the exit code is not 0. */
  public static void run(String name, Path dir, String classpath, String mainClass, String... args)
      throws InterruptedException {
    JvmProcess process = start(name, dir, classpath, "256m", mainClass, args);
    if (!process.process.waitFor(60, TimeUnit.SECONDS) || process.process.exitValue() != 0) {
      process.kill();
      throw new AssertionError(name + " failed:\n" + process.output());
    }
  }

  /** Waits up to {@code timeout} for the process to end; true when it did. */
  public boolean awaitExit(java.time.Duration timeout) throws InterruptedException {
    return process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
  }

  /** The exit code of the ended process. */
  public int exitValue() {
    return process.exitValue();
  }

  public long pid() {
    return process.pid();
  }

  public boolean isAlive() {
    return process.isAlive();
  }

  public String output() {
    try {
      return Files.readString(log);
    } catch (IOException e) {
      return "(no output: " + e + ")";
    }
  }

  /** SIGKILL: no shutdown hook, no graceful stop, like a crashed machine. */
  public void kill() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor(30, TimeUnit.SECONDS);
  }

  @Override
  public void close() throws InterruptedException {
    process.destroy();
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor(30, TimeUnit.SECONDS);
    }
  }

  @Override
  public String toString() {
    return name + " (pid " + process.pid() + ")";
  }

  public static int freePort() {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
