package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * The README's "look at what arrived": {@code java -jar relaybus-quickstart.jar --tail} prints the
 * demo's records with their keys and headers, then each new record as it arrives (also on a topic
 * created after it started), until Ctrl-C; and the printed validate example answers with exactly
 * the two errors it means to show.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class QuickstartTailIT {
  private static final Path WORK = Path.of("target", "quickstart-tail-it").toAbsolutePath();
  private static final Path OUT = Path.of("target", "quickstart-tail-it.out").toAbsolutePath();
  private static final Pattern RECORD_LINE =
      Pattern.compile("(?m)^(\\S+) partition (\\d+) offset (\\d+)  key (\\S+)$");
  private static final Pattern POSTGRES =
      Pattern.compile("PostgreSQL\\s+(jdbc:postgresql://localhost:\\d+/postgres)");

  private static Process process;
  private static int restPort;

  @BeforeAll
  static void startWithTail() throws Exception {
    restPort = QuickstartJar.freePort();
    process = QuickstartJar.start(WORK, OUT, restPort, "--tail");
    await()
        .atMost(Duration.ofSeconds(240))
        .pollInterval(Duration.ofSeconds(1))
        .until(() -> !process.isAlive() || output().contains("--tail: every record"));
    assertThat(process.isAlive()).as("still running:%n%s", output()).isTrue();
  }

  @AfterAll
  static void stop() throws Exception {
    if (process != null && process.isAlive()) {
      process.destroy(); // SIGTERM, as Ctrl-C: the shutdown hook stops everything
      if (!process.waitFor(60, TimeUnit.SECONDS)) {
        process.destroyForcibly();
      }
    }
  }

  private static String output() throws IOException {
    return Files.readString(OUT);
  }

  @Test
  @Order(2) // it ends with Ctrl-C
  void printsTheDemosRecordsThenANewOneWithKeyAndHeadersThenStopsOnCtrlC() throws Exception {
    // The demo: 40 events to billing and shipping, 60 records (the poison note is a dead letter).
    await()
        .atMost(Duration.ofSeconds(60))
        .untilAsserted(() -> assertThat(records(output())).hasSize(60));
    List<String[]> demo = records(output());
    assertThat(demo).allSatisfy(r -> assertThat(r[0]).isIn("billing", "shipping"));
    assertThat(demo.stream().filter(r -> r[0].equals("billing"))).hasSize(30);
    // The sequence is the event's log id: the same on both handlers' topics.
    String placedSequence = null;
    for (String handler : List.of("billing", "shipping")) {
      Matcher placed =
          Pattern.compile(
                  "(?m)^"
                      + handler
                      + " partition \\d+ offset \\d+  key order-1\\n"
                      + "  headers traceparent=00-0{31}1-0{15}1-01, relaybus-event-id=order-1-placed,"
                      + " relaybus-event-type=order.placed, relaybus-content-type=application/json,"
                      + " relaybus-handler="
                      + handler
                      + ", relaybus-sequence=(\\d+), relaybus-attempt=1\\n"
                      + "  value   \\{.*\"order\":\"order-1\".*\\}$")
              .matcher(output());
      assertThat(placed.find()).as(handler + "'s order-1-placed in%n%s", output()).isTrue();
      if (placedSequence == null) {
        placedSequence = placed.group(1);
      }
      assertThat(placed.group(1)).as(handler + "'s sequence").isEqualTo(placedSequence);
    }

    String url = postgresUrl();
    try (PostgresOutboxStore store =
        PostgresOutboxStore.builder().jdbcUrl(url).user("postgres").build()) {
      store.publish(
          OutboxEvent.builder("greeting.sent")
              .id("tail-it-1")
              .key("tail-key")
              .json("{\"hello\":\"tail\"}")
              .header("traceparent", "00-tail")
              .handlers("billing", "audit") // audit: a topic the tail did not see at its start
              .build());
    }

    await()
        .atMost(Duration.ofSeconds(60))
        .untilAsserted(() -> assertThat(records(output())).hasSize(62));
    String printed = output();
    // Published after the demo: its log id is above the demo's, one for both handlers.
    String tailSequence = null;
    for (String handler : List.of("billing", "audit")) {
      Matcher record =
          Pattern.compile(
                  Pattern.quote(handler)
                      + " partition \\d+ offset \\d+  key tail-key\\n"
                      + Pattern.quote(
                          "  headers traceparent=00-tail, relaybus-event-id=tail-it-1,"
                              + " relaybus-event-type=greeting.sent,"
                              + " relaybus-content-type=application/json, relaybus-handler="
                              + handler
                              + ", relaybus-sequence=")
                      + "(\\d+)"
                      + Pattern.quote(
                          ", relaybus-attempt=1\n" + "  value   {\"hello\":\"tail\"}\n"))
              .matcher(printed);
      assertThat(record.find()).as(handler + "'s tail-it-1 in%n%s", printed).isTrue();
      if (tailSequence == null) {
        tailSequence = record.group(1);
      }
      assertThat(record.group(1)).as(handler + "'s sequence").isEqualTo(tailSequence);
    }
    assertThat(Long.parseLong(tailSequence)).isGreaterThan(Long.parseLong(placedSequence));
    List<String[]> all = records(printed);
    assertThat(all.subList(60, 62).stream().map(r -> r[0] + "/" + r[3]))
        .containsExactlyInAnyOrder("billing/tail-key", "audit/tail-key");
    assertThat(all.stream().map(r -> r[0] + "/" + r[1] + "/" + r[2]).distinct()).hasSize(62);

    process.destroy();
    assertThat(process.waitFor(60, TimeUnit.SECONDS)).isTrue();
    assertThat(output()).contains("Stopped cleanly in");
    assertThat(records(output())).hasSize(62); // nothing printed twice on the way out
  }

  @Test
  @Order(1)
  void thePrintedValidateExampleAnswersWithExactlyItsTwoMistakes() throws Exception {
    Path example = WORK.resolve("validate-example.json");
    assertThat(output())
        .contains(
            // as the quickstart prints it, relative to where it runs (the repository)
            "--data @quickstart/target/quickstart-tail-it/validate-example.json \\",
            "localhost:%d/connector-plugins/OutboxSourceConnector/config/validate"
                .formatted(restPort),
            "(the deployed config with two mistakes: error_count 2, on value.format and"
                + " connection.url)");

    HttpResponse<String> response =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(
                        URI.create(
                            "http://localhost:%d/connector-plugins/OutboxSourceConnector/config/validate"
                                .formatted(restPort)))
                    .timeout(Duration.ofSeconds(60))
                    .header("Content-Type", "application/json")
                    .PUT(HttpRequest.BodyPublishers.ofFile(example))
                    .build(),
                HttpResponse.BodyHandlers.ofString());

    assertThat(response.statusCode()).isEqualTo(200);
    JsonNode answer = new ObjectMapper().readTree(response.body());
    TreeMap<String, List<String>> errors = new TreeMap<>();
    for (JsonNode config : answer.path("configs")) {
      List<String> messages = new ArrayList<>();
      config.path("value").path("errors").forEach(e -> messages.add(e.asText()));
      if (!messages.isEmpty()) {
        errors.put(config.path("value").path("name").asText(), messages);
      }
    }
    assertThat(answer.path("error_count").asInt()).as(response.body()).isEqualTo(2);
    assertThat(errors).containsOnlyKeys("value.format", "connection.url");
    assertThat(errors.get("value.format"))
        .containsExactly(
            "Invalid value xml for configuration value.format: must be one of bytes, string, json");
    assertThat(errors.get("connection.url"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith("connection.url: the server at jdbc:postgresql://localhost:")
        .contains(
            "/no_such_database has no database of that name (SQLSTATE 3D000)",
            "database \"no_such_database\" does not exist");
  }

  /** Each printed record's topic, partition, offset and key, in the order printed. */
  private static List<String[]> records(String output) {
    List<String[]> records = new ArrayList<>();
    Matcher m = RECORD_LINE.matcher(output);
    while (m.find()) {
      records.add(new String[] {m.group(1), m.group(2), m.group(3), m.group(4)});
    }
    return records;
  }

  private static String postgresUrl() throws IOException {
    Matcher m = POSTGRES.matcher(output());
    assertThat(m.find()).as("the PostgreSQL address in:%n%s", output()).isTrue();
    return m.group(1);
  }
}
