package io.relaybus.store.testing;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/** Which machine a benchmark run was taken on, for its report. */
public final class Machine {
  private Machine() {}

  /** The CPU's model name, or "unknown CPU" off Linux. */
  public static String cpu() {
    try {
      return Files.readAllLines(Path.of("/proc/cpuinfo")).stream()
          .filter(l -> l.startsWith("model name"))
          .map(l -> l.substring(l.indexOf(':') + 1).strip())
          .findFirst()
          .orElse("unknown CPU");
    } catch (IOException e) {
      return "unknown CPU"; // not Linux
    }
  }

  /** One line: CPU, cores, memory, OS and Java. */
  public static String describe() {
    String cpu = cpu();
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

  /** The 1, 5 and 15 minute load averages, e.g. "0.52 0.81 1.10", or "unknown" off Linux. */
  public static String loadAverage() {
    try {
      String[] parts = Files.readString(Path.of("/proc/loadavg")).split(" ");
      return parts[0] + " " + parts[1] + " " + parts[2];
    } catch (IOException | ArrayIndexOutOfBoundsException e) {
      return "unknown";
    }
  }
}
