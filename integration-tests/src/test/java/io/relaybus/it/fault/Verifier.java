package io.relaybus.it.fault;

import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.store.OutboxEvent;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import javax.sql.DataSource;

/**
 * Accounts for every (event, handler) of a fault scenario by id, from what the publishers committed
 * and what a consumer read from every topic:
 *
 * <ul>
 *   <li><b>lost</b>: committed pairs that never arrived;
 *   <li><b>unexpected</b>: arrived pairs nobody committed;
 *   <li><b>duplicates</b>: copies beyond the first of a pair (at-least-once: allowed only for what
 *       was in flight at a fault, reported as a count);
 *   <li><b>order violations</b>: per (topic, key), in partition order, after dropping replays of
 *       pairs already seen, a sequence not greater than the one before it; a key seen in more than
 *       one partition counts one more;
 *   <li><b>rows left</b>: delivery rows still in the outbox (pending or dead) at the end.
 * </ul>
 */
public final class Verifier {
  /** The accounting of one scenario; {@link #clean()} is what every scenario must end with. */
  public record Report(
      String scenario,
      int published,
      int received,
      int lost,
      int unexpected,
      int duplicates,
      int orderViolations,
      long rowsLeft,
      long dead,
      double recoverySeconds,
      List<String> examples) {

    public boolean clean() {
      return lost == 0 && unexpected == 0 && orderViolations == 0 && rowsLeft == 0;
    }

    public Report withRecovery(double seconds) {
      return new Report(
          scenario,
          published,
          received,
          lost,
          unexpected,
          duplicates,
          orderViolations,
          rowsLeft,
          dead,
          seconds,
          examples);
    }

    /** One row of the results table in docs/reliability.md. */
    public String tableRow() {
      return "| %s | %d | %d | %d | %d | %d | %d | %.1f |"
          .formatted(
              scenario,
              published,
              lost,
              unexpected,
              duplicates,
              orderViolations,
              rowsLeft,
              recoverySeconds);
    }
  }

  public static final String TABLE_HEADER =
      "| scenario | published pairs | lost | unexpected | duplicates | order violations | rows left"
          + " | recovery s |\n|---|---|---|---|---|---|---|---|";

  private Verifier() {}

  /** The report of {@code scenario}: committed events against the records received. */
  public static Report verify(
      String scenario,
      List<OutboxEvent> committed,
      List<Received> received,
      long rowsLeft,
      long dead) {
    Set<String> expected = Publishers.pairs(committed);
    Map<String, Integer> copies = new HashMap<>();
    for (Received r : received) {
      copies.merge(r.pair(), 1, Integer::sum);
    }
    List<String> examples = new ArrayList<>();
    int lost = 0;
    for (String pair : expected) {
      if (!copies.containsKey(pair)) {
        lost++;
        note(examples, "lost " + pair);
      }
    }
    int unexpected = 0;
    int duplicates = 0;
    for (Map.Entry<String, Integer> e : copies.entrySet()) {
      if (!expected.contains(e.getKey())) {
        unexpected++;
        note(examples, "unexpected " + e.getKey());
      }
      duplicates += e.getValue() - 1;
    }
    int orderViolations = orderViolations(received, examples);
    return new Report(
        scenario,
        expected.size(),
        received.size(),
        lost,
        unexpected,
        duplicates,
        orderViolations,
        rowsLeft,
        dead,
        Double.NaN,
        List.copyOf(examples));
  }

  public static int orderViolations(List<Received> received, List<String> examples) {
    Map<String, List<Received>> byKey = new LinkedHashMap<>();
    received.stream()
        .filter(r -> r.key() != null)
        .sorted(
            Comparator.comparing(Received::topic)
                .thenComparingInt(Received::partition)
                .thenComparingLong(Received::offset))
        .forEach(
            r -> byKey.computeIfAbsent(r.topic() + "/" + r.key(), k -> new ArrayList<>()).add(r));
    int violations = 0;
    for (Map.Entry<String, List<Received>> entry : byKey.entrySet()) {
      long partitions = entry.getValue().stream().mapToInt(Received::partition).distinct().count();
      if (partitions > 1) {
        violations++;
        note(examples, entry.getKey() + " in " + partitions + " partitions");
      }
      Set<String> seen = new HashSet<>();
      long last = Long.MIN_VALUE;
      for (Received r : entry.getValue()) {
        if (!seen.add(r.pair())) {
          continue; // a replay of a pair already seen: a duplicate, not an order violation
        }
        if (r.sequence() == null || r.sequence() <= last) {
          violations++;
          note(
              examples,
              "%s: sequence %s (%s, offset %d) after %d"
                  .formatted(entry.getKey(), r.sequence(), r.pair(), r.offset(), last));
        } else {
          last = r.sequence();
        }
      }
    }
    return violations;
  }

  /** Delivery rows of the outbox with this table prefix: {all, dead}. */
  public static long[] rows(DataSource dataSource, String tablePrefix) throws SQLException {
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement();
        ResultSet rs =
            s.executeQuery(
                // not done: the log's rows (storage v2) and the deliveries off the happy path
                "SELECT count(*) + (SELECT count(*) FROM %1$slog),".formatted(tablePrefix)
                    + " count(*) FILTER (WHERE status = 'dead') FROM "
                    + tablePrefix
                    + "deliveries")) {
      rs.next();
      return new long[] {rs.getLong(1), rs.getLong(2)};
    }
  }

  /** The first rows left in the outbox and their lanes' state, for a failure's evidence. */
  public static List<String> rowsLeft(DataSource dataSource, String tablePrefix)
      throws SQLException {
    List<String> rows = new ArrayList<>();
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement();
        ResultSet rs =
            s.executeQuery(
                ("SELECT d.id, d.event_id, d.handler, d.lane, d.status, d.attempts, d.claims,"
                        + " d.last_error, l.epoch, l.lease_owner,"
                        + " greatest(l.lease_expires_at, h.expires_at) AS lease_expires_at,"
                        + " d.id = ANY(l.in_flight) AS in_flight"
                        + " FROM %1$sdeliveries d JOIN %1$slanes l ON l.lane = d.lane"
                        + " LEFT JOIN %1$slease_holders h ON h.owner = l.lease_owner"
                        + " ORDER BY d.id LIMIT 10")
                    .formatted(tablePrefix))) {
      while (rs.next()) {
        StringBuilder row = new StringBuilder("deliveries: ");
        for (int i = 1; i <= rs.getMetaData().getColumnCount(); i++) {
          row.append(i == 1 ? "" : ", ")
              .append(rs.getMetaData().getColumnLabel(i))
              .append('=')
              .append(rs.getString(i));
        }
        rows.add(row.toString());
      }
      try (ResultSet log =
          s.executeQuery(
              "SELECT g.id, g.event_id, g.handlers, g.lane, g.xid, l.epoch, l.lease_owner"
                  + " FROM %1$slog g JOIN %1$slanes l ON l.lane = g.lane ORDER BY g.id LIMIT 10"
                      .formatted(tablePrefix))) {
        while (log.next()) {
          rows.add(
              "log: id=%s, event_id=%s, handlers=%s, lane=%s, xid=%s, epoch=%s, owner=%s"
                  .formatted(
                      log.getString(1),
                      log.getString(2),
                      log.getString(3),
                      log.getString(4),
                      log.getString(5),
                      log.getString(6),
                      log.getString(7)));
        }
      }
    } catch (SQLException e) {
      rows.add("(could not list: " + e.getMessage() + ")");
    }
    return rows;
  }

  private static void note(List<String> examples, String example) {
    if (examples.size() < 10) {
      examples.add(example);
    }
  }
}
