package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.JavaAndSqlPublishes;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.PgBouncer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The connector through a real PgBouncer in transaction pooling, with the settings
 * docs/deploying.md gives for it (no startup options, no server-prepared statements, no wake-ups):
 * events published concurrently through Java and the SQL function reach their topics once each, in
 * key order, and leave nothing pending.
 */
class PgBouncerIT {
  private static final Duration DELIVERY_TIMEOUT = Duration.ofSeconds(60);

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(started -> PgBouncer.inFrontOf(started.get(PostgresServer.class).port()), b -> {})
          .and(() -> ConnectCluster.start("relaybus-pgbouncer-it", 1, Map.of()));

  private static PostgresServer postgres;
  private static PgBouncer bouncer;
  private static ConnectCluster connect;

  @Test
  void deliversJavaAndSqlPublishesOnceInKeyOrderThroughTransactionPooling() throws Exception {
    String connector = "through-pgbouncer";
    List<String> topics = Publishers.HANDLERS.stream().map(h -> h + "-pgb").toList();
    connect.createTopics(3, topics.toArray(String[]::new));
    try (PostgresOutboxStore store = postgres.store("pgb_");
        RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
      connect.deploy(
          connector,
          DeployedConfig.connector(
              postgres,
              "pgb_",
              Map.of(
                  "tasks.max", "2",
                  "topic.template", "${handler}-pgb",
                  "connection.url", bouncer.jdbcUrl("prepareThreshold=0"),
                  "connection.startup.options", "false",
                  "outbox.notify", "false",
                  "poll.interval.ms", "200")));
      connect.awaitRunning(connector, 2);

      Set<String> expected = JavaAndSqlPublishes.publish(store, postgres.dataSource(), "pgb_");

      JavaAndSqlPublishes.assertDeliveredOnceInKeyOrder(
          collector, expected, store, DELIVERY_TIMEOUT);
      assertThat(store.statistics().totalDead()).isZero();
    } finally {
      connect.delete(connector);
    }
  }
}
