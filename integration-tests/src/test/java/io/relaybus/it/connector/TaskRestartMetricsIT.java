package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Servers;
import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.util.Map;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Task restarts in a real Connect worker whose graceful shutdown timeout has passed before the old
 * task stopped: Connect cancels the old incarnation, starts the new one at once, and the old task's
 * thread calls {@code stop()} later. The running task keeps its MBean. Before, the old stop
 * unregistered it (Kafka's JmxReporter unregisters by name), and the running task had no metrics.
 */
class TaskRestartMetricsIT {
  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(
              () ->
                  ConnectCluster.start(
                      "relaybus-restart-metrics",
                      1,
                      // the worker moves on at once: the new task starts before the old one stopped
                      Map.of("task.shutdown.graceful.timeout.ms", "1")));

  private static PostgresServer postgres;
  private static ConnectCluster connect;

  /** The alive threads of the task's incarnations (Connect names them after the task). */
  private static long taskThreads(String connector) {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(Thread::isAlive)
        .filter(t -> t.getName().equals("task-thread-" + connector + "-0"))
        .count();
  }

  @Test
  void aRestartedTaskKeepsItsMBeanWhenTheOldIncarnationStopsLate() throws Exception {
    String connector = "restartmetrics";
    MBeanServer server = ManagementFactory.getPlatformMBeanServer();
    ObjectName mbean =
        new ObjectName(
            "relaybus.connect:type=source-task-metrics,connector=" + connector + ",task=0");
    connect.deploy(
        connector,
        DeployedConfig.connector(
            postgres,
            "restartmetrics_",
            Map.of("tasks.max", "1", "topic.template", "${handler}-restartmetrics")));
    connect.awaitRunning(connector, 1);
    await().atMost(Duration.ofSeconds(30)).until(() -> server.isRegistered(mbean));
    try {
      for (int restart = 1; restart <= 3; restart++) {
        connect.restartTask(connector, 0);
        connect.awaitRunning(connector, 1);
        // the old incarnation's thread has ended, so its stop() has run
        await().atMost(Duration.ofSeconds(60)).until(() -> taskThreads(connector) == 1);

        assertThat(server.isRegistered(mbean)).as("after restart " + restart).isTrue();
        assertThat(server.getAttribute(mbean, "lanes-held"))
            .as("after restart " + restart)
            .isEqualTo(256L);
      }
    } finally {
      connect.delete(connector);
    }
    await().atMost(Duration.ofSeconds(60)).until(() -> taskThreads(connector) == 0);
    assertThat(
            server.queryNames(
                new ObjectName("relaybus.connect:connector=" + connector + ",*"), null))
        .isEmpty();
  }
}
