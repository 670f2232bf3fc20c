package io.relaybus.it;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

/**
 * A benchmark, not a test: the end-to-end drain of a preloaded backlog through a real Connect
 * worker and broker (tasks.max 1 and 2), beside the SQL-only drain (claim + complete in one
 * session, no Kafka) of the same backlog on the same server in the same run. Deliveries/s counts
 * from the deploy until every delivery row is deleted (which happens only after Kafka acknowledged
 * the record).
 *
 * <p>Run: {@code ./mvnw -q -pl integration-tests -am install -DskipTests} then {@code ./mvnw -q -pl
 * integration-tests exec:java -Dexec.classpathScope=test
 * -Dexec.mainClass=io.relaybus.it.ConnectDrainBenchmark -Dexec.args="--quick"}.
 */
public final class ConnectDrainBenchmark {
  private static final String HANDLER = "billing";
  private static final byte[] PAYLOAD =
      "{\"orderId\":\"0000000000\",\"total\":1234,\"currency\":\"EUR\",\"lines\":[1,2,3]}"
          .getBytes(StandardCharsets.UTF_8);

  private ConnectDrainBenchmark() {}

  public static void main(String[] args) throws Exception {
    boolean quick = List.of(args).contains("--quick");
    if (System.getProperty("relaybus.config.dir") == null && Files.isDirectory(Path.of("config"))) {
      System.setProperty("relaybus.config.dir", "config"); // run from the repository root
    }
    int backlog = quick ? 20_000 : 200_000;
    StringBuilder report = new StringBuilder();
    report
        .append("### End-to-end drain through Kafka Connect (")
        .append(quick ? "quick" : "full")
        .append(" run, ")
        .append(LocalDate.now())
        .append(")\n\n")
        .append(
            ("One embedded PostgreSQL 17, one Kafka 4.3.1 broker and one Connect worker in one JVM"
                    + " (Kafka's EmbeddedConnectCluster), topic `billing` with 8 partitions; backlog"
                    + " of %,d deliveries keyed over 1,000 keys, one handler; connector from"
                    + " config/postgres-outbox-source.json with its defaults (batch.size 500,"
                    + " completion.flush.size 500). %d cores.\n\n")
                .formatted(backlog, Runtime.getRuntime().availableProcessors()));
    report.append("| variant | deliveries | seconds | deliveries/s |\n|---|---:|---:|---:|\n");
    try (PostgresServer postgres = PostgresServer.start();
        ConnectCluster connect = ConnectCluster.start("relaybus-bench", 1, Map.of())) {
      connect.createTopics(8, HANDLER);
      double sqlOnly = sqlOnlyDrain(postgres, backlog, report);
      long produced = 0;
      for (int tasks : List.of(1, 2)) {
        String prefix = "bench" + tasks + "_";
        try (PostgresOutboxStore store = postgres.store(prefix)) {
          preload(store, backlog);
          long start = System.nanoTime();
          connect.deploy(
              "drain-" + tasks,
              DeployedConfig.connector(
                  postgres, prefix, Map.of("tasks.max", String.valueOf(tasks))));
          while (store.statistics().totalPending() > 0) {
            Thread.sleep(100);
          }
          double seconds = (System.nanoTime() - start) / 1e9;
          connect.delete("drain-" + tasks);
          produced += backlog;
          long inTopic = endOffsets(connect);
          if (inTopic < produced) {
            throw new IllegalStateException(
                "only " + inTopic + " records in the topic, " + produced + " expected");
          }
          report.append(
              "| relaybus connector, tasks.max=%d (deploy to last delete) | %,d | %.1f | %,.0f (%.2f× SQL-only) |\n"
                  .formatted(
                      tasks, backlog, seconds, backlog / seconds, backlog / seconds / sqlOnly));
        }
      }
      report.append(
          "\nRecords in the topic after both runs: %,d (%,d expected; more would be duplicates).\n"
              .formatted(endOffsets(connect), produced));
    }
    System.out.println(report);
    for (int i = 0; i < args.length - 1; i++) {
      if (args[i].equals("--out")) {
        Files.writeString(Path.of(args[i + 1]), report.toString());
      }
    }
    System.exit(0);
  }

  private static double sqlOnlyDrain(PostgresServer postgres, int backlog, StringBuilder report) {
    try (PostgresOutboxStore store = postgres.store("sqlonly_")) {
      preload(store, backlog);
      long start = System.nanoTime();
      List<LaneLease> leases =
          store.acquireLanes("bench", "bench", LaneRange.all().lanes(), Duration.ofMinutes(10));
      long drained = 0;
      List<ClaimedDelivery> batch;
      while (!(batch = store.claim("bench", leases, 500)).isEmpty()) {
        drained += store.complete(batch.stream().map(ClaimedDelivery::token).toList()).size();
      }
      double seconds = (System.nanoTime() - start) / 1e9;
      report.append(
          "| SQL only: claim 500 + complete, one session, no Kafka | %,d | %.1f | %,.0f |\n"
              .formatted(drained, seconds, drained / seconds));
      return drained / seconds;
    }
  }

  private static void preload(PostgresOutboxStore store, int count) {
    List<OutboxEvent> batch = new ArrayList<>(1000);
    for (int i = 0; i < count; i++) {
      batch.add(
          OutboxEvent.builder("order.placed")
              .key("order-" + (i % 1000))
              .payload(PAYLOAD, "application/json")
              .handlers(HANDLER)
              .build());
      if (batch.size() == 1000) {
        store.publishAll(batch);
        batch.clear();
      }
    }
    if (!batch.isEmpty()) {
      store.publishAll(batch);
    }
  }

  private static long endOffsets(ConnectCluster connect) {
    try (KafkaConsumer<String, byte[]> consumer = connect.consumer()) {
      List<TopicPartition> partitions =
          consumer.partitionsFor(HANDLER).stream()
              .map(p -> new TopicPartition(p.topic(), p.partition()))
              .toList();
      return consumer.endOffsets(partitions).values().stream().mapToLong(Long::longValue).sum();
    }
  }
}
