package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.testing.MongoServers;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The same commands against MongoDB (the in-process server: no transactions needed here). */
class MongoAdminCliTest {
  private MongoOutboxStore store;
  private String url;

  @BeforeEach
  void createOutbox() {
    String db = "cli" + UUID.randomUUID().toString().substring(0, 8);
    url = MongoServers.inProcess().uri() + "/" + db;
    store = MongoOutboxStore.builder().connectionString(url).database(db).build();
    store.setup();
  }

  @AfterEach
  void closeStore() {
    store.close();
  }

  private CliRunner.Result cli(String stdin, String... args) {
    String[] all = java.util.Arrays.copyOf(args, args.length + 2);
    all[args.length] = "--url";
    all[args.length + 1] = url;
    return CliRunner.run(stdin, all);
  }

  private static OutboxEvent event(String id, String handler) {
    return OutboxEvent.builder("order.placed")
        .id(id)
        .payload(id.getBytes(StandardCharsets.UTF_8), "text/plain")
        .handlers(handler)
        .build();
  }

  @Test
  void statsDeadRequeueAndLanesWorkOnMongo() throws Exception {
    store.publishAll(List.of(event("a", "billing"), event("b", "billing"), event("c", "audit")));
    var leases =
        store.acquireLanes(
            "task-0", "conn", IntStream.range(0, 256).boxed().toList(), Duration.ofMinutes(5));
    for (ClaimedDelivery d : store.claim("task-0", leases, 10)) {
      if (!d.eventId().equals("a")) {
        store.bury(d.token(), "HTTP 500 on " + d.eventId());
      }
    }

    JsonNode stats = Text.JSON.readTree(cli("", "stats", "--json").out());
    assertThat(stats.get("store").asText()).isEqualTo("MongoDB");
    assertThat(stats.get("total").get("pending").asLong()).isEqualTo(1);
    assertThat(stats.get("total").get("inFlight").asLong()).isEqualTo(1);
    assertThat(stats.get("total").get("dead").asLong()).isEqualTo(2);

    JsonNode dead = Text.JSON.readTree(cli("", "dead", "--handler", "audit", "--json").out());
    assertThat(dead.get("total").asLong()).isEqualTo(1);
    assertThat(dead.get("items").get(0).get("reason").asText()).isEqualTo("HTTP 500 on c");
    assertThat(dead.get("items").get(0).get("eventType").asText()).isEqualTo("order.placed");

    CliRunner.Result dry = cli("", "requeue", "--reason", "http", "--dry-run");
    assertThat(dry.out())
        .endsWith(
            "dry run: would requeue 2 dead letters (reason containing 'http'); nothing changed\n");
    CliRunner.Result requeue = cli("y\n", "requeue", "--reason", "http");
    assertThat(requeue.exit()).isZero();
    assertThat(requeue.out()).isEqualTo("requeued 2 dead letters\n");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isZero();

    CliRunner.Result lanes = cli("", "lanes");
    assertThat(lanes.out()).contains("task-0 holds 256 lanes: 0-255\n", "unowned: 0 lanes: none\n");

    CliRunner.Result health = cli("", "health");
    assertThat(health.exit()).isZero();
    assertThat(health.out()).startsWith("not applicable to MongoDB");
  }
}
