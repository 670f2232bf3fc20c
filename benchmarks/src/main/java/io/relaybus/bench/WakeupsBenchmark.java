package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.IntStream;

/**
 * What waiting for work costs with one task and with several: tasks on the store's public API (one
 * store each, as Connect's tasks have, holding an equal share of the 256 lanes) claim, complete
 * and, when a claim comes back empty, wait ({@code awaitWork}, 1 s) while publishers commit one
 * keyed event per transaction at a fixed rate. Per 1,000 deliveries: claims, empty claims, wake-ups
 * and the server time of every statement ({@code pg_stat_statements}), and the time from an event's
 * commit to the claim that returned it (p50, p99).
 *
 * <p>Each cell runs twice, side by side: with the schema's wake-up trigger as installed (version 7:
 * a claim notifies nobody, and a notification from the log says so, so a waiting task whose lanes
 * it is not for looks at its own lanes and goes on waiting), and with the trigger of version 6,
 * under which every notification ends every wait and every claim's statement (it parks rows in
 * {@code deliveries}, and a statement trigger fires even for none) notified while a task waited.
 *
 * <p>Run (embedded PostgreSQL 17, about three minutes): {@code ./mvnw -q -o -pl benchmarks -am
 * package dependency:build-classpath -DskipTests -Dmdep.outputFile=target/classpath.txt} then
 * {@code java -cp benchmarks/target/classes:$(cat benchmarks/target/classpath.txt)
 * io.relaybus.bench.WakeupsBenchmark [--seconds N] [--out FILE]}.
 */
public final class WakeupsBenchmark {
  private static final String SCHEMA = "wakeups";
  private static final int[] TASKS = {1, 4};
  private static final int[] RATES = {100, 1000};
  private static final int PUBLISHERS = 2;

  /** The trigger function of schema version 6: it notifies for a claim's inserts too. */
  private static final String VERSION_6_TRIGGER =
      """
      CREATE OR REPLACE FUNCTION {schema}.{p}notify_work() RETURNS trigger
      LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
      BEGIN
        IF (SELECT last_value FROM {schema}.{p}waiting) > 0 THEN
          PERFORM pg_notify('{channel}', '');
          PERFORM setval('{schema}.{p}waiting', 0);
        END IF;
        RETURN NULL;
      END
      $$""";

  private final PgProbe probe = new PgProbe(EmbeddedPostgres17.dataSource());
  private int prefixes;

  record Cell(
      int tasks,
      int rate,
      boolean version6,
      long deliveries,
      long claims,
      long empty,
      long wakeups,
      double serverMillis,
      List<String> top,
      long p50,
      long p99) {
    double per1000(double n) {
      return n * 1000.0 / deliveries;
    }
  }

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    cli.report(new WakeupsBenchmark().run(cli.integer("seconds", 15)));
  }

  String run(int seconds) throws Exception {
    Instant started = Instant.now();
    List<Cell> cells = new ArrayList<>();
    for (int rate : RATES) {
      for (int tasks : TASKS) {
        for (boolean version6 : new boolean[] {true, false}) {
          cells.add(cell(tasks, rate, version6, seconds));
        }
      }
    }
    StringBuilder report = Cli.heading("Waiting for work with one and four tasks", started);
    report
        .append(
            " %d publishers commit one keyed event per transaction at the".formatted(PUBLISHERS)
                + " rate given for %d s; each task holds an equal share of the 256 lanes, claims"
                    .formatted(seconds)
                + " (limit 500), completes and waits up to 1 s after an empty claim. Per 1,000"
                + " deliveries: claims, empty claims, waits ended by a wake-up, and server time of"
                + " every statement (publish included). Latency: commit to the claim that returned"
                + " the event.\n\n")
        .append(
            "| rate/s | tasks | trigger | delivered | claims | empty claims |"
                + " wake-ups | server ms | p50 / p99 ms |\n")
        .append("|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
    for (Cell c : cells) {
      report.append(
          "| %,d | %d | %s | %,d | %,.0f | %,.0f | %,.0f | %,.0f | %d / %d |\n"
              .formatted(
                  c.rate,
                  c.tasks,
                  c.version6 ? "v6" : "v7",
                  c.deliveries,
                  c.per1000(c.claims),
                  c.per1000(c.empty),
                  c.per1000(c.wakeups),
                  c.per1000(c.serverMillis),
                  c.p50,
                  c.p99));
    }
    report.append(
        "\nWhere the server time goes: the statements with the most of it, per 1,000 deliveries"
            + " (calls · ms; the statement's first words).\n\n");
    for (Cell c : cells) {
      report
          .append(
              "- %,d/s, %d task(s), trigger %s — "
                  .formatted(c.rate, c.tasks, c.version6 ? "v6" : "v7"))
          .append(String.join("; ", c.top))
          .append("\n");
    }
    return report.toString();
  }

  /** The five statements with the most server time since the reset, per 1,000 deliveries. */
  private List<String> topStatements(long deliveries) throws SQLException {
    List<String> top = new ArrayList<>();
    try (java.sql.Connection c = EmbeddedPostgres17.dataSource().getConnection();
        java.sql.Statement s = c.createStatement();
        java.sql.ResultSet rs =
            s.executeQuery(
                "SELECT query, calls, total_exec_time"
                    + " FROM pg_stat_statements WHERE query NOT ILIKE '%pg_stat%'"
                    + " ORDER BY total_exec_time DESC LIMIT 5")) {
      while (rs.next()) {
        top.add(
            "%s %,.0f · %,.0f ms"
                .formatted(
                    label(rs.getString(1)),
                    rs.getLong(2) * 1000.0 / deliveries,
                    rs.getDouble(3) * 1000.0 / deliveries));
      }
    }
    return top;
  }

  /** What a statement of the store does, told by text only it has, in the order looked for. */
  private static final List<Map.Entry<String, String>> NAMES =
      List.of(
          Map.entry("log_boundary_", "claim: boundary"),
          Map.entry("now_snap", "claim: log page"),
          Map.entry("to_defer", "claim: deliveries"),
          Map.entry("handed2", "claim: cursor append"),
          Map.entry("lock_keys", "publish"),
          Map.entry("setval(", "wait: flag up, look"),
          Map.entry("pg_current_xact_id() AS own", "wait: first look"),
          Map.entry("string_to_array", "wait: look again"),
          Map.entry("DELETE FROM", "complete"));

  private static String label(String query) {
    return NAMES.stream()
        .filter(name -> query.contains(name.getKey()))
        .map(Map.Entry::getValue)
        .findFirst()
        .orElse(query.replaceAll("\\s+", " ").substring(0, Math.min(40, query.length())));
  }

  private Cell cell(int tasks, int rate, boolean version6, int seconds) throws Exception {
    String prefix = "w" + (++prefixes) + "_";
    List<PostgresOutboxStore> stores = new ArrayList<>();
    ExecutorService threads = Executors.newCachedThreadPool();
    try {
      for (int t = 0; t < tasks; t++) {
        stores.add(
            PostgresOutboxStore.builder()
                .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
                .schema(SCHEMA)
                .tablePrefix(prefix)
                .poolSize(3)
                .build());
      }
      PostgresOutboxStore publisher = stores.get(0);
      publisher.setup();
      if (version6) {
        probe.execute(
            VERSION_6_TRIGGER
                .replace("{schema}", SCHEMA)
                .replace("{p}", prefix)
                .replace("{channel}", publisher.notifyChannel()));
      }
      AtomicBoolean publishing = new AtomicBoolean(true);
      AtomicBoolean claiming = new AtomicBoolean(true);
      AtomicLong published = new AtomicLong();
      AtomicLong claims = new AtomicLong();
      AtomicLong empty = new AtomicLong();
      AtomicLong wakeups = new AtomicLong();
      ConcurrentLinkedQueue<Long> latencies = new ConcurrentLinkedQueue<>();
      List<Future<?>> running = new ArrayList<>();
      int share = Lanes.COUNT / tasks;
      for (int t = 0; t < tasks; t++) {
        PostgresOutboxStore store = stores.get(t);
        String owner = "task-" + t;
        List<LaneLease> leases =
            store.acquireLanes(
                owner,
                "g",
                IntStream.range(t * share, (t + 1) * share).boxed().toList(),
                Duration.ofMinutes(30));
        running.add(
            threads.submit(
                () -> {
                  task(store, owner, leases, claiming, claims, empty, wakeups, latencies);
                  return null;
                }));
      }
      Thread.sleep(500); // every task waiting
      probe.resetStatements();
      List<Future<?>> publishers = new ArrayList<>();
      for (int p = 0; p < PUBLISHERS; p++) {
        int first = p;
        publishers.add(
            threads.submit(
                () -> {
                  publish(publisher, first, rate / PUBLISHERS, publishing, published);
                  return null;
                }));
      }
      Thread.sleep(seconds * 1000L);
      publishing.set(false);
      for (Future<?> f : publishers) {
        f.get();
      }
      long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
      while (latencies.size() < published.get() && System.nanoTime() < deadline) {
        Thread.sleep(50);
      }
      claiming.set(false);
      for (Future<?> f : running) {
        f.get();
      }
      if (latencies.size() != published.get()) {
        throw new IllegalStateException(
            "delivered %d of %d published".formatted(latencies.size(), published.get()));
      }
      long[] sorted = latencies.stream().mapToLong(Long::longValue).sorted().toArray();
      return new Cell(
          tasks,
          rate,
          version6,
          sorted.length,
          claims.get(),
          empty.get(),
          wakeups.get(),
          serverMillis(),
          topStatements(sorted.length),
          sorted[sorted.length / 2],
          sorted[Math.min(sorted.length - 1, (int) Math.ceil(sorted.length * 0.99) - 1)]);
    } finally {
      threads.shutdownNow();
      stores.forEach(PostgresOutboxStore::close);
    }
  }

  /** As a connector task: claim, complete; after an empty claim, wait up to the poll interval. */
  private static void task(
      PostgresOutboxStore store,
      String owner,
      List<LaneLease> leases,
      AtomicBoolean claiming,
      AtomicLong claims,
      AtomicLong empty,
      AtomicLong wakeups,
      ConcurrentLinkedQueue<Long> latencies)
      throws InterruptedException {
    while (claiming.get()) {
      List<ClaimedDelivery> batch = store.claim(owner, leases, 500);
      claims.incrementAndGet();
      if (batch.isEmpty()) {
        empty.incrementAndGet();
        if (store.awaitWork(Duration.ofSeconds(1))) {
          wakeups.incrementAndGet();
        }
        continue;
      }
      long now = System.currentTimeMillis();
      batch.forEach(d -> latencies.add(now - d.eventTime().toEpochMilli()));
      store.complete(batch.stream().map(ClaimedDelivery::token).toList());
    }
  }

  /** One keyed event per transaction at {@code rate} per second, paced by the clock. */
  private static void publish(
      PostgresOutboxStore store, int publisher, int rate, AtomicBoolean publishing, AtomicLong n) {
    long interval = 1_000_000_000L / rate;
    long next = System.nanoTime();
    for (long i = 0; publishing.get(); i++) {
      long wait = next - System.nanoTime();
      if (wait > 0) {
        java.util.concurrent.locks.LockSupport.parkNanos(wait);
      }
      next += interval;
      store.publish(
          OutboxEvent.builder("bench")
              .id("p" + publisher + "-" + i)
              .key("key-" + (i % 5000) + "-" + publisher)
              .json("{}")
              .handlers("h")
              .build());
      n.incrementAndGet();
    }
  }

  /** Server time of every statement since the reset, the probe's own left out. */
  private double serverMillis() throws SQLException {
    return probe.queryLong(
        "SELECT coalesce(sum(total_exec_time), 0)::bigint FROM pg_stat_statements"
            + " WHERE query NOT ILIKE '%pg_stat%'");
  }
}
