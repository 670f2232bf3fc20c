package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.it.harness.Servers;
import io.relaybus.quickstart.Ports;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The shipped monitoring files against a real worker: a Connect worker in a JVM of its own, started
 * with the Prometheus JMX exporter agent and config/prometheus-jmx-exporter.yml as
 * docs/operations.md says, runs the packaged connector against PostgreSQL; every metric that
 * config/grafana-dashboard.json and config/prometheus-alerts.yml query must be in the exporter's
 * output with the connector's labels, and the values must match what happened (20 delivered, 1
 * dead-lettered, nothing left).
 */
class MetricsExporterIT {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CONNECTOR = "metrics-it";
  private static final Pattern SAMPLE =
      Pattern.compile("^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\\{(.*)})?\\s+(\\S+)");
  private static final Pattern LABEL = Pattern.compile("(\\w+)=\"((?:[^\"\\\\]|\\\\.)*)\"");
  private static final Pattern METRIC_NAME =
      Pattern.compile("\\b((?:relaybus|kafka_connect)_[a-z0-9_]+)");

  private static final int METRICS_PORT = Ports.free();
  private static final URI metricsUri = URI.create("http://127.0.0.1:" + METRICS_PORT + "/metrics");

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          .and(
              () -> SeparateJvmKafka.start("metrics-exporter", Map.of()),
              broker -> {
                Path agent =
                    Path.of(System.getProperty("relaybus.jmx.exporter.agent")).toAbsolutePath();
                Path rules =
                    DeployedConfig.configDir()
                        .resolve("prometheus-jmx-exporter.yml")
                        .toAbsolutePath();
                broker.startWorker(
                    List.of("-javaagent:" + agent + "=" + METRICS_PORT + ":" + rules));
              });

  private static PostgresServer postgres;
  private static SeparateJvmKafka kafka;

  record Sample(String name, Map<String, String> labels, double value) {}

  @Test
  void everyMetricTheDashboardAndAlertsQueryIsExportedFromARunningTask() throws Exception {
    try (PostgresOutboxStore store = postgres.store("relaybus_")) {
      for (int i = 0; i < 20; i++) {
        store.publish(
            OutboxEvent.builder("order.placed")
                .key("order-" + i % 3)
                .json("{}")
                .handlers("billing")
                .build());
      }
      store.publish(
          OutboxEvent.builder("order.placed")
              .key("order-x")
              .payload("not json".getBytes(StandardCharsets.UTF_8), "application/json")
              .handlers("shipping")
              .build());
      Map<String, String> config = DeployedConfig.connector(postgres, "relaybus_", Map.of());
      config.put("tasks.max", "1");
      config.put("value.format", "json");
      config.put("value.converter", "org.apache.kafka.connect.json.JsonConverter");
      config.put("value.converter.schemas.enable", "false");
      kafka.createConnector(CONNECTOR, config, 1);

      await()
          .atMost(SeparateJvmKafka.TIMEOUT)
          .until(
              () -> store.statistics().totalPending() == 0 && store.statistics().totalDead() == 1);
      // The statistics gauges refresh every 10 s or more, on their own thread.
      await()
          .atMost(Duration.ofSeconds(90))
          .ignoreExceptions()
          .until(
              () -> {
                List<Sample> s = scrape();
                return value(s, "relaybus_connect_dead_letters") == 1
                    && value(s, "relaybus_connect_backlog") == 0
                    && value(s, "relaybus_connect_deleted_total") == 20
                    && value(s, "relaybus_connect_completion_lag") == 0;
              });
    }

    List<Sample> samples = scrape();
    Set<String> queried = new TreeSet<>();
    JsonNode dashboard =
        JSON.readTree(DeployedConfig.configDir().resolve("grafana-dashboard.json").toFile());
    for (JsonNode expr : dashboard.findValues("expr")) {
      queried.addAll(metricNames(expr.asText()));
    }
    List<String> panels = dashboard.path("panels").findValuesAsText("title");
    queried.addAll(
        metricNames(Files.readString(DeployedConfig.configDir().resolve("prometheus-alerts.yml"))));
    assertThat(panels)
        .contains(
            "Backlog",
            "Oldest pending delivery age",
            "Deliveries per second",
            "Dead letters per handler",
            "Claims and empty claims per second",
            "Lane takeovers",
            "Lease renewals failed",
            "Completion lag and in flight",
            "Lanes held",
            "xmin horizon age (PostgreSQL)");
    assertThat(queried).hasSizeGreaterThanOrEqualTo(15);
    for (String name : queried) {
      List<Map<String, String>> labels =
          samples.stream()
              .filter(s -> s.name().equals(name))
              .map(Sample::labels)
              .filter(l -> CONNECTOR.equals(l.get("connector")))
              .filter(l -> name.startsWith("kafka_connect_worker_") || "0".equals(l.get("task")))
              .toList();
      assertThat(labels).as("%s with connector and task labels in the scrape", name).isNotEmpty();
      if (name.startsWith("relaybus_connect_handler_")) {
        assertThat(labels)
            .as(name)
            .extracting(l -> l.get("handler"))
            .containsExactlyInAnyOrder("billing", "shipping");
      }
    }

    assertThat(value(samples, "relaybus_connect_acknowledged_total")).isEqualTo(20);
    assertThat(value(samples, "relaybus_connect_emitted_total")).isEqualTo(20);
    assertThat(value(samples, "relaybus_connect_dead_lettered_total")).isEqualTo(1);
    assertThat(value(samples, "relaybus_connect_lanes_held")).isEqualTo(256);
    assertThat(value(samples, "relaybus_connect_takeovers_total")).isZero();
    assertThat(value(samples, "relaybus_connect_lease_renewals_failed_total")).isZero();
    assertThat(value(samples, "relaybus_connect_claims_total"))
        .isGreaterThan(value(samples, "relaybus_connect_empty_claims_total"))
        .isGreaterThanOrEqualTo(1);
    assertThat(handlerValue(samples, "relaybus_connect_handler_dead_letters", "shipping"))
        .isEqualTo(1);
    assertThat(handlerValue(samples, "relaybus_connect_handler_dead_letters", "billing")).isZero();
    // PostgreSQL reports its xmin horizon (MongoDB would report -1).
    assertThat(value(samples, "relaybus_connect_xmin_horizon_age_ms")).isGreaterThanOrEqualTo(0);
    assertThat(value(samples, "relaybus_connect_xmin_horizon_age_xids")).isGreaterThanOrEqualTo(0);
    // Connect's own metrics come through the same exporter; the alert uses the failed count.
    assertThat(value(samples, "kafka_connect_worker_connector_running_task_count")).isEqualTo(1);
    assertThat(value(samples, "kafka_connect_worker_connector_failed_task_count")).isZero();
    assertThat(value(samples, "kafka_connect_source_task_metrics_source_record_write_total"))
        .isEqualTo(20);
  }

  private static Set<String> metricNames(String text) {
    Set<String> names = new TreeSet<>();
    Matcher m = METRIC_NAME.matcher(text);
    while (m.find()) {
      names.add(m.group(1));
    }
    return names;
  }

  private static double value(List<Sample> samples, String name) {
    return samples.stream()
        .filter(s -> s.name().equals(name) && CONNECTOR.equals(s.labels().get("connector")))
        .mapToDouble(Sample::value)
        .reduce(
            (a, b) -> {
              throw new AssertionError("more than one " + name + " series: " + samples);
            })
        .orElseThrow(() -> new AssertionError(name + " not in the scrape"));
  }

  private static double handlerValue(List<Sample> samples, String name, String handler) {
    return samples.stream()
        .filter(
            s ->
                s.name().equals(name)
                    && CONNECTOR.equals(s.labels().get("connector"))
                    && handler.equals(s.labels().get("handler")))
        .mapToDouble(Sample::value)
        .findFirst()
        .orElseThrow(() -> new AssertionError(name + " of " + handler + " not in the scrape"));
  }

  /** The exporter's text exposition, parsed into samples. */
  private static List<Sample> scrape() throws Exception {
    HttpResponse<String> response =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(metricsUri).timeout(Duration.ofSeconds(30)).build(),
                HttpResponse.BodyHandlers.ofString());
    assertThat(response.statusCode()).isEqualTo(200);
    Files.writeString(Path.of("target", "metrics-exporter", "scrape.txt"), response.body());
    List<Sample> samples = new ArrayList<>();
    for (String line : response.body().split("\n")) {
      Matcher m = SAMPLE.matcher(line);
      if (line.startsWith("#") || !m.find()) {
        continue;
      }
      Map<String, String> labels = new LinkedHashMap<>();
      if (m.group(2) != null) {
        Matcher l = LABEL.matcher(m.group(2));
        while (l.find()) {
          labels.put(l.group(1), l.group(2));
        }
      }
      samples.add(new Sample(m.group(1), labels, Double.parseDouble(m.group(3))));
    }
    return samples;
  }
}
