package io.relaybus.admin;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.datatype.jsr310.JavaTimeModule;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Formatting shared by the command line and the console: ages, durations, tables, JSON. */
final class Text {
  /** Instants as ISO-8601 text, durations as ISO-8601 (PT1M30S). */
  static final ObjectMapper JSON =
      new ObjectMapper()
          .registerModule(new JavaTimeModule())
          .disable(SerializationFeature.WRITE_DATES_AS_TIMESTAMPS)
          .disable(SerializationFeature.WRITE_DURATIONS_AS_TIMESTAMPS)
          .enable(SerializationFeature.INDENT_OUTPUT);

  private static final Pattern DURATION = Pattern.compile("(\\d+)(ms|s|m|h|d)?");

  private Text() {}

  /**
   * The answer to a requeue of the dead letters the operator confirmed: how many were requeued, and
   * how many of them were no longer dead by then (reliability row 135).
   */
  static String requeued(long requeued, long confirmed) {
    return requeued == confirmed
        ? "requeued %d dead letters".formatted(requeued)
        : "requeued %d of the %d dead letters confirmed (%d no longer dead: requeued or purged meanwhile)"
            .formatted(requeued, confirmed, confirmed - requeued);
  }

  /** A short human age: 0s, 42s, 3m12s, 5h03m, 2d04h. */
  static String age(Duration d) {
    long s = Math.max(0, d.toSeconds());
    if (s < 60) {
      return s + "s";
    }
    if (s < 3600) {
      return "%dm%02ds".formatted(s / 60, s % 60);
    }
    if (s < 86_400) {
      return "%dh%02dm".formatted(s / 3600, (s % 3600) / 60);
    }
    return "%dd%02dh".formatted(s / 86_400, (s % 86_400) / 3600);
  }

  /** Parses 500ms, 30s, 15m, 2h, 7d, a plain number of seconds, or ISO-8601 (PT15M, P7D). */
  static Duration duration(String name, String text) {
    String t = text == null ? "" : text.strip().toLowerCase(Locale.ROOT);
    Matcher m = DURATION.matcher(t);
    try {
      if (m.matches()) {
        long n = Long.parseLong(m.group(1));
        String unit = m.group(2) == null ? "s" : m.group(2);
        return switch (unit) {
          case "ms" -> Duration.ofMillis(n);
          case "m" -> Duration.ofMinutes(n);
          case "h" -> Duration.ofHours(n);
          case "d" -> Duration.ofDays(n);
          default -> Duration.ofSeconds(n);
        };
      }
      return t.startsWith("p") && t.contains("d") && !t.contains("t")
          ? Duration.ofDays(Long.parseLong(t.substring(1, t.length() - 1)))
          : Duration.parse(text.strip());
    } catch (RuntimeException e) {
      throw new IllegalArgumentException(
          name + " must be a duration such as 30s, 15m, 2h, 7d or PT15M, but was '" + text + "'");
    }
  }

  /** A plain-text table: a header row and rows, columns padded to their widest cell. */
  static String table(List<String> header, List<List<String>> rows) {
    List<List<String>> all = new ArrayList<>();
    all.add(header);
    all.addAll(rows);
    int[] width = new int[header.size()];
    for (List<String> row : all) {
      for (int i = 0; i < row.size(); i++) {
        width[i] = Math.max(width[i], cell(row.get(i)).length());
      }
    }
    StringBuilder out = new StringBuilder();
    for (List<String> row : all) {
      StringBuilder line = new StringBuilder();
      for (int i = 0; i < row.size(); i++) {
        String c = cell(row.get(i));
        line.append(c).append(" ".repeat(width[i] - c.length()));
        if (i < row.size() - 1) {
          line.append("  ");
        }
      }
      out.append(line.toString().stripTrailing()).append('\n');
    }
    return out.toString();
  }

  private static String cell(String value) {
    if (value == null) {
      return "-";
    }
    // a reason or a query text comes from the database: no control character of it reaches the
    // terminal (an escape sequence could rewrite or clear the operator's screen)
    String oneLine = escapeControls(value.replaceAll("\\s+", " "));
    return oneLine.length() > 80 ? oneLine.substring(0, 77) + "..." : oneLine;
  }

  /** Each control character (C0, DEL, C1) as a visible escape, e.g. {@code \x1b}. */
  static String escapeControls(String value) {
    StringBuilder out = new StringBuilder(value.length());
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (Character.getType(c) == Character.CONTROL) {
        out.append(String.format(Locale.ROOT, "\\x%02x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.toString();
  }

  static String json(Object value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException("cannot write JSON: " + e.getMessage(), e);
    }
  }
}
