package io.relaybus.inbox.testing;

import io.relaybus.inbox.InboxWork;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;
import org.assertj.core.api.Assertions;

/**
 * The consumer's own work in tests: one row per (event, handler) written in the inbox's
 * transaction, so what committed can be counted, plus a count of every invocation (including the
 * ones that rolled back). "Ran exactly once" means one invocation and one committed row.
 */
public final class Ledger {
  private final DataSource dataSource;
  private final String table;
  private final Map<String, AtomicInteger> invocations = new ConcurrentHashMap<>();

  public Ledger(DataSource dataSource, String table) {
    this.dataSource = dataSource;
    this.table = "inbox_test." + table;
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement()) {
      s.execute("CREATE SCHEMA IF NOT EXISTS inbox_test");
      s.execute("DROP TABLE IF EXISTS " + this.table);
      s.execute("CREATE TABLE " + this.table + " (event_id text NOT NULL, handler text NOT NULL)");
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Writes a ledger row in the inbox's transaction. */
  public InboxWork<Connection> work(String handler) {
    return (tx, message) -> {
      invocations
          .computeIfAbsent(message.eventId() + "/" + handler, k -> new AtomicInteger())
          .incrementAndGet();
      try (PreparedStatement insert =
          tx.prepareStatement("INSERT INTO " + table + " (event_id, handler) VALUES (?, ?)")) {
        insert.setString(1, message.eventId());
        insert.setString(2, handler);
        insert.executeUpdate();
      }
    };
  }

  /** Like {@link #work} but throws after writing, every time, so nothing commits. */
  public InboxWork<Connection> failingWork(String handler, RuntimeException failure) {
    InboxWork<Connection> work = work(handler);
    return (tx, message) -> {
      work.run(tx, message);
      throw failure;
    };
  }

  public int invocations(String eventId, String handler) {
    AtomicInteger n = invocations.get(eventId + "/" + handler);
    return n == null ? 0 : n.get();
  }

  public int totalInvocations() {
    return invocations.values().stream().mapToInt(AtomicInteger::get).sum();
  }

  /** Committed rows per "event/handler". */
  public Map<String, Integer> committed() {
    Map<String, Integer> counts = new HashMap<>();
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement();
        ResultSet rs =
            s.executeQuery(
                "SELECT event_id || '/' || handler, count(*) FROM " + table + " GROUP BY 1")) {
      while (rs.next()) {
        counts.put(rs.getString(1), rs.getInt(2));
      }
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
    return counts;
  }

  /** The work of {@code eventId} for {@code handler} was invoked once and committed once. */
  public void assertRanOnce(String eventId, String handler) {
    Assertions.assertThat(invocations(eventId, handler))
        .as("invocations of %s for %s", handler, eventId)
        .isEqualTo(1);
    Assertions.assertThat(committed().get(eventId + "/" + handler))
        .as("committed rows of %s for %s", handler, eventId)
        .isEqualTo(1);
  }
}
