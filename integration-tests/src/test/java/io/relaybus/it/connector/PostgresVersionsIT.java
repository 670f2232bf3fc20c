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
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * One connector scenario on each PostgreSQL major: events published concurrently through Java and
 * through the SQL function reach their topics once each, in key order, and leave nothing pending.
 * By default the oldest and newest majors the store claims (13, 18; 17 runs in every other IT); the
 * whole range with {@code -Drelaybus.it.postgres.majors=13,14,15,16,17,18}.
 */
class PostgresVersionsIT {
  private static final Duration DELIVERY_TIMEOUT = Duration.ofSeconds(60);

  @RegisterExtension
  static final Servers servers =
      Servers.start(() -> ConnectCluster.start("relaybus-versions-it", 1, Map.of()));

  private static ConnectCluster connect;

  static List<Integer> majors() {
    return Arrays.stream(System.getProperty("relaybus.it.postgres.majors", "13,18").split(","))
        .map(String::strip)
        .map(Integer::valueOf)
        .toList();
  }

  @ParameterizedTest(name = "PostgreSQL {0}")
  @MethodSource("majors")
  void deliversJavaAndSqlPublishesOnceInKeyOrder(int major) throws Exception {
    String connector = "versions-" + major;
    String suffix = "-v" + major;
    List<String> topics = Publishers.HANDLERS.stream().map(h -> h + suffix).toList();
    connect.createTopics(3, topics.toArray(String[]::new));
    try (PostgresServer postgres = PostgresServer.start(major)) {
      assertThat(postgres.major()).isEqualTo(major);
      try (PostgresOutboxStore store = postgres.store("v_");
          RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
        connect.deploy(
            connector,
            DeployedConfig.connector(
                postgres, "v_", Map.of("tasks.max", "2", "topic.template", "${handler}" + suffix)));
        connect.awaitRunning(connector, 2);

        Set<String> expected = JavaAndSqlPublishes.publish(store, postgres.dataSource(), "v_");

        JavaAndSqlPublishes.assertDeliveredOnceInKeyOrder(
            collector, expected, store, DELIVERY_TIMEOUT);
        assertThat(store.statistics().totalDead()).isZero();
      } finally {
        connect.delete(connector);
      }
    }
  }
}
