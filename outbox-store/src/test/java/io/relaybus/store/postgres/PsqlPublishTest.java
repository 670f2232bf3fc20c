package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.testing.FirstColumn;
import io.relaybus.store.testing.PostgresServers;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The publish function from the real {@code psql} client, as an application in another language
 * would call it: concurrent sessions publishing one key get log ids in commit order, and the rows
 * are exactly those the Java publisher writes for the same calls in the same order. Skipped, with
 * the reason, where there is no {@code psql}.
 */
class PsqlPublishTest {
  private static final Path PSQL = Path.of(System.getProperty("relaybus.psql", "/usr/bin/psql"));
  private static final int SESSIONS = 4;
  private static final int EVENTS = 6;

  private static EmbeddedPostgres server;

  @BeforeAll
  static void start() {
    server = PostgresServers.embedded(PostgresServers.selectedMajor());
  }

  @Test
  void concurrentPsqlSessionsPublishingOneKeyGetItsSequenceInCommitOrderAsJavaWould()
      throws Exception {
    assumeTrue(Files.isExecutable(PSQL), "needs the psql client at " + PSQL + " (-Drelaybus.psql)");
    PostgresOutboxStore sql = store("psql_");
    PostgresOutboxStore java = store("java_");
    sql("CREATE TABLE IF NOT EXISTS fn.psql_commit_log (n bigserial, event_id text, handler text)");

    // Each session: its own events of key order-7 and a republish of one shared event with a
    // handler of its own, each transaction holding on a little after the publish.
    List<Process> sessions = new ArrayList<>();
    for (int s = 0; s < SESSIONS; s++) {
      StringBuilder script = new StringBuilder();
      for (int e = 0; e < EVENTS; e++) {
        String id = e == EVENTS / 2 ? "shared" : "s" + s + "-e" + e;
        String handlers = e == EVENTS / 2 ? "ARRAY['w" + s + "']" : "ARRAY['billing', 'audit']";
        script
            .append("BEGIN;\n")
            .append("SELECT new_event, added_handlers FROM fn.psql_publish('")
            .append(id)
            .append("', 'order.event', 'order-7', convert_to('{\"n\":")
            .append(e)
            .append("}', 'UTF8'), 'application/json', '{\"traceparent\":\"00-abc-01\"}', ")
            .append(handlers)
            .append(");\n")
            .append("SELECT pg_sleep(random() * 0.03);\n")
            .append("INSERT INTO fn.psql_commit_log (event_id, handler) VALUES ('")
            .append(id)
            .append("', ")
            .append(e == EVENTS / 2 ? "'w" + s + "'" : "NULL")
            .append(");\n")
            .append("COMMIT;\n");
      }
      sessions.add(psql(script.toString()));
    }
    for (Process session : sessions) {
      assertThat(session.waitFor(120, TimeUnit.SECONDS)).isTrue();
      assertThat(session.exitValue())
          .as(new String(session.getErrorStream().readAllBytes(), StandardCharsets.UTF_8))
          .isZero();
    }

    // Sequence order is commit order: the log row each transaction wrote just before its commit
    // has a greater id than every transaction that committed before it (ids, not consecutive
    // numbers: storage v2 numbers events from one sequence for the whole outbox).
    List<String> commitOrder = new ArrayList<>();
    try (Connection c = connection();
        Statement st = c.createStatement();
        ResultSet rs =
            st.executeQuery(
                "SELECT l.event_id, g.id FROM fn.psql_commit_log l JOIN fn.psql_log g"
                    + " ON g.event_id = l.event_id AND (l.handler IS NULL"
                    + " OR g.handlers = ARRAY[l.handler]) ORDER BY l.n")) {
      long previous = 0;
      while (rs.next()) {
        assertThat(rs.getLong(2))
            .as("log id of commit %d (%s)", commitOrder.size() + 1, rs.getString(1))
            .isGreaterThan(previous);
        previous = rs.getLong(2);
        commitOrder.add(rs.getString(1));
      }
      assertThat(commitOrder).hasSize(SESSIONS * EVENTS);
    }

    // The Java publisher, given the same calls in the same order, writes the same rows.
    List<String> handlersOfShared;
    try (Connection c = connection()) {
      handlersOfShared =
          FirstColumn.of(
              c, "SELECT handler FROM fn.psql_commit_log WHERE handler IS NOT NULL ORDER BY n");
    }
    int shared = 0;
    for (String id : commitOrder) {
      boolean isShared = id.equals("shared");
      String handler = isShared ? handlersOfShared.get(shared++) : null;
      int e = isShared ? EVENTS / 2 : Integer.parseInt(id.substring(id.indexOf("-e") + 2));
      OutboxEvent event =
          new OutboxEvent(
              id,
              "order.event",
              "order-7",
              ("{\"n\":" + e + "}").getBytes(StandardCharsets.UTF_8),
              "application/json",
              Map.of("traceparent", "00-abc-01"),
              isShared ? List.of(handler) : List.of("billing", "audit"));
      java.publish(event);
    }
    // one log row per publish (a republish: its added handler), in the same order; no delivery
    // row, no key-sequence row
    String log = "SELECT event_id, handlers, lane, key FROM fn.%slog ORDER BY id";
    List<String> viaPsql = query(log.formatted("psql_"));
    assertThat(viaPsql).hasSize(SESSIONS * EVENTS);
    assertThat(viaPsql).isEqualTo(query(log.formatted("java_")));
    assertThat(viaPsql)
        .allSatisfy(
            row -> assertThat(row).endsWith("|" + Lanes.laneOf("order-7", "x") + "|order-7"));
    for (String prefix : List.of("psql_", "java_")) {
      assertThat(query("SELECT count(*) FROM fn.%sdeliveries".formatted(prefix)))
          .containsExactly("0");
      assertThat(query("SELECT count(*) FROM fn.%skey_sequences".formatted(prefix)))
          .containsExactly("0");
    }
    String events =
        "SELECT id, type, key, payload, content_type, headers::jsonb, handlers FROM fn.%sevents ORDER BY id";
    assertThat(query(events.formatted("psql_"))).isEqualTo(query(events.formatted("java_")));
    assertThat(query("SELECT handlers FROM fn.psql_events WHERE id = 'shared'").get(0))
        .isEqualTo("{" + String.join(",", handlersOfShared) + "}");
    sql.close();
    java.close();
  }

  @Test
  void psqlGetsTheRuleTheArgumentBroke() throws Exception {
    assumeTrue(Files.isExecutable(PSQL), "needs the psql client at " + PSQL + " (-Drelaybus.psql)");
    store("bad_").close();
    Process session =
        psql(
            "SELECT * FROM fn.bad_publish('id-1', 'order.paid', 'order-1', '\\x', 'text/plain',"
                + " '{}', ARRAY['billing', 'no spaces']);\n");
    assertThat(session.waitFor(60, TimeUnit.SECONDS)).isTrue();
    assertThat(session.exitValue()).isEqualTo(3); // ON_ERROR_STOP: an error in the script
    assertThat(new String(session.getErrorStream().readAllBytes(), StandardCharsets.UTF_8))
        .contains(
            "ERROR:  handler must match [A-Za-z0-9._-]+ (it becomes part of a topic name), but was"
                + " 'no spaces'");
    assertThat(query("SELECT count(*) FROM fn.bad_events")).containsExactly("0");
  }

  /**
   * docs/outbox-store.md's timer example, as printed, in a database of its own with the default
   * schema and prefix: the first run arms the timer, the second extends it.
   */
  @Test
  void theDocsTimerExampleArmsThenExtends() throws Exception {
    assumeTrue(Files.isExecutable(PSQL), "needs the psql client at " + PSQL + " (-Drelaybus.psql)");
    String docs = Files.readString(Path.of("../docs/outbox-store.md"));
    java.util.regex.Matcher block =
        java.util.regex.Pattern.compile(
                "```sql\\n(BEGIN;\\nSELECT \\* FROM relaybus_schedule.*?)```",
                java.util.regex.Pattern.DOTALL)
            .matcher(docs);
    assertThat(block.find()).as("the docs' timer example").isTrue();
    sql("DROP DATABASE IF EXISTS docs");
    sql("CREATE DATABASE docs");
    try (PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(server.getJdbcUrl("postgres", "docs"))
            .poolSize(1)
            .build()) {
      store.setup();
      List<String> outcomes = new ArrayList<>();
      for (int run = 0; run < 2; run++) {
        Process session = psql("docs", block.group(1).replace("SELECT *", "SELECT outcome"), true);
        String out = new String(session.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(session.waitFor(60, TimeUnit.SECONDS)).isTrue();
        assertThat(session.exitValue())
            .as(new String(session.getErrorStream().readAllBytes(), StandardCharsets.UTF_8))
            .isZero();
        outcomes.add(out.strip());
      }
      assertThat(outcomes).containsExactly("ARMED", "EXTENDED");
      try (Connection c = server.getDatabase("postgres", "docs").getConnection();
          Statement st = c.createStatement();
          ResultSet rs =
              st.executeQuery(
                  "SELECT handler, timer_id, key, fire_at > now() + interval '4 seconds'"
                      + " FROM relaybus_deliveries")) {
        assertThat(rs.next()).isTrue();
        assertThat(
                rs.getString(1)
                    + "/"
                    + rs.getString(2)
                    + "/"
                    + rs.getString(3)
                    + "/"
                    + rs.getBoolean(4))
            .isEqualTo("sessions/session-7/session-7/true");
        assertThat(rs.next()).isFalse();
      }
    }
  }

  private static PostgresOutboxStore store(String prefix) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(server.getJdbcUrl("postgres", "postgres"))
            .schema("fn")
            .tablePrefix(prefix)
            .poolSize(2)
            .build();
    store.setup();
    return store;
  }

  private static Process psql(String script) throws IOException {
    return psql("postgres", script, false);
  }

  private static Process psql(String database, String script, boolean output) throws IOException {
    Path file = Files.createTempFile("relaybus-psql", ".sql");
    Files.writeString(file, script);
    file.toFile().deleteOnExit();
    return new ProcessBuilder(
            PSQL.toString(),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            "postgresql://postgres@localhost:" + server.getPort() + "/" + database,
            "-t",
            "-A",
            "-f",
            file.toString())
        .redirectOutput(output ? ProcessBuilder.Redirect.PIPE : ProcessBuilder.Redirect.DISCARD)
        .start();
  }

  private static Connection connection() throws SQLException {
    return server.getPostgresDatabase().getConnection();
  }

  private static void sql(String statement) throws SQLException {
    try (Connection c = connection();
        Statement st = c.createStatement()) {
      st.execute(statement);
    }
  }

  private static List<String> query(String sql) throws SQLException {
    try (Connection c = connection();
        Statement st = c.createStatement();
        ResultSet rs = st.executeQuery(sql)) {
      List<String> rows = new ArrayList<>();
      int columns = rs.getMetaData().getColumnCount();
      while (rs.next()) {
        StringBuilder row = new StringBuilder();
        for (int i = 1; i <= columns; i++) {
          row.append(i > 1 ? "|" : "").append(rs.getString(i));
        }
        rows.add(row.toString());
      }
      return rows;
    }
  }
}
