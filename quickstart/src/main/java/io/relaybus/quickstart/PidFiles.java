package io.relaybus.quickstart;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The processes a run starts, one file each in the run directory ({@code <name>.pid}: the pid, then
 * a text the process's command line contains), so that the next run can stop what a quickstart
 * killed with SIGKILL left behind: the broker, the worker, PostgreSQL. The quickstart's own pid is
 * recorded too, so that a run never stops the processes of one that is still running.
 */
final class PidFiles {
  static final String QUICKSTART = "quickstart";
  private static final Duration STOP_TIMEOUT = Duration.ofSeconds(30);

  private PidFiles() {}

  /** Records {@code pid}, recognized later by {@code mark} on its command line. */
  static Path write(Path runDir, String name, long pid, String mark) throws IOException {
    return Files.writeString(runDir.resolve(name + ".pid"), pid + "\n" + mark + "\n");
  }

  /** Records this JVM as the run's quickstart. */
  static void writeSelf(Path runDir) throws IOException {
    write(runDir, QUICKSTART, ProcessHandle.current().pid(), "quickstart");
  }

  static void delete(Path pidFile) {
    try {
      Files.deleteIfExists(pidFile);
    } catch (IOException e) {
      // harmless: the next run finds no such process
    }
  }

  /**
   * Stops the processes recorded in {@code runDir} that still run (SIGTERM, then SIGKILL after 30
   * s), and removes their pid files.
   *
   * @throws IllegalStateException when the quickstart that recorded them still runs
   */
  static void stopLeftovers(Path runDir) throws IOException {
    if (!Files.isDirectory(runDir)) {
      return;
    }
    List<Path> pidFiles;
    try (var files = Files.list(runDir)) {
      pidFiles = files.filter(f -> f.getFileName().toString().endsWith(".pid")).toList();
    }
    for (Path pidFile : pidFiles) {
      if (pidFile.getFileName().toString().equals(QUICKSTART + ".pid")) {
        Optional<ProcessHandle> owner = live(pidFile);
        if (owner.isPresent() && owner.get().pid() != ProcessHandle.current().pid()) {
          throw new IllegalStateException(
              "another quickstart (pid %d) is running in %s: stop it first, or pass --work-dir"
                  .formatted(owner.get().pid(), runDir));
        }
      }
    }
    for (Path pidFile : pidFiles) {
      Optional<ProcessHandle> leftover = live(pidFile);
      if (leftover.isPresent() && leftover.get().pid() != ProcessHandle.current().pid()) {
        leftover.get().destroy();
        try {
          leftover.get().onExit().get(STOP_TIMEOUT.toSeconds(), TimeUnit.SECONDS);
        } catch (ExecutionException | TimeoutException e) {
          leftover.get().destroyForcibly();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IllegalStateException("interrupted while stopping " + leftover.get(), e);
        }
      }
      Files.delete(pidFile);
    }
  }

  /** The recorded process, if it still runs with the recorded mark on its command line. */
  private static Optional<ProcessHandle> live(Path pidFile) throws IOException {
    List<String> lines = Files.readAllLines(pidFile);
    if (lines.size() < 2) {
      return Optional.empty();
    }
    long pid;
    try {
      pid = Long.parseLong(lines.get(0).strip());
    } catch (NumberFormatException e) {
      return Optional.empty();
    }
    String mark = lines.get(1);
    return pid > 0
        ? ProcessHandle.of(pid)
            .filter(ProcessHandle::isAlive)
            .filter(p -> p.info().commandLine().orElse("").contains(mark))
        : Optional.empty();
  }
}
