package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.File;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The packaged plugin loads under Connect's plugin isolation in a worker of its own JVM, is
 * configured over HTTP from config/postgres-outbox-source.json as the README's "Deploy the
 * connector" tells users, and moves events; then the worker is killed (SIGKILL) mid-stream and a
 * new worker's tasks take its lanes over at once.
 */
class PluginIsolationIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CONNECTOR = "relaybus-outbox";

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          // Reassign a killed worker's tasks at once rather than after the production 60 s.
          .and(
              () ->
                  SeparateJvmKafka.start(
                      "separate-jvm", Map.of("scheduled.rebalance.max.delay.ms", "0")),
              SeparateJvmKafka::startWorker);

  private static PostgresServer postgres;
  private static SeparateJvmKafka kafka;

  @Test
  void packagedPluginLoadsUnderIsolationAndSurvivesAKilledWorker() throws Exception {
    assertThat(SeparateJvmKafka.classpath().split(File.pathSeparator))
        .noneMatch(entry -> entry.matches(".*(relaybus|postgresql|HikariCP|outbox-store).*"));
    assertThat(JSON.readTree(kafka.get("connector-plugins").body()).findValuesAsText("class"))
        .contains("io.relaybus.connect.OutboxSourceConnector");
    assertThat(kafka.worker().output())
        .contains("Loading plugin from: " + SeparateJvmKafka.pluginPath());

    try (PostgresOutboxStore store = postgres.store("relaybus_");
        RecordCollector collector =
            new RecordCollector(kafka.consumer("read_uncommitted"), Publishers.HANDLERS)) {
      kafka.createConnector(CONNECTOR, config(), 4);

      CompletableFuture<List<OutboxEvent>> publishing = publishInBackground(store, "j");
      await()
          .atMost(SeparateJvmKafka.TIMEOUT)
          .until(() -> collector.drain(Duration.ZERO).size() > 100);
      kafka.killWorker();
      kafka.startWorker();
      kafka.awaitTasksRunning(CONNECTOR, 4);
      List<OutboxEvent> events = publishing.get();
      Set<String> expected = Publishers.pairs(events);

      collector.awaitAll(expected, SeparateJvmKafka.TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(events).hasSize(360);
      assertThat(collector.pairs()).isEqualTo(expected);
      RecordCollector.assertPerKeyOrder(received);
      await().atMost(Duration.ofSeconds(60)).until(() -> store.statistics().totalPending() == 0);
      assertThat(store.statistics().totalDead()).isZero();
      // The new worker's tasks took the killed tasks' lanes over at once (same lease group)
      // instead of waiting out their 30 s leases.
      assertThat(takenOver(kafka.worker().output())).isPositive();
    }
  }

  /** README step 4: the JSON from config/ with the database filled in. */
  static Map<String, String> config() {
    Map<String, String> config = DeployedConfig.json("postgres-outbox-source.json");
    config.put("connection.url", postgres.jdbcUrl());
    config.put("connection.user", PostgresServer.USER);
    config.put("connection.password", "");
    return config;
  }

  static CompletableFuture<List<OutboxEvent>> publishInBackground(
      PostgresOutboxStore store, String idPrefix) {
    return CompletableFuture.supplyAsync(
        () -> {
          try {
            return new Publishers(store, postgres.dataSource(), idPrefix, 30)
                .run(3, 40, 3, Duration.ofMillis(100));
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        });
  }

  static int takenOver(String log) {
    Matcher m = Pattern.compile("leased \\d+ of \\d+ lanes \\S+: (\\d+) taken over").matcher(log);
    int total = 0;
    while (m.find()) {
      total += Integer.parseInt(m.group(1));
    }
    return total;
  }
}
