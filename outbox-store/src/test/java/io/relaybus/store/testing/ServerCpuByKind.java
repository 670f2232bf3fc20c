package io.relaybus.store.testing;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A PostgreSQL server's CPU between {@link #start} and {@link #stop}, split by the kind of process
 * that spent it (its title: client backends, autovacuum, WAL writer, checkpointer, ...), from
 * {@code /proc} (Linux). Samples every {@link #INTERVAL_MILLIS} ms: a process that starts and exits
 * between two samples is missed, and one that exits after a sample loses what it spent since (an
 * autovacuum worker lives for seconds, so the share is a lower bound). {@link ProcessCpu} has the
 * exact total.
 */
public final class ServerCpuByKind {
  static final long INTERVAL_MILLIS = 50;

  private final long postmasterPid;
  private final Map<Long, String> kinds = new HashMap<>();
  private final Map<Long, Double> first = new HashMap<>(); // seconds at its first sample (0: new)
  private final Map<Long, Double> last = new HashMap<>();
  private final Thread sampler;
  private volatile boolean running = true;

  private ServerCpuByKind(long postmasterPid) {
    this.postmasterPid = postmasterPid;
    sample(true);
    sampler = new Thread(this::run, "server-cpu-sampler");
    sampler.setDaemon(true);
    sampler.start();
  }

  /** Starts sampling the children of {@code postmasterPid}. */
  public static ServerCpuByKind start(long postmasterPid) {
    return new ServerCpuByKind(postmasterPid);
  }

  /** Stops, takes a last sample, and returns seconds of CPU per kind, largest first. */
  public Map<String, Double> stop() throws InterruptedException {
    running = false;
    sampler.join();
    sample(false);
    Map<String, Double> byKind = new HashMap<>();
    synchronized (this) {
      last.forEach(
          (pid, seconds) -> byKind.merge(kinds.get(pid), seconds - first.get(pid), Double::sum));
    }
    Map<String, Double> sorted = new LinkedHashMap<>();
    byKind.entrySet().stream()
        .sorted(Map.Entry.<String, Double>comparingByValue().reversed())
        .forEach(e -> sorted.put(e.getKey(), e.getValue()));
    return sorted;
  }

  /**
   * {@code byKind} (from {@link #stop}) as "kind 0.0123, kind 0.0004": seconds per 1,000 of {@code
   * n}, kinds under 0.00005 left out.
   */
  public static String perThousand(Map<String, Double> byKind, long n) {
    StringBuilder b = new StringBuilder();
    byKind.forEach(
        (kind, s) -> {
          double per = 1_000 * s / n;
          if (per >= 0.00005) {
            b.append(b.isEmpty() ? "" : ", ").append("%s %.4f".formatted(kind, per));
          }
        });
    return b.toString();
  }

  private void run() {
    while (running) {
      try {
        Thread.sleep(INTERVAL_MILLIS);
      } catch (InterruptedException e) {
        return;
      }
      sample(false);
    }
  }

  private synchronized void sample(boolean baseline) {
    for (long pid : ProcessCpu.childrenOf(postmasterPid)) {
      double seconds = ProcessCpu.seconds(pid);
      if (!kinds.containsKey(pid)) {
        kinds.put(pid, kindOf(pid));
        first.put(pid, baseline ? seconds : 0.0);
      }
      last.merge(pid, seconds, Math::max); // 0 when it exited meanwhile: keep what was seen
    }
  }

  /** The process's kind from its title ("postgres: autovacuum worker db" → "autovacuum worker"). */
  private static String kindOf(long pid) {
    try {
      String title =
          new String(
                  Files.readAllBytes(Path.of("/proc", Long.toString(pid), "cmdline")),
                  StandardCharsets.UTF_8)
              .replace('\0', ' ')
              .strip();
      String rest = title.startsWith("postgres: ") ? title.substring(10) : title;
      for (String kind :
          new String[] {
            "autovacuum worker",
            "autovacuum launcher",
            "walwriter",
            "checkpointer",
            "background writer",
            "walsender",
            "logical replication",
            "io worker",
            "walsummarizer"
          }) {
        if (rest.startsWith(kind)) {
          return kind;
        }
      }
      return "client backends";
    } catch (IOException e) {
      return "exited";
    }
  }
}
