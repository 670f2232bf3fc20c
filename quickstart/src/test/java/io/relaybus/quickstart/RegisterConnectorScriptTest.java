package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * config/register-connector.sh (the docker-compose path) against a stand-in for the Connect REST
 * API on loopback: it PUTs the config file unchanged to the connector's config path, and fails,
 * showing the worker's message, on an error answer. Needs sh and curl; skipped without them.
 */
class RegisterConnectorScriptTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Path REPO =
      Path.of(System.getProperty("relaybus.readme", "../README.md")).toAbsolutePath().getParent();

  private final List<String> requests = new CopyOnWriteArrayList<>();
  private HttpServer server;
  private volatile int putStatus = 201;
  private volatile String putBody = "";
  private volatile String putContentType = "";

  @BeforeEach
  void startStandIn() throws IOException {
    assumeTrue(onPath("sh") && onPath("curl"), "sh and curl are needed to run the script");
    server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
    server.createContext(
        "/connector-plugins",
        ex ->
            answer(
                ex,
                200,
                "[{\"class\":\"io.relaybus.connect.OutboxSourceConnector\",\"type\":\"source\"}]"));
    server.createContext(
        "/connectors/",
        ex -> {
          requests.add(ex.getRequestMethod() + " " + ex.getRequestURI().getPath());
          if (ex.getRequestMethod().equals("PUT")) {
            putBody = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            putContentType = ex.getRequestHeaders().getFirst("Content-Type");
            answer(
                ex,
                putStatus,
                putStatus == 201
                    ? "{\"name\":\"relaybus-outbox\"}"
                    : "{\"error_code\":400,\"message\":\"Connector configuration is invalid and"
                        + " contains the following 1 error(s):\\nconnection.url: cannot connect\"}");
          } else {
            answer(ex, 200, "{\"connector\":{\"state\":\"RUNNING\"}}");
          }
        });
    server.start();
  }

  @AfterEach
  void stopStandIn() {
    if (server != null) {
      server.stop(0);
    }
  }

  @Test
  void putsTheConfigFileUnchangedAsRelaybusOutbox() throws Exception {
    Result result = runScript();

    assertThat(result.exitCode).as(result.output).isZero();
    assertThat(requests)
        .containsExactly(
            "PUT /connectors/relaybus-outbox/config", "GET /connectors/relaybus-outbox/status");
    assertThat(putContentType).isEqualTo("application/json");
    assertThat(putBody)
        .isEqualTo(Files.readString(REPO.resolve("config/postgres-outbox-source.json")));
    assertThat(JSON.readTree(putBody).path("connector.class").asText())
        .isEqualTo("io.relaybus.connect.OutboxSourceConnector");
    assertThat(result.output).contains("\"state\":\"RUNNING\"");
  }

  @Test
  void refusedConfigFailsAndShowsTheWorkersMessage() throws Exception {
    putStatus = 400;

    Result result = runScript();

    assertThat(result.exitCode).isEqualTo(1);
    assertThat(result.output)
        .contains("connection.url: cannot connect")
        .contains("the worker answered HTTP 400");
    assertThat(requests).containsExactly("PUT /connectors/relaybus-outbox/config");
  }

  private record Result(int exitCode, String output) {}

  private Result runScript() throws Exception {
    ProcessBuilder builder =
        new ProcessBuilder("sh", REPO.resolve("config/register-connector.sh").toString())
            .directory(REPO.toFile())
            .redirectErrorStream(true);
    builder.environment().put("CONNECT_URL", "http://127.0.0.1:" + server.getAddress().getPort());
    builder.environment().put("WAIT_SECONDS", "10");
    Process process = builder.start();
    String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertThat(process.waitFor(30, TimeUnit.SECONDS)).isTrue();
    return new Result(process.exitValue(), output);
  }

  private static void answer(HttpExchange exchange, int status, String body) throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().add("Content-Type", "application/json");
    exchange.sendResponseHeaders(status, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }

  private static boolean onPath(String command) {
    for (String dir : System.getenv().getOrDefault("PATH", "").split(java.io.File.pathSeparator)) {
      if (Files.isExecutable(Path.of(dir, command))) {
        return true;
      }
    }
    return false;
  }
}
