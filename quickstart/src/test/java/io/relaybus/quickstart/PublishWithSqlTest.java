package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.tuple;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The README's SQL statement for applications in other languages, run as the README prints it
 * against the real schema: the Java store then claims what it wrote on the right lane with the
 * right sequence, and Java and SQL publishers share one sequence per key.
 */
class PublishWithSqlTest {
  private static EmbeddedPostgres postgres;
  private static PostgresOutboxStore store;
  private static String statement;
  private static List<Integer> parameterOrder;

  @BeforeAll
  static void start() throws Exception {
    postgres = EmbeddedPostgres.builder().start();
    store =
        PostgresOutboxStore.builder()
            .jdbcUrl("jdbc:postgresql://localhost:" + postgres.getPort() + "/postgres")
            .user("postgres")
            .poolSize(4)
            .build();
    store.setup();
    String sql = readmeStatement();
    // $n placeholders (PostgreSQL's own, as most drivers take them) to JDBC's ? in order.
    parameterOrder = new ArrayList<>();
    Matcher m = Pattern.compile("\\$(\\d+)").matcher(sql);
    StringBuilder jdbc = new StringBuilder();
    while (m.find()) {
      parameterOrder.add(Integer.parseInt(m.group(1)));
      m.appendReplacement(jdbc, "?");
    }
    m.appendTail(jdbc);
    statement = jdbc.toString();
  }

  @AfterAll
  static void stop() throws Exception {
    if (store != null) {
      store.close();
    }
    if (postgres != null) {
      postgres.close();
    }
  }

  @Test
  void sqlPublishIsClaimedOnTheKeysLaneWithTheKeysSequenceSharedWithJava() throws Exception {
    String key = "order-" + UUID.randomUUID();
    String first = key + "-placed";
    String third = key + "-shipped";

    assertThat(publishWithSql(first, key, List.of("billing", "shipping"))).isEqualTo(2);
    store.publish(
        OutboxEvent.builder("order.paid")
            .id(key + "-paid")
            .key(key)
            .json("{}")
            .handlers("billing")
            .build());
    assertThat(publishWithSql(third, key, List.of("billing"))).isEqualTo(1);

    List<ClaimedDelivery> claimed = claimLane(Lanes.laneOf(key, first));
    List<ClaimedDelivery> ofKey = claimed.stream().filter(c -> key.equals(c.key())).toList();
    assertThat(ofKey)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler, ClaimedDelivery::sequence)
        .containsExactlyInAnyOrder(
            tuple(first, "billing", 1L),
            tuple(first, "shipping", 1L),
            tuple(key + "-paid", "billing", 2L),
            tuple(third, "billing", 3L));
    ClaimedDelivery placed =
        ofKey.stream().filter(c -> c.eventId().equals(first)).findFirst().orElseThrow();
    assertThat(placed.type()).isEqualTo("order.placed");
    assertThat(placed.contentType()).isEqualTo("application/json");
    assertThat(new String(placed.payload(), StandardCharsets.UTF_8))
        .isEqualTo("{\"order\":\"" + key + "\"}");
    assertThat(placed.headers()).containsExactly(Map.entry("traceparent", "00-abc-01"));
    assertThat(placed.lane()).isEqualTo(Lanes.laneOf(key, first));
  }

  @Test
  void publishingAnIdAgainAddsNothingAndTakesNoSequence() throws Exception {
    String key = "order-" + UUID.randomUUID();
    String id = key + "-paid";

    assertThat(publishWithSql(id, key, List.of("billing"))).isEqualTo(1);
    assertThat(publishWithSql(id, key, List.of("billing"))).isZero();
    assertThat(publishWithSql(key + "-shipped", key, List.of("billing"))).isEqualTo(1);

    assertThat(claimLane(Lanes.laneOf(key, id)).stream().filter(c -> key.equals(c.key())))
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::sequence)
        .containsExactly(tuple(id, 1L), tuple(key + "-shipped", 2L));
  }

  @Test
  void eventWithoutKeyGoesToTheLaneOfItsIdWithoutSequence() throws Exception {
    String id = "audit-" + UUID.randomUUID();

    assertThat(publishWithSql(id, null, List.of("audit"))).isEqualTo(1);

    assertThat(claimLane(Lanes.laneOf(null, id)).stream().filter(c -> id.equals(c.eventId())))
        .singleElement()
        .satisfies(
            c -> {
              assertThat(c.key()).isNull();
              assertThat(c.sequence()).isNull();
              assertThat(c.handler()).isEqualTo("audit");
            });
  }

  @Test
  void rolledBackTransactionLeavesNothing() throws Exception {
    String key = "order-" + UUID.randomUUID();
    try (Connection tx = postgres.getPostgresDatabase().getConnection()) {
      tx.setAutoCommit(false);
      assertThat(execute(tx, key + "-placed", key, List.of("billing"))).isEqualTo(1);
      tx.rollback();
    }

    assertThat(publishWithSql(key + "-placed", key, List.of("billing"))).isEqualTo(1);
    assertThat(claimLane(Lanes.laneOf(key, key)).stream().filter(c -> key.equals(c.key())))
        .extracting(ClaimedDelivery::sequence)
        .containsExactly(1L);
  }

  /**
   * The key's counter row stays locked until the publisher commits: a second publisher of the same
   * key waits, so sequence order is commit order.
   */
  @Test
  void secondPublisherOfAKeyWaitsForTheFirstToCommit() throws Exception {
    String key = "order-" + UUID.randomUUID();
    try (Connection first = postgres.getPostgresDatabase().getConnection();
        Connection second = postgres.getPostgresDatabase().getConnection()) {
      first.setAutoCommit(false);
      second.setAutoCommit(false);
      execute(first, key + "-a", key, List.of("billing"));
      try (var lockTimeout = second.createStatement()) {
        lockTimeout.execute("SET LOCAL lock_timeout = '300ms'");
      }

      assertThatThrownBy(() -> execute(second, key + "-b", key, List.of("billing")))
          .isInstanceOf(SQLException.class)
          .hasMessageContaining("lock timeout");
      second.rollback();
      first.commit();
    }
  }

  private static int publishWithSql(String id, String key, List<String> handlers)
      throws SQLException {
    try (Connection tx = postgres.getPostgresDatabase().getConnection()) {
      tx.setAutoCommit(false);
      int inserted = execute(tx, id, key, handlers);
      tx.commit();
      return inserted;
    }
  }

  /** The README's statement with the README's parameters: $1 id ... $7 handlers. */
  private static int execute(Connection tx, String id, String key, List<String> handlers)
      throws SQLException {
    Object[] values = {
      id,
      id.endsWith("-placed") ? "order.placed" : "order.event",
      key,
      ("{\"order\":\"" + key + "\"}").getBytes(StandardCharsets.UTF_8),
      "application/json",
      "{\"traceparent\":\"00-abc-01\"}",
      tx.createArrayOf("text", handlers.toArray())
    };
    try (PreparedStatement ps = tx.prepareStatement(statement)) {
      for (int i = 0; i < parameterOrder.size(); i++) {
        ps.setObject(i + 1, values[parameterOrder.get(i) - 1]);
      }
      return ps.executeUpdate();
    }
  }

  private static List<ClaimedDelivery> claimLane(int lane) {
    String owner = "test-" + UUID.randomUUID();
    List<LaneLease> leases =
        store.acquireLanes(owner, owner, List.of(lane), Duration.ofSeconds(30));
    assertThat(leases).hasSize(1);
    try {
      List<ClaimedDelivery> claimed = new ArrayList<>(store.claim(owner, leases, 1000));
      claimed.sort(
          Comparator.comparing((ClaimedDelivery c) -> String.valueOf(c.key()))
              .thenComparing(c -> c.sequence() == null ? 0L : c.sequence())
              .thenComparing(ClaimedDelivery::handler));
      return claimed;
    } finally {
      store.relinquishLanes(owner, leases); // hands the claimed deliveries back
    }
  }

  /** The one ```sql block of the README that inserts into relaybus_events. */
  static String readmeStatement() throws Exception {
    String readme =
        Files.readString(Path.of(System.getProperty("relaybus.readme", "../README.md")));
    Matcher block = Pattern.compile("```sql\\n(.*?)```", Pattern.DOTALL).matcher(readme);
    List<String> found = new ArrayList<>();
    while (block.find()) {
      if (block.group(1).contains("INSERT INTO relaybus_events")) {
        found.add(block.group(1));
      }
    }
    assertThat(found).as("the README's SQL publishing statement").hasSize(1);
    return found.get(0);
  }
}
