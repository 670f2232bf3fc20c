package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeadLetterFilter;
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
 * {@code requeue} needs exactly one deliberate selection. {@code --reason ""} (a script's unset
 * variable: {@code --reason "$REASON"}) is not a filter: it must be refused as bad usage, as {@code
 * --handler ""} is, not turned into {@code --all}.
 */
class RequeueRefusesAnEmptyFilterValueTest {
  private PostgresOutboxStore store;
  private String prefix;

  @BeforeEach
  void createOutbox() {
    prefix = "rq" + UUID.randomUUID().toString().substring(0, 8) + "_";
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
  void anEmptyReasonIsAUsageErrorAndRequeuesNothing() {
    for (String id : List.of("s1", "s2", "a1")) {
      store.publish(
          OutboxEvent.builder("order.placed")
              .id(id)
              .payload(id.getBytes(StandardCharsets.UTF_8), "text/plain")
              .handlers(id.startsWith("s") ? "shipping" : "audit")
              .build());
    }
    List<LaneLease> leases =
        store.acquireLanes(
            "task-0", "conn", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(5));
    for (ClaimedDelivery d : store.claim("task-0", leases, 10)) {
      store.bury(d.token(), d.eventId().startsWith("s") ? "HTTP 503" : "schema mismatch");
    }
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);

    CliRunner.Result emptyHandler = cli("requeue", "--handler", "", "--yes");
    CliRunner.Result emptyReason = cli("requeue", "--reason", "", "--yes");

    assertThat(emptyHandler.exit()).as("--handler ''").isEqualTo(AdminCli.USAGE);
    assertThat(emptyReason.out() + emptyReason.err())
        .as("--reason '': exit %d", emptyReason.exit())
        .doesNotContain("requeued");
    assertThat(emptyReason.exit()).as("--reason ''").isEqualTo(AdminCli.USAGE);
    assertThat(emptyReason.err()).contains("--reason");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);
  }
}
