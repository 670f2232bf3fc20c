package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStatistics.HandlerCounts;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.XminHorizon;
import io.relaybus.store.memory.InMemoryOutboxStore;
import java.lang.management.ManagementFactory;
import java.time.Clock;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import javax.management.ObjectName;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.source.SourceRecord;
import org.junit.jupiter.api.Test;

/** The metrics an operator alerts on, as the task and its lease thread record them. */
class TaskMetricsTest {
  private final InMemoryOutboxStore store = InMemoryOutboxStore.builder().build();
  private final String connector = "metrics-" + UUID.randomUUID();

  private Map<String, String> props() {
    Map<String, String> props = new HashMap<>();
    props.put("name", connector);
    props.put("connection.url", "jdbc:postgresql://unused/db");
    props.put("task.lanes", "0-255");
    props.put("task.index", "0");
    props.put("completion.flush.interval.ms", "60000");
    props.put("completion.flush.size", "1000");
    props.put("poll.interval.ms", "1");
    props.put("poll.linger.ms", "0"); // each poll claims at once: the test counts claims
    return props;
  }

  @Test
  void claimsEmptyClaimsAndCompletionLag() throws Exception {
    store.publish(OutboxEvent.builder("t").key("k").json("{}").handlers("billing").build());
    store.publish(OutboxEvent.builder("t").key("k").json("{}").handlers("billing").build());
    OutboxSourceTask task =
        new OutboxSourceTask((config, name) -> new ForwardingStore(store), Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props());
    try {
      List<SourceRecord> records = task.poll();
      assertThat(records).hasSize(2);
      assertThat(task.poll()).isNull(); // nothing more due: an empty claim
      assertThat(task.metrics().value("claims-total")).isEqualTo(2.0);
      assertThat(task.metrics().value("empty-claims-total")).isEqualTo(1.0);

      for (SourceRecord record : records) {
        task.commitRecord(
            record, new RecordMetadata(new TopicPartition(record.topic(), 0), 0, 0, 0, 0, 0));
      }
      // Acknowledged, not yet deleted: the flush waits for its interval or size.
      assertThat(task.metrics().value("completion-lag")).isEqualTo(2.0);
      assertThat(store.statistics().totalPending()).isEqualTo(2);
    } finally {
      task.stop(); // deletes what was acknowledged
    }
    assertThat(store.statistics().totalPending()).isZero();
  }

  @Test
  void deadLettersPerHandlerAndXminHorizonAreExposedAsMBeans() throws Exception {
    try (TaskMetrics metrics = new TaskMetrics(connector, 3)) {
      metrics.outbox(
          new OutboxStatistics(
              Map.of(
                  "billing",
                  new HandlerCounts(5, 2, 1, 0),
                  "shipping",
                  new HandlerCounts(0, 0, 4, 0)),
              Duration.ofSeconds(7),
              List.of()));
      metrics.xminHorizon(Optional.of(new XminHorizon(Duration.ofMillis(1234), 56)));

      assertThat(metrics.value("dead-letters")).isEqualTo(5.0);
      assertThat(metrics.value("xmin-horizon-age-ms")).isEqualTo(1234.0);
      assertThat(metrics.value("xmin-horizon-age-xids")).isEqualTo(56.0);
      Object dead =
          ManagementFactory.getPlatformMBeanServer()
              .getAttribute(
                  new ObjectName(
                      "relaybus.connect:type=source-task-handler-metrics,connector="
                          + connector
                          + ",task=3,handler=shipping"),
                  "dead-letters");
      assertThat(dead).isEqualTo(4L);
      assertThat(metrics.handlerValue("billing", "pending")).isEqualTo(5.0);
      assertThat(metrics.handlerValue("billing", "due")).isEqualTo(2.0);

      // A handler that has no rows any more reads 0; one that comes back counts again.
      metrics.outbox(
          new OutboxStatistics(
              Map.of("billing", new HandlerCounts(0, 0, 2, 0)), Duration.ZERO, List.of()));
      assertThat(metrics.handlerValue("shipping", "dead-letters")).isZero();
      assertThat(metrics.handlerValue("billing", "dead-letters")).isEqualTo(2.0);
      metrics.outbox(
          new OutboxStatistics(
              Map.of("shipping", new HandlerCounts(0, 0, 1, 0)), Duration.ZERO, List.of()));
      assertThat(metrics.handlerValue("shipping", "dead-letters")).isEqualTo(1.0);

      // MongoDB and the in-memory store have no xmin horizon.
      metrics.xminHorizon(Optional.empty());
      assertThat(metrics.value("xmin-horizon-age-ms")).isEqualTo(-1.0);
    }
  }

  @Test
  void failedLeaseRenewalsAreCounted() {
    OutboxStore unreachable =
        new ForwardingStore(store) {
          @Override
          public List<LaneLease> renewLanes(
              String owner, Collection<LaneLease> leases, Duration duration) {
            throw new OutboxStoreException("connection refused", true, null);
          }
        };
    try (TaskMetrics metrics = new TaskMetrics(connector, 0);
        LaneLeases leases =
            new LaneLeases(
                unreachable,
                "task-a",
                connector,
                new LaneRange(0, 3),
                Duration.ofMillis(300),
                Clock.systemUTC(),
                metrics,
                "relaybus-lease-renewal-test")) {
      leases.start();
      assertThat(metrics.value("lanes-held")).isEqualTo(4.0);
      await()
          .atMost(Duration.ofSeconds(20))
          .until(() -> metrics.value("lease-renewals-failed-total") >= 2);
    }
  }

  private ObjectName taskMBean() throws Exception {
    return new ObjectName(
        "relaybus.connect:type=source-task-metrics,connector=" + connector + ",task=0");
  }

  private OutboxSourceTask startTask() {
    OutboxSourceTask task =
        new OutboxSourceTask((config, name) -> new ForwardingStore(store), Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props());
    return task;
  }

  /**
   * A restart whose old incarnation stops after the new one started (Connect starts the new task
   * once task.shutdown.graceful.timeout.ms has passed, and the old thread calls stop() when it gets
   * there; a connector deleted and re-created under its name likewise): the old one's stop must not
   * take the new one's MBean down with it. Before, Kafka's JmxReporter unregistered the MBean by
   * name, so the running task had no metrics until its next restart.
   */
  @Test
  void anOldIncarnationStoppingLateLeavesTheNewOnesMBeanInPlace() throws Exception {
    store.publish(OutboxEvent.builder("t").key("k").json("{}").handlers("billing").build());
    var server = ManagementFactory.getPlatformMBeanServer();
    OutboxSourceTask old = startTask();
    OutboxSourceTask next = startTask(); // takes the lanes over
    try {
      assertThat(next.poll()).hasSize(1);

      old.stop();

      assertThat(server.isRegistered(taskMBean())).isTrue();
      assertThat(server.getAttribute(taskMBean(), "emitted-total")).isEqualTo(1.0);
      assertThat(server.getAttribute(taskMBean(), "lanes-held")).isEqualTo(256L);
      assertThat(server.getAttribute(taskMBean(), "takeovers-total")).isEqualTo(256.0);
    } finally {
      next.stop();
    }
    assertThat(server.isRegistered(taskMBean())).isFalse();
    assertThat(
            server.queryNames(
                new ObjectName("relaybus.connect:connector=" + connector + ",*"), null))
        .isEmpty();
  }

  /**
   * Every MBean a task registers is its own (tagged with its connector and task). Before, Kafka's
   * metrics library added {@code relaybus.connect:type=kafka-metrics-count} to each task's metrics:
   * one name for all tasks of the worker, showing the count of whichever task registered last and
   * unregistered by the first task to stop while the others ran.
   */
  @Test
  void everyMBeanATaskRegistersNamesItsConnectorAndTask() throws Exception {
    var server = ManagementFactory.getPlatformMBeanServer();
    try (TaskMetrics first = new TaskMetrics(connector, 0);
        TaskMetrics second = new TaskMetrics(connector, 1)) {
      first.lanesHeld(() -> 1);
      second.lanesHeld(() -> 2);
      assertThat(server.queryNames(new ObjectName("relaybus.connect:*"), null))
          .extracting(ObjectName::getCanonicalName)
          .filteredOn(name -> !name.contains("connector=metrics-")) // other tests' tasks
          .isEmpty();
      assertThat(
              server.queryNames(
                  new ObjectName("relaybus.connect:connector=" + connector + ",*"), null))
          .extracting(name -> name.getKeyProperty("type") + "/" + name.getKeyProperty("task"))
          .containsExactlyInAnyOrder("source-task-metrics/0", "source-task-metrics/1");
    }
  }
}
