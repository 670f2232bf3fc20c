package io.relaybus.it.harness;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import javax.sql.DataSource;

/**
 * The scenario {@link io.relaybus.it.connector.PostgresVersionsIT} (embedded binaries) and {@link
 * io.relaybus.it.connector.ContainerConnectorIT} (images) run on each PostgreSQL major: events
 * published concurrently through Java and, on the same keys, through the SQL publish function reach
 * their topics once each, in key order, and leave nothing pending.
 */
public final class JavaAndSqlPublishes {
  private JavaAndSqlPublishes() {}

  /**
   * Publishes both ways into the store whose tables start with {@code prefix}; returns the
   * event/handler pairs to expect.
   */
  public static Set<String> publish(PostgresOutboxStore store, DataSource dataSource, String prefix)
      throws Exception {
    List<OutboxEvent> events =
        new Publishers(store, dataSource, "j", 10).run(2, 10, 3, Duration.ZERO);
    Set<String> expected = new HashSet<>(Publishers.pairs(events));
    // Another language's publisher, interleaved on keys the Java publishers use too.
    try (Connection tx = dataSource.getConnection();
        PreparedStatement publish =
            tx.prepareStatement(
                "SELECT * FROM "
                    + prefix
                    + "publish(?, 'sql.event', ?, convert_to('{}', 'UTF8'),"
                    + " 'application/json', '{}', ARRAY['billing', 'audit'])")) {
      tx.setAutoCommit(false);
      for (int i = 0; i < 20; i++) {
        publish.setString(1, "sql-" + i);
        publish.setString(2, "key-" + (i % 10));
        publish.executeQuery().close();
        tx.commit();
        expected.add("sql-" + i + "/billing");
        expected.add("sql-" + i + "/audit");
      }
    }
    return expected;
  }

  /** Every expected pair arrives once, nothing else, in key order, and nothing stays pending. */
  public static void assertDeliveredOnceInKeyOrder(
      RecordCollector collector, Set<String> expected, PostgresOutboxStore store, Duration timeout)
      throws Exception {
    collector.awaitAll(expected, timeout);
    List<Received> received = collector.drain(Duration.ofSeconds(2));

    assertThat(received).hasSize(expected.size());
    assertThat(collector.pairs()).isEqualTo(expected);
    RecordCollector.assertPerKeyOrder(received);
    await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
  }
}
