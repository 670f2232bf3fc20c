package io.relaybus.quickstart;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/** The Connect worker's REST API, used the way the README tells users to (curl's calls). */
final class ConnectRest {
  static final String CONNECTOR_CLASS = "io.relaybus.connect.OutboxSourceConnector";
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String baseUrl;
  private final HttpClient http =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

  ConnectRest(String baseUrl) {
    this.baseUrl = baseUrl.endsWith("/") ? baseUrl : baseUrl + "/";
  }

  /** A connector config file of {@code config/}, as the map the REST API takes. */
  static Map<String, String> readConfig(Path file) throws IOException {
    return JSON.readValue(
        Files.readString(file), new TypeReference<LinkedHashMap<String, String>>() {});
  }

  /** GET /connector-plugins lists the relaybus connector. */
  boolean pluginLoaded() throws IOException, InterruptedException {
    HttpResponse<String> response = get("connector-plugins");
    return response.statusCode() == 200
        && JSON.readTree(response.body()).findValuesAsText("class").contains(CONNECTOR_CLASS);
  }

  /** The plugin's version as the worker reports it. */
  String pluginVersion() throws IOException, InterruptedException {
    for (JsonNode plugin : JSON.readTree(get("connector-plugins").body())) {
      if (CONNECTOR_CLASS.equals(plugin.path("class").asText())) {
        return plugin.path("version").asText();
      }
    }
    return "?";
  }

  /** PUT /connectors/{name}/config; fails with the worker's answer unless it is 200 or 201. */
  void deploy(String connector, Map<String, String> config)
      throws IOException, InterruptedException {
    HttpResponse<String> response =
        http.send(
            HttpRequest.newBuilder(URI.create(baseUrl + "connectors/" + connector + "/config"))
                .timeout(Duration.ofSeconds(60))
                .header("Content-Type", "application/json")
                .PUT(HttpRequest.BodyPublishers.ofString(JSON.writeValueAsString(config)))
                .build(),
            HttpResponse.BodyHandlers.ofString());
    if (response.statusCode() / 100 != 2) {
      throw new IllegalStateException(
          "the worker refused the connector config (HTTP %d): %s"
              .formatted(response.statusCode(), response.body()));
    }
  }

  /**
   * Waits until the connector and {@code tasks} tasks run; fails with the trace of a failed one.
   */
  void awaitRunning(String connector, int tasks, Duration timeout)
      throws IOException, InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    String last = "";
    while (System.nanoTime() < deadline) {
      HttpResponse<String> response = get("connectors/" + connector + "/status");
      last = response.body();
      if (response.statusCode() == 200) {
        JsonNode status = JSON.readTree(last);
        for (JsonNode task : status.path("tasks")) {
          if ("FAILED".equals(task.path("state").asText())) {
            throw new IllegalStateException(
                "task %s of %s failed: %s"
                    .formatted(task.path("id").asText(), connector, task.path("trace").asText()));
          }
        }
        if ("FAILED".equals(status.path("connector").path("state").asText())) {
          throw new IllegalStateException(
              connector + " failed: " + status.path("connector").path("trace").asText());
        }
        if ("RUNNING".equals(status.path("connector").path("state").asText())
            && status.path("tasks").size() == tasks
            && status.path("tasks").findValuesAsText("state").stream()
                .allMatch("RUNNING"::equals)) {
          return;
        }
      }
      Thread.sleep(250);
    }
    throw new IllegalStateException(
        connector
            + " did not run "
            + tasks
            + " tasks within "
            + timeout
            + "; last status: "
            + last);
  }

  private HttpResponse<String> get(String path) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(baseUrl + path)).timeout(Duration.ofSeconds(10)).build(),
        HttpResponse.BodyHandlers.ofString());
  }
}
