package io.relaybus.bench;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.PgBouncer;
import io.relaybus.store.testing.ProcessCpu;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What a drain costs behind PgBouncer (deploying.md, "Behind PgBouncer"): the same keyed backlog
 * drained by two owners claiming 500 and completing, straight to the server with pgjdbc's
 * server-prepared statements (as shipped), straight with none ({@code prepareThreshold=0}: every
 * statement planned at each execution), and through a real PgBouncer in transaction pooling with
 * none (what PgBouncer before 1.21 needs), in turns, {@code --rounds} times. Deliveries per second
 * and PostgreSQL's CPU (every process of the server) per 1,000 deliveries.
 *
 * <p>Run: {@code java -cp benchmarks/target/classes:$(cat benchmarks/target/classpath.txt)
 * io.relaybus.bench.PgBouncerDrainBenchmark [--depth 50000] [--rounds 3] [--out FILE]} (needs
 * Debian's pgbouncer).
 */
public final class PgBouncerDrainBenchmark {
  private static final int TASKS = 2;

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    int depth = cli.integer("depth", 50_000);
    int rounds = cli.integer("rounds", 3);
    Instant started = Instant.now();
    long postmaster = ProcessCpu.postmasterPid(EmbeddedPostgres17.dataSource());
    StringBuilder rows = new StringBuilder();
    int prefixes = 0;
    PgBouncer bouncer = PgBouncer.shared();
    String direct = EmbeddedPostgres17.jdbcUrl();
    List<Variant> variants =
        List.of(
            new Variant("straight to the server (as shipped)", direct, true),
            new Variant("straight, prepareThreshold=0", direct + "&prepareThreshold=0", true),
            new Variant(
                "PgBouncer, transaction pooling, prepareThreshold=0",
                bouncer.jdbcUrl("prepareThreshold=0"),
                false));
    for (int round = 1; round <= rounds; round++) {
      for (Variant variant : variants) {
        PostgresOutboxStore store =
            PostgresOutboxStore.builder()
                .jdbcUrl(variant.url())
                .schema("pgbouncerdrain")
                .tablePrefix("p" + (++prefixes) + "_")
                .startupOptions(variant.startupOptions())
                .poolSize(6)
                .build();
        try (store) {
          store.setup();
          ExecutorService pool = Executors.newFixedThreadPool(4);
          try {
            DrainDepthBenchmark.publish(store, depth, pool);
            AtomicLong done = new AtomicLong();
            double cpu0 = ProcessCpu.serverSeconds(postmaster);
            long start = System.nanoTime();
            List<Future<?>> drains = new ArrayList<>();
            for (int t = 0; t < TASKS; t++) {
              List<Integer> lanes = DrainDepthBenchmark.lanesOf(t, TASKS);
              String owner = "task-" + t;
              drains.add(
                  pool.submit(
                      () -> DrainDepthBenchmark.drainLanes(store, owner, lanes, depth, done)));
            }
            for (Future<?> drain : drains) {
              drain.get();
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            double cpu = ProcessCpu.serverSeconds(postmaster) - cpu0;
            rows.append(
                "| %d | %s | %,.0f | %.4f |\n"
                    .formatted(round, variant.name(), depth / seconds, cpu * 1_000 / depth));
          } finally {
            pool.shutdownNow();
          }
        }
      }
    }
    cli.report(
        Cli.heading("A drain behind PgBouncer", started)
            .append(
                " PgBouncer 1.18 (Debian) in transaction pooling in front of it. %,d keyed events"
                        .formatted(depth)
                    + " (1,000 keys, 100 per transaction), drained by %d owners claiming 500 and"
                        .formatted(TASKS)
                    + " completing; the variants in turns, a round each.\n\n")
            .append(
                "| round | connections | deliveries/s | PostgreSQL CPU s per 1,000 |\n"
                    + "|---:|---|---:|---:|\n")
            .append(rows)
            .toString());
  }

  private record Variant(String name, String url, boolean startupOptions) {}
}
