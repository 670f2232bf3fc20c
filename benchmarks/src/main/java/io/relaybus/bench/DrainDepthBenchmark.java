package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.ProcessCpu;
import io.relaybus.store.testing.ServerCpuByKind;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Whether a claim gets dearer with the depth of the backlog (issue 14, goal 1, without Kafka): a
 * keyed backlog (1,000 keys, four publishers, 100 events per transaction) drained by tasks that
 * split the 256 lanes, each claiming 500 and completing in a loop, as the connector's tasks do. Per
 * depth: deliveries per second, and per call the server time and buffer reads of the claim's
 * boundary statement, its page statement and the completion ({@code pg_stat_statements}) over the
 * first and the last tenth of the drain.
 *
 * <p>Run (embedded PostgreSQL 17): {@code java -cp benchmarks/target/classes:$(cat
 * benchmarks/target/classpath.txt) io.relaybus.bench.DrainDepthBenchmark [--tasks N] [--depth N]
 * [--out FILE]} (2 tasks; depths 200,000 and 1,000,000, or the one given).
 */
public final class DrainDepthBenchmark {
  static final int LIMIT = 500;

  /**
   * The claim's boundary and page statements, and the completion: its delete where the claim read
   * the rows ({@code WITH fenced AS}) with, per call, its whole statement when any row goes that
   * way.
   */
  private static final List<List<String>> STATEMENTS =
      List.of(List.of("SELECT b.floor"), List.of("WITH req AS"), PgProbe.COMPLETION);

  private final PgProbe probe = new PgProbe(EmbeddedPostgres17.dataSource());
  private final long postmasterPid = ProcessCpu.postmasterPid(EmbeddedPostgres17.dataSource());
  private int prefixes;

  public static void main(String[] args) throws Exception {
    Cli cli = new Cli(args);
    int tasks = cli.integer("tasks", 2);
    int depth = cli.integer("depth", 0);
    int[] depths = depth > 0 ? new int[] {depth} : new int[] {200_000, 1_000_000};
    cli.report(new DrainDepthBenchmark().run(depths, tasks));
  }

  String run(int[] depths, int tasks) throws Exception {
    Instant started = Instant.now();
    StringBuilder rows = new StringBuilder();
    for (int depth : depths) {
      rows.append(drain(depth, tasks));
    }
    return Cli.heading("Claim cost against backlog depth", started)
        .append(
            " %d tasks split the 256 lanes, each claims %d and completes in a loop, no Kafka;"
                    .formatted(tasks, LIMIT)
                + " the backlog: 1,000 keys, 4 publishers, 100 events per transaction. Per call,"
                + " server time · buffer reads over the first and the last tenth of the drain;"
                + " PostgreSQL's CPU (every process of the server) per 1,000 deliveries over the"
                + " whole drain.\n\n")
        .append(
            "| depth | deliveries/s | PostgreSQL CPU s per 1,000 | boundary, first → last tenth"
                + " | page | completion (per statement) | PostgreSQL CPU s per 1,000 by process"
                + " (sampled) |\n"
                + "|---:|---:|---:|---:|---:|---:|---|\n")
        .append(rows)
        .toString();
  }

  private String drain(int depth, int tasks) throws Exception {
    String prefix = "d" + (++prefixes) + "_";
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(4, tasks));
    try (PostgresOutboxStore store = store("draindepth", prefix, tasks)) {
      publish(store, depth, pool);
      String log = store.tableName("log");
      AtomicLong done = new AtomicLong();
      List<double[][]> tenths = new ArrayList<>();
      probe.resetStatements();
      double cpu0 = ProcessCpu.serverSeconds(postmasterPid);
      ServerCpuByKind byKind = ServerCpuByKind.start(postmasterPid);
      long start = System.nanoTime();
      List<Future<?>> drains = new ArrayList<>();
      for (int t = 0; t < tasks; t++) {
        List<Integer> lanes = lanesOf(t, tasks);
        String owner = "task-" + t;
        drains.add(pool.submit(() -> drainLanes(store, owner, lanes, depth, done)));
      }
      // the first tenth's costs when a tenth is done; the last tenth's from nine tenths on
      while (done.get() < depth / 10) {
        Thread.sleep(5);
      }
      tenths.add(costs(log));
      while (done.get() < depth * 9L / 10) {
        Thread.sleep(5);
      }
      probe.resetStatements();
      for (Future<?> drain : drains) {
        drain.get();
      }
      double seconds = (System.nanoTime() - start) / 1e9;
      double cpu = ProcessCpu.serverSeconds(postmasterPid) - cpu0;
      Map<String, Double> kinds = byKind.stop();
      tenths.add(costs(log));
      StringBuilder row =
          new StringBuilder(
              "| %,d | %,.0f | %.4f".formatted(depth, depth / seconds, cpu * 1_000 / depth));
      for (int s = 0; s < STATEMENTS.size(); s++) {
        double[] first = tenths.get(0)[s];
        double[] last = tenths.get(1)[s];
        row.append(
            " | %.2f ms · %,.0f → %.2f · %,.0f".formatted(first[1], first[2], last[1], last[2]));
      }
      return row.append(" | ")
          .append(ServerCpuByKind.perThousand(kinds, depth))
          .append(" |\n")
          .toString();
    } finally {
      pool.shutdownNow();
    }
  }

  /** Per statement of {@link #STATEMENTS}: its {@link PgProbe#statementCost} since the reset. */
  private double[][] costs(String log) throws SQLException {
    double[][] costs = new double[STATEMENTS.size()][];
    for (int s = 0; s < STATEMENTS.size(); s++) {
      costs[s] = probe.statementCost(STATEMENTS.get(s), log);
    }
    return costs;
  }

  /** A store set up on the embedded server, its pool sized for {@code tasks} and publishers. */
  static PostgresOutboxStore store(String schema, String prefix, int tasks) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema(schema)
            .tablePrefix(prefix)
            .poolSize(Math.max(4, tasks) + 2)
            .build();
    store.setup();
    return store;
  }

  /** Task {@code task}'s share of the 256 lanes when {@code tasks} split them. */
  static List<Integer> lanesOf(int task, int tasks) {
    List<Integer> lanes = new ArrayList<>();
    for (int lane = task; lane < 256; lane += tasks) {
      lanes.add(lane);
    }
    return lanes;
  }

  static Void drainLanes(
      PostgresOutboxStore store, String owner, List<Integer> lanes, int depth, AtomicLong done)
      throws InterruptedException {
    List<LaneLease> leases = store.acquireLanes(owner, "g", lanes, Duration.ofMinutes(30));
    while (done.get() < depth) {
      List<ClaimedDelivery> batch = store.claim(owner, leases, LIMIT);
      if (batch.isEmpty()) {
        Thread.sleep(5);
        continue;
      }
      store.complete(batch.stream().map(ClaimedDelivery::token).toList());
      done.addAndGet(batch.size());
    }
    return null;
  }

  static void publish(PostgresOutboxStore store, int depth, ExecutorService pool) throws Exception {
    inChunks(
        depth,
        pool,
        (from, to) -> {
          List<OutboxEvent> batch = new ArrayList<>();
          for (int i = from; i < to; i++) {
            batch.add(
                OutboxEvent.builder("bench")
                    .id("e" + i)
                    .key("k" + i % 1_000)
                    .json("{\"n\":" + i + "}")
                    .handlers("h")
                    .build());
          }
          store.publishAll(batch);
        });
  }

  /** Publishes events {@code [from, to)} in one transaction. */
  @FunctionalInterface
  interface Chunk {
    void publish(int from, int to) throws Exception;
  }

  /** The backlog's shape: four publishers take 100 events at a time until {@code depth}. */
  static void inChunks(int depth, ExecutorService pool, Chunk chunk) throws Exception {
    AtomicInteger next = new AtomicInteger();
    List<Future<?>> publishers = new ArrayList<>();
    for (int p = 0; p < 4; p++) {
      publishers.add(
          pool.submit(
              () -> {
                for (int n = next.getAndAdd(100); n < depth; n = next.getAndAdd(100)) {
                  chunk.publish(n, Math.min(depth, n + 100));
                }
                return null;
              }));
    }
    for (Future<?> publisher : publishers) {
      publisher.get();
    }
  }
}
