package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import javax.sql.DataSource;

/**
 * Whether a claim and a completion get dearer the longer a snapshot holds the xmin horizon (issue
 * 14, goal 2; the store's own counterpart of the delivery benchmark's held-xmin scenario, without
 * Kafka). One task holds all 256 lanes and claims (limit 500) and completes in a loop, while two
 * publishers commit 10 keyed events per transaction, each transaction open about 4 ms (so a claim's
 * snapshot usually sees one running: its rows are below the next window's floor). Every 10 s: the
 * deliveries, and per call the server time and buffer reads of the claim's boundary statement (its
 * probes for rows committed since the last read), of its page statement and of the completion
 * ({@code pg_stat_statements}). Run once with a REPEATABLE READ snapshot held open from the start
 * (nothing deleted may be vacuumed) and once without; autovacuum as configured.
 *
 * <p>Run (embedded PostgreSQL 17): {@code java -cp benchmarks/target/classes:$(cat
 * benchmarks/target/classpath.txt) io.relaybus.bench.HeldHorizonBenchmark [--seconds N] [--out
 * FILE]} (60 s per pass by default).
 */
public final class HeldHorizonBenchmark {
  private static final int PUBLISHERS = 2;
  private static final int EVENTS_PER_TRANSACTION = 10;
  private static final int LIMIT = 500;
  private static final long INTERVAL_MS = 10_000;

  private final DataSource admin = EmbeddedPostgres17.dataSource();
  private final PgProbe probe = new PgProbe(admin);
  private int prefixes;

  /** One interval of a pass. */
  private record Interval(
      int second,
      long delivered,
      double boundaryMillis,
      double boundaryBuffers,
      double pageMillis,
      double pageBuffers,
      double completeMillis,
      double completeBuffers) {}

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    cli.report(new HeldHorizonBenchmark().run(cli.integer("seconds", 60)));
  }

  String run(int seconds) throws Exception {
    Instant started = Instant.now();
    List<Interval> held = pass(true, seconds);
    List<Interval> free = pass(false, seconds);
    StringBuilder report = Cli.heading("Claim and completion under a held xmin horizon", started);
    report
        .append(
            " One task holds the 256 lanes, claims (limit %d) and completes;".formatted(LIMIT)
                + " %d publishers commit %d keyed events per transaction, each open about 4 ms."
                    .formatted(PUBLISHERS, EVENTS_PER_TRANSACTION)
                + " Per 10 s: deliveries, and per call the server time and buffer reads of the"
                + " claim's first statement (the boundary, which probes for rows committed since"
                + " the last read), of its page statement and of the completion.\n\n")
        .append(
            "| seconds | snapshot held: delivered | boundary ms · buffers | page ms · buffers"
                + " | complete ms · buffers | not held: delivered | boundary ms · buffers"
                + " | page ms · buffers | complete ms · buffers |\n")
        .append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < Math.min(held.size(), free.size()); i++) {
      Interval h = held.get(i);
      Interval f = free.get(i);
      report.append(
          ("| %d | %,d | %.2f · %,.0f | %.2f · %,.0f | %.2f · %,.0f | %,d | %.2f · %,.0f"
                  + " | %.2f · %,.0f | %.2f · %,.0f |\n")
              .formatted(
                  h.second,
                  h.delivered,
                  h.boundaryMillis,
                  h.boundaryBuffers,
                  h.pageMillis,
                  h.pageBuffers,
                  h.completeMillis,
                  h.completeBuffers,
                  f.delivered,
                  f.boundaryMillis,
                  f.boundaryBuffers,
                  f.pageMillis,
                  f.pageBuffers,
                  f.completeMillis,
                  f.completeBuffers));
    }
    return report.toString();
  }

  private List<Interval> pass(boolean holdSnapshot, int seconds) throws Exception {
    String prefix = "h" + (++prefixes) + "_";
    AtomicBoolean stop = new AtomicBoolean();
    AtomicLong delivered = new AtomicLong();
    List<Interval> intervals = new ArrayList<>();
    try (PostgresOutboxStore store =
            PostgresOutboxStore.builder()
                .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
                .schema("heldhorizon")
                .tablePrefix(prefix)
                .poolSize(PUBLISHERS + 2)
                .build();
        Connection holder = admin.getConnection()) {
      store.setup();
      if (holdSnapshot) {
        holder.setAutoCommit(false);
        holder.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
        try (Statement s = holder.createStatement()) {
          s.executeQuery("SELECT count(*) FROM pg_class").close();
        }
      }
      List<LaneLease> leases =
          store.acquireLanes("owner", "g", LaneRange.all().lanes(), Duration.ofMinutes(30));
      List<Thread> publishers = new ArrayList<>();
      for (int p = 0; p < PUBLISHERS; p++) {
        int publisher = p;
        Thread thread =
            new Thread(() -> publish(store, publisher, stop), "publisher-" + prefix + publisher);
        thread.start();
        publishers.add(thread);
      }
      long start = System.currentTimeMillis();
      long next = start + INTERVAL_MS;
      long deliveredBefore = 0;
      probe.resetStatements();
      while (System.currentTimeMillis() < start + seconds * 1000L) {
        List<ClaimedDelivery> batch = store.claim("owner", leases, LIMIT);
        if (batch.isEmpty()) {
          Thread.sleep(5);
        } else {
          store.complete(batch.stream().map(ClaimedDelivery::token).toList());
          delivered.addAndGet(batch.size());
        }
        if (System.currentTimeMillis() >= next) {
          double[] boundary = probe.statementCost("SELECT b.floor", store.tableName("log"));
          double[] page = probe.statementCost("WITH req AS", store.tableName("log"));
          double[] complete = probe.statementCost(PgProbe.COMPLETION, store.tableName("log"));
          intervals.add(
              new Interval(
                  (int) ((next - start) / 1000),
                  delivered.get() - deliveredBefore,
                  boundary[1],
                  boundary[2],
                  page[1],
                  page[2],
                  complete[1],
                  complete[2]));
          deliveredBefore = delivered.get();
          probe.resetStatements();
          next += INTERVAL_MS;
        }
      }
      stop.set(true);
      for (Thread thread : publishers) {
        thread.join();
      }
      if (holdSnapshot) {
        holder.rollback();
      }
    }
    return intervals;
  }

  private void publish(PostgresOutboxStore store, int publisher, AtomicBoolean stop) {
    int n = 0;
    while (!stop.get()) {
      List<OutboxEvent> events = new ArrayList<>();
      for (int e = 0; e < EVENTS_PER_TRANSACTION; e++, n++) {
        events.add(
            OutboxEvent.builder("bench")
                .id("p" + publisher + "-" + n)
                .key("k" + (n % 1_000))
                .json("{\"n\":" + n + "}")
                .handlers("h")
                .build());
      }
      try (Connection c = store.dataSource().getConnection()) {
        c.setAutoCommit(false);
        store.publishAll(c, events);
        Thread.sleep(4); // the transaction stays open a little, as an application's does
        c.commit();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      } catch (SQLException e) {
        throw new IllegalStateException("publishing failed", e);
      }
    }
  }
}
