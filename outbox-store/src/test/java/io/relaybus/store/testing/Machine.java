package io.relaybus.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** One line that says which machine a run was taken on. */
final class Machine {
  private Machine() {}

  static String describe() {
    String cpu = "unknown CPU";
    try {
      cpu =
          Files.readAllLines(Path.of("/proc/cpuinfo")).stream()
              .filter(l -> l.startsWith("model name"))
              .map(l -> l.substring(l.indexOf(':') + 1).strip())
              .findFirst()
              .orElse(cpu);
    } catch (IOException ignored) {
      // not Linux: say so below
    }
    long memoryGiB = -1;
    try {
      String total =
          Files.readAllLines(Path.of("/proc/meminfo")).stream()
              .filter(l -> l.startsWith("MemTotal"))
              .findFirst()
              .orElse("");
      memoryGiB = Long.parseLong(total.replaceAll("\\D", "")) / 1024 / 1024;
    } catch (IOException | NumberFormatException ignored) {
      // unknown
    }
    return "Machine: %s, %d cores, %d GiB, %s %s, Java %s. "
        .formatted(
            cpu,
            Runtime.getRuntime().availableProcessors(),
            memoryGiB,
            System.getProperty("os.name"),
            System.getProperty("os.arch"),
            System.getProperty("java.version"));
  }
}
