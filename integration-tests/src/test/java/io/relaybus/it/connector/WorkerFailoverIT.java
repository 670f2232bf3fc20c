package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.connect.util.clusters.WorkerHandle;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Four tasks over two Connect workers; one worker leaves mid-stream and its tasks move to the
 * other, whose new incarnations take the lanes over at once.
 */
class WorkerFailoverIT {
  private static final Duration TIMEOUT = Duration.ofSeconds(90);

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          // A departed worker's tasks are reassigned after this delay (config/ says 60 s for
          // production).
          .and(
              () ->
                  ConnectCluster.start(
                      "relaybus-failover", 2, Map.of("scheduled.rebalance.max.delay.ms", "3000")));

  private static PostgresServer postgres;
  private static ConnectCluster connect;

  @Test
  void workerLeavingMidStreamLosesNothingAndKeepsKeyOrder() throws Exception {
    List<String> topics = Publishers.HANDLERS.stream().map(h -> h + "-failover").toList();
    connect.createTopics(3, topics.toArray(String[]::new));
    try (PostgresOutboxStore store = postgres.store("failover_");
        RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
      connect.deploy(
          "failover",
          DeployedConfig.connector(
              postgres,
              "failover_",
              Map.of(
                  "tasks.max", "4",
                  "batch.size", "50",
                  "topic.template", "${handler}-failover")));
      connect.awaitRunning("failover", 4);

      CompletableFuture<List<OutboxEvent>> publishing =
          CompletableFuture.supplyAsync(
              () -> {
                try {
                  return new Publishers(store, postgres.dataSource(), "f", 30)
                      .run(3, 50, 3, Duration.ofMillis(100));
                } catch (Exception e) {
                  throw new IllegalStateException(e);
                }
              });
      await().atMost(TIMEOUT).until(() -> collector.drain(Duration.ZERO).size() > 150);
      WorkerHandle leaving = connect.workers().iterator().next();
      connect.removeWorker(leaving);
      connect.awaitRunning("failover", 4);
      List<OutboxEvent> events = publishing.get();
      Set<String> expected = Publishers.pairs(events);

      collector.awaitAll(expected, TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(events).hasSize(450);
      assertThat(collector.pairs()).isEqualTo(expected);
      RecordCollector.assertPerKeyOrder(received);
      // Only records in flight when the worker left may repeat: 4 batches of 50 per moved task.
      assertThat(RecordCollector.duplicates(received)).hasSizeLessThanOrEqualTo(4 * 4 * 50);
      await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
      assertThat(store.statistics().totalDead()).isZero();
    }
  }
}
