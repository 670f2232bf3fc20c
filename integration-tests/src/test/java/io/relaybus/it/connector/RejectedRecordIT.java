package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.it.fault.Verifier;
import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A record Kafka rejects for good under {@code errors.tolerance=none}: the broker refuses it (the
 * topic's {@code max.message.bytes} is below the record, which is below {@code max.record.bytes}),
 * the producer reports it, Connect fails the task. A real broker and Connect worker in this JVM
 * ({@link io.relaybus.it.harness.ConnectCluster}), a real PostgreSQL, restarts through REST as an
 * operator does.
 */
class RejectedRecordIT {
  private static final Duration TIMEOUT = Duration.ofSeconds(90);
  private static final int MAX_ATTEMPTS = 3;

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(() -> ConnectCluster.start("relaybus-rejects", 1, Map.of()));

  private static PostgresServer postgres;
  private static ConnectCluster connect;

  /**
   * Regression (issue 13, item 4): the task failed on every restart forever and the rejected
   * delivery was never dead-lettered, because stopping the failed task handed it back without
   * charging an attempt; and a later record of its key, claimed with its retry, reached Kafka
   * before it was settled. Now each failure charges it, its retry goes out alone, and it ends
   * dead-lettered with its reason after {@code retry.max.attempts} failures; nothing of its key
   * after it is sent while it is unsettled; everything else arrives exactly once in key order.
   */
  @Test
  void recordTheBrokerRejectsIsDeadLetteredAfterItsAttemptsAndItsKeyWaitsForIt() throws Exception {
    Outcome outcome = rejectUntilDead("rejects", false);

    assertThat(outcome.restarts()).isEqualTo(MAX_ATTEMPTS - 1);
    assertThat(outcome.dead().attempts()).isEqualTo(MAX_ATTEMPTS);
    assertThat(outcome.dead().lastError())
        .startsWith("the task stopped with the record unacknowledged by Kafka");
  }

  /**
   * The case: later records of the rejected record's key were claimed and sent with it;
   * Connect's producer goes on after a rejected batch, so they are written after it failed. A retry
   * would then land after them, so it is dead-lettered at the first failure, with the reason.
   */
  @Test
  void recordTheBrokerRejectsAfterWhichItsKeyWasWrittenIsDeadLetteredAtOnce() throws Exception {
    Outcome outcome = rejectUntilDead("overtaken", true);

    if (outcome.overtakenInKafka()) {
      assertThat(outcome.restarts()).isZero();
      assertThat(outcome.dead().lastError())
          .startsWith(
              "Kafka never acknowledged the record but acknowledged a later record of its key");
    } else { // Connect noticed the rejection before it handed the later records to the producer
      assertThat(outcome.restarts()).isEqualTo(MAX_ATTEMPTS - 1);
      assertThat(outcome.dead().lastError())
          .startsWith("the task stopped with the record unacknowledged by Kafka");
    }
  }

  /**
   * Under {@code errors.tolerance=all} the same rejection never fails the task: Connect reports the
   * record without metadata and goes on, the other keys flow, and the rejected record is
   * dead-lettered without a restart. Its key's later records, sent with it, are written after it
   * failed, so it is dead-lettered as overtaken (a retry that passed would land after them: before
   * the fix it was retried while they were in flight), and the key's events after that go on.
   */
  @Test
  void withToleranceAllTheRejectedRecordIsDeadLetteredWithoutTheTaskFailingAndItsKeyKeepsItsOrder()
      throws Exception {
    String name = "tolerant";
    String prefix = name + "_";
    String topic = "billing-" + name;
    connect.createTopic(topic, 1, Map.of("max.message.bytes", "2000"));
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), List.of(topic))) {
      publish(store, "k-1", "k", 10);
      publish(store, "k-2", "k", 6000);
      publish(store, "k-3", "k", 10);
      publish(store, "k-4", "k", 10);
      publish(store, "o-1", "o", 10);
      publish(store, "o-2", "o", 10);
      deploy(name, topic, Map.of("errors.tolerance", "all", "errors.log.enable", "true"));

      Set<String> states = new java.util.concurrent.ConcurrentSkipListSet<>();
      await()
          .atMost(TIMEOUT)
          .pollInterval(Duration.ofMillis(100))
          .until(
              () -> {
                states.add(String.valueOf(connect.taskState(name, 0)));
                return status(store, "k-2") == DeliveryStatus.DEAD;
              });
      publish(store, "k-5", "k", 10);
      assertTheRestArrivedOnceInKeyOrder(collector, prefix);
      DeliveryView dead = deadLetter(store);
      System.out.printf(
          "[rejects] %s: task states seen %s; attempts %d; reason: %s%n",
          name, states, dead.attempts(), dead.lastError());

      assertThat(states).as("task states while k-2 was being rejected").doesNotContain("FAILED");
      assertThat(connect.taskState(name, 0)).isEqualTo("RUNNING");
      assertThat(dead.eventId()).isEqualTo("k-2");
      assertThat(dead.lastError())
          .startsWith(
              "Kafka never acknowledged the record but acknowledged a later record of its key");
    } finally {
      connect.delete(name);
    }
  }

  private record Outcome(int restarts, DeliveryView dead, boolean overtakenInKafka) {}

  /**
   * Key k: k-1, k-2 (6 KB, above the topic's max.message.bytes=2000, below max.record.bytes), k-3,
   * k-4 (published before the first send, or only after the first failure), k-5 (after the first
   * failure); key o: o-1, o-2. Restarts the failed task through REST until k-2 is dead, then checks
   * that the rest arrived exactly once in key order and only the dead letter is left.
   */
  private static Outcome rejectUntilDead(String name, boolean laterOfKeyBeforeFirstSend)
      throws Exception {
    String prefix = name + "_";
    String topic = "billing-" + name;
    connect.createTopic(topic, 1, Map.of("max.message.bytes", "2000"));
    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), List.of(topic))) {
      publish(store, "k-1", "k", 10);
      publish(store, "k-2", "k", 6000);
      if (laterOfKeyBeforeFirstSend) {
        publish(store, "k-3", "k", 10);
        publish(store, "k-4", "k", 10);
      }
      publish(store, "o-1", "o", 10);
      publish(store, "o-2", "o", 10);
      deploy(name, topic, Map.of());

      awaitTaskState(name, "FAILED");
      boolean overtaken =
          eventIds(collector.drain(Duration.ofMillis(500))).contains("k-3")
              && laterOfKeyBeforeFirstSend;
      if (!laterOfKeyBeforeFirstSend) {
        publish(store, "k-3", "k", 10);
        publish(store, "k-4", "k", 10);
      }
      publish(store, "k-5", "k", 10);
      int restarts = 0;
      while (status(store, "k-2") != DeliveryStatus.DEAD && restarts < MAX_ATTEMPTS + 2) {
        List<String> received = eventIds(collector.drain(Duration.ofMillis(300)));
        assertThat(received)
            .as("nothing of k after k-2 is sent while k-2 is unsettled (restart %d)", restarts)
            .doesNotContain("k-5");
        if (!laterOfKeyBeforeFirstSend) {
          assertThat(received).doesNotContain("k-3", "k-4");
        }
        int attempts = attempts(store, "k-2");
        connect.restartTask(name, 0);
        restarts++;
        // The restarted task fails again on k-2, which charges it (or buries it).
        await()
            .atMost(TIMEOUT)
            .pollInterval(Duration.ofMillis(200))
            .until(
                () ->
                    status(store, "k-2") == DeliveryStatus.DEAD
                        || (attempts(store, "k-2") > attempts
                            && "FAILED".equals(connect.taskState(name, 0))));
      }
      DeliveryView dead = deadLetter(store);
      System.out.printf(
          "[rejects] %s: k-3 in Kafka at the first failure %s; restarts until k-2 was dead %d;"
              + " attempts %d; reason: %s%n",
          name, overtaken, restarts, dead.attempts(), dead.lastError());
      assertThat(dead.eventId()).isEqualTo("k-2");
      assertThat(restarts).isLessThanOrEqualTo(MAX_ATTEMPTS);

      // Restarted once more, the task sends the rest: k-5 only now that k-2 is settled.
      connect.restartTask(name, 0);
      assertTheRestArrivedOnceInKeyOrder(collector, prefix);
      assertThat(connect.taskState(name, 0)).isEqualTo("RUNNING");
      return new Outcome(restarts, dead, overtaken);
    } finally {
      try {
        connect.delete(name);
      } catch (RuntimeException e) {
        System.out.println("[rejects] deleting " + name + ": " + e.getMessage());
      }
    }
  }

  /** The connector {@code name}, one task, handler billing to {@code topic}, short backoffs. */
  private static void deploy(String name, String topic, Map<String, String> more) {
    Map<String, String> settings =
        new java.util.HashMap<>(
            Map.of(
                "tasks.max", "1",
                "topic.template", "",
                "topic.map", "billing:" + topic,
                "retry.max.attempts", String.valueOf(MAX_ATTEMPTS),
                "retry.backoff.ms", "200",
                "retry.backoff.max.ms", "400",
                "poll.interval.ms", "100"));
    settings.putAll(more);
    connect.deploy(name, DeployedConfig.connector(postgres, name + "_", settings));
  }

  /**
   * Everything but k-2 arrived exactly once, each key in order, and only k-2's event and dead
   * letter are left in the outbox.
   */
  private static void assertTheRestArrivedOnceInKeyOrder(RecordCollector collector, String prefix)
      throws Exception {
    collector.awaitAll(
        Set.of(
            "k-1/billing",
            "k-3/billing",
            "k-4/billing",
            "k-5/billing",
            "o-1/billing",
            "o-2/billing"),
        TIMEOUT);
    List<Received> all = collector.drain(Duration.ofSeconds(2));
    assertThat(RecordCollector.duplicates(all)).isEmpty();
    assertThat(eventIds(all.stream().filter(r -> "k".equals(r.key())).toList()))
        .containsExactly("k-1", "k-3", "k-4", "k-5");
    assertThat(eventIds(all.stream().filter(r -> "o".equals(r.key())).toList()))
        .containsExactly("o-1", "o-2");
    await()
        .atMost(TIMEOUT)
        .untilAsserted(
            () -> assertThat(Verifier.rows(postgres.dataSource(), prefix)).containsExactly(1, 1));
  }

  private static void publish(PostgresOutboxStore store, String id, String key, int bytes) {
    store.publish(
        OutboxEvent.builder("t")
            .id(id)
            .key(key)
            .payload(
                "x".repeat(bytes).getBytes(java.nio.charset.StandardCharsets.UTF_8), "text/plain")
            .handlers("billing")
            .build());
  }

  private static void awaitTaskState(String connector, String state) {
    await()
        .atMost(TIMEOUT)
        .pollInterval(Duration.ofMillis(200))
        .until(() -> state.equals(connect.taskState(connector, 0)));
  }

  private static DeliveryStatus status(PostgresOutboxStore store, String eventId) {
    return store.listDeliveries(DeliveryQuery.all()).items().stream()
        .filter(d -> d.eventId().equals(eventId))
        .map(DeliveryView::status)
        .findFirst()
        .orElse(null);
  }

  private static int attempts(PostgresOutboxStore store, String eventId) {
    return store.listDeliveries(DeliveryQuery.all()).items().stream()
        .filter(d -> d.eventId().equals(eventId))
        .mapToInt(DeliveryView::attempts)
        .findFirst()
        .orElse(-1);
  }

  private static DeliveryView deadLetter(PostgresOutboxStore store) {
    List<DeliveryView> dead =
        store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items();
    assertThat(dead).hasSize(1);
    return dead.get(0);
  }

  private static List<String> eventIds(List<Received> received) {
    return received.stream().map(Received::eventId).collect(Collectors.toList());
  }
}
