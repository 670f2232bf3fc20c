package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.ProcessCpu;
import io.relaybus.store.testing.WalByKind;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import javax.sql.DataSource;

/**
 * Where a steady state's WAL goes, per relation, through the store's API (issue 14, goal 4: WAL
 * bytes per delivery). Four publishers commit one keyed event per transaction at a fixed rate while
 * four tasks of 64 lanes each claim (up to 500; {@code awaitWork} when a claim found nothing, 3 ms
 * between busy claims for Connect's send) and complete every 500 ms, as the connector does. Between
 * two LSNs of the steady phase, {@code pg_walinspect} lists every record; each is counted against
 * the relation of its first block reference. Three cells in turns, twice: a cursor row at every
 * claim ({@code cursorInterval} zero) and the waiting flag a logged sequence (both as before
 * 2026-12-05), the shipped interval with the flag logged, and as shipped (schema version 12: the
 * flag unlogged).
 *
 * <p>Run (embedded PostgreSQL 17, about a minute): {@code ./mvnw -q -o -pl benchmarks -am package
 * dependency:build-classpath -DskipTests -Dmdep.outputFile=target/classpath.txt} then {@code java
 * -cp benchmarks/target/classes:$(cat benchmarks/target/classpath.txt)
 * io.relaybus.bench.SteadyWalBenchmark [--seconds 15] [--rate 1000] [--out FILE]}.
 */
public final class SteadyWalBenchmark {
  private static final String SCHEMA = "steadywal";
  private static final int TASKS = 4;
  private static final int PUBLISHERS = 4;
  private static final String PAD = "x".repeat(110);

  private final DataSource admin = EmbeddedPostgres17.dataSource();
  private final PgProbe probe = new PgProbe(admin);
  private final long postmasterPid = ProcessCpu.postmasterPid(admin);
  private int prefixes;

  /** One cell: WAL bytes per delivery by "relation: record kind", and the totals. */
  record Cell(
      String name,
      long deliveries,
      long claims,
      double walPerDelivery,
      double cpuPerThousand,
      Map<String, Double> byKind) {}

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    cli.report(new SteadyWalBenchmark().run(cli.integer("seconds", 15), cli.integer("rate", 1000)));
  }

  String run(int seconds, int rate) throws Exception {
    Instant started = Instant.now();
    List<Cell> cells = new ArrayList<>();
    for (int round = 0; round < 2; round++) {
      cells.add(cell("a cursor row per claim, logged flag", Duration.ZERO, true, seconds, rate));
      cells.add(
          cell("cursor interval 1 s, logged flag", Duration.ofSeconds(1), true, seconds, rate));
      cells.add(cell("as shipped", Duration.ofSeconds(1), false, seconds, rate));
    }
    StringBuilder report = Cli.heading("Where a steady state's WAL goes", started);
    report.append(
        " %d publishers, one keyed event per transaction, %,d events/s in all; %d tasks of %d"
                .formatted(PUBLISHERS, rate, TASKS, 256 / TASKS)
            + " lanes claiming and completing every 500 ms; %d s measured per cell, cells in"
                .formatted(seconds)
            + " turns. WAL bytes per delivery (pg_walinspect: each record against the relation"
            + " of its first block; the rest: commits, sequences, records without a block).\n\n");
    List<String> kinds = new ArrayList<>();
    for (Cell cell : cells) {
      cell.byKind.forEach(
          (kind, bytes) -> {
            if (bytes >= 2.0 && !kinds.contains(kind)) {
              kinds.add(kind);
            }
          });
    }
    kinds.sort(String::compareTo);
    report.append("| what |");
    cells.forEach(cell -> report.append(" ").append(cell.name).append(" |"));
    report.append("\n|---|");
    cells.forEach(cell -> report.append("---:|"));
    report.append("\n");
    for (String kind : kinds) {
      report.append("| ").append(kind).append(" |");
      cells.forEach(
          cell -> report.append(" %.1f |".formatted(cell.byKind.getOrDefault(kind, 0.0))));
      report.append("\n");
    }
    report.append("| **all (LSNs moved)** |");
    cells.forEach(cell -> report.append(" **%,.0f** |".formatted(cell.walPerDelivery)));
    report.append("\n| deliveries, claims |");
    cells.forEach(cell -> report.append(" %,d, %,d |".formatted(cell.deliveries, cell.claims)));
    report.append("\n| PostgreSQL CPU s per 1,000 deliveries |");
    cells.forEach(cell -> report.append(" %.3f |".formatted(cell.cpuPerThousand)));
    return report.append("\n").toString();
  }

  private Cell cell(String name, Duration cursorInterval, boolean loggedFlag, int seconds, int rate)
      throws Exception {
    String prefix = "s" + (++prefixes) + "_";
    List<PostgresOutboxStore> stores = new ArrayList<>();
    AtomicBoolean stop = new AtomicBoolean();
    AtomicLong delivered = new AtomicLong();
    AtomicLong claims = new AtomicLong();
    List<Thread> threads = new ArrayList<>();
    try {
      PostgresOutboxStore publisher = store(prefix, Duration.ZERO, PUBLISHERS);
      stores.add(publisher);
      publisher.setup();
      if (loggedFlag) { // as before schema version 12
        probe.execute("ALTER SEQUENCE " + SCHEMA + "." + prefix + "waiting SET LOGGED");
      }
      for (int t = 0; t < TASKS; t++) {
        PostgresOutboxStore task = store(prefix, cursorInterval, 2);
        stores.add(task);
        String owner = "task" + t;
        List<LaneLease> leases =
            task.acquireLanes(
                owner,
                "g",
                LaneRange.split(TASKS).get(t).lanes(), // as Connect splits them
                Duration.ofMinutes(30));
        threads.add(new Thread(() -> claimLoop(task, owner, leases, stop, delivered, claims)));
      }
      for (int p = 0; p < PUBLISHERS; p++) {
        int number = p;
        threads.add(new Thread(() -> publishLoop(publisher, number, rate / PUBLISHERS, stop)));
      }
      threads.forEach(Thread::start);
      Thread.sleep(3_000); // the windows, the statements' plans and the pools settle
      long wal0 = probe.walLsn();
      long delivered0 = delivered.get();
      long claims0 = claims.get();
      double cpu0 = ProcessCpu.serverSeconds(postmasterPid);
      Thread.sleep(seconds * 1_000L);
      long wal1 = probe.walLsn();
      long deliveries = delivered.get() - delivered0;
      long claimed = claims.get() - claims0;
      double cpu = ProcessCpu.serverSeconds(postmasterPid) - cpu0;
      stop.set(true);
      for (Thread thread : threads) {
        thread.join();
      }
      return new Cell(
          name,
          deliveries,
          claimed,
          (double) (wal1 - wal0) / deliveries,
          cpu * 1_000 / deliveries,
          byKind(wal0, wal1, deliveries));
    } finally {
      stop.set(true);
      for (PostgresOutboxStore store : stores) {
        store.close();
      }
    }
  }

  private static PostgresOutboxStore store(String prefix, Duration cursorInterval, int poolSize) {
    return PostgresOutboxStore.builder()
        .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
        .schema(SCHEMA)
        .tablePrefix(prefix)
        .poolSize(poolSize)
        .cursorInterval(cursorInterval)
        .build();
  }

  private static void claimLoop(
      PostgresOutboxStore store,
      String owner,
      List<LaneLease> leases,
      AtomicBoolean stop,
      AtomicLong delivered,
      AtomicLong claims) {
    List<DeliveryToken> done = new ArrayList<>();
    long flushed = System.nanoTime();
    try {
      while (!stop.get()) {
        List<ClaimedDelivery> batch = store.claim(owner, leases, 500);
        claims.incrementAndGet();
        delivered.addAndGet(batch.size());
        batch.forEach(d -> done.add(d.token()));
        if (System.nanoTime() - flushed > 500_000_000L && !done.isEmpty()) {
          store.complete(new ArrayList<>(done));
          done.clear();
          flushed = System.nanoTime();
        }
        if (batch.isEmpty()) {
          store.awaitWork(Duration.ofMillis(200));
        } else {
          Thread.sleep(3); // Connect converting and sending the batch
        }
      }
      if (!done.isEmpty()) {
        store.complete(done);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static void publishLoop(
      PostgresOutboxStore store, int number, int perSecond, AtomicBoolean stop) {
    long interval = 1_000_000_000L / perSecond;
    long next = System.nanoTime();
    for (long n = 0; !stop.get(); n++) {
      String key = "p" + number + "-k" + (n % 250);
      store.publishAll(
          List.of(
              OutboxEvent.builder("order.placed")
                  .id(UUID.randomUUID().toString())
                  .key(key)
                  .json("{\"key\":\"%s\",\"seq\":%d,\"pad\":\"%s\"}".formatted(key, n, PAD))
                  .handlers("h")
                  .build()));
      next += interval;
      long wait = next - System.nanoTime();
      if (wait > 0) {
        LockSupport.parkNanos(wait);
      }
    }
  }

  /** WAL bytes per delivery by "relation: resource manager/record type", largest first. */
  private Map<String, Double> byKind(long from, long to, long deliveries) throws SQLException {
    Map<String, Double> kinds = new LinkedHashMap<>();
    try (Connection c = admin.getConnection()) {
      for (WalByKind.Kind kind : WalByKind.between(c, from, to)) {
        // the cell's table prefix (s<n>_) left out, so the cells' rows line up
        kinds.merge(
            kind.name().replaceFirst("^s\\d+_", ""),
            (double) kind.bytes() / deliveries,
            Double::sum);
      }
    }
    return kinds;
  }
}
