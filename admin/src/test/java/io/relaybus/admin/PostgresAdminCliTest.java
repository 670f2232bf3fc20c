package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeadLetter;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.stream.IntStream;
import org.assertj.core.api.SoftAssertions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The command line against a real PostgreSQL 17, outputs and exit codes exactly. */
class PostgresAdminCliTest {
  private PostgresOutboxStore store;
  private String prefix;

  @BeforeEach
  void createOutbox() {
    prefix = "cli" + UUID.randomUUID().toString().substring(0, 8) + "_";
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

  private CliRunner.Result cli(String stdin, String... args) {
    return CliRunner.run(stdin, cliArgs(args));
  }

  private String[] cliArgs(String... args) {
    List<String> all = new ArrayList<>(List.of(args));
    all.addAll(List.of("--url", EmbeddedPostgres17.jdbcUrl(), "--prefix", prefix));
    return all.toArray(String[]::new);
  }

  private static OutboxEvent event(String id, String key, String... handlers) {
    return OutboxEvent.builder("order.placed")
        .id(id)
        .key(key)
        .payload(("payload of " + id).getBytes(StandardCharsets.UTF_8), "text/plain")
        .handlers(handlers)
        .build();
  }

  /**
   * billing: b1 in flight, b2 due, b3 retrying in 1 h, t1 timer in 1 h; shipping: s1 dead ("HTTP
   * 503 from shipping"), s2 dead ("schema mismatch"); audit: a1 dead ("HTTP 500").
   */
  private List<Long> deliveriesInEveryState() {
    store.publishAll(
        List.of(
            event("b1", "k", "billing"),
            event("b2", "k", "billing"),
            event("b3", null, "billing"),
            event("s1", null, "shipping"),
            event("s2", null, "shipping"),
            event("a1", null, "audit")));
    store.schedule(event("t1", null, "billing"), Timer.in(Duration.ofHours(1)));
    List<LaneLease> leases =
        store.acquireLanes("task-0", "conn", range(0, 256), Duration.ofMinutes(5));
    List<ClaimedDelivery> batch = store.claim("task-0", leases, 100);
    List<Long> dead = new ArrayList<>();
    for (ClaimedDelivery d : batch) {
      switch (d.eventId()) {
        case "b2" -> store.release(List.of(d.token()));
        case "b3" -> store.reschedule(d.token(), "timeout");
        case "s1" -> store.bury(d.token(), "HTTP 503 from shipping");
        case "s2" -> store.bury(d.token(), "schema mismatch");
        case "a1" -> store.bury(d.token(), "HTTP 500");
        default -> {}
      }
      if (d.eventId().startsWith("s") || d.eventId().startsWith("a")) {
        dead.add(d.deliveryId());
      }
    }
    dead.sort(null);
    return dead;
  }

  private static List<Integer> range(int from, int to) {
    return IntStream.range(from, to).boxed().toList();
  }

  private static JsonNode json(String text) throws Exception {
    return Text.JSON.readTree(text);
  }

  private static List<String> holderNames(String json) throws Exception {
    List<String> names = new ArrayList<>();
    for (JsonNode h : json(json).get("holders")) {
      names.add(h.get("name").asText());
    }
    return names;
  }

  private static int pid(Statement s) throws SQLException {
    try (ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
      rs.next();
      return rs.getInt(1);
    }
  }

  @Test
  void statsShowsBacklogPerHandlerSplitByWhyItWaits() throws Exception {
    deliveriesInEveryState();

    CliRunner.Result text = cli("", "stats");
    CliRunner.Result js = cli("", "stats", "--json");

    assertThat(text.exit()).isZero();
    assertThat(text.err()).isEmpty();
    List<String> lines = text.out().lines().toList();
    assertThat(lines).hasSize(5);
    assertThat(lines.get(0))
        .isEqualTo("HANDLER   PENDING  DUE  IN_FLIGHT  TIMERS  RETRIES  DEAD  OLDEST  LAG");
    assertThat(lines.get(1))
        .matches("audit     0        0    0          0       0        1     0s      0s");
    assertThat(lines.get(2))
        .matches("billing   4        2    1          1       1        0     \\d+s +\\d+s");
    assertThat(lines.get(3))
        .matches("shipping  0        0    0          0       0        2     0s      0s");
    assertThat(lines.get(4))
        .matches("\\(all\\)     4        2    1          1       1        3     \\d+s +\\d+s");
    assertThat(js.exit()).isZero();
    JsonNode total = json(js.out()).get("total");
    assertThat(total.get("pending").asLong()).isEqualTo(4);
    assertThat(total.get("due").asLong()).isEqualTo(2);
    assertThat(total.get("inFlight").asLong()).isEqualTo(1);
    assertThat(total.get("scheduledTimers").asLong()).isEqualTo(1);
    assertThat(total.get("scheduledRetries").asLong()).isEqualTo(1);
    assertThat(total.get("dead").asLong()).isEqualTo(3);
    assertThat(json(js.out()).get("handlers")).hasSize(3);
    assertThat(json(js.out()).get("store").asText()).isEqualTo("PostgreSQL");
  }

  @Test
  void deadListsReasonsFilteredAndPaged() throws Exception {
    List<Long> dead = deliveriesInEveryState();

    CliRunner.Result all = cli("", "dead", "--json");
    CliRunner.Result http = cli("", "dead", "--reason", "http 50", "--limit", "1");
    CliRunner.Result shipping = cli("", "dead", "--handler", "shipping", "--json");
    CliRunner.Result old = cli("", "dead", "--older-than", "1h", "--json");

    JsonNode doc = json(all.out());
    assertThat(doc.get("total").asLong()).isEqualTo(3);
    assertThat(doc.get("items")).hasSize(3);
    JsonNode first = doc.get("items").get(0);
    assertThat(first.get("id").asLong()).isEqualTo(dead.get(0));
    assertThat(first.get("eventType").asText()).isEqualTo("order.placed");
    assertThat(first.get("attempts").asInt()).isEqualTo(1);
    assertThat(doc.get("nextAfterId").isNull()).isTrue();

    assertThat(http.exit()).isZero();
    List<String> lines = http.out().lines().toList();
    assertThat(lines).hasSize(3);
    assertThat(lines.get(0)).matches("ID +HANDLER +TYPE +EVENT +KEY +ATTEMPTS +DIED +REASON");
    assertThat(lines.get(1))
        .matches(dead.get(0) + " +\\w+ +order.placed +(s1|a1) +- +1 +\\d+s +HTTP 50.*");
    assertThat(lines.get(2)).isEqualTo("1 of 2 dead letters; next page: --after " + dead.get(0));

    assertThat(json(shipping.out()).get("total").asLong()).isEqualTo(2);
    assertThat(json(old.out()).get("total").asLong()).isZero();
  }

  @Test
  void requeueDryRunChangesNothingAndTheRealOneAsksFirst() throws Exception {
    deliveriesInEveryState();

    CliRunner.Result dry = cli("", "requeue", "--reason", "HTTP", "--dry-run");
    assertThat(dry.exit()).isZero();
    assertThat(dry.out())
        .endsWith(
            "dry run: would requeue 2 dead letters (reason containing 'HTTP'); nothing changed\n");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);

    CliRunner.Result refused = cli("n\n", "requeue", "--reason", "HTTP");
    assertThat(refused.exit()).isEqualTo(AdminCli.NOT_CONFIRMED);
    assertThat(refused.err())
        .contains("Requeue 2 dead letters (reason containing 'HTTP')? [y/N]")
        .contains("not confirmed: nothing changed");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);

    CliRunner.Result noAnswer = cli("", "requeue", "--reason", "HTTP");
    assertThat(noAnswer.exit()).as("end of input is no").isEqualTo(AdminCli.NOT_CONFIRMED);

    CliRunner.Result done = cli("y\n", "requeue", "--reason", "HTTP", "--json");
    assertThat(done.exit()).isZero();
    assertThat(json(done.out()).get("requeued").asLong()).isEqualTo(2);
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(1);
    assertThat(store.listDeadLetters(DeadLetterFilter.all(), null, 10).items().get(0).reason())
        .isEqualTo("schema mismatch");
  }

  /**
   * Symptom: {@code requeue --reason HTTP} asked "Requeue 2 dead letters?" and then requeued every
   * dead letter matching the filter when the answer came: one that died while the operator read the
   * question was requeued too (3 where 2 were confirmed), and a confirmed one requeued by someone
   * else meanwhile was made up for by it. The operator gets at most the ones counted, and the
   * answer says how many of them were no longer dead.
   */
  @Test
  void aRequeueByFilterRequeuesOnlyTheDeadLettersItAskedAbout() throws Exception {
    List<Long> dead = deliveriesInEveryState(); // s1 and a1 match HTTP, s2 does not
    store.publish(event("a2", null, "audit"));
    List<LaneLease> leases =
        store.acquireLanes("task-0", "conn", range(0, 256), Duration.ofMinutes(5));
    ClaimedDelivery a2 =
        store.claim("task-0", leases, 100).stream()
            .filter(d -> d.eventId().equals("a2"))
            .findFirst()
            .orElseThrow();
    long s1 =
        store
            .listDeadLetters(DeadLetterFilter.all().withHandler("shipping"), null, 10)
            .items()
            .stream()
            .filter(d -> d.eventId().equals("s1"))
            .findFirst()
            .orElseThrow()
            .id();
    assertThat(dead).contains(s1);
    // while the question waits for its answer: a2 dies with a matching reason, and another
    // operator requeues s1
    java.io.InputStream answer =
        new java.io.InputStream() {
          private java.io.ByteArrayInputStream yes;

          private java.io.ByteArrayInputStream afterTheQuestion() {
            if (yes == null) {
              store.bury(a2.token(), "HTTP 502 from audit");
              assertThat(store.requeue(List.of(s1))).isEqualTo(1);
              yes = new java.io.ByteArrayInputStream("y\n".getBytes(StandardCharsets.UTF_8));
            }
            return yes;
          }

          @Override
          public int read() {
            return afterTheQuestion().read();
          }

          @Override
          public int read(byte[] b, int off, int len) {
            return afterTheQuestion().read(b, off, len);
          }
        };

    CliRunner.Result done = CliRunner.run(answer, cliArgs("requeue", "--reason", "HTTP"));

    SoftAssertions soft = new SoftAssertions();
    soft.assertThat(done.exit()).isZero();
    soft.assertThat(done.err())
        .contains("Requeue 2 dead letters (reason containing 'HTTP')? [y/N]");
    soft.assertThat(store.listDeadLetters(DeadLetterFilter.all(), null, 10).items())
        .as("a2, dead after the question, stays dead; so does s2, which never matched")
        .extracting(DeadLetter::eventId)
        .containsExactly("s2", "a2");
    soft.assertThat(done.out())
        .isEqualTo(
            "requeued 1 of the 2 dead letters confirmed"
                + " (1 no longer dead: requeued or purged meanwhile)\n");
    soft.assertAll();
  }

  @Test
  void requeueByIdsAndByHandlerWithYes() {
    deliveriesInEveryState();
    long audit =
        store
            .listDeadLetters(DeadLetterFilter.all().withHandler("audit"), null, 10)
            .items()
            .get(0)
            .id();

    CliRunner.Result byId = cli("", "requeue", "--id", audit + ",999999", "--yes");
    assertThat(byId.exit()).isZero();
    assertThat(byId.out()).isEqualTo("requeued 1 dead letters\n");

    CliRunner.Result byHandler = cli("", "requeue", "--handler", "shipping", "--yes");
    assertThat(byHandler.exit()).isZero();
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isZero();
    assertThat(byId.out() + byHandler.out())
        .isEqualTo("requeued 1 dead letters\nrequeued 2 dead letters\n");
  }

  @Test
  void requeueWithoutSelectionIsAUsageError() {
    deliveriesInEveryState();

    CliRunner.Result none = cli("", "requeue", "--yes");
    CliRunner.Result both = cli("", "requeue", "--all", "--handler", "audit", "--yes");
    CliRunner.Result badAge = cli("", "dead", "--older-than", "soon");

    assertThat(none.exit()).isEqualTo(AdminCli.USAGE);
    assertThat(none.err())
        .isEqualTo("error: requeue needs exactly one selection: --id, filter options, or --all\n");
    assertThat(both.exit()).isEqualTo(AdminCli.USAGE);
    assertThat(badAge.exit()).isEqualTo(AdminCli.USAGE);
    assertThat(badAge.err())
        .isEqualTo(
            "error: --older-than must be a duration such as 30s, 15m, 2h, 7d or PT15M, but was"
                + " 'soon'\n");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);
  }

  @Test
  void purgeAsksAndRemovesByRetention() throws Exception {
    deliveriesInEveryState();

    CliRunner.Result refused = cli("no\n", "purge", "--dead-letters", "0s");
    assertThat(refused.exit()).isEqualTo(AdminCli.NOT_CONFIRMED);
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);

    CliRunner.Result kept = cli("", "purge", "--yes");
    assertThat(kept.out())
        .isEqualTo("purged 0 dead letters, 0 events, 0 history rows, 0 key counters\n");

    CliRunner.Result purged =
        cli("", "purge", "--dead-letters", "0s", "--events", "0s", "--yes", "--json");
    assertThat(purged.exit()).isZero();
    JsonNode r = json(purged.out());
    assertThat(r.get("deadLetters").asLong()).isEqualTo(3);
    assertThat(r.get("events").asLong()).isEqualTo(3);
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isZero();
  }

  @Test
  void lanesShowHoldersAndUnownedLanes() throws Exception {
    store.publish(event("e1", "k", "h"));
    store.acquireLanes("task-0", "conn", range(0, 10), Duration.ofMinutes(5));
    store.acquireLanes("task-1", "conn", range(200, 256), Duration.ofMinutes(5));

    CliRunner.Result text = cli("", "lanes");
    CliRunner.Result js = cli("", "lanes", "--json");

    assertThat(text.exit()).isZero();
    assertThat(text.out())
        .contains("task-0 holds 10 lanes: 0-9\n")
        .contains("task-1 holds 56 lanes: 200-255\n")
        .contains("unowned: 190 lanes: 10-199\n");
    assertThat(text.out().lines().filter(l -> l.matches("\\d+ +task-0 +1 +in \\S+ +0 +\\d+")))
        .hasSize(10);
    JsonNode doc = json(js.out());
    assertThat(doc.get("lanes")).hasSize(256);
    assertThat(doc.get("unowned")).hasSize(190);
    int lane = io.relaybus.store.Lanes.laneOf("k", "e1");
    assertThat(doc.get("lanes").get(lane).get("pending").asLong()).isEqualTo(1);
  }

  /** A session left idle in a REPEATABLE READ transaction holds the horizon: it is named. */
  @Test
  void healthNamesTheSessionHoldingTheXminHorizon() throws Exception {
    CliRunner.Result clean = cli("", "health", "--warn-after", "1h");
    assertThat(clean.out())
        .contains(prefix + "deliveries", prefix + "log ", prefix + "lane_cursors");

    try (Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = holder.createStatement()) {
      s.execute("SET application_name = 'forgotten-report'");
      holder.setAutoCommit(false);
      s.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      s.executeQuery("SELECT count(*) FROM pg_class").close();
      int pid;
      try (var rs = s.executeQuery("SELECT pg_backend_pid()")) {
        rs.next();
        pid = rs.getInt(1);
      }

      CliRunner.Result warned = cli("", "health", "--warn-after", "0s");
      CliRunner.Result js = cli("", "health", "--warn-after", "0s", "--json");

      assertThat(warned.exit()).isEqualTo(AdminCli.WARNING);
      assertThat(warned.out())
          .contains("xmin horizon held back by:")
          .containsPattern("backend +pid " + pid + " +idle in transaction .*forgotten-report")
          .contains("WARNING: xmin horizon held by backend pid " + pid)
          .contains("SELECT pg_terminate_backend(" + pid + ")");
      JsonNode report = json(js.out());
      JsonNode named = null;
      for (JsonNode h : report.get("holders")) {
        if (h.get("name").asText().equals("pid " + pid)) {
          named = h;
        }
      }
      assertThat(named).as("holder pid %d in %s", pid, js.out()).isNotNull();
      assertThat(named.get("state").asText()).isEqualTo("idle in transaction");
      assertThat(named.get("detail").asText()).contains("application 'forgotten-report'");
      assertThat(named.get("since").asText()).isNotEmpty();
      assertThat(report.get("horizonXidAge").asLong()).isGreaterThanOrEqualTo(0);
      holder.rollback();
    }
    CliRunner.Result after = cli("", "health", "--warn-after", "1h", "--json");
    for (JsonNode h : json(after.out()).get("holders")) {
      assertThat(h.get("detail").asText()).doesNotContain("forgotten-report");
    }
  }

  /** A logical replication slot with no consumer holds catalog_xmin: named, with its advice. */
  @Test
  void healthNamesAnUnusedReplicationSlot() throws Exception {
    String slot = "admin_" + prefix.replace("_", "");
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = c.createStatement()) {
      s.executeQuery("SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')")
          .close();
      try {
        CliRunner.Result r =
            cli("", "health", "--warn-after", "1h", "--warn-xid-age", "0", "--json");

        assertThat(r.exit()).isEqualTo(AdminCli.WARNING);
        JsonNode named = null;
        for (JsonNode h : json(r.out()).get("holders")) {
          if (h.get("name").asText().equals(slot)) {
            named = h;
          }
        }
        assertThat(named).as(r.out()).isNotNull();
        assertThat(named.get("kind").asText()).isEqualTo("replication slot");
        assertThat(named.get("detail").asText()).isEqualTo("logical slot, inactive");
        assertThat(named.get("advice").asText())
            .isEqualTo(
                "no consumer is attached: if it is no longer used, SELECT"
                    + " pg_drop_replication_slot('"
                    + slot
                    + "')");
        assertThat(json(r.out()).get("warnings").toString())
            .contains("xmin horizon held by replication slot " + slot);
      } finally {
        s.executeQuery("SELECT pg_drop_replication_slot('" + slot + "')").close();
      }
    }
  }

  /**
   * Symptom: health missed a session of the outbox database that had written and sat idle in a READ
   * COMMITTED transaction, the classic forgotten session: it holds the horizon with its transaction
   * id (pg_stat_activity shows backend_xid, not backend_xmin).
   */
  @Test
  void healthNamesAWriterIdleInAReadCommittedTransaction() throws Exception {
    try (Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = holder.createStatement()) {
      s.execute("SET application_name = 'forgotten-writer'");
      int pid = pid(s);
      holder.setAutoCommit(false);
      s.execute("CREATE TEMP TABLE forgotten (x int)");
      s.execute("INSERT INTO forgotten VALUES (1)");

      // what PostgreSQL shows of it: a transaction id, no snapshot
      try (Connection look = EmbeddedPostgres17.dataSource().getConnection();
          Statement q = look.createStatement();
          ResultSet rs =
              q.executeQuery(
                  "SELECT state, backend_xmin IS NULL, backend_xid IS NOT NULL"
                      + " FROM pg_stat_activity WHERE pid = "
                      + pid)) {
        assertThat(rs.next()).isTrue();
        assertThat(rs.getString(1)).isEqualTo("idle in transaction");
        assertThat(rs.getBoolean(2)).as("backend_xmin is null").isTrue();
        assertThat(rs.getBoolean(3)).as("backend_xid is set").isTrue();
      }

      CliRunner.Result js = cli("", "health", "--warn-after", "0s", "--json");
      CliRunner.Result text = cli("", "health", "--warn-after", "0s");

      assertThat(holderNames(js.out()))
          .as("holders reported while pid %d is idle in transaction after a write", pid)
          .contains("pid " + pid);
      assertThat(text.exit()).isEqualTo(AdminCli.WARNING);
      assertThat(text.out()).contains("WARNING: xmin horizon held by backend pid " + pid);
      holder.rollback();
    }
  }

  /**
   * Symptom: health blamed a session of another database of the same server, with advice to
   * terminate it, though PostgreSQL computes a table's horizon from its own database's sessions
   * only.
   */
  @Test
  void healthBlamesNoSessionOfAnotherDatabase() throws Exception {
    String otherDb = "hx_other_db";
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = c.createStatement()) {
      try (ResultSet rs =
          s.executeQuery("SELECT count(*) FROM pg_database WHERE datname = '" + otherDb + "'")) {
        rs.next();
        if (rs.getLong(1) == 0) {
          s.execute("CREATE DATABASE " + otherDb);
        }
      }
    }
    javax.sql.DataSource other = EmbeddedPostgres17.server().getDatabase("postgres", otherDb);
    try (Connection holder = other.getConnection();
        Statement s = holder.createStatement()) {
      s.execute("SET application_name = 'other-app-report'");
      int pid = pid(s);
      holder.setAutoCommit(false);
      s.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      s.executeQuery("SELECT count(*) FROM pg_class").close();

      // the premise: with that snapshot open, VACUUM here still removes the rows deleted here
      String table = prefix + "vacuum_probe";
      try (Connection here = EmbeddedPostgres17.dataSource().getConnection();
          Statement h = here.createStatement()) {
        h.execute("CREATE TABLE " + table + " (x int)");
        h.execute("INSERT INTO " + table + " SELECT generate_series(1, 1000)");
        h.execute("DELETE FROM " + table);
        h.execute("VACUUM (VERBOSE) " + table);
        StringBuilder notices = new StringBuilder();
        for (java.sql.SQLWarning w = h.getWarnings(); w != null; w = w.getNextWarning()) {
          notices.append(w.getMessage()).append('\n');
        }
        assertThat(notices.toString())
            .as("VACUUM of a table of this database")
            .containsPattern("tuples: \\d+ removed, 0 remain, 0 are dead but not yet removable");
        h.execute("DROP TABLE " + table);
      }

      CliRunner.Result js = cli("", "health", "--warn-after", "0s", "--json");
      CliRunner.Result text = cli("", "health", "--warn-after", "0s");

      assertThat(holderNames(js.out()))
          .as("holders reported; pid %d is in database %s", pid, otherDb)
          .doesNotContain("pid " + pid);
      assertThat(text.out()).doesNotContain("pg_terminate_backend(" + pid + ")");
      holder.rollback();
    }
  }

  /**
   * Symptom: a dead letter's reason (text from outside, an exception message that may quote a
   * payload) reached the operator's terminal with its control characters (ESC, BEL, backspace),
   * which rewrite the screen, the window title or the lines above.
   */
  @Test
  void deadAndTheRequeuePreviewPrintReasonsWithoutTerminalControlCharacters() {
    String hostile = "HTTP 500\u001b]0;owned\u0007\u001b[2J\u001b[Hall clear\b\b\b\u009b31m";
    store.publish(event("e1", null, "shipping"));
    List<LaneLease> leases =
        store.acquireLanes("task-0", "conn", range(0, 256), Duration.ofMinutes(5));
    List<ClaimedDelivery> batch = store.claim("task-0", leases, 10);
    assertThat(batch).hasSize(1);
    store.bury(batch.get(0).token(), hostile);

    CliRunner.Result dead = cli("", "dead");
    CliRunner.Result preview = cli("", "requeue", "--all", "--dry-run");

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

  /**
   * Symptom: {@code requeue --reason ''} (a script's unset variable: {@code --reason "$REASON"})
   * was taken for {@code --all} and requeued every dead letter, where {@code --handler ''} is
   * refused as bad usage.
   */
  @Test
  void requeueWithAnEmptyFilterValueIsAUsageErrorAndRequeuesNothing() {
    deliveriesInEveryState();
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);

    CliRunner.Result emptyHandler = cli("", "requeue", "--handler", "", "--yes");
    CliRunner.Result emptyReason = cli("", "requeue", "--reason", "", "--yes");

    assertThat(emptyHandler.exit()).as("--handler ''").isEqualTo(AdminCli.USAGE);
    assertThat(emptyReason.out() + emptyReason.err())
        .as("--reason '': exit %d", emptyReason.exit())
        .doesNotContain("requeued");
    assertThat(emptyReason.exit()).as("--reason ''").isEqualTo(AdminCli.USAGE);
    assertThat(emptyReason.err()).contains("--reason");
    assertThat(store.countDeadLetters(DeadLetterFilter.all())).isEqualTo(3);
  }

  /**
   * Symptom: an age too large to be a duration was no usage error (exit 2 with a message naming the
   * option, the value and the rule, as operations.md says of bad usage).
   */
  @Test
  void agesTooLargeForADurationAreUsageErrorsNamingTheOption() {
    CliRunner.Result digits = cli("", "dead", "--older-than", "99999999999999999999s");
    CliRunner.Result days = cli("", "dead", "--older-than", "9999999999999999d");

    SoftAssertions soft = new SoftAssertions();
    soft.assertThat(digits.exit()).as("exit, 99999999999999999999s").isEqualTo(AdminCli.USAGE);
    soft.assertThat(digits.err())
        .as("stderr, 99999999999999999999s")
        .startsWith("error: --older-than must be")
        .contains("'99999999999999999999s'");
    soft.assertThat(days.exit()).as("exit, 9999999999999999d").isEqualTo(AdminCli.USAGE);
    soft.assertThat(days.err())
        .as("stderr, 9999999999999999d")
        .startsWith("error: --older-than must be")
        .contains("'9999999999999999d'");
    soft.assertAll();
  }

  /**
   * Symptom: {@code serve --sample-every 0} said "error: null" and kept a console listening,
   * instead of exiting 2 with a message naming the option, the value and the rule.
   */
  @Test
  void serveWithAZeroSampleIntervalIsAUsageErrorAndLeavesNothingListening() throws Exception {
    int port;
    try (ServerSocket free = new ServerSocket(0)) {
      port = free.getLocalPort();
    }

    CliRunner.Result r = cli("", "serve", "--sample-every", "0", "--port", Integer.toString(port));

    boolean listening;
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
      listening = true;
    } catch (ConnectException e) {
      listening = false;
    }
    SoftAssertions soft = new SoftAssertions();
    soft.assertThat(r.exit()).as("exit code").isEqualTo(AdminCli.USAGE);
    soft.assertThat(r.err()).as("stderr").contains("--sample-every").contains("'0'");
    soft.assertThat(listening)
        .as("a console still listens on port %d after serve failed", port)
        .isFalse();
    soft.assertAll();
  }

  @Test
  void credentialsFromAPropertiesFileAreNeverEchoed(@TempDir Path dir) throws Exception {
    Path config = dir.resolve("admin.properties");
    Files.writeString(
        config,
        "url=jdbc:postgresql://127.0.0.1:1/nowhere?connectTimeout=2\n"
            + "user=operator\npassword=s3cret-pw\n");

    CliRunner.Result r = CliRunner.run("", "stats", "--config", config.toString());

    assertThat(r.exit()).isEqualTo(AdminCli.FAILED);
    assertThat(r.err()).startsWith("error: ");
    assertThat(r.out() + r.err()).doesNotContain("s3cret-pw");

    CliRunner.Result badUrl =
        CliRunner.run("", "stats", "--url", "mysql://op:s3cret-pw@db/x?password=s3cret-pw");
    assertThat(badUrl.exit()).isEqualTo(AdminCli.USAGE);
    assertThat(badUrl.err())
        .isEqualTo(
            "error: url must start with jdbc:postgresql: or mongodb://, but was"
                + " mysql://***@db/x?***\n");
  }

  @Test
  void helpListsEveryCommandAndTheExitCodes() {
    CliRunner.Result help = CliRunner.run("", "--help");

    assertThat(help.exit()).isZero();
    assertThat(help.out())
        .contains("stats", "dead", "requeue", "purge", "lanes", "health", "serve")
        .contains("3 health warnings");
  }
}
