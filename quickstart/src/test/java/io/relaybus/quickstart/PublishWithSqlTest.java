package io.relaybus.quickstart;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.tuple;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

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
import java.sql.ResultSet;
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
 * The README's SQL block for applications in other languages, run as the README prints it with
 * {@code psql}, and with its values swapped for parameters as a driver sends them, against the real
 * schema: the Java store then claims what it wrote on the right lane with the right sequence, and
 * Java and SQL publishers share one sequence per key.
 */
class PublishWithSqlTest {
  private static EmbeddedPostgres postgres;
  private static PostgresOutboxStore store;
  private static String statement;

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
    statement = parameterized(selectStatement(readmeStatement()));
  }

  /** The README's values, each swapped for the parameter a driver binds ($1 id ... $7 handlers). */
  private static final List<String> README_VALUES =
      List.of(
          "'order-42-paid'",
          "'order.paid'",
          "'order-42'",
          "convert_to('{\"order\":42}', 'UTF8')",
          "'application/json'",
          "'{\"traceparent\":\"00-abc-01\"}'",
          "ARRAY['billing', 'shipping']");

  private static final List<String> PARAMETERS =
      List.of("?", "?", "?", "?::bytea", "?", "?::json", "?::text[]");

  /** The block's SELECT (what an application sends), without the psql session around it. */
  static String selectStatement(String block) {
    Matcher select =
        Pattern.compile("(?s)(SELECT \\* FROM relaybus_publish\\(.*?\\));").matcher(block);
    assertThat(select.find()).as("the README block's SELECT").isTrue();
    return select.group(1).replaceAll("--[^\n]*", "");
  }

  private static String parameterized(String select) {
    String sql = select;
    for (int i = 0; i < README_VALUES.size(); i++) {
      String value = README_VALUES.get(i);
      assertThat(sql.indexOf(value)).as("the README's value %s", value).isNotNegative();
      assertThat(sql.indexOf(value)).isEqualTo(sql.lastIndexOf(value));
      sql = sql.replace(value, PARAMETERS.get(i));
    }
    assertThat(sql).doesNotContain("'");
    return sql;
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
    // In sequence order (claimLane sorts by key, sequence, handler): one sequence per event.
    assertThat(ofKey)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler)
        .containsExactly(
            tuple(first, "billing"),
            tuple(first, "shipping"),
            tuple(key + "-paid", "billing"),
            tuple(third, "billing"));
    assertSequencesRiseByEvent(ofKey);
    ClaimedDelivery placed =
        ofKey.stream().filter(c -> c.eventId().equals(first)).findFirst().orElseThrow();
    assertThat(placed.type()).isEqualTo("order.placed");
    assertThat(placed.contentType()).isEqualTo("application/json");
    assertThat(new String(placed.payload(), StandardCharsets.UTF_8))
        .isEqualTo("{\"order\":\"" + key + "\"}");
    assertThat(placed.headers()).containsExactly(Map.entry("traceparent", "00-abc-01"));
    assertThat(placed.lane()).isEqualTo(Lanes.laneOf(key, first));
  }

  /**
   * The block as printed, pasted into psql: it prints the README's output, and the store claims it.
   */
  @Test
  void theReadmeBlockRunsInPsqlAsPrinted() throws Exception {
    Path psql = Path.of(System.getProperty("relaybus.psql", "/usr/bin/psql"));
    assumeTrue(Files.isExecutable(psql), "needs the psql client at " + psql + " (-Drelaybus.psql)");
    Path script = Files.createTempFile("readme", ".sql");
    Files.writeString(script, readmeStatement());
    Process session =
        new ProcessBuilder(
                psql.toString(),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                "postgresql://postgres@localhost:" + postgres.getPort() + "/postgres",
                "-f",
                script.toString())
            .start();
    String out = new String(session.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    String err = new String(session.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
    assertThat(session.waitFor()).as(err).isZero();
    Files.delete(script);
    assertThat(out.strip().replaceAll(" +\n", "\n"))
        .isEqualTo(readmeOutput().strip().replaceAll(" +\n", "\n"));

    List<ClaimedDelivery> ofKey =
        claimLane(Lanes.laneOf("order-42", "order-42-paid")).stream()
            .filter(c -> "order-42".equals(c.key()))
            .toList();
    assertThat(ofKey)
        .extracting(
            ClaimedDelivery::eventId,
            ClaimedDelivery::type,
            ClaimedDelivery::handler,
            c -> new String(c.payload(), StandardCharsets.UTF_8),
            ClaimedDelivery::headers)
        .containsExactly(
            tuple(
                "order-42-paid",
                "order.paid",
                "billing",
                "{\"order\":42}",
                Map.of("traceparent", "00-abc-01")),
            tuple(
                "order-42-paid",
                "order.paid",
                "shipping",
                "{\"order\":42}",
                Map.of("traceparent", "00-abc-01")));
    assertSequencesRiseByEvent(ofKey); // both handlers: the event's one sequence
  }

  @Test
  void republishingAnIdAddsTheHandlersItLacksInTheKeysNextSequence() throws Exception {
    String key = "order-" + UUID.randomUUID();
    String id = key + "-paid";

    assertThat(publishWithSql(id, key, List.of("billing"))).isEqualTo(1);
    assertThat(publishWithSql(id, key, List.of("billing", "shipping"))).isEqualTo(1);
    store.publish(
        OutboxEvent.builder("order.shipped")
            .id(key + "-shipped")
            .key(key)
            .json("{}")
            .handlers("shipping")
            .build());

    List<ClaimedDelivery> ofKey =
        claimLane(Lanes.laneOf(key, id)).stream().filter(c -> key.equals(c.key())).toList();
    assertThat(ofKey)
        .extracting(ClaimedDelivery::eventId, ClaimedDelivery::handler)
        .containsExactly(
            tuple(id, "billing"), tuple(id, "shipping"), tuple(key + "-shipped", "shipping"));
    // The handler the republish added sorts after billing and before the later event: its own.
    assertThat(ofKey)
        .extracting(ClaimedDelivery::sequence)
        .doesNotContainNull()
        .isSortedAccordingTo(Long::compare)
        .doesNotHaveDuplicates();
  }

  @Test
  void publishingAnIdAgainAddsNothing() throws Exception {
    String key = "order-" + UUID.randomUUID();
    String id = key + "-paid";

    assertThat(publishWithSql(id, key, List.of("billing"))).isEqualTo(1);
    assertThat(publishWithSql(id, key, List.of("billing"))).isZero();
    assertThat(publishWithSql(key + "-shipped", key, List.of("billing"))).isEqualTo(1);

    List<ClaimedDelivery> ofKey =
        claimLane(Lanes.laneOf(key, id)).stream().filter(c -> key.equals(c.key())).toList();
    assertThat(ofKey).extracting(ClaimedDelivery::eventId).containsExactly(id, key + "-shipped");
    assertSequencesRiseByEvent(ofKey);
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
        .singleElement()
        .satisfies(
            c -> {
              assertThat(c.eventId()).isEqualTo(key + "-placed");
              assertThat(c.sequence()).isNotNull().isPositive();
            });
  }

  /**
   * The key's lock is held until the publisher commits: a second publisher of the same key waits,
   * so sequence order is commit order.
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

  /**
   * The quickstart's "Try:" query counts what the store counts: the log's pending handlers, the
   * delivery rows that left it (a retry) once, and the dead letters.
   */
  @Test
  void theQuickstartsDeliveriesQueryCountsLikeTheStatistics() throws Exception {
    String key = "order-" + UUID.randomUUID();
    String handler = "h" + UUID.randomUUID().toString().substring(0, 8);
    String other = handler + "-2";
    String third = handler + "-3";
    for (String step : List.of("-placed", "-paid", "-shipped")) {
      store.publish(
          OutboxEvent.builder("order.event")
              .id(key + step)
              .key(key)
              .json("{}")
              .handlers(handler, other, third)
              .build());
    }
    int lane = Lanes.laneOf(key, key);
    String owner = "test-" + UUID.randomUUID();
    List<LaneLease> leases =
        store.acquireLanes(owner, owner, List.of(lane), Duration.ofSeconds(30));
    List<ClaimedDelivery> placed =
        store.claim(owner, leases, 1000).stream()
            .filter(c -> c.eventId().equals(key + "-placed"))
            .toList();
    for (ClaimedDelivery c : placed) {
      if (c.handler().equals(handler)) {
        assertThat(store.bury(c.token(), "test: dead")).isTrue(); // dead: a row of deliveries
      } else if (c.handler().equals(other)) {
        store.reschedule(c.token(), "test: retry"); // a retry: a row of deliveries
      } else {
        assertThat(store.complete(List.of(c.token()))).hasSize(1); // struck from the log row
      }
    }
    store.relinquishLanes(owner, leases);

    Map<String, Map<String, Long>> counted = new java.util.TreeMap<>();
    try (Connection connection = postgres.getPostgresDatabase().getConnection();
        var query = connection.createStatement();
        ResultSet rs = query.executeQuery(Quickstart.DELIVERIES_SQL)) {
      while (rs.next()) {
        counted
            .computeIfAbsent(rs.getString(1), h -> new java.util.TreeMap<>())
            .put(rs.getString(2), rs.getLong(3));
      }
    }
    assertThat(counted.get(handler)).isEqualTo(Map.of("dead", 1L, "pending", 2L));
    assertThat(counted.get(other)).isEqualTo(Map.of("pending", 3L));
    assertThat(counted.get(third)).isEqualTo(Map.of("pending", 2L));
    store
        .statistics()
        .handlers()
        .forEach(
            (h, c) -> {
              Map<String, Long> row = counted.getOrDefault(h, Map.of());
              assertThat(row.getOrDefault("pending", 0L)).as(h + " pending").isEqualTo(c.pending());
              assertThat(row.getOrDefault("dead", 0L)).as(h + " dead").isEqualTo(c.dead());
            });
  }

  /**
   * Deliveries of one key, in claim order: a sequence on each, the same for the handlers of one
   * event, and strictly rising from event to event. Sequences are log ids (storage v2): rising per
   * key in commit order, not consecutive, so only their order is asserted.
   */
  private static void assertSequencesRiseByEvent(List<ClaimedDelivery> ofKey) {
    assertThat(ofKey).isNotEmpty().allSatisfy(c -> assertThat(c.sequence()).isNotNull());
    for (int i = 1; i < ofKey.size(); i++) {
      ClaimedDelivery before = ofKey.get(i - 1);
      ClaimedDelivery after = ofKey.get(i);
      if (after.eventId().equals(before.eventId())) {
        assertThat(after.sequence())
            .as(after.eventId() + "/" + after.handler())
            .isEqualTo(before.sequence());
      } else {
        assertThat(after.sequence())
            .as(after.eventId() + " after " + before.eventId())
            .isGreaterThan(before.sequence());
      }
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

  /**
   * The README's statement with parameters instead of its values: $1 id ... $7 handlers. Returns
   * the number of handlers it added deliveries for.
   */
  private static int execute(Connection tx, String id, String key, List<String> handlers)
      throws SQLException {
    try (PreparedStatement ps = tx.prepareStatement(statement)) {
      ps.setString(1, id);
      ps.setString(2, id.endsWith("-placed") ? "order.placed" : "order.event");
      ps.setString(3, key);
      ps.setBytes(4, ("{\"order\":\"" + key + "\"}").getBytes(StandardCharsets.UTF_8));
      ps.setString(5, "application/json");
      ps.setString(6, "{\"traceparent\":\"00-abc-01\"}");
      ps.setArray(7, tx.createArrayOf("text", handlers.toArray()));
      try (ResultSet rs = ps.executeQuery()) {
        assertThat(rs.next()).isTrue();
        return ((String[]) rs.getArray("added_handlers").getArray()).length;
      }
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

  /** The README's block after the SQL publishing block: what psql prints for it. */
  static String readmeOutput() throws Exception {
    String readme =
        Files.readString(Path.of(System.getProperty("relaybus.readme", "../README.md")));
    Matcher block =
        Pattern.compile(
                "```sql\\n[^`]*?SELECT \\* FROM relaybus_publish\\([^`]*```\\s*```\\n(.*?)```",
                Pattern.DOTALL)
            .matcher(readme);
    assertThat(block.find()).as("the README's psql output after the SQL block").isTrue();
    return block.group(1);
  }

  /** The one ```sql block of the README that calls relaybus_publish. */
  static String readmeStatement() throws Exception {
    String readme =
        Files.readString(Path.of(System.getProperty("relaybus.readme", "../README.md")));
    Matcher block = Pattern.compile("```sql\\n(.*?)```", Pattern.DOTALL).matcher(readme);
    List<String> found = new ArrayList<>();
    while (block.find()) {
      if (block.group(1).contains("SELECT * FROM relaybus_publish(")) {
        found.add(block.group(1));
      }
    }
    assertThat(found).as("the README's SQL publishing statement").hasSize(1);
    return found.get(0);
  }
}
