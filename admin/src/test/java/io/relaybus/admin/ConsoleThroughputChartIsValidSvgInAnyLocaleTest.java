package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The overview's throughput chart is SVG: its coordinates must be SVG numbers ({@code 12.5}),
 * whatever the JVM's default locale (a console started on a German or French machine writes {@code
 * 12,5}, which browsers reject, and the bars are drawn wrong or not at all).
 */
class ConsoleThroughputChartIsValidSvgInAnyLocaleTest {
  private static final Pattern RECT =
      Pattern.compile("<rect x='([^']*)' y='([^']*)' width='([^']*)' height='([^']*)'/>");

  private PostgresOutboxStore store;
  private Console console;
  private Locale saved;

  @BeforeEach
  void start() throws Exception {
    saved = Locale.getDefault();
    store =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix("loc" + UUID.randomUUID().toString().substring(0, 8) + "_")
            .build();
    store.setup();
  }

  @AfterEach
  void stop() {
    Locale.setDefault(saved);
    if (console != null) {
      console.close();
    }
    store.close();
  }

  @Test
  void chartCoordinatesAreSvgNumbersUnderAGermanLocale() throws Exception {
    Locale.setDefault(Locale.GERMANY);
    console =
        Console.start(
            new StoreConnection.Opened(store, Optional.of(new PostgresHealth(store)), "PostgreSQL"),
            "127.0.0.1",
            0,
            null,
            Duration.ofMillis(100),
            Duration.ofMinutes(5));
    long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
    while (console.samples().size() < 4 && System.nanoTime() < deadline) {
      Thread.sleep(50);
    }
    assertThat(console.samples().size()).isGreaterThanOrEqualTo(4);

    HttpResponse<String> page =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + console.port() + "/"))
                    .build(),
                HttpResponse.BodyHandlers.ofString());

    assertThat(page.statusCode()).isEqualTo(200);
    Matcher m = RECT.matcher(page.body());
    List<String> values = new ArrayList<>();
    while (m.find()) {
      for (int g = 1; g <= 4; g++) {
        values.add(m.group(g));
      }
    }
    assertThat(values).as("rect attributes of the chart").isNotEmpty();
    assertThat(values)
        .as("rect attributes of the chart")
        .allMatch(v -> v.matches("-?\\d+(\\.\\d+)?"), "are SVG numbers");
  }
}
