package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The packaged jar as an operator runs it: {@code java -jar relaybus-admin.jar ...}. */
class AdminJarIT {
  private static final Path JAR = Path.of("target", "relaybus-admin.jar");

  private static Process start(String... args) throws Exception {
    return start(java.util.Map.of(), args);
  }

  private static Process start(java.util.Map<String, String> env, String... args) throws Exception {
    List<String> command = new ArrayList<>();
    command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
    command.add("-jar");
    command.add(JAR.toString());
    command.addAll(List.of(args));
    ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
    builder.environment().putAll(env);
    return builder.start();
  }

  private static String runToEnd(Process p) throws Exception {
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertThat(p.waitFor(120, TimeUnit.SECONDS)).isTrue();
    return out;
  }

  @Test
  void theJarRunsCommandsAndServesTheConsole() throws Exception {
    assertThat(JAR).exists();
    Process help = start("--help");
    assertThat(runToEnd(help)).contains("Usage: relaybus-admin", "serve");
    assertThat(help.exitValue()).isZero();

    try (PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix("jarit_")
            .build()) {
      store.setup();
      store.publish(
          OutboxEvent.builder("t")
              .id("e1")
              .payload(new byte[] {1}, "application/octet-stream")
              .handlers("h")
              .build());
      String url = EmbeddedPostgres17.jdbcUrl();

      // the database from the environment, as a script would give it
      Process stats =
          start(java.util.Map.of("RELAYBUS_URL", url), "stats", "--prefix", "jarit_", "--json");
      String json = runToEnd(stats);
      assertThat(stats.exitValue()).as(json).isZero();
      assertThat(Text.JSON.readTree(json).get("total").get("pending").asLong()).isEqualTo(1);

      Process refused =
          start(
              java.util.Map.of(
                  "RELAYBUS_URL",
                  "jdbc:postgresql://127.0.0.1:1/none?connectTimeout=2",
                  "RELAYBUS_USER",
                  "ops",
                  "RELAYBUS_PASSWORD",
                  "env-s3cret"),
              "stats");
      String refusal = runToEnd(refused);
      assertThat(refused.exitValue()).as(refusal).isEqualTo(1);
      assertThat(refusal).contains("error: ").doesNotContain("env-s3cret");

      Process serve = start("serve", "--url", url, "--prefix", "jarit_", "--port", "0");
      try {
        BufferedReader lines =
            new BufferedReader(
                new InputStreamReader(serve.getInputStream(), StandardCharsets.UTF_8));
        String first = lines.readLine();
        assertThat(first)
            .startsWith("relaybus console at http://127.0.0.1:")
            .endsWith("(PostgreSQL, read-only)");
        String address = first.substring("relaybus console at ".length(), first.indexOf(' ', 20));
        HttpResponse<String> page =
            HttpClient.newHttpClient()
                .send(
                    HttpRequest.newBuilder(URI.create(address)).build(),
                    HttpResponse.BodyHandlers.ofString());
        assertThat(page.statusCode()).isEqualTo(200);
        assertThat(page.body()).contains("Backlog per handler", "read-only");
      } finally {
        serve.destroy();
        serve.waitFor(30, TimeUnit.SECONDS);
      }
    }
  }
}
