package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A dead letter's reason is text from outside (an exception message that may quote a payload): the
 * console escapes it as HTML, and the command line must not hand its control characters (ESC, BEL,
 * backspace) to the operator's terminal, where they rewrite the screen, the window title or the
 * lines above.
 */
class DeadLetterReasonsCannotDriveTheOperatorsTerminalTest {
  private static final String HOSTILE =
      "HTTP 500\u001b]0;owned\u0007\u001b[2J\u001b[Hall clear\b\b\b\u009b31m";

  private PostgresOutboxStore store;
  private String prefix;

  @BeforeEach
  void createOutbox() {
    prefix = "tt" + UUID.randomUUID().toString().substring(0, 8) + "_";
    store =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix(prefix)
            .retryPolicy(new RetryPolicy(10, Duration.ofHours(1), Duration.ofHours(1), 0))
            .build();
    store.setup();
  }

  @AfterEach
  void closeStore() {
    store.close();
  }

  private CliRunner.Result cli(String... args) {
    List<String> all = new ArrayList<>(List.of(args));
    all.addAll(List.of("--url", EmbeddedPostgres17.jdbcUrl(), "--prefix", prefix));
    return CliRunner.run("", all.toArray(String[]::new));
  }

  @Test
  void deadAndRequeuePreviewPrintNoControlCharacters() {
    store.publish(
        OutboxEvent.builder("order.placed")
            .id("e1")
            .payload("p".getBytes(StandardCharsets.UTF_8), "text/plain")
            .handlers("shipping")
            .build());
    List<LaneLease> leases =
        store.acquireLanes(
            "task-0", "conn", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(5));
    List<ClaimedDelivery> batch = store.claim("task-0", leases, 10);
    assertThat(batch).hasSize(1);
    store.bury(batch.get(0).token(), HOSTILE);

    CliRunner.Result dead = cli("dead");
    CliRunner.Result preview = cli("requeue", "--all", "--dry-run");

    assertThat(dead.exit()).isZero();
    assertThat(dead.out()).contains("HTTP 500");
    assertThat(dead.out())
        .as("dead: characters a terminal interprets")
        .doesNotContainPattern("[\\x00-\\x09\\x0B-\\x1F\\x7F-\\x9F]");
    assertThat(preview.exit()).isZero();
    assertThat(preview.out())
        .as("requeue --dry-run preview: characters a terminal interprets")
        .doesNotContainPattern("[\\x00-\\x09\\x0B-\\x1F\\x7F-\\x9F]");
  }
}
