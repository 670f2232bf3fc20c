package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.PublishResult;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerExistsException;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.Validation;
import io.relaybus.store.testing.PostgresServers;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The SQL functions ({@code <prefix>publish}, {@code <prefix>schedule}, {@code
 * <prefix>cancel_timer}) against the Java store: the same calls on two outboxes of one server, one
 * through Java, one through SQL, must return the same results and leave the same rows (events, log
 * rows with their ids and lanes, timer deliveries with lanes and sequences, and no key-sequence
 * row); what the Java side refuses, the function refuses with the same message.
 */
class SqlPublishFunctionTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private static final Instant AT = Instant.parse("2030-01-02T03:04:05.123456Z");

  private PostgresOutboxStore javaStore;
  private PostgresOutboxStore sqlStore;
  private String javaPrefix;
  private String sqlPrefix;

  @BeforeEach
  void setUp() {
    int n = PREFIXES.incrementAndGet();
    javaPrefix = "j" + n + "_";
    javaStore = store(javaPrefix);
    sqlPrefix = "s" + n + "_";
    sqlStore = store(sqlPrefix);
  }

  @AfterEach
  void tearDown() {
    javaStore.close();
    sqlStore.close();
  }

  private static PostgresOutboxStore store(String prefix) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(PostgresServers.embeddedJdbcUrl(PostgresServers.selectedMajor()))
            .schema("fn")
            .tablePrefix(prefix)
            .poolSize(2)
            .build();
    store.setup();
    return store;
  }

  @Test
  void publishAgreesWithTheJavaPublisherCallForCall() throws Exception {
    List<OutboxEvent> calls =
        List.of(
            event(
                "o1-placed",
                "order.placed",
                "order-1",
                "{\"n\":1}",
                List.of("billing", "shipping")),
            event("o1-paid", "order.paid", "order-1", "{\"n\":2}", List.of("billing")),
            event("audit-1", "audit", null, "x", List.of("audit")),
            // the same again: nothing added, no log id taken
            event("o1-paid", "order.paid", "order-1", "{\"n\":2}", List.of("billing")),
            // a handler added to an existing event, with another payload (the stored one wins)
            event(
                "o1-placed",
                "order.placed",
                "order-1",
                "{\"n\":9}",
                List.of("shipping", "audit", "email")),
            // every field differs, and a handler is added: the stored key keeps the lane
            new OutboxEvent(
                "o1-paid",
                "other",
                "order-2",
                new byte[0],
                "text/plain",
                Map.of("a", "b"),
                List.of("email")),
            event("o2-placed", "order.placed", "order-2", "{}", List.of("billing")),
            event("audit-1", "audit", null, "x", List.of("audit", "billing")),
            event("o1-shipped", "order.shipped", "order-1", "{\"n\":3}", List.of("shipping")));

    List<PublishResult> viaJava = new ArrayList<>();
    List<PublishResult> viaSql = new ArrayList<>();
    for (OutboxEvent call : calls) {
      viaJava.add(inTransaction(javaStore, c -> javaStore.publish(c, call)));
      viaSql.add(inTransaction(sqlStore, c -> publishWithSql(c, call)));
    }

    assertThat(viaSql).isEqualTo(viaJava);
    assertThat(viaJava.get(4).addedHandlers()).containsExactly("audit", "email");
    assertThat(viaJava.get(5).differingFields())
        .containsExactly("type", "key", "payload", "contentType", "headers");
    assertSameRows("events", "log", "deliveries", "key_sequences");
    // storage v2: one log row per publish (a republish: only the handlers added), no delivery row,
    // no key-sequence row; per key the log ids grow in call (here: commit) order
    assertThat(rows(sqlStore, sqlPrefix, "deliveries")).isEmpty();
    assertThat(rows(sqlStore, sqlPrefix, "key_sequences")).isEmpty();
    List<List<Object>> order1 =
        rows(sqlStore, sqlPrefix, "log").stream()
            .filter(row -> "order-1".equals(row.get(4)))
            .toList();
    assertThat(order1)
        .extracting(row -> row.get(3) + "/" + row.get(2))
        .containsExactly(
            "o1-placed/{billing,shipping}",
            "o1-paid/{billing}",
            "o1-placed/{audit,email}",
            "o1-paid/{email}",
            "o1-shipped/{shipping}");
    assertThat(order1).extracting(row -> (Long) row.get(0)).isSorted().doesNotHaveDuplicates();
    assertThat(order1).extracting(row -> row.get(1)).containsOnly(Lanes.laneOf("order-1", "x"));
    assertThat(rows(sqlStore, sqlPrefix, "log"))
        .extracting(row -> row.get(3) + "/" + row.get(2))
        .containsExactly(
            "o1-placed/{billing,shipping}",
            "o1-paid/{billing}",
            "audit-1/{audit}",
            "o1-placed/{audit,email}",
            "o1-paid/{email}",
            "o2-placed/{billing}",
            "audit-1/{billing}",
            "o1-shipped/{shipping}");
  }

  @Test
  void timersAgreeWithTheJavaStoreCallForCall() throws Exception {
    record Call(OutboxEvent event, Timer timer, String cancel) {}
    List<Call> calls =
        List.of(
            new Call(event("t1", "fire", "k", "1", List.of("a", "b")), Timer.at(AT), null),
            new Call(
                event("t2", "fire", "k", "2", List.of("s")),
                Timer.at(AT).named("session-7", TimerConflict.EXTEND),
                null),
            new Call(
                event("t3", "fire", "k", "3", List.of("s")),
                Timer.at(AT.plusSeconds(60)).named("session-7", TimerConflict.EXTEND),
                null),
            new Call(
                event("t4", "fire", "k", "4", List.of("s")),
                Timer.at(AT.plusSeconds(120)).named("session-7", TimerConflict.KEEP),
                null),
            new Call(
                event("t5", "fire", null, "5", List.of("s")),
                Timer.at(AT.plusSeconds(5)).named("session-7", TimerConflict.REPLACE),
                null),
            new Call(
                event("t6", "fire", "k", "6", List.of("s")),
                Timer.at(AT).named("session-8", TimerConflict.FAIL),
                null),
            new Call(null, null, "session-7"),
            new Call(null, null, "session-7"),
            new Call(
                event("t7", "fire", "k", "7", List.of("s")),
                Timer.at(AT.plusSeconds(1)).named("session-7", TimerConflict.KEEP),
                null));

    List<TimerResult> viaJava = new ArrayList<>();
    List<TimerResult> viaSql = new ArrayList<>();
    for (Call call : calls) {
      if (call.cancel() != null) {
        viaJava.add(inTransaction(javaStore, c -> javaStore.cancelTimer(c, "s", call.cancel())));
        viaSql.add(inTransaction(sqlStore, c -> cancelWithSql(c, "s", call.cancel())));
      } else {
        viaJava.add(
            inTransaction(javaStore, c -> javaStore.schedule(c, call.event(), call.timer())));
        viaSql.add(inTransaction(sqlStore, c -> scheduleWithSql(c, call.event(), call.timer())));
      }
    }

    assertThat(viaSql).isEqualTo(viaJava);
    assertThat(viaJava)
        .extracting(r -> r.outcome() + ":" + r.eventId())
        .containsExactly(
            "ARMED:t1",
            "ARMED:t2",
            "EXTENDED:t2",
            "KEPT:t2",
            "REPLACED:t5",
            "ARMED:t6",
            "CANCELLED:t5",
            "NOT_FOUND:null",
            "ARMED:t7");
    assertSameRows("events", "deliveries", "log", "key_sequences");
    // keyed timers are numbered from the log's sequence (one number per event, increasing in call
    // order under the key's lock), and every timer row carries its transaction's xid
    List<List<Object>> keyed =
        rows(sqlStore, sqlPrefix, "deliveries").stream()
            .filter(row -> "k".equals(row.get(3)))
            .sorted(java.util.Comparator.comparing(row -> (Long) row.get(4)))
            .toList();
    assertThat(keyed)
        .extracting(row -> row.get(0) + "/" + row.get(1))
        .containsExactly("t1/a", "t1/b", "t6/s", "t7/s");
    assertThat(keyed.get(0).get(4)).isEqualTo(keyed.get(1).get(4));
    assertThat(keyed.stream().map(row -> row.get(4)).distinct()).hasSize(3);
    assertThat(
            rowsOf(
                sqlStore,
                "SELECT count(*) FILTER (WHERE xid IS NULL), count(*) FROM fn."
                    + sqlPrefix
                    + "deliveries"))
        .containsExactly(List.of(0L, 4L));
    assertThat(rows(sqlStore, sqlPrefix, "key_sequences")).isEmpty();

    // FAIL on a pending timer: both refuse with the same message and publish nothing.
    OutboxEvent again = event("t8", "fire", "k", "8", List.of("s"));
    Timer fail = Timer.at(AT).named("session-8", TimerConflict.FAIL);
    assertThatThrownBy(() -> inTransaction(javaStore, c -> javaStore.schedule(c, again, fail)))
        .isInstanceOf(TimerExistsException.class);
    String expected =
        "timer 'session-8' of handler 's' is already pending (event 't6') and the conflict policy"
            + " is FAIL: nothing was published; use EXTEND, REPLACE or KEEP, or cancel it first";
    assertThatThrownBy(() -> inTransaction(javaStore, c -> javaStore.schedule(c, again, fail)))
        .hasMessage(expected);
    assertThatThrownBy(() -> inTransaction(sqlStore, c -> scheduleWithSql(c, again, fail)))
        .isInstanceOf(SQLException.class)
        .hasMessageContaining(expected);
  }

  /** A timer a claim has handed out: every call on it says ALREADY_FIRING, in Java and in SQL. */
  @Test
  void timersBeingFiredAgreeWithTheJavaStore() throws Exception {
    Instant past = Instant.parse("2020-01-01T00:00:00Z");
    OutboxEvent armed = event("f1", "fire", "fk", "1", List.of("s"));
    Timer timer = Timer.at(past).named("firing", TimerConflict.KEEP);
    assertThat(inTransaction(javaStore, c -> javaStore.schedule(c, armed, timer)).outcome())
        .isEqualTo(io.relaybus.store.TimerOutcome.ARMED);
    assertThat(inTransaction(sqlStore, c -> scheduleWithSql(c, armed, timer)).outcome())
        .isEqualTo(io.relaybus.store.TimerOutcome.ARMED);
    int lane = io.relaybus.store.Lanes.laneOf("fk", "f1");
    for (PostgresOutboxStore store : List.of(javaStore, sqlStore)) {
      var leases = store.acquireLanes("w", "w", List.of(lane), java.time.Duration.ofSeconds(60));
      assertThat(store.claim("w", leases, 10))
          .extracting(io.relaybus.store.ClaimedDelivery::eventId)
          .containsExactly("f1");
    }

    List<TimerResult> viaJava = new ArrayList<>();
    List<TimerResult> viaSql = new ArrayList<>();
    for (TimerConflict policy :
        List.of(
            TimerConflict.KEEP, TimerConflict.EXTEND, TimerConflict.REPLACE, TimerConflict.FAIL)) {
      OutboxEvent next = event("f-" + policy, "fire", "fk", "2", List.of("s"));
      Timer again = Timer.at(past.plusSeconds(60)).named("firing", policy);
      viaJava.add(inTransaction(javaStore, c -> javaStore.schedule(c, next, again)));
      viaSql.add(inTransaction(sqlStore, c -> scheduleWithSql(c, next, again)));
    }
    viaJava.add(inTransaction(javaStore, c -> javaStore.cancelTimer(c, "s", "firing")));
    viaSql.add(inTransaction(sqlStore, c -> cancelWithSql(c, "s", "firing")));

    assertThat(viaJava)
        .extracting(r -> r.outcome() + ":" + r.eventId())
        .containsExactly(
            "ALREADY_FIRING:f1",
            "ALREADY_FIRING:f1",
            "ALREADY_FIRING:f1",
            "ALREADY_FIRING:f1",
            "ALREADY_FIRING:f1");
    assertThat(viaSql).isEqualTo(viaJava);
    assertSameRows("events", "deliveries");
  }

  /** A version-1 schema from before the functions (here: dropped) gets them from setup(). */
  @Test
  void setupInstallsTheFunctionsIntoASchemaThatLacksThem() throws Exception {
    try (Connection c = sqlStore.dataSource().getConnection();
        Statement s = c.createStatement()) {
      s.execute("DROP FUNCTION fn." + sqlPrefix + "publish");
      s.execute("DROP FUNCTION fn." + sqlPrefix + "cancel_timer");
    }
    assertThat(sqlStore.schemaSql())
        .contains("CREATE OR REPLACE FUNCTION fn." + sqlPrefix + "publish(")
        .contains("CREATE OR REPLACE FUNCTION fn." + sqlPrefix + "schedule(")
        .contains("CREATE OR REPLACE FUNCTION fn." + sqlPrefix + "cancel_timer(");

    sqlStore.setup();

    OutboxEvent event = event("after-setup", "t", "k", "{}", List.of("h"));
    PublishResult published = inTransaction(sqlStore, c -> publishWithSql(c, event));
    TimerResult cancelled = inTransaction(sqlStore, c -> cancelWithSql(c, "h", "none"));
    assertThat(published).isEqualTo(new PublishResult("after-setup", true, List.of("h")));
    assertThat(cancelled)
        .isEqualTo(new TimerResult(io.relaybus.store.TimerOutcome.NOT_FOUND, null));
  }

  /** Each bad input: the Java event refuses it, the function refuses it with the same message. */
  @Test
  void refusesWhatTheJavaPublisherRefusesWithTheSameMessage() throws Exception {
    Map<String, String> longHeader = Map.of("h", "v".repeat(8193));
    List<Object[]> bad =
        List.of(
            args(null, "t", null, "p", "c", Map.of(), List.of("a")),
            args(" ", "t", null, "p", "c", Map.of(), List.of("a")),
            args(" id", "t", null, "p", "c", Map.of(), List.of("a")),
            args("x".repeat(201), "t", null, "p", "c", Map.of(), List.of("a")),
            args("id", "", null, "p", "c", Map.of(), List.of("a")),
            args("id", "t".repeat(201), null, "p", "c", Map.of(), List.of("a")),
            args("id", "t", " ", "p", "c", Map.of(), List.of("a")),
            args("id", "t", "k".repeat(1001), "p", "c", Map.of(), List.of("a")),
            args("id", "t", null, "p", null, Map.of(), List.of("a")),
            args("id", "t", null, "p", "c", Map.of(" ", "v"), List.of("a")),
            args("id", "t", null, "p", "c", longHeader, List.of("a")),
            args("id", "t", null, "p", "c", Map.of(), List.of()),
            args("id", "t", null, "p", "c", Map.of(), List.of("a b")),
            args("id", "t", null, "p", "c", Map.of(), List.of("h".repeat(201))),
            args("id", "t", null, "p", "c", Map.of(), List.of("a", "b", "a")),
            args("id", "t", null, "p", "c", Map.of(), Arrays.asList("a", null)),
            // beyond the BMP a character is two UTF-16 units to Java: 101 of them are 202
            args("\uD83D\uDE00".repeat(101), "t", null, "p", "c", Map.of(), List.of("a")),
            args("id", "t", "\uD83D\uDE00".repeat(501), "p", "c", Map.of(), List.of("a")),
            args("id", "t", null, "p", "c", Map.of("h", "\uD83D\uDE00".repeat(4097)), List.of("a")),
            // U+0000 in a header (JSON: \u0000), after a character beyond the BMP (index 3)
            args("id", "t", null, "p", "c", Map.of("h", "\uD83D\uDE00x\u0000"), List.of("a")),
            args("id", "t", null, "p", "c", Map.of("a\u0000", "v"), List.of("a")));
    for (Object[] a : bad) {
      String javaMessage = javaRefusal(a);
      try (Connection c = sqlStore.dataSource().getConnection()) {
        c.setAutoCommit(false);
        assertThatThrownBy(
                () ->
                    publishWithSql(
                        c,
                        (String) a[0],
                        (String) a[1],
                        (String) a[2],
                        a[3] == null ? null : ((String) a[3]).getBytes(StandardCharsets.UTF_8),
                        (String) a[4],
                        PostgresPublisher.json(a[5]),
                        (List<?>) a[6]))
            .as("the function on %s", javaMessage)
            .isInstanceOf(SQLException.class)
            .hasMessageContaining(javaMessage)
            .extracting(e -> ((SQLException) e).getSQLState())
            .isEqualTo("22023");
        c.rollback();
      }
    }
    // and what only SQL can send: headers that are not an object of strings, a null payload
    try (Connection c = sqlStore.dataSource().getConnection()) {
      c.setAutoCommit(false);
      assertThatThrownBy(
              () -> publishWithSql(c, "id", "t", null, new byte[0], "c", "[1]", List.of("a")))
          .hasMessageContaining(
              "headers must be a JSON object of string values ('{}' for none), but were [1]");
      c.rollback();
      assertThatThrownBy(
              () -> publishWithSql(c, "id", "t", null, new byte[0], "c", "{\"n\":1}", List.of("a")))
          .hasMessageContaining(
              "headers must be a JSON object of string values, but header 'n' is 1");
      c.rollback();
      assertThatThrownBy(() -> publishWithSql(c, "id", "t", null, null, "c", "{}", List.of("a")))
          .hasMessageContaining("payload must not be null");
      c.rollback();
    }
    assertThat(rows(sqlStore, sqlPrefix, "events")).isEmpty();
  }

  /**
   * White space is what Java takes for it (Character.isWhitespace, which String.isBlank and strip
   * use) in every field the function checks for it, whatever the database's locale. The function
   * matched {@code [[:space:]]}, which follows the locale: it published an id ending in U+001F, or
   * a key, type, content type or header name of U+001F alone, that every Java reader then refused
   * (the inbox dead-lettered such a message as poison); under the C locale the same for U+2003 or
   * U+3000. Here on this server's default locale (C.UTF-8) and on a database of the C locale.
   */
  @Test
  void whiteSpaceIsWhatJavaTakesForWhiteSpaceWhateverTheDatabasesLocale() throws Exception {
    List<String> differing = new ArrayList<>();
    onEachLocale(
        "ws",
        (database, prefix, c) -> {
          for (int cp : WHITE_SPACE_TO_SOMEONE) {
            String ws = new String(Character.toChars(cp));
            List<Object[]> cases =
                List.of(
                    args("id" + ws, "t", null, "p", "c", Map.of(), List.of("a")),
                    args(ws + "id", "t", null, "p", "c", Map.of(), List.of("a")),
                    args("id", ws, null, "p", "c", Map.of(), List.of("a")),
                    args("id", "t", ws, "p", "c", Map.of(), List.of("a")),
                    args("id", "t", null, "p", ws, Map.of(), List.of("a")),
                    args("id", "t", null, "p", "c", Map.of(ws, "v"), List.of("a")));
            for (Object[] a : cases) {
              String java = javaVerdict(a);
              String sql;
              try {
                publishWithSql(
                    c,
                    (String) a[0],
                    (String) a[1],
                    (String) a[2],
                    ((String) a[3]).getBytes(StandardCharsets.UTF_8),
                    (String) a[4],
                    PostgresPublisher.json(a[5]),
                    (List<?>) a[6],
                    "fn." + prefix);
                sql = "accepted";
              } catch (SQLException e) {
                sql =
                    "22023".equals(e.getSQLState()) && e.getMessage().contains(java)
                        ? java
                        : e.getSQLState() + " " + e.getMessage();
              }
              c.rollback();
              if (!sql.equals(java)) {
                differing.add(
                    escaped(
                        "%s %s: Java %s, SQL %s"
                            .formatted(database, Arrays.asList(a).subList(0, 6), java, sql)));
              }
            }
          }
        });
    assertThat(differing).as("the function and the Java event disagree").isEmpty();
  }

  /**
   * Row 148 for timer ids: {@code schedule} and {@code cancel_timer} took white space as the
   * database's locale classifies it ({@code [[:space:]]}), where the Java {@code Timer} and {@code
   * cancelTimer} take Java's. A timer armed with SQL under an id ending in U+001F could not be
   * cancelled from Java, whose refusal named a rule the function had not applied.
   */
  @Test
  void timerIdsTakeWhiteSpaceAsJavaDoesWhateverTheDatabasesLocale() throws Exception {
    List<String> differing = new ArrayList<>();
    onEachLocale(
        "wt",
        (database, prefix, c) -> {
          for (int cp : WHITE_SPACE_TO_SOMEONE) {
            String ws = new String(Character.toChars(cp));
            for (String id : List.of("t" + ws, ws + "t", ws)) {
              String java;
              try {
                Timer.in(Duration.ofHours(1)).named(id, TimerConflict.EXTEND);
                java = "accepted";
              } catch (IllegalArgumentException e) {
                java = e.getMessage();
              }
              String sql =
                  sqlVerdict(
                      c,
                      "SELECT outcome FROM fn."
                          + prefix
                          + "schedule('e', 'tick', NULL, ''::bytea, 'text/plain', '{}'::json,"
                          + " ARRAY['a'], now() + interval '1 hour', ?, 'EXTEND')",
                      id,
                      java);
              if (!sql.equals(java)) {
                differing.add(
                    escaped(
                        "%s schedule '%s': Java %s, SQL %s".formatted(database, id, java, sql)));
              }
              String javaCancel;
              try {
                Timer.checkCancelId("timerId", id);
                javaCancel = "accepted";
              } catch (IllegalArgumentException e) {
                javaCancel = e.getMessage();
              }
              String sqlCancel =
                  sqlVerdict(
                      c,
                      "SELECT outcome FROM fn." + prefix + "cancel_timer('a', ?)",
                      id,
                      javaCancel);
              if (!sqlCancel.equals(javaCancel)) {
                differing.add(
                    escaped(
                        "%s cancel_timer '%s': Java %s, SQL %s"
                            .formatted(database, id, javaCancel, sqlCancel)));
              }
            }
          }
        });
    assertThat(differing).as("the functions and the Java timer disagree").isEmpty();
  }

  /**
   * Java's white space (Character.isWhitespace), and what is white space to someone but not to
   * Java: no-break spaces, NEL, the Mongolian vowel separator, the zero-width space and no-break
   * space.
   */
  private static final List<Integer> WHITE_SPACE_TO_SOMEONE = whiteSpaceToSomeone();

  private static List<Integer> whiteSpaceToSomeone() {
    List<Integer> codePoints = new ArrayList<>();
    for (int cp = 0; cp <= 0xFFFF; cp++) {
      if (Character.isWhitespace(cp)) {
        codePoints.add(cp);
      }
    }
    codePoints.addAll(List.of(0x85, 0xA0, 0x180E, 0x2007, 0x200B, 0x202F, 0xFEFF));
    return List.copyOf(codePoints);
  }

  /** Statements on a connection of a store set up in a database of each locale. */
  private interface LocaleCheck {
    void run(String database, String prefix, Connection c) throws SQLException;
  }

  /**
   * Runs {@code check} on this server's default locale (C.UTF-8) and on a database of the C locale,
   * each with a store of its own set up under a fresh prefix starting {@code stem}, autocommit off.
   */
  private static void onEachLocale(String stem, LocaleCheck check) throws SQLException {
    for (String database : List.of("postgres", cLocaleDatabase())) {
      String prefix = stem + PREFIXES.incrementAndGet() + "_";
      try (PostgresOutboxStore store =
          PostgresOutboxStore.builder()
              .jdbcUrl(
                  PostgresServers.embedded(PostgresServers.selectedMajor())
                      .getJdbcUrl("postgres", database))
              .schema("fn")
              .tablePrefix(prefix)
              .poolSize(2)
              .build()) {
        store.setup();
        try (Connection c = store.dataSource().getConnection()) {
          c.setAutoCommit(false);
          check.run(database, prefix, c);
        }
      }
    }
  }

  /** "accepted", {@code java} when refused with 22023 and its message, else what SQL said. */
  private static String sqlVerdict(Connection c, String sql, String argument, String java)
      throws SQLException {
    String verdict;
    try (PreparedStatement ps = c.prepareStatement(sql)) {
      ps.setString(1, argument);
      ps.executeQuery().close();
      verdict = "accepted";
    } catch (SQLException e) {
      verdict =
          "22023".equals(e.getSQLState()) && e.getMessage().contains(java)
              ? java
              : e.getSQLState() + " " + e.getMessage();
    }
    c.rollback();
    return verdict;
  }

  /** {@code text} with every character but printable ASCII written as its escape. */
  private static String escaped(String text) {
    StringBuilder out = new StringBuilder();
    text.chars()
        .forEach(
            ch ->
                out.append(
                    ch >= 0x21 && ch < 0x7F
                        ? String.valueOf((char) ch)
                        : ch == ' ' ? " " : "\\u%04X".formatted(ch)));
    return out.toString();
  }

  /**
   * Headers whose JSON escapes a surrogate without its pair ({@code \ud83d} alone): refused as the
   * Java event refuses the same text, naming the header, the surrogate and its index, with 22023.
   * json_each cannot read them: the function failed with 22P02, "invalid input syntax for type
   * json", whose detail for a high surrogate alone said "Unicode low surrogate must follow a high
   * surrogate", naming neither the header nor the rule. A pair is a character, and accepted.
   */
  @Test
  void headersWithASurrogateWithoutItsPairAreRefusedAsByTheJavaEvent() throws Exception {
    // the JSON text the function gets, and the same headers as Java strings
    Map<String, Map<String, String>> cases = new LinkedHashMap<>();
    cases.put("{\"h\":\"\\ud83d\"}", Map.of("h", "\uD83D"));
    cases.put("{\"h\":\"x\\uDE00\"}", Map.of("h", "x\uDE00"));
    cases.put("{\"\\ud83dk\":\"v\"}", Map.of("\uD83Dk", "v"));
    cases.put("{\"h\":\"\\ud83d\\ude00\\ud83d\"}", Map.of("h", "\uD83D\uDE00\uD83D"));
    cases.put("{\"h\":\"\\ud83d\\ud83d\\ude00\"}", Map.of("h", "\uD83D\uD83D\uDE00"));
    cases.put("{\"h\":\"\\\\\\ud83d\"}", Map.of("h", "\\\uD83D"));
    cases.put("{\"h\":\"\\u0000\\ud83d\"}", Map.of("h", "\u0000\uD83D"));
    cases.put("{\"h\":\"\\ud83d\\u0000\"}", Map.of("h", "\uD83D\u0000"));
    cases.put(
        "{\"a\":\"\\ud83d\\ude00\",\"h\":\"\\udc00\"}",
        orderedMap("a", "\uD83D\uDE00", "h", "\uDC00"));
    // accepted: a pair, and the text of an escape after an escaped backslash
    cases.put("{\"h\":\"\\ud83d\\ude00\"}", Map.of("h", "\uD83D\uDE00"));
    cases.put("{\"h\":\"\\\\ud83d\"}", Map.of("h", "\\ud83d"));
    List<String> differing = new ArrayList<>();
    try (Connection c = sqlStore.dataSource().getConnection()) {
      c.setAutoCommit(false);
      for (Map.Entry<String, Map<String, String>> e : cases.entrySet()) {
        String java = javaVerdict(args("id", "t", null, "p", "c", e.getValue(), List.of("a")));
        String sql;
        try {
          publishWithSql(c, "id", "t", null, new byte[0], "c", e.getKey(), List.of("a"));
          sql = "accepted";
        } catch (SQLException refused) {
          sql =
              "22023".equals(refused.getSQLState()) && refused.getMessage().contains(java)
                  ? java
                  : refused.getSQLState() + " " + refused.getMessage();
        }
        c.rollback();
        if (!sql.equals(java)) {
          differing.add(escaped("%s: Java %s, SQL %s".formatted(e.getKey(), java, sql)));
        }
      }
    }
    assertThat(differing).as("the function and the Java event disagree").isEmpty();
  }

  private static Map<String, String> orderedMap(String k1, String v1, String k2, String v2) {
    Map<String, String> map = new LinkedHashMap<>();
    map.put(k1, v1);
    map.put(k2, v2);
    return map;
  }

  /** A database of the C locale on the test server (created once). */
  private static String cLocaleDatabase() throws SQLException {
    String name = "relaybus_c_locale";
    try (Connection c =
            PostgresServers.embedded(PostgresServers.selectedMajor())
                .getPostgresDatabase()
                .getConnection();
        Statement s = c.createStatement()) {
      try {
        s.execute(
            "CREATE DATABASE "
                + name
                + " TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C'"
                + " LC_CTYPE 'C'");
      } catch (SQLException e) {
        if (!"42P04".equals(e.getSQLState())) { // duplicate_database: made by an earlier run
          throw e;
        }
      }
    }
    return name;
  }

  /** "accepted", or the message the Java event refuses {@code a} with. */
  @SuppressWarnings("unchecked")
  private static String javaVerdict(Object[] a) {
    try {
      new OutboxEvent(
          (String) a[0],
          (String) a[1],
          (String) a[2],
          ((String) a[3]).getBytes(StandardCharsets.UTF_8),
          (String) a[4],
          (Map<String, String>) a[5],
          (List<String>) a[6]);
      return "accepted";
    } catch (IllegalArgumentException e) {
      return e.getMessage();
    }
  }

  /**
   * A cancel whose handler or timer id the Java call refuses is refused by {@code cancel_timer}
   * with the same message (SQLSTATE 22023), not answered NOT_FOUND: a caller told NOT_FOUND for a
   * handler with a stray space takes its timer for gone, and the timer fires.
   */
  @Test
  void cancelTimerRefusesWhatTheJavaCallRefusesWithTheSameMessage() throws Exception {
    Timer inAnHour =
        Timer.at(Instant.now().plus(Duration.ofHours(1))).named("s-7", TimerConflict.EXTEND);
    inTransaction(
        sqlStore,
        c -> scheduleWithSql(c, event("t1", "tick", null, "{}", List.of("timers")), inAnHour));
    List<String[]> bad =
        List.of(
            new String[] {null, "s-7"},
            new String[] {"", "s-7"},
            new String[] {"timers ", "s-7"},
            new String[] {"h".repeat(201), "s-7"},
            new String[] {"timers", null},
            new String[] {"timers", " "});
    List<String> answers = new ArrayList<>();
    for (String[] a : bad) {
      String javaMessage;
      try {
        javaStore.cancelTimer(a[0], a[1]);
        throw new AssertionError("the Java call accepted " + Arrays.toString(a));
      } catch (IllegalArgumentException e) {
        javaMessage = e.getMessage();
      }
      try (Connection c = sqlStore.dataSource().getConnection()) {
        c.setAutoCommit(false);
        try {
          answers.add(Arrays.toString(a) + " -> " + cancelWithSql(c, a[0], a[1]));
        } catch (SQLException e) {
          assertThat((Throwable) e).as(javaMessage).hasMessageContaining(javaMessage);
          assertThat(e.getSQLState()).as(javaMessage).isEqualTo("22023");
        }
        c.rollback();
      }
    }
    assertThat(answers).as("answered instead of refused").isEmpty();
    TimerResult cancelled = inTransaction(sqlStore, c -> cancelWithSql(c, "timers", "s-7"));
    assertThat(cancelled).isEqualTo(new TimerResult(TimerOutcome.CANCELLED, "t1"));
  }

  /**
   * A deadline the Java {@code Timer} refuses is refused by {@code schedule} (SQLSTATE 22023),
   * naming the argument, the rule and the value: {@code infinity} (a timer that never fires, and
   * its key's events behind it never go), {@code -infinity}, a year past 9999 or before 1 (beyond
   * what the Java store and MongoDB compute with). A new timer, and an extend of a pending one.
   */
  @Test
  void scheduleRefusesADeadlineTheJavaTimerRefusesNamingTheValueAndTheRule() throws Exception {
    Timer inAnHour =
        Timer.at(Instant.now().plus(Duration.ofHours(1))).named("s-7", TimerConflict.EXTEND);
    inTransaction(
        sqlStore,
        c -> scheduleWithSql(c, event("t1", "tick", "k", "{}", List.of("timers")), inAnHour));
    String rule = "fire_at must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z";
    Map<String, String> bad = new LinkedHashMap<>();
    bad.put("infinity", "infinity");
    bad.put("-infinity", "-infinity");
    bad.put("10000-01-01 00:00:00+00", "10000-01-01T00:00:00.000000Z");
    bad.put("9999-12-31 23:59:59.999999-01", "10000-01-01T00:59:59.999999Z");
    bad.put("0044-03-15 00:00:00+00 BC", "0044-03-15T00:00:00.000000Z BC");
    List<String> answers = new ArrayList<>();
    List<String> refusals = new ArrayList<>();
    for (Map.Entry<String, String> value : bad.entrySet()) {
      for (String timerId : Arrays.asList(null, "s-7")) {
        try (Connection c = sqlStore.dataSource().getConnection()) {
          c.setAutoCommit(false);
          try (PreparedStatement ps =
              c.prepareStatement(
                  "SELECT outcome, event_id FROM fn."
                      + sqlPrefix
                      + "schedule('t2', 'tick', 'k', ''::bytea, 'text/plain', '{}'::json,"
                      + " ARRAY['timers'], ?::timestamptz, ?, ?)")) {
            ps.setString(1, value.getKey());
            ps.setString(2, timerId);
            ps.setString(3, timerId == null ? null : "EXTEND");
            answers.add(value.getKey() + " " + timerId + " -> " + timerResult(ps));
          } catch (SQLException e) {
            assertThat(e.getSQLState()).as(e.getMessage()).isEqualTo("22023");
            refusals.add(e.getMessage().lines().findFirst().orElseThrow());
          }
          c.rollback();
        }
      }
    }
    assertThat(answers).as("answered instead of refused").isEmpty();
    assertThat(refusals)
        .containsExactlyElementsOf(
            bad.values().stream()
                .flatMap(v -> java.util.stream.Stream.of(v, v))
                .map(v -> "ERROR: " + rule + " (the years 1 to 9999), but was " + v)
                .toList());
    // the bounds themselves are deadlines (Timer.MIN_AT and MAX_AT)
    for (Instant at : List.of(Timer.MIN_AT, Timer.MAX_AT)) {
      String id = "at-" + at.getEpochSecond();
      TimerResult armed =
          inTransaction(
              sqlStore,
              c -> scheduleWithSql(c, event(id, "tick", null, "{}", List.of("a")), Timer.at(at)));
      assertThat(armed).isEqualTo(new TimerResult(TimerOutcome.ARMED, id));
    }
  }

  /**
   * A keyed timer cancelled, or moved earlier, through the SQL functions lets the key's followers
   * go at once, as through the Java store: a claim deferred them behind the timer (issue 13 item
   * 1), and the functions must pull them back as PostgresTimers does. Before the functions did, the
   * followers waited until the timer's old deadline (the claims below returned nothing of them).
   */
  @Test
  void followersOfATimerCancelledOrAdvancedWithSqlGoAtOnce() throws Exception {
    Timer inAnHour = Timer.at(Instant.now().plus(Duration.ofHours(1)));
    for (String key : List.of("k1", "k2")) {
      String timer = key.equals("k1") ? "t1" : "t2";
      OutboxEvent tick = event(timer, "tick", key, "{}", List.of("timers"));
      TimerResult armed =
          inTransaction(
              sqlStore, c -> scheduleWithSql(c, tick, inAnHour.named(timer, TimerConflict.EXTEND)));
      assertThat(armed).isEqualTo(new TimerResult(TimerOutcome.ARMED, timer));
    }
    for (int i = 1; i <= 7; i++) {
      sqlStore.publish(event("a" + i, "step", "k1", "{}", List.of("timers")));
      sqlStore.publish(event("b" + i, "step", "k2", "{}", List.of("timers")));
    }
    List<Integer> all = IntStream.range(0, Lanes.COUNT).boxed().toList();
    List<LaneLease> leases = sqlStore.acquireLanes("A", "g", all, Duration.ofMinutes(5));
    assertThat(sqlStore.claim("A", leases, 5)).as("both keys wait for their timers").isEmpty();

    TimerResult cancelled = inTransaction(sqlStore, c -> cancelWithSql(c, "timers", "t1"));
    assertThat(cancelled).isEqualTo(new TimerResult(TimerOutcome.CANCELLED, "t1"));
    OutboxEvent ignored = event("x", "tick", "k2", "{}", List.of("timers"));
    Timer now = Timer.at(Instant.now().minusSeconds(1)).named("t2", TimerConflict.EXTEND);
    TimerResult extended = inTransaction(sqlStore, c -> scheduleWithSql(c, ignored, now));
    assertThat(extended).isEqualTo(new TimerResult(TimerOutcome.EXTENDED, "t2"));

    List<String> out = new ArrayList<>();
    for (int claims = 0; claims < 5; claims++) {
      List<ClaimedDelivery> batch = sqlStore.claim("A", leases, 5);
      batch.forEach(d -> out.add(d.eventId()));
      sqlStore.complete(batch.stream().map(ClaimedDelivery::token).toList());
    }
    assertThat(out.stream().filter(id -> id.startsWith("a")))
        .containsExactly("a1", "a2", "a3", "a4", "a5", "a6", "a7");
    assertThat(out.stream().filter(id -> id.startsWith("b") || id.equals("t2")))
        .containsExactly("t2", "b1", "b2", "b3", "b4", "b5", "b6", "b7");
  }

  /**
   * A claim defers a keyed timer's follower behind the timer's deadline, holding the timer row
   * {@code FOR SHARE}, and commits while a call that cancels the timer or moves it earlier waits
   * for that lock. The deferral committed after the call's statement began: a pull in that
   * statement (the functions up to schema version 21) reads the follower as it was before and
   * leaves it an hour behind a timer that fired or is gone; a pull in a statement of its own (the
   * Java calls, and the functions since version 22) sees it. The claim is held in its deferral by a
   * trigger of this test that waits for an advisory lock the test holds; nothing else is changed.
   */
  @Test
  void aFollowerDeferredByAClaimThatCommitsWhileTheCallWaitsIsPulledBack() throws Exception {
    record Case(String name, boolean sql, boolean cancel) {}
    List<String> outcomes = new ArrayList<>();
    for (Case c :
        List.of(
            new Case("java extend", false, false),
            new Case("java cancel", false, true),
            new Case("sql extend", true, false),
            new Case("sql cancel", true, true))) {
      PostgresOutboxStore store = c.sql() ? sqlStore : javaStore;
      String prefix = c.sql() ? sqlPrefix : javaPrefix;
      String key = "key-" + c.name().replace(' ', '-');
      String timerId = "t-" + key;
      TimerResult armed =
          inTransaction(
              store,
              tx ->
                  store.schedule(
                      tx,
                      event(timerId, "tick", key, "{}", List.of("h")),
                      Timer.at(Instant.now().plus(Duration.ofHours(1)))
                          .named(timerId, TimerConflict.EXTEND)));
      assertThat(armed).isEqualTo(new TimerResult(TimerOutcome.ARMED, timerId));
      store.publish(event("f-" + key, "step", key, "{}", List.of("h")));
      List<Integer> all = IntStream.range(0, Lanes.COUNT).boxed().toList();
      List<LaneLease> leases = store.acquireLanes("A", "g-" + key, all, Duration.ofMinutes(5));
      assertThat(store.claim("A", leases, 10)).as("%s: the key waits for its timer", c).isEmpty();

      java.util.concurrent.ExecutorService pool =
          java.util.concurrent.Executors.newFixedThreadPool(2);
      long gate = 7_000 + outcomes.size();
      // the gate's holder on a connection of its own: the store's pool (2) serves claim and call
      try (Connection holder =
          java.sql.DriverManager.getConnection(
              PostgresServers.embeddedJdbcUrl(PostgresServers.selectedMajor()))) {
        try (Statement s = holder.createStatement()) {
          s.execute(
              ("CREATE FUNCTION fn.{p}gate_() RETURNS trigger LANGUAGE plpgsql AS $$"
                      + " BEGIN PERFORM pg_advisory_xact_lock_shared({gate}); RETURN NEW; END $$")
                  .replace("{p}", prefix)
                  .replace("{gate}", String.valueOf(gate)));
          s.execute(
              ("CREATE TRIGGER {p}gate BEFORE UPDATE ON fn.{p}deliveries FOR EACH ROW"
                      + " WHEN (NEW.key = '{key}' AND NEW.available_at > OLD.available_at"
                      + " AND NEW.timer_id IS NULL) EXECUTE FUNCTION fn.{p}gate_()")
                  .replace("{p}", prefix)
                  .replace("{key}", key));
          s.execute("SELECT pg_advisory_lock(" + gate + ")");
        }
        // the claim that defers the follower (parked by the claim above) waits at the gate
        var claim = pool.submit(() -> store.claim("A", leases, 10));
        awaitRows(holder, waiting(prefix, "'advisory'"));
        Instant now = serverClock(holder); // after the follower was parked
        var call =
            pool.submit(
                () ->
                    inTransaction(
                        store,
                        tx -> {
                          OutboxEvent ignored = event("x-" + key, "tick", key, "{}", List.of("h"));
                          Timer earlier = Timer.at(now).named(timerId, TimerConflict.EXTEND);
                          TimerResult result;
                          if (c.sql()) {
                            result =
                                c.cancel()
                                    ? cancelWithSql(tx, "h", timerId)
                                    : scheduleWithSql(tx, ignored, earlier);
                          } else {
                            result =
                                c.cancel()
                                    ? store.cancelTimer(tx, "h", timerId)
                                    : store.schedule(tx, ignored, earlier);
                          }
                          return result;
                        }));
        // the call waits for the claim's lock on the timer row
        awaitRows(holder, waiting(prefix, "'transactionid', 'tuple'"));
        try (Statement s = holder.createStatement()) {
          s.execute("SELECT pg_advisory_unlock(" + gate + ")");
        }
        assertThat(claim.get(30, java.util.concurrent.TimeUnit.SECONDS))
            .as("%s: the claim that deferred the follower", c)
            .isEmpty();
        assertThat(call.get(30, java.util.concurrent.TimeUnit.SECONDS))
            .as(c.name())
            .isEqualTo(
                new TimerResult(
                    c.cancel() ? TimerOutcome.CANCELLED : TimerOutcome.EXTENDED, timerId));
        try (Statement s = holder.createStatement()) {
          s.execute("DROP TRIGGER {p}gate ON fn.{p}deliveries".replace("{p}", prefix));
          s.execute("DROP FUNCTION fn.{p}gate_()".replace("{p}", prefix));
        }
      } finally {
        pool.shutdownNow();
      }
      List<String> out = new ArrayList<>();
      for (int claims = 0; claims < 3; claims++) {
        List<ClaimedDelivery> batch = store.claim("A", leases, 10);
        batch.forEach(d -> out.add(d.eventId()));
        store.complete(batch.stream().map(ClaimedDelivery::token).toList());
      }
      outcomes.add(c.name() + ": " + out + stillPending(store, prefix, key));
    }
    assertThat(outcomes)
        .containsExactly(
            "java extend: [t-key-java-extend, f-key-java-extend]",
            "java cancel: [f-key-java-cancel]",
            "sql extend: [t-key-sql-extend, f-key-sql-extend]",
            "sql cancel: [f-key-sql-cancel]");
  }

  /** The key's pending deliveries and how long from now each is due, or nothing. */
  private static String stillPending(PostgresOutboxStore store, String prefix, String key)
      throws SQLException {
    List<List<Object>> pending =
        rowsOf(
            store,
            "SELECT event_id || ' due in ' || round(extract(epoch FROM available_at - now()) / 60)"
                + " || ' min' FROM fn."
                + prefix
                + "deliveries WHERE key = '"
                + key
                + "' ORDER BY sequence");
    return pending.isEmpty() ? "" : ", pending " + pending.stream().map(r -> r.get(0)).toList();
  }

  /** A query for a session of the outbox {@code prefix} waiting for a lock of those kinds. */
  private static String waiting(String prefix, String kinds) {
    return "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event IN ("
        + kinds
        + ") AND query LIKE '%fn."
        + prefix
        + "%'";
  }

  private static Instant serverClock(Connection c) throws SQLException {
    try (Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT clock_timestamp()")) {
      rs.next();
      return rs.getObject(1, OffsetDateTime.class).toInstant();
    }
  }

  /** Waits (up to 30 s) until {@code sql} returns a row: a state the test waits for, not a time. */
  private static void awaitRows(Connection c, String sql) {
    org.awaitility.Awaitility.await()
        .atMost(Duration.ofSeconds(30))
        .pollInterval(Duration.ofMillis(20))
        .until(
            () -> {
              try (Statement s = c.createStatement();
                  ResultSet rs = s.executeQuery(sql)) {
                return rs.next();
              }
            });
  }

  /**
   * A delivery's id on the log is {@code 2^62 + log id * 1024 + handler number - 1}: an event has
   * room for 1024 handlers, and OutboxEvent allows at most {@value Validation#MAX_HANDLERS}. The
   * function must refuse what the Java event refuses; a 1025th handler would take the id of the
   * next log row's first delivery.
   */
  @Test
  void moreHandlersThanAnEventMayHaveAreRefusedAsByTheJavaEvent() throws Exception {
    List<String> many = IntStream.rangeClosed(1, 1025).mapToObj(i -> "h" + i).toList();
    String javaMessage = javaRefusal(args("big", "t", "k", "p", "c", Map.of(), many));
    assertThat(javaMessage).isEqualTo("handlers must name at most 1000 handlers, but named 1025");
    try (Connection c = sqlStore.dataSource().getConnection()) {
      c.setAutoCommit(false);
      assertThatThrownBy(() -> publishWithSql(c, "big", "t", "k", new byte[0], "c", "{}", many))
          .isInstanceOf(SQLException.class)
          .hasMessageContaining(javaMessage)
          .extracting(e -> ((SQLException) e).getSQLState())
          .isEqualTo("22023");
      c.rollback();
    }
  }

  /**
   * What an event with 1025 handlers (accepted by the function) does to the delivery path: its
   * 1025th delivery would have the id of the next log row's first delivery; today the claim never
   * hands it out (20 claims of 100 took the other 1025), so it is silently lost.
   */
  @Test
  void everyDeliveryOfAnEventPublishedWithSqlHasItsOwnIdAndIsDeliveredOnce() throws Exception {
    List<String> many = IntStream.rangeClosed(1, 1025).mapToObj(i -> "h" + i).toList();
    try {
      inTransaction(
          sqlStore, c -> publishWithSql(c, "big", "t", "k", new byte[0], "c", "{}", many));
    } catch (SQLException refused) {
      assertThat(refused.getSQLState()).isEqualTo("22023");
      return; // refused, as the Java event refuses it: nothing to deliver
    }
    inTransaction(sqlStore, c -> publishWithSql(c, event("next", "t", "k", "{}", List.of("h1"))));
    List<Integer> all = IntStream.range(0, Lanes.COUNT).boxed().toList();
    List<LaneLease> leases = sqlStore.acquireLanes("A", "g", all, Duration.ofMinutes(5));
    List<ClaimedDelivery> claimed = new ArrayList<>();
    for (int i = 0; i < 20; i++) {
      claimed.addAll(sqlStore.claim("A", leases, 100));
    }
    assertThat(claimed.stream().map(d -> d.eventId() + "/" + d.handler()))
        .as("every (event, handler) claimed once in 20 claims")
        .contains("big/h1", "big/h1024", "big/h1025", "next/h1")
        .hasSize(1026);
    assertThat(claimed.stream().map(ClaimedDelivery::deliveryId).distinct().count())
        .as("distinct delivery ids")
        .isEqualTo(1026);
    sqlStore.complete(claimed.stream().map(ClaimedDelivery::token).toList());
    assertThat(rows(sqlStore, sqlPrefix, "log")).as("log rows left").isEmpty();
  }

  private static Object[] args(
      String id,
      String type,
      String key,
      String payload,
      String contentType,
      Map<String, String> headers,
      List<String> handlers) {
    return new Object[] {id, type, key, payload, contentType, headers, handlers};
  }

  @SuppressWarnings("unchecked")
  private static String javaRefusal(Object[] a) {
    try {
      new OutboxEvent(
          (String) a[0],
          (String) a[1],
          (String) a[2],
          ((String) a[3]).getBytes(StandardCharsets.UTF_8),
          (String) a[4],
          (Map<String, String>) a[5],
          (List<String>) a[6]);
    } catch (IllegalArgumentException | NullPointerException e) {
      return e.getMessage() == null ? "handler must not be blank, but was null" : e.getMessage();
    }
    throw new AssertionError("the Java event accepted " + Arrays.toString(a));
  }

  private static OutboxEvent event(
      String id, String type, String key, String payload, List<String> handlers) {
    Map<String, String> headers = new LinkedHashMap<>();
    headers.put("traceparent", "00-" + id);
    headers.put("b", "2");
    return new OutboxEvent(
        id,
        type,
        key,
        payload.getBytes(StandardCharsets.UTF_8),
        "application/json",
        headers,
        handlers);
  }

  PublishResult publishWithSql(Connection c, OutboxEvent e) throws SQLException {
    ResultRow row =
        publishWithSql(
            c,
            e.id(),
            e.type(),
            e.key(),
            e.payload(),
            e.contentType(),
            PostgresPublisher.json(e.headers()),
            e.handlers());
    return row.toResult(e.id());
  }

  private record ResultRow(boolean newEvent, List<String> added, List<String> differing) {
    PublishResult toResult(String id) {
      return new PublishResult(id, newEvent, added, differing);
    }
  }

  private ResultRow publishWithSql(
      Connection c,
      String id,
      String type,
      String key,
      byte[] payload,
      String contentType,
      String headers,
      List<?> handlers)
      throws SQLException {
    return publishWithSql(
        c, id, type, key, payload, contentType, headers, handlers, "fn." + sqlPrefix);
  }

  private static ResultRow publishWithSql(
      Connection c,
      String id,
      String type,
      String key,
      byte[] payload,
      String contentType,
      String headers,
      List<?> handlers,
      String qualifiedPrefix)
      throws SQLException {
    try (PreparedStatement ps =
        c.prepareStatement(
            "SELECT new_event, added_handlers, differing_fields FROM "
                + qualifiedPrefix
                + "publish(?, ?, ?, ?, ?, ?::json, ?)")) {
      ps.setString(1, id);
      ps.setString(2, type);
      ps.setString(3, key);
      ps.setBytes(4, payload);
      ps.setString(5, contentType);
      ps.setString(6, headers);
      ps.setArray(7, c.createArrayOf("text", handlers.toArray()));
      try (ResultSet rs = ps.executeQuery()) {
        assertThat(rs.next()).isTrue();
        ResultRow row =
            new ResultRow(
                rs.getBoolean(1),
                Arrays.asList((String[]) rs.getArray(2).getArray()),
                Arrays.asList((String[]) rs.getArray(3).getArray()));
        assertThat(rs.next()).isFalse();
        return row;
      }
    }
  }

  private TimerResult scheduleWithSql(Connection c, OutboxEvent e, Timer timer)
      throws SQLException {
    try (PreparedStatement ps =
        c.prepareStatement(
            "SELECT outcome, event_id FROM fn."
                + sqlPrefix
                + "schedule(?, ?, ?, ?, ?, ?::json, ?, ?, ?, ?)")) {
      ps.setString(1, e.id());
      ps.setString(2, e.type());
      ps.setString(3, e.key());
      ps.setBytes(4, e.payload());
      ps.setString(5, e.contentType());
      ps.setString(6, PostgresPublisher.json(e.headers()));
      ps.setArray(7, c.createArrayOf("text", e.handlers().toArray()));
      ps.setObject(8, OffsetDateTime.ofInstant(timer.at(), ZoneOffset.UTC));
      ps.setString(9, timer.id());
      ps.setString(10, timer.onConflict() == null ? null : timer.onConflict().name());
      return timerResult(ps);
    }
  }

  private TimerResult cancelWithSql(Connection c, String handler, String timerId)
      throws SQLException {
    try (PreparedStatement ps =
        c.prepareStatement(
            "SELECT outcome, event_id FROM fn." + sqlPrefix + "cancel_timer(?, ?)")) {
      ps.setString(1, handler);
      ps.setString(2, timerId);
      return timerResult(ps);
    }
  }

  private static TimerResult timerResult(PreparedStatement ps) throws SQLException {
    try (ResultSet rs = ps.executeQuery()) {
      assertThat(rs.next()).isTrue();
      TimerResult result =
          new TimerResult(io.relaybus.store.TimerOutcome.valueOf(rs.getString(1)), rs.getString(2));
      assertThat(rs.next()).isFalse();
      return result;
    }
  }

  /** A table's rows, without ids and times of day that differ between two runs. */
  /** The SQL functions' store holds the same rows as the Java store's, table by table. */
  private void assertSameRows(String... tables) throws SQLException {
    for (String table : tables) {
      assertThat(rows(sqlStore, sqlPrefix, table))
          .as(table)
          .isEqualTo(rows(javaStore, javaPrefix, table));
    }
  }

  private static List<List<Object>> rowsOf(PostgresOutboxStore store, String sql)
      throws SQLException {
    try (Connection c = store.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      List<List<Object>> rows = new ArrayList<>();
      while (rs.next()) {
        List<Object> row = new ArrayList<>();
        for (int i = 1; i <= rs.getMetaData().getColumnCount(); i++) {
          row.add(rs.getObject(i));
        }
        rows.add(row);
      }
      return rows;
    }
  }

  private static List<List<Object>> rows(PostgresOutboxStore store, String prefix, String table)
      throws SQLException {
    String tableName = "fn." + prefix + table;
    String sql =
        switch (table) {
          case "events" ->
              "SELECT id, type, key, payload, content_type, headers::jsonb::text, handlers::text"
                  + " FROM "
                  + tableName
                  + " ORDER BY id";
          case "deliveries" ->
              "SELECT event_id, handler, lane, key, sequence, status, timer_id, fire_at,"
                  + " CASE WHEN timer_id IS NOT NULL OR fire_at IS NOT NULL"
                  + " OR available_at > now() + interval '1 day' THEN available_at END"
                  + " FROM "
                  + tableName
                  + " ORDER BY event_id, handler";
          // the xid and the time differ between two runs; ids, lanes and handlers must not
          case "log" ->
              "SELECT id, lane, handlers::text, event_id, key FROM " + tableName + " ORDER BY id";
          default -> "SELECT key, sequence FROM " + tableName + " ORDER BY key";
        };
    try (Connection c = store.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      ResultSetMetaData meta = rs.getMetaData();
      List<List<Object>> rows = new ArrayList<>();
      while (rs.next()) {
        List<Object> row = new ArrayList<>();
        for (int i = 1; i <= meta.getColumnCount(); i++) {
          Object value = rs.getObject(i);
          row.add(value instanceof byte[] bytes ? Arrays.toString(bytes) : value);
        }
        rows.add(row);
      }
      return rows;
    }
  }

  private interface InTransaction<T> {
    T run(Connection connection) throws SQLException;
  }

  private static <T> T inTransaction(PostgresOutboxStore store, InTransaction<T> work)
      throws SQLException {
    try (Connection c = store.dataSource().getConnection()) {
      c.setAutoCommit(false);
      try {
        T result = work.run(c);
        c.commit();
        return result;
      } catch (SQLException | RuntimeException e) {
        c.rollback();
        throw e;
      }
    }
  }
}
