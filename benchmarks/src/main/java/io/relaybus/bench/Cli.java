package io.relaybus.bench;

import io.relaybus.store.testing.Machine;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;

/** The command line of a benchmark's {@code main}: {@code --name value} options, the report. */
final class Cli {
  private final Map<String, String> options = new HashMap<>();

  Cli(String[] args) {
    for (int i = 0; i < args.length - 1; i += 2) {
      if (!args[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --name value, got '" + args[i] + "'");
      }
      options.put(args[i].substring(2), args[i + 1]);
    }
  }

  int integer(String name, int otherwise) {
    String value = options.get(name);
    return value == null ? otherwise : Integer.parseInt(value);
  }

  /**
   * A report's first lines: its title and start, the machine and its load average now, and that the
   * server is the embedded PostgreSQL 17 (what follows goes on in the same paragraph).
   */
  static StringBuilder heading(String title, Instant started) {
    return new StringBuilder()
        .append("### ")
        .append(title)
        .append(" — ")
        .append(started)
        .append("\n\n")
        .append(Machine.describe())
        .append(" Load average at the end: ")
        .append(Machine.loadAverage())
        .append(". Embedded PostgreSQL 17.");
  }

  /** Prints the markdown, writes it to {@code --out FILE} when given, and ends the JVM. */
  void report(String markdown) throws IOException {
    System.out.println(markdown);
    String out = options.get("out");
    if (out != null) {
      Files.writeString(Path.of(out), markdown);
    }
    System.exit(0);
  }
}
