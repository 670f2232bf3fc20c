package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.ProcessCpu;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;
import javax.sql.DataSource;

/**
 * What a PostgreSQL claim costs the server as a function of the lanes its owner holds, at the same
 * batch (issue 14, goal 1: "the cost of a claim depends on the batch it returns, not ... the number
 * of lanes held"). Every event goes to the same 8 lanes whatever the owner holds, so each cell's
 * claims return the same rows; only the lanes held change. Per claim, from {@code
 * pg_stat_statements} (server time and shared buffer hits of the claim's statements: the boundary,
 * the log's page, the deliveries claim, the cursor append), for a busy claim (one publish of
 * {@value #BATCH} keyed events before each) and for an empty one; with and without a REPEATABLE
 * READ snapshot held open for the whole cell (the xmin horizon pinned, so nothing the cell deletes
 * may be vacuumed). Beside them, the CPU of every server process per busy round (the publish, the
 * claims and the completions; from {@code /proc}): {@code pg_stat_statements} leaves out what the
 * executor spends setting a plan up and taking it down, most of a small claim's cost when its plan
 * has many steps.
 *
 * <p>Run (embedded PostgreSQL 17, about a minute): {@code ./mvnw -q -o -pl benchmarks -am package
 * dependency:build-classpath -DskipTests -Dmdep.outputFile=target/classpath.txt} then {@code java
 * -cp benchmarks/target/classes:$(cat benchmarks/target/classpath.txt)
 * io.relaybus.bench.ClaimLanesBenchmark [--rounds N] [--out FILE]}.
 */
public final class ClaimLanesBenchmark {
  private static final String SCHEMA = "claimlanes";
  private static final int BATCH = 10;
  private static final int BUSY_LANES = 8;
  private static final int[] HELD = {8, 32, 128, 256};

  /** Text every statement of a claim has, one marker per statement. */
  private static final List<String> CLAIM_MARKERS =
      List.of("log_boundary_", "now_snap", "to_defer", "handed2");

  private final DataSource admin = EmbeddedPostgres17.dataSource();
  private final PgProbe probe = new PgProbe(admin);
  private final long postmasterPid = ProcessCpu.postmasterPid(admin);
  private int prefixes;

  /** Per claim: server time and buffer hits, in all and per statement (as CLAIM_MARKERS). */
  record Cost(double[] statementMillis, double[] statementHits) {
    double millis() {
      return java.util.Arrays.stream(statementMillis).sum();
    }

    double hits() {
      return java.util.Arrays.stream(statementHits).sum();
    }

    String cell() {
      return "%.2f ms · %,.0f".formatted(millis(), hits());
    }

    String statement(int i) {
      return "%.2f ms · %,.0f".formatted(statementMillis[i], statementHits[i]);
    }
  }

  record Row(
      int held,
      boolean snapshot,
      Cost busy,
      Cost empty,
      double rowsPerClaim,
      double busyCpuMicros) {}

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    cli.report(new ClaimLanesBenchmark().run(cli.integer("rounds", 400)));
  }

  String run(int rounds) throws Exception {
    Instant started = Instant.now();
    List<Row> rows = new ArrayList<>();
    for (boolean snapshot : new boolean[] {false, true}) {
      for (int held : HELD) {
        rows.add(cell(held, snapshot, rounds));
      }
    }
    StringBuilder report = Cli.heading("Claim cost against lanes held", started);
    report
        .append(
            " Per claim: server time · shared buffer hits of its"
                + " statements (pg_stat_statements). Busy: %d rounds of one publish of %d keyed"
                    .formatted(rounds, BATCH)
                + " events over %d lanes, claimed (limit 100) and completed;".formatted(BUSY_LANES)
                + " empty: %d claims with nothing published.\n\n".formatted(rounds))
        .append(
            "| lanes held | snapshot held | busy claim | rows per busy claim | empty claim |"
                + " busy vs 8 lanes | PostgreSQL CPU per busy round |\n")
        .append("|---:|---|---:|---:|---:|---:|---:|\n");
    for (Row row : rows) {
      Row base =
          rows.stream()
              .filter(r -> r.held == HELD[0] && r.snapshot == row.snapshot)
              .findFirst()
              .orElseThrow();
      report.append(
          "| %d | %s | %s | %.1f | %s | %.2f× time, %.2f× hits | %,.0f µs |\n"
              .formatted(
                  row.held,
                  row.snapshot ? "yes" : "no",
                  row.busy.cell(),
                  row.rowsPerClaim,
                  row.empty.cell(),
                  row.busy.millis() / base.busy.millis(),
                  row.busy.hits() / base.busy.hits(),
                  row.busyCpuMicros));
    }
    report
        .append("\nWhere a busy claim's cost goes, per statement (server time · buffer hits):\n\n")
        .append(
            "| lanes held | snapshot held | boundary | log page | deliveries claim | cursor append |\n")
        .append("|---:|---|---:|---:|---:|---:|\n");
    for (Row row : rows) {
      report.append(
          "| %d | %s | %s | %s | %s | %s |\n"
              .formatted(
                  row.held,
                  row.snapshot ? "yes" : "no",
                  row.busy.statement(0),
                  row.busy.statement(1),
                  row.busy.statement(2),
                  row.busy.statement(3)));
    }
    return report.toString();
  }

  private Row cell(int held, boolean snapshot, int rounds) throws Exception {
    String prefix = "c" + (++prefixes) + "_";
    List<String> keys = keysOfBusyLanes();
    try (PostgresOutboxStore store =
            PostgresOutboxStore.builder()
                .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
                .schema(SCHEMA)
                .tablePrefix(prefix)
                .poolSize(4)
                .build();
        Connection holder = admin.getConnection()) {
      store.setup();
      List<LaneLease> leases =
          store.acquireLanes(
              "owner", "g", IntStream.range(0, held).boxed().toList(), Duration.ofMinutes(30));
      if (snapshot) {
        holder.setAutoCommit(false);
        holder.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
        try (Statement s = holder.createStatement()) {
          s.executeQuery("SELECT count(*) FROM pg_class").close();
        }
      }
      int[] sequence = {0};
      busyRounds(store, leases, keys, 50, sequence); // warm up: cursors, plans, caches
      probe.resetStatements();
      double cpu0 = ProcessCpu.serverSeconds(postmasterPid);
      long claims = busyRounds(store, leases, keys, rounds, sequence);
      double busyCpuMicros = (ProcessCpu.serverSeconds(postmasterPid) - cpu0) * 1e6 / rounds;
      Cost busy = claimCost(claims);
      double rowsPerClaim = (double) rounds * BATCH / claims;
      probe.resetStatements();
      for (int i = 0; i < rounds; i++) {
        if (!store.claim("owner", leases, 100).isEmpty()) {
          throw new IllegalStateException("an empty claim returned deliveries");
        }
      }
      Cost empty = claimCost(rounds);
      if (snapshot) {
        holder.rollback();
      }
      return new Row(held, snapshot, busy, empty, rowsPerClaim, busyCpuMicros);
    }
  }

  /** Publishes, claims until the batch is back, completes; returns the number of claims. */
  private static long busyRounds(
      PostgresOutboxStore store,
      List<LaneLease> leases,
      List<String> keys,
      int rounds,
      int[] sequence) {
    long claims = 0;
    for (int r = 0; r < rounds; r++) {
      List<OutboxEvent> events = new ArrayList<>();
      for (int e = 0; e < BATCH; e++) {
        int n = sequence[0]++;
        events.add(
            OutboxEvent.builder("bench")
                .id("e" + n)
                .key(keys.get(n % keys.size()))
                .json("{\"n\":" + n + "}")
                .handlers("h")
                .build());
      }
      store.publishAll(events);
      int got = 0;
      while (got < BATCH) {
        claims++;
        List<ClaimedDelivery> batch = store.claim("owner", leases, 100);
        got += batch.size();
        store.complete(batch.stream().map(ClaimedDelivery::token).toList());
        if (claims > (long) rounds * BATCH * 2) {
          throw new IllegalStateException("the claims do not return what was published");
        }
      }
    }
    return claims;
  }

  /** Server time and buffer hits per claim of the claim's statements since the last reset. */
  private Cost claimCost(long claims) throws SQLException {
    double[] millis = new double[CLAIM_MARKERS.size()];
    double[] hits = new double[CLAIM_MARKERS.size()];
    try (Connection c = admin.getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT coalesce(sum(total_exec_time), 0), coalesce(sum(shared_blks_hit"
                    + " + shared_blks_read), 0) FROM pg_stat_statements WHERE query LIKE '%' || ?"
                    + " || '%' AND query NOT LIKE '%pg_stat_statements%'")) {
      for (int i = 0; i < CLAIM_MARKERS.size(); i++) {
        s.setString(1, CLAIM_MARKERS.get(i));
        try (ResultSet rs = s.executeQuery()) {
          rs.next();
          millis[i] = rs.getDouble(1) / claims;
          hits[i] = rs.getDouble(2) / claims;
        }
      }
    }
    return new Cost(millis, hits);
  }

  /** Four keys per lane of the first {@value #BUSY_LANES} lanes. */
  private static List<String> keysOfBusyLanes() {
    List<String> keys = new ArrayList<>();
    int[] perLane = new int[BUSY_LANES];
    for (int i = 0; keys.size() < BUSY_LANES * 4; i++) {
      String key = "key-" + i;
      int lane = Lanes.laneOf(key, null);
      if (lane < BUSY_LANES && perLane[lane] < 4) {
        perLane[lane]++;
        keys.add(key);
      }
    }
    return keys;
  }
}
