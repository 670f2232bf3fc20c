package io.relaybus.bench;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.Machine;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.LongStream;

/**
 * The heartbeat workload of issue 9, after the reference's {@code bench-extend}: N timers pinged
 * round-robin at a fixed offered rate, each every 2 s, every ping extending its timer to ping + 6
 * s. Pings are offered on schedule whether or not earlier ones committed (open loop), one per
 * transaction or in batches of up to B (a batch waits at most 10 ms to fill, its pings in timer
 * order), on a pool of 20 connections. Before the run every timer is armed, as in steady state. A
 * quarter into the measured part 5% of the timers stop pinging: they must fire; any other firing is
 * a false expiry. A claimer like the connector's task (all 256 lanes, claim every 200 ms, complete
 * what it claimed) fires the due timers. A point stops offering and is marked saturated once the
 * backlog exceeds 5 s of pings.
 *
 * <p>Reported per point: offered and committed pings/s, ping latency p50/p95/p99 (from the ping's
 * scheduled time to its commit, so queueing counts; after a lead-in of the point's own pings, whose
 * latencies are reported apart with the pings over 20 ms and where they lie), outcomes, false
 * expiries, lateness of the silent timers (fire time minus last deadline), WAL bytes per ping
 * ({@code pg_current_wal_lsn}, everything the database wrote: extends, re-arms, claims,
 * completions), tuple counters of the deliveries table ({@code pg_stat_user_tables}: updates, HOT,
 * dead tuples, autovacuums), and the server time of the extend statement ({@code
 * pg_stat_statements}).
 *
 * <p>Run (no install needed): {@code ./mvnw -q -o -pl benchmarks -am package
 * dependency:build-classpath -DskipTests -Dmdep.outputFile=target/classpath.txt} then {@code java
 * -cp benchmarks/target/classes:$(cat benchmarks/target/classpath.txt)
 * io.relaybus.bench.TimerHeartbeatBenchmark --quick}. {@code --out FILE} writes the markdown;
 * {@code --points r3000-b1} runs only the points named (r = pings per second, b = pings per
 * transaction), {@code --seconds N} sets each point's length (issue 14's goal 5: {@code --points
 * r3000-b1}).
 */
public final class TimerHeartbeatBenchmark {
  private static final String SCHEMA = "heartbeat";
  private static final String HANDLER = "sessions";
  private static final Duration PING_EVERY = Duration.ofSeconds(2);
  private static final Duration TIMEOUT = Duration.ofSeconds(6);

  /**
   * From computing the first ping's due time to sending it: arming every timer, a CHECKPOINT, an
   * ANALYZE and the statistics' flush must fit, or the first pings are overdue before any is sent
   * and the point's tail is that backlog (3 s was too little on a slower machine: 2,600 pings
   * overdue by 0.9 s, worked off over 3 s, made p99 about a second).
   */
  private static final Duration LEAD = Duration.ofSeconds(10);

  /**
   * A point's first pings, at its own rate on its own pool, before those it reports: each point has
   * a new store, so a new pool of new backends that plan the extend's statements for the first
   * times, and the JVM compiles the ping path at 3,000/s, which the 500/s warm-up does not reach.
   * On the 2-core AMD EPYC that took both cores for the first 1 to 7 s of a point (about 80 methods
   * compiled in its first half second, every ping over 20 ms until about 2.5 s in most runs) and
   * decided a 30 s point's p99 (about 6,000 of 87,000 pings). An application's pool and JVM are
   * warm; the lead-in's latencies are reported apart, beside the point's, and it counts in
   * everything else (WAL, tuples, expiries).
   */
  private static final Duration LEAD_IN = Duration.ofSeconds(10);

  /** A ping slower than this is counted and placed in time (goal 5's bound). */
  private static final long SLOW_MICROS = 20_000;

  private static final int POOL = 20;
  private static final long BATCH_WAIT_NANOS = TimeUnit.MILLISECONDS.toNanos(10);

  private final PgProbe probe = new PgProbe(EmbeddedPostgres17.dataSource());
  private final StringBuilder report = new StringBuilder();
  private int prefixes;

  record Point(String name, int rate, int batch) {}

  public static void main(String[] args) throws Exception {
    boolean quick = List.of(args).contains("--quick");
    Path out = null;
    String chosen = null;
    Duration length = quick ? Duration.ofSeconds(30) : Duration.ofSeconds(60);
    for (int i = 0; i < args.length - 1; i++) {
      switch (args[i]) {
        case "--out" -> out = Path.of(args[i + 1]);
        case "--points" -> chosen = args[i + 1];
        case "--seconds" -> length = Duration.ofSeconds(Long.parseLong(args[i + 1]));
        default -> {}
      }
    }
    List<Point> points =
        chosen != null
            ? points(chosen)
            : quick
                ? List.of(
                    new Point("r1000-b1", 1000, 1),
                    new Point("r3000-b1", 3000, 1),
                    new Point("r3000-b10", 3000, 10))
                : List.of(
                    new Point("r1000-b1", 1000, 1),
                    new Point("r3000-b1", 3000, 1),
                    new Point("r3000-b10", 3000, 10),
                    new Point("r5000-b1", 5000, 1),
                    new Point("r10000-b50", 10000, 50));
    TimerHeartbeatBenchmark benchmark = new TimerHeartbeatBenchmark();
    String markdown =
        benchmark.run(chosen != null ? "chosen points" : quick ? "quick" : "full", length, points);
    System.out.println(markdown);
    if (out != null) {
      Files.writeString(out, markdown);
    }
    System.exit(0);
  }

  /**
   * {@code --points r3000-b1,r1000-b10}: offered pings per second and pings per transaction of each
   * point, by name.
   */
  static List<Point> points(String names) {
    List<Point> points = new ArrayList<>();
    for (String name : names.split(",")) {
      Matcher m = POINT.matcher(name.strip());
      if (!m.matches()) {
        throw new IllegalArgumentException(
            "--points: '"
                + name.strip()
                + "' must be r<pings per second>-b<pings per transaction>,"
                + " e.g. r3000-b1");
      }
      points.add(
          new Point(name.strip(), Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2))));
    }
    return points;
  }

  private static final Pattern POINT = Pattern.compile("r([1-9][0-9]*)-b([1-9][0-9]*)");

  private String run(String form, Duration length, List<Point> points) throws Exception {
    probe.execute("CREATE SCHEMA IF NOT EXISTS " + SCHEMA);
    report
        .append("### Timers heartbeat (")
        .append(form)
        .append(" run, ")
        .append(
            DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm 'UTC'")
                .format(Instant.now().atOffset(ZoneOffset.UTC)))
        .append(", load average before: ")
        .append(Machine.loadAverage())
        .append(")\n\n")
        .append(Machine.describe())
        .append("PostgreSQL ")
        .append(probe.queryLong("SHOW server_version_num"))
        .append(
            " (embedded binaries, default settings but wal_level=logical, synchronous_commit on,")
        .append(" autovacuum on), one client JVM, pool of ")
        .append(POOL)
        .append(" connections. ")
        .append(length.toSeconds())
        .append(
            " s per point after an unreported 8 s warm-up, measured after a lead-in of "
                + LEAD_IN.toSeconds()
                + " s of the point's own pings (its p99 and slow pings in the third table);"
                + " each timer pinged every 2 s, deadline = ping + 6 s.\n\n")
        .append(
            "| point | timers | offered/s | committed/s | commits/s | ping p50 / p95 / p99 ms | extended / armed / already firing | errors | extend stmt (calls × mean) |\n")
        .append("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    new Run(new Point("warm-up", 500, 1), Duration.ofSeconds(8))
        .execute(); // JIT, pools: not reported
    List<String> second = new ArrayList<>();
    List<Result> results = new ArrayList<>();
    for (Point point : points) {
      Result r = new Run(point, length).execute();
      results.add(r);
      report.append(r.firstRow()).append('\n');
      second.add(r.secondRow());
    }
    report
        .append(
            "\n| point | WAL B/ping | updates (extends + re-arms) | HOT % of updates | HOT % of extends")
        .append(
            " | dead tuples at end | autovacuums | silent fired | false expiries | lateness p50 / max ms | claim stmt (calls × mean) |\n")
        .append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    second.forEach(row -> report.append(row).append('\n'));
    List<Result> goalPoints =
        results.stream().filter(r -> r.point().rate() == 3000 && r.point().batch() == 1).toList();
    if (!goalPoints.isEmpty()) {
      report.append(
          "\nIssue 14, goal 5 (3,000 pings/s, one per transaction: p99 ≤ 20 ms, 0 false expiries,"
              + " ≥ 90% HOT extends):\n\n| point | ping p99 ms | false expiries | HOT % of extends"
              + " | goal |\n|---|---:|---:|---:|---|\n");
      for (Result r : goalPoints) {
        report.append(r.goalRow()).append('\n');
      }
    }
    report.append(
        "\n| point | lead-in p99 ms | lead-in pings over 20 ms | p99 ms, lead-in included |"
            + " pings over 20 ms after it | seconds with the most of them (s after the lead-in: count) |\n"
            + "|---|---:|---:|---:|---:|---|\n");
    results.forEach(r -> report.append(r.slowRow()).append('\n'));
    report.append("\nLoad average after: ").append(Machine.loadAverage()).append(".\n");
    return report.toString();
  }

  record Result(
      Point point,
      int timers,
      boolean saturated,
      double seconds,
      long offered,
      long committed,
      long commits,
      long[] latencyMicros,
      long[] leadInMicros,
      List<Long> slowAtMillis,
      long extended,
      long armed,
      long firing,
      long errors,
      String extendTime,
      String claimTime,
      long wal,
      PgProbe.TableStats deliveries,
      long autovacuums,
      int silent,
      int silentFired,
      long falseExpiries,
      long[] latenessMillis) {

    String firstRow() {
      return "| %s%s | %,d | %,.0f | %,.0f | %,.0f | %s / %s / %s | %,d / %,d / %,d | %,d | %s |"
          .formatted(
              point.name(),
              saturated ? " (saturated)" : "",
              timers,
              offered / seconds,
              committed / seconds,
              commits / seconds,
              ms(percentile(latencyMicros, 50)),
              ms(percentile(latencyMicros, 95)),
              ms(percentile(latencyMicros, 99)),
              extended,
              armed,
              firing,
              errors,
              extendTime);
    }

    String secondRow() {
      long updates = deliveries.updated();
      return "| %s | %,d | %,d (%,d + %,d) | %s | %s | %,d | %d | %d / %d | %,d | %s / %s | %s |"
          .formatted(
              point.name(),
              committed == 0 ? 0 : wal / committed,
              updates,
              extended,
              Math.max(0, updates - extended),
              deliveries.hotPercent(),
              extended == 0 ? "n/a" : "%.1f".formatted(100.0 * deliveries.hotUpdated() / extended),
              deliveries.dead(),
              autovacuums,
              silentFired,
              silent,
              falseExpiries,
              latenessMillis.length == 0 ? "n/a" : "%,d".formatted(percentile(latenessMillis, 50)),
              latenessMillis.length == 0
                  ? "n/a"
                  : "%,d".formatted(latenessMillis[latenessMillis.length - 1]),
              claimTime);
    }

    /** The lead-in apart, and where the slow pings of the measured part lie. */
    String slowRow() {
      long[] all =
          LongStream.concat(Arrays.stream(latencyMicros), Arrays.stream(leadInMicros))
              .sorted()
              .toArray();
      Map<Long, Long> bySecond = new TreeMap<>();
      slowAtMillis.forEach(at -> bySecond.merge(at / 1000, 1L, Long::sum));
      String worst =
          bySecond.entrySet().stream()
              .sorted(Map.Entry.<Long, Long>comparingByValue().reversed())
              .limit(3)
              .map(e -> e.getKey() + ": " + e.getValue())
              .reduce((a, b) -> a + ", " + b)
              .orElse("none");
      return "| %s | %s | %,d | %s | %,d | %s |"
          .formatted(
              point.name(),
              ms(percentile(leadInMicros, 99)),
              Arrays.stream(leadInMicros).filter(m -> m > SLOW_MICROS).count(),
              ms(percentile(all, 99)),
              slowAtMillis.size(),
              worst);
    }

    /** Issue 14, goal 5: p99 ≤ 20 ms, no false expiry, at least 90% of extends HOT. */
    String goalRow() {
      double p99 = percentile(latencyMicros, 99) / 1000.0;
      double hot = extended == 0 ? 0 : 100.0 * deliveries.hotUpdated() / extended;
      boolean met = !saturated && p99 <= 20 && falseExpiries == 0 && hot >= 90;
      return "| %s%s | %.1f | %,d | %.1f | %s |"
          .formatted(
              point.name(),
              saturated ? " (saturated)" : "",
              p99,
              falseExpiries,
              hot,
              met ? "met" : "**not met**");
    }

    private static String ms(long micros) {
      return "%.1f".formatted(micros / 1000.0);
    }
  }

  static long percentile(long[] sorted, int p) {
    if (sorted.length == 0) {
      return 0;
    }
    int index = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
    return sorted[Math.max(0, Math.min(sorted.length - 1, index))];
  }

  /** One point: a fresh outbox, preloaded, pinged for {@code length}, fired by one claimer. */
  private final class Run {
    private final Point point;
    private final Duration length;
    private final int timers;
    private final String prefix;
    private final PostgresOutboxStore store;
    private final boolean[] silent;
    private final AtomicLongArray lastDeadlineMillis;
    private final AtomicLongArray fires;
    private final AtomicLong generation = new AtomicLong();
    private final ConcurrentLinkedQueue<Long> latencies = new ConcurrentLinkedQueue<>();
    private final ConcurrentLinkedQueue<Long> leadInLatencies = new ConcurrentLinkedQueue<>();
    private final ConcurrentLinkedQueue<Long> slowAtMillis = new ConcurrentLinkedQueue<>();
    private volatile long measuredFromNanos = Long.MAX_VALUE;
    private final ConcurrentLinkedQueue<Long> lateness = new ConcurrentLinkedQueue<>();
    private final AtomicLong committed = new AtomicLong();
    private final AtomicLong commits = new AtomicLong();
    private final AtomicLong extended = new AtomicLong();
    private final AtomicLong armed = new AtomicLong();
    private final AtomicLong alreadyFiring = new AtomicLong();
    private final AtomicLong falseExpiries = new AtomicLong();
    private final AtomicLong errors = new AtomicLong();
    private volatile long silenceAtNanos = Long.MAX_VALUE;
    private volatile boolean claiming = true;

    Run(Point point, Duration length) {
      this.point = point;
      this.length = length;
      this.timers = (int) (point.rate() * PING_EVERY.toSeconds());
      this.prefix = "h" + (++prefixes) + "_";
      this.store =
          PostgresOutboxStore.builder()
              .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
              .schema(SCHEMA)
              .tablePrefix(prefix)
              .poolSize(POOL + 2)
              .applicationName("heartbeat")
              .build();
      store.setup();
      this.silent = new boolean[timers];
      for (int i = 0; i < timers; i += 20) {
        silent[i] = true; // 5%
      }
      this.lastDeadlineMillis = new AtomicLongArray(timers);
      this.fires = new AtomicLongArray(timers);
    }

    private OutboxEvent event(int timer) {
      return OutboxEvent.builder("session.expired")
          .id("t" + timer + "-" + generation.incrementAndGet())
          .json("{\"session\":" + timer + "}")
          .handlers(HANDLER)
          .build();
    }

    /** Steady state before the run: timer i was last pinged one period before its first ping. */
    private void preload(Instant start) throws Exception {
      try (Connection tx = store.dataSource().getConnection()) {
        tx.setAutoCommit(false);
        for (int i = 0; i < timers; i++) {
          Instant firstPing = start.plusNanos((long) (i * 1e9 / point.rate()));
          Instant deadline = firstPing.minus(PING_EVERY).plus(TIMEOUT);
          store.schedule(tx, event(i), Timer.at(deadline).named("s" + i, TimerConflict.EXTEND));
          lastDeadlineMillis.set(i, deadline.toEpochMilli());
        }
        tx.commit();
      }
    }

    Result execute() throws Exception {
      Instant start = Instant.now().plus(LEAD);
      preload(start);
      probe.execute("CHECKPOINT");
      probe.execute("ANALYZE " + SCHEMA + "." + prefix + "deliveries");
      probe.awaitStatsFlush();
      PgProbe.TableStats before = probe.table(SCHEMA, prefix + "deliveries");
      long autovacuumsBefore = autovacuums();
      probe.resetStatements();
      long walStart = probe.walLsn();

      Thread claimer = new Thread(this::claimLoop, "heartbeat-claimer");
      claimer.start();
      ThreadPoolExecutor pool =
          new ThreadPoolExecutor(
              POOL,
              POOL,
              1,
              TimeUnit.MINUTES,
              new LinkedBlockingQueue<>(),
              r -> {
                Thread t = new Thread(r, "heartbeat-ping");
                t.setDaemon(true);
                return t;
              });
      long startNanos = System.nanoTime() + Duration.between(Instant.now(), start).toNanos();
      long overrun = System.nanoTime() - startNanos;
      if (overrun > 0) {
        throw new IllegalStateException(
            "the preparation ran %d ms past the first ping's due time: raise LEAD (%s)"
                .formatted(TimeUnit.NANOSECONDS.toMillis(overrun), LEAD));
      }
      long leadInNanos = LEAD_IN.toNanos();
      measuredFromNanos = startNanos + leadInNanos;
      long lengthNanos = leadInNanos + length.toNanos();
      silenceAtNanos = measuredFromNanos + length.toNanos() / 4;
      double nanosPerPing = 1e9 / point.rate();
      long slot = 0; // ping slots: round-robin over every timer, silent ones included
      long offered = 0; // pings sent
      boolean saturated = false;
      List<long[]> batch = new ArrayList<>(); // {timer, scheduledNanos}
      long batchOpenedAt = 0;
      while (true) {
        long now = System.nanoTime();
        if (now - startNanos >= lengthNanos) {
          break;
        }
        if (pool.getQueue().size() * (long) point.batch() > 5L * point.rate()) {
          saturated = true;
          break;
        }
        long due = (long) ((now - startNanos) / nanosPerPing) + 1;
        while (slot < due) {
          long scheduled = startNanos + (long) (slot * nanosPerPing);
          int timer = (int) (slot % timers);
          slot++;
          if (silent[timer] && scheduled >= silenceAtNanos) {
            continue; // gone quiet: must fire
          }
          offered++;
          if (point.batch() == 1) {
            long[] ping = {timer, scheduled};
            pool.execute(() -> ping(List.of(ping)));
          } else {
            if (batch.isEmpty()) {
              batchOpenedAt = scheduled;
            }
            batch.add(new long[] {timer, scheduled});
            if (batch.size() == point.batch()) {
              submit(pool, batch);
              batch = new ArrayList<>();
            }
          }
        }
        if (!batch.isEmpty() && now - batchOpenedAt >= BATCH_WAIT_NANOS) {
          submit(pool, batch);
          batch = new ArrayList<>();
        }
        long next = startNanos + (long) (slot * nanosPerPing);
        long sleep = Math.min(next - System.nanoTime(), BATCH_WAIT_NANOS / 2);
        if (sleep > 0) {
          TimeUnit.NANOSECONDS.sleep(sleep);
        }
      }
      double seconds = (System.nanoTime() - startNanos) / 1e9;
      if (saturated) {
        pool.getQueue().clear();
      }
      pool.shutdown();
      pool.awaitTermination(2, TimeUnit.MINUTES);
      // Live timers' last deadlines are at least 4 s after the last ping: stop firing before.
      long stopAt = startNanos + lengthNanos + TimeUnit.SECONDS.toNanos(2);
      TimeUnit.NANOSECONDS.sleep(Math.max(0, stopAt - System.nanoTime()));
      claiming = false;
      claimer.join();
      long wal = probe.walLsn() - walStart;
      String extendTime = probe.statementTime("fire_at = t.deadline");
      String claimTime = probe.statementTime("WITH req AS");
      store.close();
      probe.awaitStatsFlush();
      PgProbe.TableStats stats = probe.table(SCHEMA, prefix + "deliveries").minus(before);
      long autovacuums = autovacuums() - autovacuumsBefore;

      int silentCount = 0;
      int silentFired = 0;
      for (int i = 0; i < timers; i++) {
        if (silent[i]) {
          silentCount++;
          silentFired += fires.get(i) > 0 ? 1 : 0;
        }
      }
      long[] lat = latencies.stream().mapToLong(Long::longValue).sorted().toArray();
      long[] leadIn = leadInLatencies.stream().mapToLong(Long::longValue).sorted().toArray();
      long[] late = lateness.stream().mapToLong(Long::longValue).sorted().toArray();
      return new Result(
          point,
          timers,
          saturated,
          seconds,
          offered,
          committed.get(),
          commits.get(),
          lat,
          leadIn,
          List.copyOf(slowAtMillis),
          extended.get(),
          armed.get(),
          alreadyFiring.get(),
          errors.get(),
          extendTime,
          claimTime,
          wal,
          stats,
          autovacuums,
          silentCount,
          silentFired,
          falseExpiries.get(),
          late);
    }

    private void submit(ExecutorService pool, List<long[]> batch) {
      List<long[]> sorted = new ArrayList<>(batch);
      sorted.sort((a, b) -> Long.compare(a[0], b[0])); // lock order: no deadlock between batches
      pool.execute(() -> ping(sorted));
    }

    /** One transaction: each ping extends its timer to now + 6 s (or arms it again). */
    private void ping(List<long[]> pings) {
      try (Connection tx = store.dataSource().getConnection()) {
        tx.setAutoCommit(false);
        long[] deadlines = new long[pings.size()];
        TimerOutcome[] outcomes = new TimerOutcome[pings.size()];
        for (int k = 0; k < pings.size(); k++) {
          int timer = (int) pings.get(k)[0];
          Instant deadline = Instant.now().plus(TIMEOUT);
          deadlines[k] = deadline.toEpochMilli();
          outcomes[k] =
              store
                  .schedule(
                      tx, event(timer), Timer.at(deadline).named("s" + timer, TimerConflict.EXTEND))
                  .outcome();
        }
        tx.commit();
        long done = System.nanoTime();
        commits.incrementAndGet();
        for (int k = 0; k < pings.size(); k++) {
          int timer = (int) pings.get(k)[0];
          lastDeadlineMillis.accumulateAndGet(timer, deadlines[k], Math::max);
          long scheduled = pings.get(k)[1];
          long micros = (done - scheduled) / 1000;
          if (scheduled < measuredFromNanos) {
            leadInLatencies.add(micros);
          } else {
            latencies.add(micros);
            if (micros > SLOW_MICROS) {
              slowAtMillis.add((scheduled - measuredFromNanos) / 1_000_000);
            }
          }
          committed.incrementAndGet();
          switch (outcomes[k]) {
            case EXTENDED -> extended.incrementAndGet();
            case ARMED -> armed.incrementAndGet();
            default -> alreadyFiring.incrementAndGet();
          }
        }
      } catch (Exception e) {
        errors.incrementAndGet();
        if (errors.get() <= 5) {
          System.err.println("ping failed: " + e);
        }
      }
    }

    /** The connector's part: claim due deliveries of all lanes every 200 ms, complete them. */
    private void claimLoop() {
      List<LaneLease> leases =
          store.acquireLanes("bench", "bench", LaneRange.all().lanes(), Duration.ofMinutes(10));
      while (claiming) {
        List<ClaimedDelivery> batch = store.claim("bench", leases, 1000);
        long now = System.currentTimeMillis();
        List<DeliveryToken> done = new ArrayList<>();
        for (ClaimedDelivery d : batch) {
          int timer = Integer.parseInt(d.eventId().substring(1, d.eventId().indexOf('-')));
          fires.incrementAndGet(timer);
          if (silent[timer] && System.nanoTime() > silenceAtNanos && fires.get(timer) == 1) {
            lateness.add(now - lastDeadlineMillis.get(timer));
          } else {
            falseExpiries.incrementAndGet();
          }
          done.add(d.token());
        }
        if (!done.isEmpty()) {
          store.complete(done);
        }
        if (batch.size() < 1000) {
          try {
            Thread.sleep(200);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
          }
        }
      }
    }

    private long autovacuums() throws Exception {
      return probe.autovacuums(SCHEMA, prefix + "deliveries");
    }
  }
}
