package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.Machine;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import javax.sql.DataSource;

/**
 * The SQL path alone, on a real PostgreSQL 17 (embedded binaries): publish against a bare
 * two-INSERT outbox in the same run, and the claim+complete drain of a preloaded backlog against a
 * plain-SQL ceiling. Every pair is measured side by side, interleaved, on the same server, so read
 * the ratios; the absolute numbers move with the machine and its load.
 *
 * <p>Run: {@code ./mvnw -q -pl benchmarks -am install -DskipTests && ./mvnw -q -pl benchmarks
 * exec:java -Dexec.args="--quick"}. Prints a markdown report; {@code --out FILE} also writes it.
 */
public final class SqlPathBenchmark {
  private static final String SCHEMA = "bench";
  private static final byte[] PAYLOAD =
      "{\"orderId\":\"0000000000\",\"total\":1234,\"currency\":\"EUR\",\"lines\":[1,2,3]}"
          .getBytes(StandardCharsets.UTF_8);

  private final boolean quick;
  private final DataSource admin;
  private final PgProbe probe;
  private final StringBuilder report = new StringBuilder();
  private int prefixes;

  private SqlPathBenchmark(boolean quick) {
    this.quick = quick;
    this.admin = EmbeddedPostgres17.dataSource();
    this.probe = new PgProbe(admin);
  }

  public static void main(String[] args) throws Exception {
    boolean quick = List.of(args).contains("--quick");
    Path out = null;
    for (int i = 0; i < args.length - 1; i++) {
      if (args[i].equals("--out")) {
        out = Path.of(args[i + 1]);
      }
    }
    SqlPathBenchmark benchmark = new SqlPathBenchmark(quick);
    String markdown = benchmark.run();
    System.out.println(markdown);
    if (out != null) {
      Files.writeString(out, markdown);
    }
    System.exit(0);
  }

  private String run() throws Exception {
    probe.execute("CREATE SCHEMA IF NOT EXISTS " + SCHEMA);
    report
        .append("### SQL path (")
        .append(quick ? "quick" : "full")
        .append(" run, ")
        .append(LocalDate.now())
        .append(")\n\n")
        .append(Machine.describe())
        .append("PostgreSQL ")
        .append(probe.queryLong("SHOW server_version_num"))
        .append(
            " (embedded binaries, default settings, synchronous_commit on), one client JVM.\n\n");
    publishSingle();
    publishBatch();
    drain(quick ? 20_000 : 200_000, 1000);
    drain(quick ? 20_000 : 200_000, 250);
    return report.toString();
  }

  // ------------------------------------------------------------------ publish

  private PostgresOutboxStore newStore(int poolSize) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema(SCHEMA)
            .tablePrefix("b" + (++prefixes) + "_")
            .poolSize(poolSize)
            .build();
    store.setup();
    return store;
  }

  private static OutboxEvent event(long i) {
    return OutboxEvent.builder("order.placed")
        .key("order-" + (i % 1000))
        .payload(PAYLOAD, "application/json")
        .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .handlers("billing")
        .build();
  }

  /** The outbox everyone starts with: two tables, two inserts, the indexes a poller needs. */
  private String createBare() throws SQLException {
    String p = SCHEMA + ".bare" + (++prefixes) + "_";
    probe.execute(
        "CREATE TABLE "
            + p
            + "events (id text PRIMARY KEY, type text NOT NULL, key text, payload bytea NOT NULL,"
            + " content_type text NOT NULL, headers json NOT NULL, created_at timestamptz NOT NULL DEFAULT now())");
    probe.execute(
        "CREATE TABLE "
            + p
            + "deliveries (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id text NOT NULL,"
            + " handler text NOT NULL, key text, available_at timestamptz NOT NULL DEFAULT now(),"
            + " created_at timestamptz NOT NULL DEFAULT now())");
    probe.execute("CREATE INDEX ON " + p + "deliveries (available_at, id)");
    return p;
  }

  private interface Publisher {
    void publish(Connection tx, List<OutboxEvent> events) throws SQLException;
  }

  private static Publisher bare(String p) {
    String events =
        "INSERT INTO "
            + p
            + "events (id, type, key, payload, content_type, headers) VALUES (?, ?, ?, ?, ?, ?::json)";
    String deliveries = "INSERT INTO " + p + "deliveries (event_id, handler, key) VALUES (?, ?, ?)";
    return (tx, batch) -> {
      try (PreparedStatement e = tx.prepareStatement(events);
          PreparedStatement d = tx.prepareStatement(deliveries)) {
        for (OutboxEvent event : batch) {
          e.setString(1, event.id());
          e.setString(2, event.type());
          e.setString(3, event.key());
          e.setBytes(4, event.payload());
          e.setString(5, event.contentType());
          e.setString(6, "{\"traceparent\":\"" + event.headers().get("traceparent") + "\"}");
          e.addBatch();
          for (String handler : event.handlers()) {
            d.setString(1, event.id());
            d.setString(2, handler);
            d.setString(3, event.key());
            d.addBatch();
          }
        }
        e.executeBatch();
        d.executeBatch();
      }
    };
  }

  private record Sample(long events, long nanos, long walBytes) {
    Sample plus(Sample o) {
      return new Sample(events + o.events, nanos + o.nanos, walBytes + o.walBytes);
    }

    double perSecond() {
      return events / (nanos / 1e9);
    }
  }

  private Sample measure(
      DataSource pool, Publisher publisher, int transactions, int batch, long[] counter)
      throws SQLException {
    long wal = probe.walLsn();
    long start = System.nanoTime();
    try (Connection tx = pool.getConnection()) {
      tx.setAutoCommit(false);
      for (int t = 0; t < transactions; t++) {
        List<OutboxEvent> events = new ArrayList<>(batch);
        for (int i = 0; i < batch; i++) {
          events.add(event(counter[0]++));
        }
        publisher.publish(tx, events);
        tx.commit();
      }
    }
    long nanos = System.nanoTime() - start;
    return new Sample((long) transactions * batch, nanos, probe.walLsn() - wal);
  }

  private void publishSingle() throws Exception {
    comparePublish(
        "Single-event publish, one publisher, one transaction per event",
        1,
        quick ? 2_000 : 10_000);
  }

  private void publishBatch() throws Exception {
    comparePublish(
        "Batch publish, 100 events per transaction, one publisher", 100, quick ? 100 : 500);
  }

  /** Interleaved rounds (bare, relaybus, relaybus, bare, ...) so drift hits both alike. */
  private void comparePublish(String title, int batch, int transactions) throws Exception {
    try (PostgresOutboxStore store = newStore(2)) {
      String bareTables = createBare();
      Publisher bare = bare(bareTables);
      Publisher relaybus = store::publishAll;
      long[] counter = {0};
      // warm-up: plans cached, pages in memory
      measure(store.dataSource(), bare, Math.max(10, transactions / 20), batch, counter);
      measure(store.dataSource(), relaybus, Math.max(10, transactions / 20), batch, counter);
      Sample bareTotal = new Sample(0, 0, 0);
      Sample oursTotal = new Sample(0, 0, 0);
      int rounds = 6;
      for (int round = 0; round < rounds; round++) {
        boolean bareFirst = round % 2 == 0;
        if (bareFirst) {
          bareTotal =
              bareTotal.plus(
                  measure(store.dataSource(), bare, transactions / rounds, batch, counter));
        }
        oursTotal =
            oursTotal.plus(
                measure(store.dataSource(), relaybus, transactions / rounds, batch, counter));
        if (!bareFirst) {
          bareTotal =
              bareTotal.plus(
                  measure(store.dataSource(), bare, transactions / rounds, batch, counter));
        }
      }
      report.append("#### ").append(title).append("\n\n");
      report.append("| variant | events | events/s | WAL B/event |\n|---|---:|---:|---:|\n");
      row("bare two-INSERT outbox (events + deliveries, PK + due index)", bareTotal);
      row("relaybus publish (handlers, key sequence, lane; 4 indexes)", oursTotal);
      report.append(
          "\nrelaybus ÷ bare: **%.2f×** throughput (%+.0f%% cost per event), %.2f× WAL per event; %d interleaved rounds.\n\n"
              .formatted(
                  oursTotal.perSecond() / bareTotal.perSecond(),
                  100 * (bareTotal.perSecond() / oursTotal.perSecond() - 1),
                  (double) oursTotal.walBytes()
                      / oursTotal.events()
                      / ((double) bareTotal.walBytes() / bareTotal.events()),
                  rounds));
    }
  }

  private void row(String name, Sample s) {
    report.append(
        "| %s | %,d | %,.0f | %,.0f |\n"
            .formatted(name, s.events(), s.perSecond(), (double) s.walBytes() / s.events()));
  }

  // ------------------------------------------------------------------ drain

  private void preload(PostgresOutboxStore store, int count) {
    List<OutboxEvent> batch = new ArrayList<>(1000);
    for (long i = 0; i < count; i++) {
      batch.add(event(i));
      if (batch.size() == 1000) {
        store.publishAll(batch);
        batch.clear();
      }
    }
    if (!batch.isEmpty()) {
      store.publishAll(batch);
    }
  }

  private void drain(int backlog, int batchSize) throws Exception {
    String prefix;
    long drained = 0;
    long nanos;
    long wal;
    long statements;
    String claimTime;
    String completeTime;
    PgProbe.TableStats deliveriesBefore;
    PgProbe.TableStats lanesBefore;
    try (PostgresOutboxStore store = newStore(2)) {
      prefix = "b" + prefixes + "_";
      preload(store, backlog);
      probe.execute("CHECKPOINT");
      probe.execute("VACUUM ANALYZE " + SCHEMA + "." + prefix + "deliveries");
      probe.awaitStatsFlush();
      deliveriesBefore = probe.table(SCHEMA, prefix + "deliveries");
      lanesBefore = probe.table(SCHEMA, prefix + "lanes");
      probe.resetStatements();
      long walStart = probe.walLsn();
      long start = System.nanoTime();
      List<LaneLease> leases =
          store.acquireLanes("bench", "bench", LaneRange.all().lanes(), Duration.ofMinutes(10));
      while (true) {
        List<ClaimedDelivery> claimed = store.claim("bench", leases, batchSize);
        if (claimed.isEmpty()) {
          break;
        }
        drained += store.complete(claimed.stream().map(ClaimedDelivery::token).toList()).size();
      }
      nanos = System.nanoTime() - start;
      wal = probe.walLsn() - walStart;
      statements = probe.statementCalls();
      claimTime = probe.statementTime("WITH req AS");
      completeTime = probe.statementTime("), done AS (");
    }
    probe.awaitStatsFlush();
    PgProbe.TableStats deliveries =
        probe.table(SCHEMA, prefix + "deliveries").minus(deliveriesBefore);
    PgProbe.TableStats lanes = probe.table(SCHEMA, prefix + "lanes").minus(lanesBefore);
    Ceiling ceiling = ceilingDrain(backlog, batchSize);

    report.append(
        "#### Drain of a %,d-delivery backlog, one session, claim limit %d\n\n"
            .formatted(backlog, batchSize));
    report.append(
        "| variant | drained | deliveries/s | WAL B/delivery | statements/delivery | delivery rows updated | lane updates HOT % | dead tuples after |\n");
    report.append("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    report.append(
        "| relaybus claim + fenced complete | %,d | %,.0f | %,.0f | %.4f | %,d | %s | %,d |\n"
            .formatted(
                drained,
                drained / (nanos / 1e9),
                (double) wal / drained,
                (double) statements / drained,
                deliveries.updated(),
                lanes.hotPercent(),
                deliveries.dead()));
    report.append(
        "| ceiling: plain `DELETE … RETURNING` of the oldest rows, no lanes, no order, no fencing | %,d | %,.0f | %,.0f | %.4f | 0 | n/a | %,d |\n"
            .formatted(
                ceiling.drained(),
                ceiling.perSecond(),
                (double) ceiling.wal() / ceiling.drained(),
                (double) ceiling.statements() / ceiling.drained(),
                ceiling.dead()));
    report.append(
        ("\nrelaybus ÷ ceiling: **%.2f×**. Lane updates: %,d (%,d HOT). Server time: claim %s, complete %s"
                + " (wall clock per delivery: %.1f µs). Backlog keyed over 1,000 keys, one handler.\n\n")
            .formatted(
                drained / (nanos / 1e9) / ceiling.perSecond(),
                lanes.updated(),
                lanes.hotUpdated(),
                claimTime,
                completeTime,
                nanos / 1e3 / drained));
  }

  private record Ceiling(long drained, double perSecond, long wal, long statements, long dead) {}

  /** The fastest a queue drain gets in PostgreSQL: delete the oldest rows and return them. */
  private Ceiling ceilingDrain(int backlog, int batchSize) throws Exception {
    String p = createBare();
    try (Connection c = admin.getConnection()) {
      c.setAutoCommit(true);
      try (PreparedStatement load =
          c.prepareStatement(
              "INSERT INTO "
                  + p
                  + "deliveries (event_id, handler, key)"
                  + " SELECT 'e' || i, 'billing', 'order-' || (i % 1000) FROM generate_series(1, ?) i")) {
        load.setInt(1, backlog);
        load.executeUpdate();
      }
      probe.execute(
          "INSERT INTO "
              + p
              + "events (id, type, key, payload, content_type, headers)"
              + " SELECT 'e' || i, 'order.placed', 'order-' || (i % 1000), '\\x"
              + hex(PAYLOAD)
              + "', 'application/json', '{}' FROM generate_series(1, "
              + backlog
              + ") i");
      probe.execute("CHECKPOINT");
      probe.execute("VACUUM ANALYZE " + p + "deliveries");
      probe.resetStatements();
      long walStart = probe.walLsn();
      long drained = 0;
      long start = System.nanoTime();
      try (PreparedStatement drain =
          c.prepareStatement(
              "WITH d AS (DELETE FROM "
                  + p
                  + "deliveries WHERE id IN ("
                  + " SELECT id FROM "
                  + p
                  + "deliveries ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED)"
                  + " RETURNING event_id, handler, key)"
                  + " SELECT d.*, e.payload, e.headers FROM d JOIN "
                  + p
                  + "events e ON e.id = d.event_id")) {
        drain.setInt(1, batchSize);
        while (true) {
          int rows = 0;
          try (var rs = drain.executeQuery()) {
            while (rs.next()) {
              rows++;
              rs.getBytes(4);
            }
          }
          if (rows == 0) {
            break;
          }
          drained += rows;
        }
      }
      long nanos = System.nanoTime() - start;
      long wal = probe.walLsn() - walStart;
      long statements = probe.statementCalls();
      probe.awaitStatsFlush();
      String table = p.substring(p.indexOf('.') + 1) + "deliveries";
      return new Ceiling(
          drained, drained / (nanos / 1e9), wal, statements, probe.table(SCHEMA, table).dead());
    }
  }

  private static String hex(byte[] bytes) {
    StringBuilder s = new StringBuilder();
    for (byte b : bytes) {
      s.append(String.format(Locale.ROOT, "%02x", b));
    }
    return s.toString();
  }
}
