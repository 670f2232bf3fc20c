package io.relaybus.it.benchmark;

import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.relaybus.it.benchmark.BenchConsumer.Accounting;
import io.relaybus.it.harness.DebeziumOutboxSetup;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.RecordHeaders;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.ProcessCpu;
import io.relaybus.store.testing.ServerCpuByKind;
import io.relaybus.store.testing.WalByKind;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The delivery benchmark (issue 7): relaybus and Debezium's outbox router side by side in one run,
 * on one real PostgreSQL 17, one Kafka broker and one distributed Connect worker (each a JVM of its
 * own, both connectors installed on plugin.path), with the application's publishers and a verifying
 * consumer in this JVM. Every run accounts for every event by id; a run that loses, invents or
 * reorders anything, or leaves a row behind, is reported INVALID, not fast.
 *
 * <p>Scenarios: publish only; drain of a backlog (relaybus tasks.max 1, 2, 4; Debezium; ceilings:
 * the SQL-only drain and a raw Kafka producer of the same records); steady state at fixed offered
 * rates with commit-to-consumer latency; for issue 14 also depth (the same drain at growing
 * backlogs, claim time at the start and the end), a held xmin horizon (drain, empty polls and
 * steady state with a REPEATABLE READ session kept open, against the same without) and idle cost.
 * Parts are chosen with {@code -Drelaybus.bench.scenarios}. Statements are counted per database
 * role (each party has its own), WAL from {@code pg_current_wal_insert_lsn()} (the write position
 * moves in whole pages), CPU from {@code /proc}.
 */
final class DeliveryBenchmark implements AutoCloseable {
  enum Mode {
    SMOKE(400, 2_000, List.of(1, 2), List.of(200), 3, false, List.of(2_000), 2_000, 5, 5),
    QUICK(
        4_000,
        20_000,
        List.of(1, 2, 4),
        List.of(500, 1_000, 2_000),
        10,
        true,
        List.of(20_000),
        20_000,
        30,
        15),
    FULL(
        20_000,
        200_000,
        List.of(1, 2, 4),
        List.of(500, 1_000, 2_000, 4_000, 6_000, 8_000),
        20,
        true,
        List.of(200_000),
        200_000,
        300,
        60);

    final int publishEvents;
    final int backlog;
    final List<Integer> taskCounts;
    final List<Integer> rates;
    final double steadySeconds;

    /** Steady state also at 1,000/s with both connectors' shipped settings (not in CI). */
    final boolean shippedCell;

    /** Scenario depth: backlogs drained by relaybus (tasks.max=2) and Debezium. */
    final List<Integer> depths;

    /** Scenario xmin: the backlog drained, then this many seconds at 2,000/s. */
    final int xminBacklog;

    final double xminSeconds;

    /** Scenario idle: seconds each connector runs on an empty outbox. */
    final double idleSeconds;

    Mode(
        int publishEvents,
        int backlog,
        List<Integer> taskCounts,
        List<Integer> rates,
        double steadySeconds,
        boolean shippedCell,
        List<Integer> depths,
        int xminBacklog,
        double xminSeconds,
        double idleSeconds) {
      this.publishEvents = publishEvents;
      this.backlog = backlog;
      this.taskCounts = taskCounts;
      this.rates = rates;
      this.steadySeconds = steadySeconds;
      this.shippedCell = shippedCell;
      this.depths = depths;
      this.xminBacklog = xminBacklog;
      this.xminSeconds = xminSeconds;
      this.idleSeconds = idleSeconds;
    }

    /**
     * Events each connector drains, not counted, before the first scenario that runs a connector:
     * none in CI's smoke run (its run time).
     */
    int warmUpEvents() {
      return this == SMOKE ? 0 : this == QUICK ? 20_000 : 50_000;
    }
  }

  /**
   * Parts of a run, selectable with -Drelaybus.bench.scenarios=a,b,... (see docs/benchmarks.md).
   */
  static final List<String> SCENARIOS =
      List.of("publish", "ceilings", "drain", "steady", "depth", "xmin", "idle");

  /** What CI's smoke run keeps (its run time); quick and full run everything by default. */
  static final List<String> SMOKE_SCENARIOS = List.of("publish", "ceilings", "drain", "steady");

  /** The offered rate of the held-xmin scenario's steady phase (issue 14). */
  static final int XMIN_RATE = 2_000;

  /**
   * {@code -Drelaybus.bench.xmin.repeat=N}: the held-xmin scenario runs relaybus alone, N passes,
   * without and with the snapshot in turn, stopping after the first pass in which the log's safety
   * net moved a row (a hunt for a rare miss of the windows; the report counts the rows moved). 0:
   * each connector once without and once with the snapshot.
   */
  static final int XMIN_REPEAT = Integer.getInteger("relaybus.bench.xmin.repeat", 0);

  /** Tasks of the depth and held-xmin drains (issue 14: tasks.max=2). */
  static final int DEPTH_TASKS = 2;

  /** Used to estimate a depth before any drain of this run measured it (a conservative guess). */
  static final long ASSUMED_BYTES_PER_EVENT = 3_000;

  record PublishRow(
      String outbox,
      int publishers,
      int batch,
      int events,
      double seconds,
      long wal,
      long stmts,
      long walRecords,
      long fullPageImages,
      double serverMillis,
      double serverCpu) {
    double rate() {
      return events / seconds;
    }
  }

  record DrainRow(
      String scenario,
      String variant,
      int deliveries,
      double seconds,
      long walPublish,
      long walDrain,
      long statements,
      StatementTimes times,
      TableCounters lanes,
      TableCounters deliveryRows,
      long deadTuplesAfter,
      double workerCpu,
      double publishServerCpu,
      double serverCpu,
      double brokerCpu,
      double benchCpu,
      Accounting accounting,
      double[] tenths,
      StatementTimes firstTenth,
      StatementTimes lastTenth) {
    double rate() {
      return deliveries / seconds;
    }

    boolean relaybus() {
      return lanes != null;
    }

    /** CPU seconds per 1,000 deliveries during the drain of every process that took part. */
    double everyProcessCpuPerThousand() {
      return 1000 * (serverCpu + workerCpu + brokerCpu + benchCpu) / deliveries;
    }

    /** PostgreSQL's share of {@link #everyProcessCpuPerThousand()}. */
    double serverCpuPerThousand() {
      return 1000 * serverCpu / deliveries;
    }

    /**
     * The ratio to {@code rival}'s rate this drain would reach with PostgreSQL costing it what it
     * cost the rival, on a machine the drain keeps busy: the rate of a drain whose processes share
     * the cores is about the cores over their CPU per delivery.
     */
    double boundWithRivalsDatabase(DrainRow rival) {
      return rival.everyProcessCpuPerThousand()
          / (everyProcessCpuPerThousand() - serverCpuPerThousand() + rival.serverCpuPerThousand());
    }

    /** The chart's name for it: connector, tasks, depth, scenario. */
    String label() {
      return (relaybus()
              ? "relaybus "
                  + variant.substring(
                      variant.indexOf("tasks.max="),
                      variant.indexOf(',', variant.indexOf("tasks.max=")))
              : "Debezium")
          + ", %,d".formatted(deliveries)
          + (scenario.equals("drain") ? "" : " (" + scenario + ")");
    }
  }

  /** The held-xmin scenario for one connector, with or without the snapshot holder. */
  record XminRow(
      String variant,
      boolean held,
      DrainRow drain,
      StatementTimes emptyPolls,
      double idleSeconds,
      double idleServerCpu,
      SteadyRow steady,
      StatementTimes steadyLastTenth,
      int steadyLastTenthDeliveries,
      Map<String, Long> deadTuples,
      SnapshotHolder.Horizon horizon) {}

  /** A connector running on an empty outbox: what it costs PostgreSQL. */
  record IdleRow(
      String variant,
      double seconds,
      double serverCpu,
      long statements,
      StatementTimes times,
      long wal,
      String walByRecord) {
    double percentOfCore() {
      return 100 * serverCpu / seconds;
    }
  }

  record SteadyRow(
      String variant,
      int offered,
      double committedRate,
      double deliveredRate,
      Accounting window,
      int deliveries,
      long maxBacklog,
      long statements,
      double workerCpu,
      double serverCpu,
      long wal,
      boolean saturated) {
    /** PostgreSQL CPU seconds per 1,000 deliveries (publish and delivery ran together). */
    double serverCpuPerThousand() {
      return deliveries == 0 ? Double.NaN : 1000 * serverCpu / deliveries;
    }

    /** WAL bytes per delivery over the cell (publish, delivery and the server's own). */
    double walPerDelivery() {
      return deliveries == 0 ? Double.NaN : (double) wal / deliveries;
    }
  }

  /** Claim and completion statements: calls and total server milliseconds. */
  record StatementTimes(long claims, double claimMillis, long completes, double completeMillis) {
    static final StatementTimes NONE = new StatementTimes(0, 0, 0, 0);

    /** Mean server milliseconds of a claim statement, NaN without one. */
    double perClaim() {
      return claims == 0 ? Double.NaN : claimMillis / claims;
    }

    /** Mean server milliseconds of a completion, 0 without one. */
    double perCompletion() {
      return completes == 0 ? 0.0 : completeMillis / completes;
    }

    StatementTimes minus(StatementTimes before) {
      return new StatementTimes(
          claims - before.claims,
          claimMillis - before.claimMillis,
          completes - before.completes,
          completeMillis - before.completeMillis);
    }

    String describe() {
      return claims == 0
          ? "n/a"
          : "%.1f / %.1f (%,d / %,d)"
              .formatted(claimMillis / claims, perCompletion(), claims, completes);
    }
  }

  /** The SQL-only drain: its statements, exactly, for the CI gate. */
  record SqlDrain(
      int deliveries, double seconds, int batch, long claims, long completes, long others) {}

  record TableCounters(long inserted, long updated, long hotUpdated, long deleted, long dead) {
    String hot() {
      return updated == 0
          ? "n/a"
          : "%.0f%% (%,d/%,d)".formatted(100.0 * hotUpdated / updated, hotUpdated, updated);
    }
  }

  static final String HANDLER_HEADER_ID = RecordHeaders.DEFAULT_PREFIX + RecordHeaders.EVENT_ID;
  static final int PARTITIONS = 8;
  static final int KEYS = 1_000;
  static final int DRAIN_PUBLISHERS = 4;
  static final int SQL_DRAIN_BATCH = 500;
  static final Duration DEADLINE = Duration.ofMinutes(5);
  private static final String APP = "bench_app";
  private static final String CONNECT = "bench_connect";
  private static final String SQL = "bench_sql";
  private static final String DEBEZIUM = "bench_debezium";
  private static final String PUBLISHERS = "bench-publishers";

  final Mode mode;
  final List<PublishRow> publishRows = new ArrayList<>();
  final List<DrainRow> drainRows = new ArrayList<>();
  final List<SteadyRow> steadyRows = new ArrayList<>();
  final List<DrainRow> depthRows = new ArrayList<>();
  final List<XminRow> xminRows = new ArrayList<>();
  final List<IdleRow> idleRows = new ArrayList<>();
  final List<String> scenarios;
  final List<Integer> depths;

  /**
   * Offered rates of the steady scenario: {@code -Drelaybus.bench.rates=1000,2000}, else the
   * mode's.
   */
  final List<Integer> rates;

  /**
   * {@code -Drelaybus.bench.rates.all=true}: offer every rate to both connectors even after one
   * saturated (a picture of the whole range), instead of stopping a connector at its first
   * saturated rate.
   */
  final boolean ratesPastSaturation;

  /** Seconds per steady cell: {@code -Drelaybus.bench.steady.seconds}, else the mode's. */
  final double steadySeconds;

  /**
   * The steady cells' {@code poll.interval.ms} for both connectors: {@code
   * -Drelaybus.bench.steady.poll.ms=N}, or {@code default} for each connector's own; 10 unless set.
   */
  final String steadyPoll;

  /** -Drelaybus.bench.relaybus.config=key=value,...: settings added to every relaybus connector. */
  final Map<String, String> relaybusOverrides;

  /** The held-xmin drain: {@code -Drelaybus.bench.xmin.backlog}, else the mode's. */
  final int xminBacklog;

  /**
   * Events each connector drains before the first scenario that runs one, not counted: {@code
   * -Drelaybus.bench.warmup} (0: none), else the mode's. The worker is a new JVM: whichever
   * connector ran first paid for compiling the Connect runtime, the producer and the converters, on
   * the cores its drain shared, and the other ran on that work (relaybus went first: half of the
   * worker's CPU samples over a depth run of 200,000 were its JIT compiler threads).
   */
  final int warmUpEvents;

  /**
   * The held-xmin steady phase at 2,000/s: {@code -Drelaybus.bench.xmin.seconds}, else the mode's.
   */
  final double xminSeconds;

  SqlDrain sqlDrain;
  double rawProducerSeconds;
  private final StringBuilder notes = new StringBuilder();
  private final PostgresServer postgres;
  private final SeparateJvmKafka kafka;
  private HikariDataSource app;
  private final Admin admin;
  private final long postmasterPid;
  private final String startedAt;
  private final String loadAtStart;
  private final List<Path> charts = new ArrayList<>();
  private int runs;

  DeliveryBenchmark(Mode mode) throws Exception {
    this(mode, mode == Mode.SMOKE ? SMOKE_SCENARIOS : SCENARIOS, mode.depths);
  }

  /** {@code scenarios}: names from {@link #SCENARIOS}; {@code depths}: backlogs of "depth". */
  DeliveryBenchmark(Mode mode, List<String> scenarios, List<Integer> depths) throws Exception {
    for (String s : scenarios) {
      if (!SCENARIOS.contains(s)) {
        throw new IllegalArgumentException(
            "relaybus.bench.scenarios: unknown scenario '" + s + "', must be one of " + SCENARIOS);
      }
    }
    this.mode = mode;
    this.scenarios = List.copyOf(scenarios);
    this.depths = List.copyOf(depths);
    rates = positiveInts("relaybus.bench.rates", mode.rates);
    ratesPastSaturation = Boolean.getBoolean("relaybus.bench.rates.all");
    steadySeconds = positiveNumber("relaybus.bench.steady.seconds", mode.steadySeconds);
    String poll = System.getProperty("relaybus.bench.steady.poll.ms", "10").strip();
    if (!poll.equals("default") && !poll.matches("[0-9]+")) {
      throw new IllegalArgumentException(
          "relaybus.bench.steady.poll.ms: '"
              + poll
              + "' must be a number of milliseconds or 'default'");
    }
    steadyPoll = poll;
    relaybusOverrides = settings("relaybus.bench.relaybus.config");
    xminBacklog = positiveInts("relaybus.bench.xmin.backlog", List.of(mode.xminBacklog)).get(0);
    warmUpEvents = nonNegativeInt("relaybus.bench.warmup", mode.warmUpEvents());
    xminSeconds = positiveNumber("relaybus.bench.xmin.seconds", mode.xminSeconds);
    startedAt =
        ZonedDateTime.now(ZoneOffset.UTC)
            .format(DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm 'UTC'"));
    loadAtStart = loadAverage();
    postgres = PostgresServer.startForBenchmark();
    execute(
        "CREATE ROLE " + APP + " LOGIN SUPERUSER",
        "CREATE ROLE " + CONNECT + " LOGIN SUPERUSER",
        "CREATE ROLE " + SQL + " LOGIN SUPERUSER",
        "CREATE ROLE " + DEBEZIUM + " LOGIN SUPERUSER REPLICATION");
    postmasterPid = ProcessCpu.postmasterPid(postgres.dataSource());
    app = publisherPool();
    kafka =
        SeparateJvmKafka.start(
            "delivery-benchmark",
            Map.of(
                "plugin.path",
                SeparateJvmKafka.pluginPath()
                    + ","
                    + Path.of(System.getProperty("relaybus.debezium.plugin.path")).toAbsolutePath(),
                "offset.flush.interval.ms",
                "1000"));
    // -Drelaybus.bench.worker.jvm="-Dx=y ...": JVM options of the Connect worker (KAFKA_OPTS)
    String workerJvm = System.getProperty("relaybus.bench.worker.jvm", "").trim();
    kafka.startWorker(workerJvm.isEmpty() ? List.of() : List.of(workerJvm.split("\\s+")));
    admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers()));
  }

  /** Every scenario of the mode, in the order the report lists them. */
  void runAll() throws Exception {
    if (scenarios.contains("publish")) {
      publishOnly();
    }
    if (scenarios.contains("ceilings")) {
      sqlOnlyDrain();
      rawProducer();
    }
    if (warmUpEvents > 0
        && scenarios.stream().anyMatch(List.of("drain", "depth", "xmin", "steady")::contains)) {
      warmUp();
    }
    if (scenarios.contains("drain")) {
      // One task each, first with Connect's producer defaults, then with bigger producer requests
      // (relaybus as shipped; Debezium given the same two settings): Connect caps a source task's
      // producer at one request in flight per broker, each at most batch.size per partition.
      drainRelaybus(1, false);
      drainDebezium(false);
      drainRelaybus(1, true);
      drainDebezium(true);
      for (int tasks : mode.taskCounts) {
        if (tasks > 1) {
          drainRelaybus(tasks, true);
        }
      }
    }
    if (scenarios.contains("depth")) {
      depth();
    }
    if (scenarios.contains("xmin")) {
      heldXmin();
    }
    if (scenarios.contains("idle")) {
      idle();
    }
    if (scenarios.contains("steady")) {
      steadyState();
    }
  }

  /** A comma-separated list of key=value settings, in order; empty when not given. */
  static Map<String, String> settings(String property) {
    Map<String, String> settings = new LinkedHashMap<>();
    String value = System.getProperty(property, "");
    for (String item : value.split(",")) {
      if (item.isBlank()) {
        continue;
      }
      int eq = item.indexOf('=');
      if (eq <= 0) {
        throw new IllegalArgumentException(
            property + ": '" + item.strip() + "' must be key=value (e.g. poll.linger.ms=50)");
      }
      settings.put(item.substring(0, eq).strip(), item.substring(eq + 1).strip());
    }
    return Collections.unmodifiableMap(settings);
  }

  /** The config as deployed: a relaybus connector's gets this run's overrides. */
  private String deployed(Map<String, String> config) {
    Map<String, String> deployed = new LinkedHashMap<>(config);
    if (String.valueOf(config.get("connector.class")).startsWith("io.relaybus.")) {
      deployed.putAll(relaybusOverrides);
    }
    return DeployedConfig.toJson(deployed);
  }

  /** A whole number, 0 or more ("50_000" allowed), or {@code fallback}. */
  static int nonNegativeInt(String property, int fallback) {
    String value = System.getProperty(property);
    if (value == null || value.isBlank()) {
      return fallback;
    }
    String v = value.strip().replace("_", "");
    if (!v.matches("0|[1-9][0-9]{0,8}")) {
      throw new IllegalArgumentException(
          property + ": '" + value.strip() + "' must be a whole number, 0 or more");
    }
    return Integer.parseInt(v);
  }

  /**
   * Each connector drains {@link #warmUpEvents} once, relaybus as the depth scenario runs it and
   * Debezium with the same producer settings, so that neither measured scenario pays for the
   * worker's start (see {@link #warmUpEvents}). Counted nowhere but in a note.
   */
  private void warmUp() throws Exception {
    DrainRow rb = drainRelaybus("warm-up", warmUpEvents, DEPTH_TASKS, true, false);
    DrainRow dbz = drainDebezium("warm-up", warmUpEvents, true, false);
    notes.append(
        ("- warm-up, not counted: before the first scenario that runs a connector each one drained"
                + " %,d events (relaybus tasks.max=%d as shipped, %,.0f/s; Debezium, %,.0f/s), so"
                + " the worker's start (a new JVM compiling Connect, the producer and the"
                + " converters) is paid by neither measured scenario%n")
            .formatted(warmUpEvents, DEPTH_TASKS, rb.rate(), dbz.rate()));
  }

  /** A comma-separated list of positive integers ("200_000" allowed), or {@code fallback}. */
  static List<Integer> positiveInts(String property, List<Integer> fallback) {
    String value = System.getProperty(property);
    if (value == null || value.isBlank()) {
      return fallback;
    }
    List<Integer> list = new ArrayList<>();
    for (String item : value.split(",")) {
      String v = item.strip().replace("_", "");
      if (!v.matches("[1-9][0-9]{0,8}")) {
        throw new IllegalArgumentException(
            property + ": '" + item.strip() + "' must be a positive whole number");
      }
      list.add(Integer.valueOf(v));
    }
    return List.copyOf(list);
  }

  /** A positive number (seconds), or {@code fallback}. */
  static double positiveNumber(String property, double fallback) {
    String value = System.getProperty(property);
    if (value == null || value.isBlank()) {
      return fallback;
    }
    try {
      double d = Double.parseDouble(value.strip());
      if (d > 0 && Double.isFinite(d)) {
        return d;
      }
    } catch (NumberFormatException ignored) {
      // reported below
    }
    throw new IllegalArgumentException(
        property + ": '" + value.strip() + "' must be a positive number of seconds");
  }

  // ---------------------------------------------------------------- publish only

  /** Events each outbox publishes, per events-per-transaction, before the measured cells. */
  static final int PUBLISH_WARM_UP = 4_000;

  void publishOnly() throws Exception {
    try (PostgresOutboxStore store = appStore("pub_")) {
      BenchOutbox relaybus = BenchOutbox.relaybus(store, "publish-only");
      BenchOutbox debezium = BenchOutbox.debezium(postgres.dataSource(), "pub_dbz_outbox", "bench");
      // Neither side pays for a cold JVM, pool or plan cache inside a measured cell: the first cell
      // of a run was up to half as fast as the same cell later (2026-12-05: 1 x 1 at 0.46x, its
      // statements as fast as Debezium's in pgbench).
      for (BenchOutbox outbox : List.of(relaybus, debezium)) {
        for (int batch : List.of(1, 100)) {
          new BenchPublishers(app, outbox, 8, KEYS).publish(PUBLISH_WARM_UP, batch);
        }
      }
      boolean relaybusFirst = true;
      for (int publishers : List.of(1, 8)) {
        for (int batch : List.of(1, 100)) {
          // Taking turns at going first, so what one cell leaves behind (autovacuum, dirty pages
          // to write) does not always fall on the same side.
          String dbzName = "Debezium outbox (insert + delete)";
          PublishRow rb;
          PublishRow dbz;
          if (relaybusFirst) {
            rb = publishCell("relaybus", relaybus, publishers, batch);
            dbz = publishCell(dbzName, debezium, publishers, batch);
          } else {
            dbz = publishCell(dbzName, debezium, publishers, batch);
            rb = publishCell("relaybus", relaybus, publishers, batch);
          }
          publishRows.add(rb);
          publishRows.add(dbz);
          relaybusFirst = !relaybusFirst;
        }
      }
    }
  }

  private PublishRow publishCell(String name, BenchOutbox outbox, int publishers, int batch)
      throws Exception {
    BenchPublishers p = new BenchPublishers(app, outbox, publishers, KEYS);
    execute(
        "CHECKPOINT"); // every cell starts alike: the first change of each page after it is logged
    // whole
    long[] walStats0 = walStatistics();
    long wal0 = wal();
    long s0 = statements(APP);
    double ms0 = statementMillis(APP);
    double cpu0 = ProcessCpu.serverSeconds(postmasterPid);
    long t0 = System.nanoTime();
    p.publish(mode.publishEvents, batch);
    double seconds = (System.nanoTime() - t0) / 1e9;
    double cpu = ProcessCpu.serverSeconds(postmasterPid) - cpu0;
    long wal = wal() - wal0;
    closePublisherConnections(); // their WAL statistics are flushed when they exit
    long[] walStats = walStatistics();
    return new PublishRow(
        name,
        publishers,
        batch,
        mode.publishEvents,
        seconds,
        wal,
        statements(APP) - s0,
        walStats[0] - walStats0[0],
        walStats[1] - walStats0[1],
        statementMillis(APP) - ms0,
        cpu);
  }

  // ---------------------------------------------------------------- ceilings

  /** relaybus's claim + complete loop in one session over all lanes: no Kafka. */
  void sqlOnlyDrain() throws Exception {
    String prefix = "s" + ++runs + "_";
    try (PostgresOutboxStore appStore = appStore(prefix)) {
      new BenchPublishers(app, BenchOutbox.relaybus(appStore, "sql-only"), DRAIN_PUBLISHERS, KEYS)
          .publish(mode.backlog, 100);
    }
    try (PostgresOutboxStore store = store(SQL, prefix)) {
      long t0 = System.nanoTime();
      List<LaneLease> leases =
          store.acquireLanes(
              "bench-sql", "bench-sql", LaneRange.all().lanes(), Duration.ofMinutes(10));
      long s0 = statements(SQL);
      int drained = 0;
      long claims = 0;
      long completes = 0;
      List<ClaimedDelivery> batch;
      do {
        batch = store.claim("bench-sql", leases, SQL_DRAIN_BATCH);
        claims++;
        if (!batch.isEmpty()) {
          drained += store.complete(batch.stream().map(ClaimedDelivery::token).toList()).size();
          completes++;
        }
      } while (!batch.isEmpty());
      double seconds = (System.nanoTime() - t0) / 1e9;
      long counted = statements(SQL) - s0;
      sqlDrain =
          new SqlDrain(
              drained, seconds, SQL_DRAIN_BATCH, claims, completes, counted - claims - completes);
    }
  }

  /** A plain KafkaProducer sending the same records (key, payload, id header) to a new topic. */
  void rawProducer() throws Exception {
    String topic = "raw-" + ++runs;
    createTopic(topic);
    try (KafkaProducer<String, byte[]> producer =
        new KafkaProducer<>(
            Map.of(
                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                kafka.bootstrapServers(),
                ProducerConfig.ACKS_CONFIG,
                "all"),
            new StringSerializer(),
            new ByteArraySerializer())) {
      long t0 = System.nanoTime();
      for (int i = 0; i < mode.backlog; i++) {
        BenchOutbox.Event e = new BenchOutbox.Event(BenchOutbox.newId(), "key-" + i % KEYS, i);
        ProducerRecord<String, byte[]> r = new ProducerRecord<>(topic, e.key(), e.payload());
        r.headers().add(HANDLER_HEADER_ID, e.id().getBytes(StandardCharsets.UTF_8));
        producer.send(r);
      }
      producer.flush();
      rawProducerSeconds = (System.nanoTime() - t0) / 1e9;
    }
  }

  // ---------------------------------------------------------------- drain

  static final String SHIPPED = ", as shipped (producer batch.size 256 KB)";
  static final String CONNECT_DEFAULTS = ", Connect's producer defaults";
  static final String TUNED = ", producer batch.size 256 KB, linger.ms 5";

  void drainRelaybus(int tasks, boolean shipped) throws Exception {
    drainRows.add(drainRelaybus("drain", mode.backlog, tasks, shipped, false));
  }

  void drainDebezium(boolean tuned) throws Exception {
    drainRows.add(drainDebezium("drain", mode.backlog, tuned, false));
  }

  /**
   * {@code scenario} "drain" and "depth": the drain alone; "xmin": see {@link #heldXmin} ({@code
   * hold} opens the snapshot holder first).
   */
  DrainRow drainRelaybus(String scenario, int backlog, int tasks, boolean shipped, boolean hold)
      throws Exception {
    int n = ++runs;
    String prefix = "d" + n + "_";
    String topic = "relaybus-drain-" + n;
    try (PostgresOutboxStore store = appStore(prefix)) {
      return drain(
          scenario,
          backlog,
          hold,
          "relaybus, tasks.max=" + tasks + (shipped ? SHIPPED : CONNECT_DEFAULTS),
          topic,
          shipped ? relaybusShipped(prefix, tasks, 200) : relaybusDefaults(prefix, tasks, 200),
          topic,
          HANDLER_HEADER_ID,
          BenchOutbox.relaybus(store, topic),
          CONNECT,
          tasks,
          null,
          prefix);
    }
  }

  DrainRow drainDebezium(String scenario, int backlog, boolean tuned, boolean hold)
      throws Exception {
    int n = ++runs;
    String table = "dbz" + n + "_outbox";
    String topic = "debezium-drain-" + n;
    BenchOutbox outbox = BenchOutbox.debezium(postgres.dataSource(), table, "bench");
    return drain(
        scenario,
        backlog,
        hold,
        "Debezium 3.6.1 + EventRouter (1 task)" + (tuned ? TUNED : CONNECT_DEFAULTS),
        topic,
        tuned
            ? debeziumTuned(table, "dbz" + n, topic, 500)
            : debeziumConfig(table, "dbz" + n, topic, 500),
        topic,
        "id",
        outbox,
        DEBEZIUM,
        1,
        "dbz" + n,
        table);
  }

  /**
   * Watches a drain from another thread: when each tenth of the backlog reached the consumer, and
   * the claim statements' times at the end of the first tenth and at the start of the last.
   */
  private final class DrainWatch {
    final long[] crossed = new long[11];
    volatile StatementTimes atFirstTenth;
    volatile StatementTimes atLastTenth;
    private final Thread thread;

    DrainWatch(BenchConsumer consumer, int backlog, String role, long t0) {
      crossed[0] = t0;
      thread =
          new Thread(
              () -> {
                int next = 1;
                boolean last = false;
                while (next <= 10) {
                  // read before the interrupt is looked at: close() comes when the consumer has
                  // everything, so the pass after it sees the tenths crossed since the last look
                  last = last || Thread.currentThread().isInterrupted();
                  int seen = consumer.distinct();
                  long now = System.nanoTime();
                  while (next <= 10 && seen >= (long) backlog * next / 10) {
                    crossed[next] = now;
                    try {
                      if (next == 1) {
                        atFirstTenth = statementTimes(role);
                      } else if (next == 9) {
                        atLastTenth = statementTimes(role);
                      }
                    } catch (SQLException e) {
                      notes
                          .append("- could not read pg_stat_statements during a drain: ")
                          .append(e.getMessage())
                          .append('\n');
                    }
                    next++;
                  }
                  if (last) {
                    return;
                  }
                  try {
                    Thread.sleep(5);
                  } catch (InterruptedException e) {
                    last = true;
                  }
                }
              },
              "bench-drain-watch");
      thread.start();
    }

    /** Deliveries per second in each tenth that completed. */
    double[] tenths(int backlog) {
      List<Double> rates = new ArrayList<>();
      for (int i = 1; i <= 10 && crossed[i] != 0; i++) {
        long events = (long) backlog * i / 10 - (long) backlog * (i - 1) / 10;
        // two tenths seen in one look (a tiny backlog): no rate for the second
        long nanos = crossed[i] - crossed[i - 1];
        rates.add(nanos == 0 ? Double.NaN : events / (nanos / 1e9));
      }
      return rates.stream().mapToDouble(Double::doubleValue).toArray();
    }

    /** Takes a last look (the consumer has everything by now) and ends the watch. */
    void stop() throws InterruptedException {
      thread.interrupt();
      thread.join();
    }
  }

  private DrainRow drain(
      String scenario,
      int backlog,
      boolean hold,
      String variant,
      String connector,
      Map<String, String> config,
      String topic,
      String idHeader,
      BenchOutbox outbox,
      String role,
      int tasks,
      String slot,
      String tables)
      throws Exception {
    boolean relaybus = slot == null;
    createTopic(topic);
    deployPaused(connector, config, tasks, slot);
    // Opened after the slot exists (creating one waits for transactions), before the publish.
    SnapshotHolder holder =
        hold
            ? new SnapshotHolder(postgres.dataSource(), relaybus ? tables + "lanes" : tables)
            : null;
    try (holder;
        BenchConsumer consumer =
            new BenchConsumer(kafka.bootstrapServers(), topic, PARTITIONS, idHeader)) {
      BenchPublishers publishers = new BenchPublishers(app, outbox, DRAIN_PUBLISHERS, KEYS);
      execute("CHECKPOINT");
      long wal0 = wal();
      double publishCpu0 = ProcessCpu.serverSeconds(postmasterPid);
      publishers.publish(backlog, 100);
      double publishCpu = ProcessCpu.serverSeconds(postmasterPid) - publishCpu0;
      long wal1 = wal();
      long s0 = statements(role);
      StatementTimes times0 = statementTimes(role);
      double worker0 = ProcessCpu.seconds(kafka.worker().pid());
      double server0 = ProcessCpu.serverSeconds(postmasterPid);
      ServerCpuByKind serverByKind = ServerCpuByKind.start(postmasterPid);
      double broker0 = brokerSeconds();
      double bench0 = ProcessCpu.seconds(ProcessHandle.current().pid());
      long t0 = System.nanoTime();
      kafka.put("connectors/" + connector + "/resume", "");
      boolean all;
      double[] tenths;
      StatementTimes times;
      StatementTimes atFirstTenth;
      StatementTimes atLastTenth;
      DrainWatch watch = new DrainWatch(consumer, backlog, role, t0);
      try {
        all = consumer.awaitAll(publishers.committed().keySet(), deadline(backlog));
        awaitRowsLeftZero(outbox);
        times = statementTimes(role);
      } finally {
        watch.stop();
      }
      tenths = watch.tenths(backlog);
      atFirstTenth = watch.atFirstTenth == null ? times : watch.atFirstTenth;
      atLastTenth = watch.atLastTenth == null ? times : watch.atLastTenth;
      double seconds = ((all ? consumer.lastNewAt() : System.nanoTime()) - t0) / 1e9;
      long wal2 = wal();
      long stmts = statements(role) - s0;
      double workerCpu = ProcessCpu.seconds(kafka.worker().pid()) - worker0;
      double serverCpu = ProcessCpu.serverSeconds(postmasterPid) - server0;
      Map<String, Double> serverKinds = serverByKind.stop();
      double brokerCpu = brokerSeconds() - broker0;
      double benchCpu = ProcessCpu.seconds(ProcessHandle.current().pid()) - bench0;
      StatementTimes drained = times.minus(times0);
      notes.append(
          "- %s, %s %,d: PostgreSQL CPU s per 1,000 deliveries by process during the drain (sampled"
                  .formatted(variant, scenario, backlog)
              + " every 50 ms, a lower bound per kind; all %.4f): %s%s%n"
                  .formatted(
                      1_000 * serverCpu / backlog,
                      ServerCpuByKind.perThousand(serverKinds, backlog),
                      relaybus
                          ? "; %,d claims (%.1f deliveries each), %,d completions (%.1f each),"
                                  .formatted(
                                      drained.claims(),
                                      (double) backlog / drained.claims(),
                                      drained.completes(),
                                      (double) backlog / drained.completes())
                              + " server ms per claim / completion %.2f / %.2f"
                                  .formatted(drained.perClaim(), drained.perCompletion())
                          : ""));
      Thread.sleep(1_000); // duplicates, if any, arrive
      Accounting accounting =
          consumer.account(publishers.committed(), outbox.rowsLeft(postgres.dataSource()), null);
      XminPhase after = null;
      if (scenario.startsWith("xmin")) {
        after = xminAfterDrain(publishers, consumer, outbox, role, relaybus ? tables : null);
      }
      removeConnector(connector, role, slot);
      closePublisherConnections();
      // relaybus: the log (one row per event and its handlers); Debezium: its outbox table
      TableCounters deliveryRows = table(relaybus ? tables + "log" : tables);
      DrainRow row =
          new DrainRow(
              scenario,
              variant,
              backlog,
              seconds,
              wal1 - wal0,
              wal2 - wal1,
              stmts,
              drained,
              relaybus ? table(tables + "lanes") : null,
              deliveryRows,
              deliveryRows.dead() + (relaybus ? table(tables + "events").dead() : 0),
              workerCpu,
              publishCpu,
              serverCpu,
              brokerCpu,
              benchCpu,
              accounting,
              tenths,
              atFirstTenth.minus(times0),
              times.minus(atLastTenth));
      if (after != null) {
        Map<String, Long> dead = new LinkedHashMap<>();
        for (String t : relaybus ? List.of("events", "log", "deliveries", "lanes") : List.of("")) {
          dead.put(relaybus ? tables + t : tables, table(tables + t).dead());
        }
        SteadyRow steady =
            after.steady(
                variant,
                consumer.account(
                    publishers.committed(),
                    outbox.rowsLeft(postgres.dataSource()),
                    after.steadyIds()));
        xminRows.add(
            new XminRow(
                variant,
                hold,
                row,
                after.emptyPolls(),
                after.idleSeconds(),
                after.idleServerCpu(),
                steady,
                after.steadyLastTenth(),
                after.steadyLastTenthDeliveries(),
                dead,
                holder == null ? null : holder.release()));
      }
      return row;
    }
  }

  /** A drain's deadline: 5 minutes, or 2 ms per event for deep backlogs. */
  private static Duration deadline(int backlog) {
    return DEADLINE.compareTo(Duration.ofMillis(2L * backlog)) >= 0
        ? DEADLINE
        : Duration.ofMillis(2L * backlog);
  }

  /** Seconds the held-xmin scenario watches the connector on the drained, empty outbox. */
  static final double XMIN_EMPTY_SECONDS = 10;

  /** What the held-xmin scenario measured after its drain, on the same connector and tables. */
  private record XminPhase(
      StatementTimes emptyPolls,
      double idleSeconds,
      double idleServerCpu,
      StatementTimes steadyLastTenth,
      int steadyLastTenthDeliveries,
      java.util.Set<String> steadyIds,
      double committedRate,
      double deliveredRate,
      long maxBacklog,
      long statements,
      double workerCpu,
      double serverCpu,
      long wal,
      boolean saturated) {
    SteadyRow steady(String variant, Accounting window) {
      return new SteadyRow(
          variant,
          XMIN_RATE,
          committedRate,
          deliveredRate,
          window,
          window.latenciesMicros().length,
          maxBacklog,
          statements,
          workerCpu,
          serverCpu,
          wal,
          saturated);
    }
  }

  /**
   * After a drain, with the connector still running: its empty polls for {@link
   * #XMIN_EMPTY_SECONDS}, then {@link Mode#xminSeconds} at {@link #XMIN_RATE}/s, the claim's server
   * time over the last tenth of that.
   */
  private XminPhase xminAfterDrain(
      BenchPublishers publishers,
      BenchConsumer consumer,
      BenchOutbox outbox,
      String role,
      String relaybusTables)
      throws Exception {
    Thread.sleep(1_000);
    StatementTimes idle0 = statementTimes(role);
    double idleCpu0 = ProcessCpu.serverSeconds(postmasterPid);
    long i0 = System.nanoTime();
    Thread.sleep((long) (XMIN_EMPTY_SECONDS * 1000));
    StatementTimes emptyPolls = statementTimes(role).minus(idle0);
    double idleCpu = ProcessCpu.serverSeconds(postmasterPid) - idleCpu0;
    double idleSeconds = (System.nanoTime() - i0) / 1e9;

    java.util.Set<String> before = java.util.Set.copyOf(publishers.committed().keySet());
    long count0 = publishers.count();
    int distinct0 = consumer.distinct();
    long s0 = statements(role);
    double worker0 = ProcessCpu.seconds(kafka.worker().pid());
    double server0 = ProcessCpu.serverSeconds(postmasterPid);
    long wal0 = wal();
    AtomicLong maxBacklog = new AtomicLong();
    StatementTimes[] atLastTenth = new StatementTimes[1];
    int[] deliveredAtLastTenth = new int[1];
    long t0 = System.nanoTime();
    Thread sampler =
        new Thread(
            () -> {
              long lastTenthAt = t0 + (long) (0.9 * xminSeconds * 1e9);
              while (!Thread.currentThread().isInterrupted()) {
                maxBacklog.accumulateAndGet(
                    (publishers.count() - count0) - (consumer.distinct() - distinct0), Math::max);
                if (atLastTenth[0] == null && System.nanoTime() >= lastTenthAt) {
                  deliveredAtLastTenth[0] = consumer.distinct();
                  try {
                    atLastTenth[0] = statementTimes(role);
                  } catch (SQLException e) {
                    atLastTenth[0] = StatementTimes.NONE;
                  }
                }
                try {
                  Thread.sleep(20);
                } catch (InterruptedException e) {
                  return;
                }
              }
            },
            "bench-xmin-sampler");
    sampler.start();
    publishers.publishAtRate(XMIN_RATE, xminSeconds);
    long published = System.nanoTime();
    boolean all = consumer.awaitAll(publishers.committed().keySet(), Duration.ofSeconds(120));
    awaitRowsLeftZero(outbox);
    if (!all && relaybusTables != null) {
      printRowsLeft(
          relaybusTables + "log", relaybusTables + "lane_cursors", relaybusTables + "deliveries");
    }
    sampler.interrupt();
    sampler.join();
    StatementTimes end = statementTimes(role);
    int deliveredInLastTenth =
        atLastTenth[0] == null ? 0 : consumer.distinct() - deliveredAtLastTenth[0];
    java.util.Set<String> steadyIds = new java.util.HashSet<>(publishers.committed().keySet());
    steadyIds.removeAll(before);
    int count = steadyIds.size();
    double tail = (consumer.lastNewAt() - published) / 1e9;
    return new XminPhase(
        emptyPolls,
        idleSeconds,
        idleCpu,
        end.minus(atLastTenth[0] == null ? end : atLastTenth[0]),
        deliveredInLastTenth,
        steadyIds,
        count / ((published - t0) / 1e9),
        count / ((consumer.lastNewAt() - t0) / 1e9),
        maxBacklog.get(),
        statements(role) - s0,
        ProcessCpu.seconds(kafka.worker().pid()) - worker0,
        ProcessCpu.serverSeconds(postmasterPid) - server0,
        wal() - wal0,
        !all || tail > 5 || count < 0.9 * XMIN_RATE * xminSeconds);
  }

  // ---------------------------------------------------------------- issue 14 scenarios

  /**
   * Depth: the same keyed backlog at each depth, relaybus (tasks.max={@value #DEPTH_TASKS}, as
   * shipped) and Debezium with the same producer settings. Prints what the next depth will need.
   */
  void depth() throws Exception {
    double bytesPerEvent = ASSUMED_BYTES_PER_EVENT;
    double relaybusRate = 0;
    double debeziumRate = 0;
    for (int depth : depths) {
      long free = Files.getFileStore(Path.of(dataDirectory())).getUsableSpace();
      double publishSeconds = depth / 10_000.0 * 2; // both outboxes, a guess of 10,000/s each
      double drainSeconds =
          relaybusRate == 0 ? depth / 2_000.0 * 2 : depth / relaybusRate + depth / debeziumRate;
      String estimate =
          String.format(
              "depth %,d: needs about %.1f GB of disk (%,.0f B/event%s; %.1f GB free), about %.0f min",
              depth,
              depth * bytesPerEvent / 1e9,
              bytesPerEvent,
              relaybusRate == 0 ? ", assumed" : ", measured at the previous depth",
              free / 1e9,
              (publishSeconds + drainSeconds) / 60);
      System.out.println(estimate);
      notes.append("- ").append(estimate).append(" (printed before the drain)\n");
      if (depth * bytesPerEvent > free) {
        throw new IllegalStateException(
            "depth %,d needs about %.1f GB, only %.1f GB free under the data directory"
                .formatted(depth, depth * bytesPerEvent / 1e9, free / 1e9));
      }
      long size0 = queryLong("SELECT pg_database_size(current_database())") + walSize();
      // Taking turns at going first from one depth to the next: what a drain leaves behind
      // (autovacuum of its tables, dirty pages, the checkpoint it started) falls on the other.
      boolean relaybusFirst = (depthRows.size() / 2) % 2 == 0; // two rows per depth
      DrainRow rb;
      DrainRow dbz;
      if (relaybusFirst) {
        rb = drainRelaybus("depth", depth, DEPTH_TASKS, true, false);
        dbz = drainDebezium("depth", depth, true, false);
      } else {
        dbz = drainDebezium("depth", depth, true, false);
        rb = drainRelaybus("depth", depth, DEPTH_TASKS, true, false);
      }
      depthRows.add(rb);
      depthRows.add(dbz);
      long size1 = queryLong("SELECT pg_database_size(current_database())") + walSize();
      notes.append(
          "- depth %,d used %,.0f B/event of database and WAL (both connectors' tables kept)%n"
              .formatted(depth, (double) (size1 - size0) / depth));
      bytesPerEvent = Math.max(bytesPerEvent / 4, (double) (size1 - size0) / depth);
      relaybusRate = rb.rate();
      debeziumRate = dbz.rate();
    }
  }

  /**
   * Held xmin: each connector twice, once plain and once with {@link SnapshotHolder} open from
   * before the publish to the end: drain of {@link Mode#xminBacklog}, empty polls, then {@link
   * Mode#xminSeconds} at {@link #XMIN_RATE}/s.
   */
  void heldXmin() throws Exception {
    for (int i = 0; i < XMIN_REPEAT && rescuedRows() == 0; i++) {
      boolean hold = i % 2 == 1;
      drainRelaybus((hold ? "xmin held " : "xmin none ") + i, xminBacklog, DEPTH_TASKS, true, hold);
    }
    if (XMIN_REPEAT > 0) {
      return;
    }
    for (boolean hold : List.of(false, true)) {
      String scenario = hold ? "xmin held" : "xmin none";
      drainRelaybus(scenario, xminBacklog, DEPTH_TASKS, true, hold);
      drainDebezium(scenario, xminBacklog, true, hold);
    }
  }

  /**
   * Idle: PostgreSQL's CPU over {@link Mode#idleSeconds} with nothing connected, then with each
   * connector running on an empty outbox.
   */
  void idle() throws Exception {
    idleRows.add(idleWindow("no connector (PostgreSQL's own background work)", null, null, null));
    for (int tasks : List.of(1, 4)) {
      int n = ++runs;
      String prefix = "i" + n + "_";
      // Held open through the window: the tables exist and the application's pool stays
      // connected, as beside a running application.
      PostgresOutboxStore store = appStore(prefix);
      try {
        Map<String, String> config = relaybusAsShipped(prefix);
        config.put("tasks.max", String.valueOf(tasks));
        idleRows.add(
            idleWindow(
                "relaybus, tasks.max=%d, otherwise as shipped (poll.interval.ms default)"
                    .formatted(tasks),
                "relaybus-idle-" + n,
                config,
                null));
      } finally {
        store.close();
      }
    }
    int n = ++runs;
    String table = "dbz" + n + "_outbox";
    BenchOutbox.debezium(postgres.dataSource(), table, "bench");
    Map<String, String> config = debeziumTuned(table, "dbz" + n, "debezium-idle-" + n, 500);
    config.remove("poll.interval.ms");
    idleRows.add(
        idleWindow(
            "Debezium 3.6.1 + EventRouter (defaults)", "debezium-idle-" + n, config, "dbz" + n));
  }

  private IdleRow idleWindow(
      String variant, String connector, Map<String, String> config, String slot) throws Exception {
    String role = slot == null ? CONNECT : DEBEZIUM;
    // Earlier scenarios leave work behind (autovacuum, dirty pages): let it finish first.
    execute("CHECKPOINT");
    Thread.sleep(5_000);
    if (connector != null) {
      createTopic(connector);
      kafka.put("connectors/" + connector + "/config", deployed(config));
      kafka.awaitTasksRunning(connector, Integer.parseInt(config.get("tasks.max")));
      awaitSlotActive(slot);
      Thread.sleep(3_000); // past start-up (lane acquisition, slot catch-up)
    }
    // A settled database: without this, autovacuum and autoanalyze of the tables just created
    // (and of the lane rows just granted) land in the window, most of its WAL.
    execute("VACUUM (ANALYZE)");
    long s0 = statements(role);
    StatementTimes times0 = statementTimes(role);
    long wal0 = wal();
    double cpu0 = ProcessCpu.serverSeconds(postmasterPid);
    long t0 = System.nanoTime();
    Thread.sleep((long) (mode.idleSeconds * 1000));
    double cpu = ProcessCpu.serverSeconds(postmasterPid) - cpu0;
    double seconds = (System.nanoTime() - t0) / 1e9;
    long wal = wal() - wal0;
    String walByRecord = walByKind(wal0, wal0 + wal);
    IdleRow row =
        new IdleRow(
            variant,
            seconds,
            cpu,
            connector == null ? 0 : statements(role) - s0,
            connector == null ? StatementTimes.NONE : statementTimes(role).minus(times0),
            wal,
            walByRecord);
    if (connector != null) {
      removeConnector(connector, role, slot);
    }
    return row;
  }

  /** The largest kinds of WAL record between two positions (see {@link WalByKind}). */
  private String walByKind(long from, long to) throws SQLException {
    List<WalByKind.Kind> kinds;
    try (Connection c = postgres.dataSource().getConnection()) {
      kinds = WalByKind.between(c, from, to);
    }
    return kinds.isEmpty()
        ? "none"
        : kinds.stream()
            .limit(5)
            .map(
                k ->
                    "%s %,d B in %,d (full-page images %,d B)"
                        .formatted(k.name(), k.bytes(), k.records(), k.fullPageImageBytes()))
            .collect(Collectors.joining("; "));
  }

  private String dataDirectory() throws SQLException {
    return queryString("SHOW data_directory");
  }

  private long walSize() throws SQLException {
    return queryLong("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()");
  }

  private void awaitRowsLeftZero(BenchOutbox outbox) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    while (outbox.rowsLeft(postgres.dataSource()) > 0 && System.nanoTime() < deadline) {
      Thread.sleep(20);
    }
  }

  // ---------------------------------------------------------------- steady state

  /**
   * Rates rise until a variant saturates; at each rate relaybus and Debezium take turns, each on a
   * connector, tables and topic of its own, so a change in the machine's load hits both alike.
   */
  void steadyState() throws Exception {
    boolean relaybusSaturated = false;
    boolean debeziumSaturated = false;
    for (int rate : rates) {
      if (!relaybusSaturated || ratesPastSaturation) {
        relaybusSaturated |= steadyCell(true, rate).saturated();
      }
      if (!debeziumSaturated || ratesPastSaturation) {
        debeziumSaturated |= steadyCell(false, rate).saturated();
      }
      if (relaybusSaturated && debeziumSaturated && !ratesPastSaturation) {
        break;
      }
    }
    if (mode.shippedCell) {
      // issue 14: p99 at 1,000/s with the settings a user starts from, not poll.interval.ms=10
      steadyCell(true, 1_000, true);
      steadyCell(false, 1_000, true);
    }
  }

  /** The steady cells' relaybus variant (one task), with the poll interval of this run. */
  String relaybusSteady() {
    return "relaybus, tasks.max=1, poll.interval.ms=" + steadyPoll;
  }

  /** The steady cells' Debezium variant, with the poll interval of this run. */
  String debeziumSteady() {
    return "Debezium 3.6.1 + EventRouter, poll.interval.ms=" + steadyPoll;
  }

  static final String RELAYBUS_AS_SHIPPED =
      "relaybus as shipped (tasks.max=4, poll.interval.ms default)";
  static final String DEBEZIUM_DEFAULTS =
      "Debezium 3.6.1 + EventRouter, poll.interval.ms default, relaybus's producer settings";

  private SteadyRow steadyCell(boolean relaybus, int rate) throws Exception {
    return steadyCell(relaybus, rate, false);
  }

  /** The start of a steady cell left out of its latencies: a fifth of it, at most 2 s. */
  private long warmUpNanos() {
    return (long) (Math.min(2.0, steadySeconds / 5.0) * 1e9);
  }

  private SteadyRow steadyCell(boolean relaybus, int rate, boolean asShipped) throws Exception {
    int n = ++runs;
    String topic = (relaybus ? "relaybus-steady-" : "debezium-steady-") + n;
    String prefix = "m" + n + "_";
    String table = "dbz" + n + "_outbox";
    String slot = relaybus ? null : "dbz" + n;
    String role = relaybus ? CONNECT : DEBEZIUM;
    PostgresOutboxStore store = relaybus ? appStore(prefix) : null;
    try (store) {
      BenchOutbox outbox =
          relaybus
              ? BenchOutbox.relaybus(store, topic)
              : BenchOutbox.debezium(postgres.dataSource(), table, "bench");
      createTopic(topic);
      int poll = steadyPoll.equals("default") ? 0 : Integer.parseInt(steadyPoll);
      Map<String, String> config =
          relaybus ? relaybusShipped(prefix, 1, poll) : debeziumTuned(table, slot, topic, poll);
      if (steadyPoll.equals("default")) {
        config.remove("poll.interval.ms");
      }
      if (asShipped) {
        config = relaybus ? relaybusAsShipped(prefix) : config;
        config.remove("poll.interval.ms");
      }
      kafka.put("connectors/" + topic + "/config", deployed(config));
      kafka.awaitTasksRunning(topic, Integer.parseInt(config.get("tasks.max")));
      awaitSlotActive(slot);
      try (BenchConsumer consumer =
          new BenchConsumer(
              kafka.bootstrapServers(), topic, PARTITIONS, relaybus ? HANDLER_HEADER_ID : "id")) {
        BenchPublishers publishers = new BenchPublishers(app, outbox, 4, KEYS);
        long s0 = statements(role);
        StatementTimes times0 = statementTimes(role);
        double worker0 = ProcessCpu.seconds(kafka.worker().pid());
        double server0 = ProcessCpu.serverSeconds(postmasterPid);
        long wal0 = wal();
        AtomicLong maxBacklog = new AtomicLong();
        Thread sampler =
            new Thread(
                () -> {
                  while (!Thread.currentThread().isInterrupted()) {
                    maxBacklog.accumulateAndGet(
                        publishers.count() - consumer.distinct(), Math::max);
                    try {
                      Thread.sleep(20);
                    } catch (InterruptedException e) {
                      return;
                    }
                  }
                },
                "bench-backlog");
        sampler.start();
        long t0 = System.nanoTime();
        publishers.publishAtRate(rate, steadySeconds);
        long published = System.nanoTime();
        // a saturated cell's backlog drains after the publish: 60 s, or 2 ms per event for big ones
        boolean all =
            consumer.awaitAll(
                publishers.committed().keySet(),
                Duration.ofMillis(Math.max(60_000, 2L * publishers.committed().size())));
        sampler.interrupt();
        sampler.join();
        if (!all && store != null) {
          printRowsLeft(store);
        }
        long wal = wal() - wal0;
        long statements = statements(role) - s0;
        StatementTimes times = statementTimes(role).minus(times0);
        double workerCpu = ProcessCpu.seconds(kafka.worker().pid()) - worker0;
        double serverCpu = ProcessCpu.serverSeconds(postmasterPid) - server0;
        double tail = (consumer.lastNewAt() - published) / 1e9;
        int count = publishers.committed().size();
        Thread.sleep(1_000); // duplicates, if any, arrive
        removeConnector(topic, role, slot);
        // Latency after the cell's start-up: each cell starts a fresh connector (its producer's
        // first metadata fetch for a new topic, a new pool, the first claims), which both sides
        // pay in their first second or two; what is exact (lost, duplicates, order) counts all
        long warmUpEnd = t0 + warmUpNanos();
        java.util.Set<String> afterWarmUp = new java.util.HashSet<>();
        publishers
            .committed()
            .forEach(
                (id, c) -> {
                  if (c.committedAt() >= warmUpEnd) {
                    afterWarmUp.add(id);
                  }
                });
        Accounting everyEvent =
            consumer.account(publishers.committed(), outbox.rowsLeft(postgres.dataSource()), null);
        SteadyRow row =
            new SteadyRow(
                relaybus
                    ? asShipped ? RELAYBUS_AS_SHIPPED : relaybusSteady()
                    : asShipped ? DEBEZIUM_DEFAULTS : debeziumSteady(),
                rate,
                count / ((published - t0) / 1e9),
                count / ((consumer.lastNewAt() - t0) / 1e9),
                consumer.account(
                    publishers.committed(), outbox.rowsLeft(postgres.dataSource()), afterWarmUp),
                everyEvent.latenciesMicros().length,
                maxBacklog.get(),
                statements,
                workerCpu,
                serverCpu,
                wal,
                !all || tail > 5 || count < 0.9 * rate * steadySeconds);
        steadyRows.add(row);
        notes.append(
            ("- steady %s at %,d/s: p99 %.1f ms over every event, %.1f ms after the first %.1f s;"
                    + " commit to the broker's append p50 %.0f / p99 %.0f ms (ms resolution; %s)%s%n")
                .formatted(
                    row.variant(),
                    rate,
                    everyEvent.latencyMillis(99),
                    row.window().latencyMillis(99),
                    warmUpNanos() / 1e9,
                    row.window().toBrokerMillis(50),
                    row.window().toBrokerMillis(99),
                    row.window().slowest(),
                    relaybus
                        ? "; %,d claims, %.1f deliveries each, server ms per claim / completion %s"
                            .formatted(
                                times.claims(),
                                times.claims() == 0 ? Double.NaN : (double) count / times.claims(),
                                times.describe())
                        : ""));
        return row;
      }
    }
  }

  // ---------------------------------------------------------------- connectors

  /** config/postgres-outbox-source.json as shipped (tasks.max, poll interval), this database. */
  private Map<String, String> relaybusAsShipped(String prefix) {
    Map<String, String> config = relaybusShipped(prefix, 1, 0);
    config.put("tasks.max", DeployedConfig.json("postgres-outbox-source.json").get("tasks.max"));
    config.remove("poll.interval.ms");
    return config;
  }

  /** config/postgres-outbox-source.json with Connect's producer defaults (no overrides). */
  private Map<String, String> relaybusDefaults(String prefix, int tasks, int pollMillis) {
    Map<String, String> config = relaybusShipped(prefix, tasks, pollMillis);
    config.keySet().removeIf(k -> k.startsWith("producer.override."));
    return config;
  }

  /** config/postgres-outbox-source.json as shipped, pointed at this database and prefix. */
  private Map<String, String> relaybusShipped(String prefix, int tasks, int pollMillis) {
    Map<String, String> config =
        new LinkedHashMap<>(DeployedConfig.json("postgres-outbox-source.json"));
    config.put("tasks.max", String.valueOf(tasks));
    config.put("connection.url", postgres.jdbcUrl());
    config.put("connection.user", CONNECT);
    config.put("connection.password", "");
    config.put("outbox.table.prefix", prefix);
    config.put("outbox.setup", "false");
    config.put("poll.interval.ms", String.valueOf(pollMillis));
    return config;
  }

  /** Debezium with the producer settings relaybus ships. */
  private Map<String, String> debeziumTuned(
      String table, String slot, String topic, int pollMillis) {
    Map<String, String> config = debeziumConfig(table, slot, topic, pollMillis);
    DeployedConfig.json("postgres-outbox-source.json").entrySet().stream()
        .filter(e -> e.getKey().startsWith("producer.override."))
        .forEach(e -> config.put(e.getKey(), e.getValue()));
    return config;
  }

  /** Debezium's documented outbox setup: pgoutput, the EventRouter SMT, no snapshot. */
  private Map<String, String> debeziumConfig(
      String table, String slot, String topic, int pollMillis) {
    Map<String, String> config =
        DebeziumOutboxSetup.connectorConfig(postgres.port(), DEBEZIUM, table, slot, slot);
    config.put("tombstones.on.delete", "false");
    config.put("poll.interval.ms", String.valueOf(pollMillis));
    config.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
    config.put("value.converter", "org.apache.kafka.connect.storage.StringConverter");
    config.put("transforms.outbox.route.topic.replacement", topic);
    return config;
  }

  private void deployPaused(String connector, Map<String, String> config, int tasks, String slot)
      throws Exception {
    var response = kafka.put("connectors/" + connector + "/config", deployed(config));
    if (response.statusCode() >= 300) {
      throw new IllegalStateException("deploy of " + connector + " refused: " + response.body());
    }
    kafka.awaitTasksRunning(connector, tasks);
    awaitSlotActive(slot);
    kafka.put("connectors/" + connector + "/pause", "");
    kafka.awaitState(connector, "PAUSED");
  }

  private void awaitSlotActive(String slot) {
    if (slot == null) {
      return;
    }
    await()
        .atMost(SeparateJvmKafka.TIMEOUT)
        .until(
            () ->
                queryLong(
                        "SELECT count(*) FROM pg_replication_slots WHERE active AND slot_name = '"
                            + slot
                            + "'")
                    == 1);
  }

  /** Deletes the connector and waits until its role has no connection left (statistics flushed). */
  private void removeConnector(String connector, String role, String slot) throws Exception {
    kafka.delete("connectors/" + connector);
    await()
        .atMost(SeparateJvmKafka.TIMEOUT)
        .until(
            () ->
                queryLong("SELECT count(*) FROM pg_stat_activity WHERE usename = '" + role + "'")
                    == 0);
    if (slot != null
        && queryLong("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" + slot + "'")
            > 0) {
      execute("SELECT pg_drop_replication_slot('" + slot + "')");
    }
  }

  /**
   * Closes the publishers' idle connections and waits for their backends to exit: a backend flushes
   * its table counters on exit, an idle one only every few seconds.
   */
  private void closePublisherConnections() {
    app.close();
    app = publisherPool();
    await()
        .atMost(SeparateJvmKafka.TIMEOUT)
        .until(
            () ->
                queryLong(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = '"
                            + PUBLISHERS
                            + "'")
                    == 0);
  }

  /** The application's connections, for the publishers (a pool as an application has). */
  private HikariDataSource publisherPool() {
    HikariConfig pool = new HikariConfig();
    pool.setJdbcUrl(postgres.jdbcUrl());
    pool.setUsername(APP);
    pool.setMaximumPoolSize(10);
    pool.setMinimumIdle(0);
    pool.setPoolName("bench-app");
    pool.addDataSourceProperty("ApplicationName", PUBLISHERS);
    return new HikariDataSource(pool);
  }

  private void createTopic(String topic) throws Exception {
    // the broker stamps each record with its append time: the steady notes split the latency there
    admin
        .createTopics(
            List.of(
                new NewTopic(topic, PARTITIONS, (short) 1)
                    .configs(Map.of("message.timestamp.type", "LogAppendTime"))))
        .all()
        .get();
  }

  // ---------------------------------------------------------------- database probes

  /**
   * For a relaybus cell that did not deliver everything: the log rows left (lane, id, xid) and the
   * latest cursor rows of their lanes, on standard output (the failsafe report's output file), so a
   * stall can be read after the run.
   */
  private void printRowsLeft(PostgresOutboxStore store) throws SQLException {
    printRowsLeft(
        store.tableName("log"), store.tableName("cursors"), store.tableName("deliveries"));
  }

  private void printRowsLeft(String log, String cursors, String deliveries) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement()) {
      try (ResultSet rs =
          s.executeQuery(
              "SELECT lane, id, xid::text, handlers::text FROM "
                  + log
                  + " ORDER BY lane, id LIMIT 100")) {
        while (rs.next()) {
          System.out.printf(
              "rows left: log lane %d id %d xid %s handlers %s%n",
              rs.getInt(1), rs.getLong(2), rs.getString(3), rs.getString(4));
        }
      }
      try (ResultSet rs =
          s.executeQuery(
              "SELECT DISTINCT ON (c.lane) c.* FROM "
                  + cursors
                  + " c WHERE c.lane IN (SELECT lane FROM "
                  + log
                  + ") ORDER BY c.lane, c.epoch DESC, c.version DESC")) {
        int columns = rs.getMetaData().getColumnCount();
        while (rs.next()) {
          StringBuilder line = new StringBuilder("rows left: latest cursor");
          for (int i = 1; i <= columns; i++) {
            line.append(' ').append(rs.getMetaData().getColumnName(i)).append('=');
            line.append(rs.getString(i));
          }
          System.out.println(line);
        }
      }
      try (ResultSet rs =
          s.executeQuery("SELECT status, count(*) FROM " + deliveries + " GROUP BY status")) {
        while (rs.next()) {
          System.out.printf("rows left: deliveries %s %d%n", rs.getString(1), rs.getLong(2));
        }
      }
    }
  }

  private PostgresOutboxStore appStore(String prefix) {
    PostgresOutboxStore store = store(APP, prefix);
    store.setup();
    return store;
  }

  private PostgresOutboxStore store(String role, String prefix) {
    return PostgresOutboxStore.builder()
        .jdbcUrl(postgres.jdbcUrl())
        .user(role)
        .tablePrefix(prefix)
        .poolSize(2)
        .applicationName("bench-" + role)
        .build();
  }

  private long wal() throws SQLException {
    return queryLong("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint");
  }

  /** WAL records and full-page images written so far, by the whole server (pg_stat_wal). */
  private long[] walStatistics() throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT wal_records, wal_fpi FROM pg_stat_wal")) {
      rs.next();
      return new long[] {rs.getLong(1), rs.getLong(2)};
    }
  }

  /** Server time of {@code role}'s statements so far, milliseconds (pg_stat_statements). */
  private double statementMillis(String role) throws SQLException {
    return perRole("sum(total_exec_time)", role).doubleValue();
  }

  /** Statements of {@code role} so far (pg_stat_statements, utility statements not tracked). */
  private long statements(String role) throws SQLException {
    return perRole("sum(calls)", role).longValue();
  }

  private Number perRole(String aggregate, String role) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT coalesce("
                    + aggregate
                    + ", 0) FROM pg_stat_statements p"
                    + " JOIN pg_roles r ON r.oid = p.userid WHERE r.rolname = ?")) {
      s.setString(1, role);
      try (ResultSet rs = s.executeQuery()) {
        rs.next();
        return (Number) rs.getObject(1);
      }
    }
  }

  private TableCounters table(String name) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup"
                    + " FROM pg_stat_user_tables WHERE schemaname = 'public' AND relname = ?")) {
      s.setString(1, name);
      try (ResultSet rs = s.executeQuery()) {
        if (!rs.next()) {
          throw new IllegalStateException("no statistics for table " + name);
        }
        return new TableCounters(
            rs.getLong(1), rs.getLong(2), rs.getLong(3), rs.getLong(4), rs.getLong(5));
      }
    }
  }

  /**
   * Calls and server time of the claims and the completion statements of {@code role} so far. A
   * claim is counted by its first statement, the window boundary ({@code log_boundary_}), which
   * every claim runs, idle or not; its server time is that of all its statements (the boundary, the
   * claim statements with their {@code held AS MATERIALIZED} CTE, of the log's page and of the
   * claim off the happy path, and the cursor append). The completion is recognised by its {@code
   * done AS} or, of the log, {@code SELECT token FROM ok} and the delete where the claim read the
   * rows ({@code WITH fenced AS}); a completion that takes both of the log's counts twice, which on
   * the happy path none does. A storage whose statements read otherwise must change the patterns
   * here, or every per-claim figure reads n/a and the gate's claims-per-tenth fail.
   */
  private StatementTimes statementTimes(String role) throws SQLException {
    String claim = "query LIKE '%log_boundary_(%'";
    String claimStatement =
        "(query LIKE '%held AS MATERIALIZED%' OR query LIKE '%log_boundary_(%'"
            + " OR query LIKE '%INSERT INTO%lane_cursors%')";
    String complete =
        "(query LIKE '%done AS%' OR query LIKE '%SELECT token FROM ok%'"
            + " OR query LIKE 'WITH fenced AS%')";
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT coalesce(sum(calls) FILTER (WHERE "
                    + claim
                    + "), 0), coalesce(sum(total_exec_time) FILTER (WHERE "
                    + claimStatement
                    + "), 0), coalesce(sum(calls) FILTER (WHERE "
                    + complete
                    + "), 0), coalesce(sum(total_exec_time) FILTER (WHERE "
                    + complete
                    + "), 0) FROM pg_stat_statements p JOIN pg_roles r ON r.oid = p.userid"
                    + " WHERE r.rolname = ?")) {
      s.setString(1, role);
      try (ResultSet rs = s.executeQuery()) {
        rs.next();
        return new StatementTimes(rs.getLong(1), rs.getDouble(2), rs.getLong(3), rs.getDouble(4));
      }
    }
  }

  private long queryLong(String sql) throws SQLException {
    return Long.parseLong(queryString(sql));
  }

  private String queryString(String sql) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      rs.next();
      return rs.getString(1);
    }
  }

  private void execute(String... sql) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement()) {
      for (String statement : sql) {
        s.execute(statement);
      }
    }
  }

  private static String loadAverage() {
    try {
      String[] l = Files.readString(Path.of("/proc/loadavg")).split(" ");
      return l[0] + " / " + l[1] + " / " + l[2];
    } catch (Exception e) {
      return "unknown";
    }
  }

  /**
   * The log rows the store's safety net found behind their lane's cursor and sent on
   * (PostgresLog.sweep): the lines the worker logged for them. Each is a defect.
   */
  long rescuedRows() {
    try (java.util.stream.Stream<String> lines = Files.lines(kafka.worker().log())) {
      return lines.filter(l -> l.contains("was behind the lane's read position")).count();
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  // ---------------------------------------------------------------- report

  String report() {
    StringBuilder r = new StringBuilder();
    r.append("### ")
        .append(mode.name().toLowerCase())
        .append(" run, ")
        .append(startedAt)
        .append("\n\n");
    r.append(machine())
        .append(" Load average (1/5/15 min) at the start ")
        .append(loadAtStart)
        .append(", at the end ")
        .append(loadAverage())
        .append(".\n\n");
    if (!relaybusOverrides.isEmpty()) {
      r.append("Every relaybus connector of this run was also given ")
          .append(relaybusOverrides)
          .append(" (relaybus.bench.relaybus.config).\n\n");
    }

    DrainRow debezium =
        drainRows.stream().filter(d -> d.variant().startsWith("Debezium")).findFirst().orElse(null);
    if (!publishRows.isEmpty()) {
      r.append(
          "**Publish only** (%,d events per cell, no connector reading; statements and WAL of the application's role; PostgreSQL CPU of all its processes; before the cells each outbox published %,d events one per transaction and %,d a hundred per transaction, not counted; the two sides of a pair take turns at going first, relaybus in the first pair):\n\n"
              .formatted(mode.publishEvents, PUBLISH_WARM_UP, PUBLISH_WARM_UP));
      r.append(
          "| outbox | publishers | events per transaction | events/s | WAL B/event | WAL records/event | full-page images | statements/event | server µs/event | PostgreSQL CPU s/1k | relaybus ÷ Debezium |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
      for (int i = 0; i + 1 < publishRows.size(); i += 2) {
        PublishRow rb = publishRows.get(i);
        PublishRow dbz = publishRows.get(i + 1);
        for (PublishRow p : List.of(rb, dbz)) {
          r.append(
              "| %s | %d | %d | %,.0f | %,d | %.1f | %,d | %.2f | %,.0f | %.3f | %s |\n"
                  .formatted(
                      p.outbox(),
                      p.publishers(),
                      p.batch(),
                      p.rate(),
                      p.wal() / p.events(),
                      (double) p.walRecords() / p.events(),
                      p.fullPageImages(),
                      (double) p.stmts() / p.events(),
                      1000 * p.serverMillis() / p.events(),
                      1000 * p.serverCpu() / p.events(),
                      p == rb ? "**%.2f×**".formatted(rb.rate() / dbz.rate()) : ""));
        }
      }
    }

    if (!drainRows.isEmpty() || sqlDrain != null) {
      r.append(
          "\n**Drain of a %,d-event backlog** (4 publishers, 100 per transaction, with the connector paused; time from resume to the last new record at the verifying consumer; one topic of %d partitions; %,d keys):\n\n"
              .formatted(mode.backlog, PARTITIONS, KEYS));
      drainTable(r, drainRows);
      if (sqlDrain != null) {
        r.append(
            "| ceiling: SQL-only drain (relaybus claim %d + complete, one session, no Kafka) | %,.0f | | 1.00× | | %.4f | | | | | | | | %,d drained |\n"
                .formatted(
                    sqlDrain.batch(),
                    sqlRate(),
                    (double) (sqlDrain.claims() + sqlDrain.completes() + sqlDrain.others())
                        / sqlDrain.deliveries(),
                    sqlDrain.deliveries()));
        r.append(
            "| ceiling: raw Kafka producer of the same records (acks=all) | %,.0f | | | | | | | | | | | | |\n"
                .formatted(mode.backlog / rawProducerSeconds));
      }
    }

    if (!depthRows.isEmpty()) {
      r.append(
          "\n**Depth** (issue 14): the same drain at each depth, relaybus tasks.max=%d as shipped, Debezium with the same producer settings, the two taking turns at going first (relaybus at the first depth); server ms per claim over the first and the last tenth of the drain (pg_stat_statements, read when the consumer had a tenth and nine tenths):\n\n"
              .formatted(DEPTH_TASKS));
      r.append(
          "| depth | relaybus deliveries/s | Debezium deliveries/s | relaybus ÷ Debezium | relaybus ms per claim, first tenth → last tenth | last ÷ first |\n|---:|---:|---:|---:|---:|---:|\n");
      for (DrainRow d : depthRows) {
        DrainRow rival = rival(d);
        if (d.relaybus() && rival != null) {
          r.append(
              "| %,d | %,.0f | %,.0f | **%.2f×** | %.2f → %.2f | %.2f× |\n"
                  .formatted(
                      d.deliveries(),
                      d.rate(),
                      rival.rate(),
                      d.rate() / rival.rate(),
                      d.firstTenth().perClaim(),
                      d.lastTenth().perClaim(),
                      d.lastTenth().perClaim() / d.firstTenth().perClaim()));
        }
      }
      r.append("\n");
      drainTable(r, depthRows);
    }

    if (!xminRows.isEmpty()) {
      r.append(
          "\n**Held xmin horizon** (issue 14): a session in REPEATABLE READ that read one row stays open from before the publish to the end (its backend_xmin set, its age growing: column \"horizon\"), against the same run without it. Per connector: drain of %,d (tasks.max=%d), then %.0f s on the empty outbox (empty polls), then %.0f s at %,d/s; dead tuples (n_dead_tup) of the outbox tables and the claim's server time at the end:\n\n"
              .formatted(xminBacklog, DEPTH_TASKS, XMIN_EMPTY_SECONDS, xminSeconds, XMIN_RATE));
      r.append(
          "| variant | snapshot held | drain deliveries/s | ÷ without | ms per claim, drain first → last tenth | empty poll ms per claim (calls) | empty poll ÷ without | PostgreSQL CPU, empty outbox, % of a core | steady committed/s → delivered/s | p50 ms | p99 ms | p99 ÷ without | ms per claim (deliveries each), last tenth of steady | dead tuples at the end | horizon age start → end | exactness |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n");
      for (XminRow x : xminRows) {
        XminRow without =
            xminRows.stream()
                .filter(o -> !o.held() && o.variant().equals(x.variant()))
                .findFirst()
                .orElse(x);
        r.append(
            "| %s | %s | %,.0f | %.2f× | %s → %s | %s | %s | %.1f%% | %,.0f → %,.0f%s | %.1f | %.1f | %.2f× | %s | %s | %s | %s |\n"
                .formatted(
                    x.variant(),
                    x.held() ? "yes" : "no",
                    x.drain().rate(),
                    x.drain().rate() / without.drain().rate(),
                    claimMs(x.drain().firstTenth()),
                    claimMs(x.drain().lastTenth()),
                    x.emptyPolls().claims() == 0
                        ? "n/a"
                        : "%.2f (%,d)"
                            .formatted(x.emptyPolls().perClaim(), x.emptyPolls().claims()),
                    x.emptyPolls().claims() == 0 || without.emptyPolls().claims() == 0
                        ? "n/a"
                        : "%.2f×"
                            .formatted(x.emptyPolls().perClaim() / without.emptyPolls().perClaim()),
                    100 * x.idleServerCpu() / x.idleSeconds(),
                    x.steady().committedRate(),
                    x.steady().deliveredRate(),
                    x.steady().saturated() ? " (saturated)" : "",
                    x.steady().window().latencyMillis(50),
                    x.steady().window().latencyMillis(99),
                    x.steady().window().latencyMillis(99)
                        / without.steady().window().latencyMillis(99),
                    x.steadyLastTenth().claims() == 0
                        ? "n/a"
                        : "%.2f (%.1f deliveries each)"
                            .formatted(
                                x.steadyLastTenth().perClaim(),
                                (double) x.steadyLastTenthDeliveries()
                                    / x.steadyLastTenth().claims()),
                    x.deadTuples().entrySet().stream()
                        .map(e -> "%s %,d".formatted(e.getKey(), e.getValue()))
                        .reduce((a, b) -> a + ", " + b)
                        .orElse(""),
                    x.horizon() == null
                        ? "not held"
                        : "%,d → %,d".formatted(x.horizon().ageAtStart(), x.horizon().ageAtEnd()),
                    x.drain().accounting().summary()
                        + "; steady "
                        + x.steady().window().summary()));
      }
    }

    if (!idleRows.isEmpty()) {
      r.append(
          "\n**Idle** (issue 14): PostgreSQL's CPU (postmaster and all backends, /proc) over %.0f s with the connector running on an empty outbox, each window begun after a VACUUM (ANALYZE) of the database (as on a settled one: otherwise autovacuum of the tables just created lands in it):\n\n"
              .formatted(mode.idleSeconds));
      r.append(
          "| variant | PostgreSQL CPU, % of one core | statements/s | ms per claim (calls) | WAL B/s |\n|---|---:|---:|---:|---:|\n");
      for (IdleRow i : idleRows) {
        r.append(
            "| %s | %.2f%% | %.1f | %s | %,.0f |\n"
                .formatted(
                    i.variant(),
                    i.percentOfCore(),
                    i.statements() / i.seconds(),
                    i.times().claims() == 0
                        ? "n/a"
                        : "%.2f (%,d)".formatted(i.times().perClaim(), i.times().claims()),
                    i.wal() / i.seconds()));
      }
      r.append(
          "\nThe largest kinds of WAL record in each window (pg_walinspect; relation: kind, each record counted against its first block's relation):\n\n");
      for (IdleRow i : idleRows) {
        r.append("- %s: %s\n".formatted(i.variant(), i.walByRecord()));
      }
    }

    if (!steadyRows.isEmpty()) {
      r.append(
          "\n**Steady state** (4 publishers, one event per transaction, at a fixed offered rate for %.0f s each, rising until saturated; latency from the publisher's commit returning to the consumer's poll returning the record):\n\n"
              .formatted(steadySeconds));
      r.append(
          "| variant | offered/s | committed/s | delivered/s | p50 ms | p95 ms | p99 ms | max ms | max backlog | statements/delivery | worker CPU s/1k | PostgreSQL CPU s/1k | exactness |\n");
      r.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
      for (SteadyRow s : steadyRows) {
        int count = s.deliveries();
        r.append(
            "| %s | %,d | %,.0f | %,.0f%s | %.1f | %.1f | %.1f | %.1f | %,d | %.3f | %.3f | %.3f | %s |\n"
                .formatted(
                    s.variant(),
                    s.offered(),
                    s.committedRate(),
                    s.deliveredRate(),
                    s.saturated() ? " (saturated)" : "",
                    s.window().latencyMillis(50),
                    s.window().latencyMillis(95),
                    s.window().latencyMillis(99),
                    s.window().latencyMillis(100),
                    s.maxBacklog(),
                    count == 0 ? 0.0 : (double) s.statements() / count,
                    count == 0 ? 0.0 : 1000 * s.workerCpu() / count,
                    count == 0 ? 0.0 : 1000 * s.serverCpu() / count,
                    s.window().summary()));
      }
    }
    cost(r);
    if (!charts.isEmpty()) {
      r.append("\n**Pictures** (drawn from this run):\n\n");
      for (Path chart : charts) {
        r.append("![%s](%s)\n\n".formatted(chart.getFileName(), chart.getFileName()));
      }
    }
    r.append("\n").append(notes);
    r.append(
        "\nLog rows the PostgreSQL log's safety net found behind their lane's cursor in this run"
            + " (each a stall defect turned into a delay; the worker logs each one): %d%n"
                .formatted(rescuedRows()));
    r.append("\n").append(goals(debezium));
    return r.toString();
  }

  /**
   * Issue 14, goal 4, in one place: relaybus against Debezium, publish-only cells, every drain that
   * has a Debezium drain of the same scenario, depth and producer settings, and every steady rate
   * both ran with the same settings.
   */
  private void cost(StringBuilder r) {
    if (!publishRows.isEmpty()) {
      r.append(
          "\n**Cost: publish** (issue 14, goal 4: events/s ≥ 0.9× Debezium's insert + delete in each cell; from the publish-only table):\n\n");
      r.append(
          "| publishers | events per transaction | relaybus events/s | Debezium events/s | relaybus ÷ Debezium | relaybus WAL B/event | Debezium WAL B/event | ÷ | relaybus PostgreSQL CPU s/1k | Debezium PostgreSQL CPU s/1k | ÷ |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
      for (int i = 0; i + 1 < publishRows.size(); i += 2) {
        PublishRow rb = publishRows.get(i);
        PublishRow dbz = publishRows.get(i + 1);
        double rbCpu = 1000 * rb.serverCpu() / rb.events();
        double dbzCpu = 1000 * dbz.serverCpu() / dbz.events();
        r.append(
            "| %d | %d | %,.0f | %,.0f | **%.2f×** | %,d | %,d | %.2f× | %.3f | %.3f | %s |\n"
                .formatted(
                    rb.publishers(),
                    rb.batch(),
                    rb.rate(),
                    dbz.rate(),
                    rb.rate() / dbz.rate(),
                    rb.wal() / rb.events(),
                    dbz.wal() / dbz.events(),
                    (double) rb.wal() / dbz.wal(),
                    rbCpu,
                    dbzCpu,
                    ratio(rbCpu, dbzCpu)));
      }
    }
    List<DrainRow> drains =
        java.util.stream.Stream.of(
                drainRows.stream(), depthRows.stream(), xminRows.stream().map(XminRow::drain))
            .flatMap(x -> x)
            .filter(d -> d.relaybus() && rival(d) != null)
            .toList();
    if (!drains.isEmpty()) {
      r.append(
          "\n**Cost: publish + delivery, drains** (issue 14, goal 4: PostgreSQL CPU per 1,000 deliveries ≤ 1.5× Debezium's, WAL bytes per delivery ≤ 1.2×; PostgreSQL is every server process, /proc, over the publish and over the drain; each relaybus drain against Debezium's drain of the same scenario, depth and producer settings):\n\n");
      r.append(
          "| relaybus variant | scenario | deliveries | relaybus PostgreSQL CPU s/1k, publish + drain | Debezium | relaybus ÷ Debezium | relaybus WAL B/delivery, publish + drain | Debezium | relaybus ÷ Debezium |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
      for (DrainRow d : drains) {
        DrainRow dbz = rival(d);
        double rbCpu = cpuPerThousand(d);
        double dbzCpu = cpuPerThousand(dbz);
        double rbWal = walPerDelivery(d);
        double dbzWal = walPerDelivery(dbz);
        r.append(
            "| %s | %s | %,d | %.3f | %.3f | **%s** | %,.0f | %,.0f | **%.2f×** |\n"
                .formatted(
                    d.variant(),
                    d.scenario(),
                    d.deliveries(),
                    rbCpu,
                    dbzCpu,
                    ratio(rbCpu, dbzCpu),
                    rbWal,
                    dbzWal,
                    rbWal / dbzWal));
      }
    }
    List<DrainRow> byProcess =
        java.util.stream.Stream.of(drainRows.stream(), depthRows.stream()).flatMap(x -> x).toList();
    if (!byProcess.isEmpty()) {
      r.append(
          "\n**CPU per 1,000 deliveries during each drain, by process** (/proc, user + system, from the connector's resume until the last completion; the machine's cores are shared by all of them, so a connector's drain rate is bounded by its sum; the benchmark's JVM is the verifying consumer then):\n\n");
      r.append(
          "| variant | deliveries/s | PostgreSQL | Connect worker | broker | benchmark JVM | all |\n|---|---:|---:|---:|---:|---:|---:|\n");
      for (DrainRow d : byProcess) {
        double thousands = d.deliveries() / 1000.0;
        r.append(
            "| %s | %,.0f | %.3f | %.3f | %.3f | %.3f | %.3f |\n"
                .formatted(
                    d.variant(),
                    d.rate(),
                    d.serverCpuPerThousand(),
                    d.workerCpu() / thousands,
                    d.brokerCpu() / thousands,
                    d.benchCpu() / thousands,
                    d.everyProcessCpuPerThousand()));
      }
    }
    List<SteadyRow[]> pairs = steadyPairs();
    if (!pairs.isEmpty()) {
      r.append(
          "\n**Cost: publish + delivery, steady state** (publishers and connector at once, so PostgreSQL CPU and WAL over the whole cell, divided by the deliveries; both include the server's own background work):\n\n");
      r.append(
          "| relaybus variant | offered/s | relaybus PostgreSQL CPU s/1k | Debezium | relaybus ÷ Debezium | relaybus WAL B/delivery | Debezium | relaybus ÷ Debezium |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
      for (SteadyRow[] p : pairs) {
        r.append(
            "| %s | %,d%s | %.3f | %.3f | **%s** | %,.0f | %,.0f | **%.2f×** |\n"
                .formatted(
                    p[0].variant(),
                    p[0].offered(),
                    p[0].saturated() || p[1].saturated() ? " (saturated)" : "",
                    p[0].serverCpuPerThousand(),
                    p[1].serverCpuPerThousand(),
                    ratio(p[0].serverCpuPerThousand(), p[1].serverCpuPerThousand()),
                    p[0].walPerDelivery(),
                    p[1].walPerDelivery(),
                    p[0].walPerDelivery() / p[1].walPerDelivery()));
      }
    }
  }

  /** CPU seconds of the broker's JVM; 0 when the broker is not this harness's. */
  private double brokerSeconds() {
    return kafka.broker() == null ? 0 : ProcessCpu.seconds(kafka.broker().pid());
  }

  /** Steady cells of both connectors at the same offered rate with comparable settings. */
  private List<SteadyRow[]> steadyPairs() {
    List<SteadyRow[]> pairs = new ArrayList<>();
    for (SteadyRow rb : steadyRows) {
      String rival =
          rb.variant().equals(relaybusSteady())
              ? debeziumSteady()
              : rb.variant().equals(RELAYBUS_AS_SHIPPED) ? DEBEZIUM_DEFAULTS : null;
      steadyRows.stream()
          .filter(d -> d.variant().equals(rival) && d.offered() == rb.offered())
          .findFirst()
          .ifPresent(d -> pairs.add(new SteadyRow[] {rb, d}));
    }
    return pairs;
  }

  /** PostgreSQL CPU seconds per 1,000 deliveries, publish + drain. */
  private static double cpuPerThousand(DrainRow d) {
    return 1000 * (d.publishServerCpu() + d.serverCpu()) / d.deliveries();
  }

  /** WAL bytes per delivery, publish + drain. */
  private static double walPerDelivery(DrainRow d) {
    return (double) (d.walPublish() + d.walDrain()) / d.deliveries();
  }

  /** "a ÷ b" with two decimals; "n/a" when b measured no CPU at all (a /proc tick is 10 ms). */
  private static String ratio(double a, double b) {
    return b > 0 && Double.isFinite(a) ? "%.2f×".formatted(a / b) : "n/a";
  }

  private static String verdict(boolean met) {
    return met ? "met" : "**not met**";
  }

  private static String claimMs(StatementTimes t) {
    return t.claims() == 0 ? "n/a" : "%.2f".formatted(t.perClaim());
  }

  private double sqlRate() {
    return sqlDrain == null ? Double.NaN : sqlDrain.deliveries() / sqlDrain.seconds();
  }

  private void drainTable(StringBuilder r, List<DrainRow> rows) {
    r.append(
        "| variant | deliveries/s | ÷ Debezium | ÷ SQL-only | WAL B/delivery publish + drain | statements/delivery | server ms per claim / complete (calls) | ms per claim, first → last tenth | lane updates HOT | delivery rows updated | dead tuples after | worker CPU s/1k | PostgreSQL CPU s/1k publish + drain | exactness |\n");
    r.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (DrainRow d : rows) {
      r.append(
          "| %s%s | %,.0f | %s | %s | %,d + %,d | %.4f | %s | %s | %s | %s | %,d | %.3f | %.3f + %.3f | %s |\n"
              .formatted(
                  d.variant(),
                  d.scenario().equals("drain") ? "" : ", %,d".formatted(d.deliveries()),
                  d.rate(),
                  rival(d) == null ? "n/a" : "**%.2f×**".formatted(d.rate() / rival(d).rate()),
                  sqlDrain == null ? "n/a" : "%.2f×".formatted(d.rate() / sqlRate()),
                  d.walPublish() / d.deliveries(),
                  d.walDrain() / d.deliveries(),
                  (double) d.statements() / d.deliveries(),
                  d.times().describe(),
                  d.firstTenth().claims() == 0
                      ? "n/a"
                      : "%.2f → %.2f"
                          .formatted(d.firstTenth().perClaim(), d.lastTenth().perClaim()),
                  d.lanes() == null ? "n/a" : d.lanes().hot(),
                  d.lanes() == null ? "n/a" : "%,d".formatted(d.deliveryRows().updated()),
                  d.deadTuplesAfter(),
                  1000 * d.workerCpu() / d.deliveries(),
                  1000 * d.publishServerCpu() / d.deliveries(),
                  d.serverCpuPerThousand(),
                  d.accounting().summary()));
    }
  }

  /** Draws the run's pictures into {@code dir}; the report links those that were drawn. */
  void writeCharts(Path dir) throws java.io.IOException {
    String note = System.getProperty("relaybus.bench.chart.note", "");
    String run =
        "%s run %s, load %s%s"
            .formatted(
                mode.name().toLowerCase(),
                startedAt,
                loadAtStart,
                note.isBlank() ? "" : " — " + note);
    List<DrainRow> drains =
        depthRows.isEmpty()
            ? drainRows.stream()
                .filter(d -> d.variant().contains("256 KB") && !d.variant().contains("tasks.max=4"))
                .toList()
            : depthRows;
    Path drain = dir.resolve("benchmark-drain-depth.png");
    Path latency = dir.resolve("benchmark-latency.png");
    Path xmin = dir.resolve("benchmark-xmin-drain.png");
    for (Path p : List.of(drain, latency, xmin)) {
      Files.deleteIfExists(p); // a picture of an earlier run is not this run's
    }
    BenchCharts.drainRate(drains, "Drain rate against backlog depth", run, drain);
    BenchCharts.latency(steadyRows, "p50 and p99 against offered rate", run, latency);
    BenchCharts.drainRate(
        xminRows.stream().map(XminRow::drain).toList(),
        "Drain rate with and without a held xmin horizon",
        run,
        xmin);
    for (Path p : List.of(drain, latency, xmin)) {
      if (Files.exists(p)) {
        charts.add(p);
      }
    }
  }

  /** The Debezium drain of the same scenario and depth, run with the same producer settings. */
  private DrainRow rival(DrainRow d) {
    boolean tuned = d.variant().contains("256 KB");
    return java.util.stream.Stream.of(
            drainRows.stream(), depthRows.stream(), xminRows.stream().map(XminRow::drain))
        .flatMap(x -> x)
        .filter(x -> x.variant().startsWith("Debezium"))
        .filter(x -> x.scenario().equals(d.scenario()) && x.deliveries() == d.deliveries())
        .filter(x -> x.variant().contains("256 KB") == tuned)
        .findFirst()
        .orElse(null);
  }

  private String goals(DrainRow debezium) {
    StringBuilder g = new StringBuilder("| goal | this run |\n|---|---|\n");
    if (debezium != null) {
      List<DrainRow> relaybus = drainRows.stream().filter(d -> d.lanes() != null).toList();
      DrainRow best =
          relaybus.stream()
              .max((a, b) -> Double.compare(a.rate() / rival(a).rate(), b.rate() / rival(b).rate()))
              .orElseThrow();
      StringBuilder oneTask = new StringBuilder();
      relaybus.stream()
          .filter(d -> d.variant().startsWith("relaybus, tasks.max=1,"))
          .forEach(
              d ->
                  oneTask.append(
                      "%s%.2f× (%s)"
                          .formatted(
                              oneTask.isEmpty() ? "" : ", ",
                              d.rate() / rival(d).rate(),
                              d.variant().substring(d.variant().indexOf(", ") + 2))));
      double bestRatio = best.rate() / rival(best).rate();
      g.append(
          "| drain ≥ 1.5× Debezium | %s: one task %s; best %.2f× (%s, against Debezium with the same producer settings) |\n"
              .formatted(
                  bestRatio >= 1.5 ? "met" : "**not met**", oneTask, bestRatio, best.variant()));
    }
    // issue 14, goal 4: publish in each of the four cells
    if (!publishRows.isEmpty()) {
      double worst = Double.POSITIVE_INFINITY;
      StringBuilder cells = new StringBuilder();
      for (int i = 0; i + 1 < publishRows.size(); i += 2) {
        PublishRow rb = publishRows.get(i);
        double ratio = rb.rate() / publishRows.get(i + 1).rate();
        worst = Math.min(worst, ratio);
        cells.append(
            "%s%d×%d %.2f×"
                .formatted(cells.isEmpty() ? "" : ", ", rb.publishers(), rb.batch(), ratio));
      }
      g.append(
          "| publish events/s ≥ 0.9× Debezium's insert + delete (publishers × events per transaction) | %s: %s |\n"
              .formatted(verdict(worst >= 0.9), cells));
    }
    steadyRows.stream()
        .filter(s -> s.variant().equals(relaybusSteady()) && s.offered() == 1_000)
        .findFirst()
        .ifPresent(
            s ->
                g.append(
                    "| p99 e2e at 1,000/s ≤ 50 ms | %s: %.1f ms (Debezium: %s) |\n"
                        .formatted(
                            s.window().latencyMillis(99) <= 50 ? "met" : "**not met**",
                            s.window().latencyMillis(99),
                            steadyRows.stream()
                                .filter(
                                    d ->
                                        d.variant().equals(debeziumSteady())
                                            && d.offered() == 1_000)
                                .findFirst()
                                .map(d -> "%.1f ms".formatted(d.window().latencyMillis(99)))
                                .orElse("n/a"))));
    steadyRows.stream()
        .filter(s -> s.variant().equals(RELAYBUS_AS_SHIPPED))
        .findFirst()
        .ifPresent(
            s ->
                g.append(
                    "| p99 at 1,000/s with the shipped settings ≤ 20 ms | %s: %.1f ms (p50 %.1f ms; Debezium with its defaults: %s) |\n"
                        .formatted(
                            verdict(s.window().latencyMillis(99) <= 20),
                            s.window().latencyMillis(99),
                            s.window().latencyMillis(50),
                            steadyRows.stream()
                                .filter(d -> d.variant().equals(DEBEZIUM_DEFAULTS))
                                .findFirst()
                                .map(d -> "%.1f ms".formatted(d.window().latencyMillis(99)))
                                .orElse("n/a"))));
    steadyRows.stream()
        .filter(s -> s.variant().equals(relaybusSteady()))
        .forEach(
            s ->
                g.append(
                    "| steady state, one task, %,d/s offered%s | %s%.1f ms p99, %,.0f/s delivered%s |\n"
                        .formatted(
                            s.offered(),
                            s.offered() == 8_000 ? ": holds it with p99 ≤ 100 ms" : "",
                            s.offered() == 8_000
                                ? verdict(!s.saturated() && s.window().latencyMillis(99) <= 100)
                                    + ": "
                                : "",
                            s.window().latencyMillis(99),
                            s.deliveredRate(),
                            s.saturated() ? " (saturated)" : "")));
    boolean allHot =
        drainRows.stream()
            .filter(d -> d.lanes() != null)
            .allMatch(d -> d.lanes().updated() == d.lanes().hotUpdated());
    g.append(
        "| lane updates 100%% HOT | %s |\n"
            .formatted(allHot ? "met in every relaybus drain" : "**not met**"));
    for (DrainRow d : depthRows) {
      DrainRow rival = rival(d);
      if (d.relaybus() && rival != null) {
        g.append(
            ("| depth %,d: drain ≥ 1.5× Debezium, claim at the end ≤ 1.5× its start | %s: %.2f× Debezium; ms per claim %.2f at the start, %.2f at the end (%.2f×); CPU s per 1,000 of every process %.3f (PostgreSQL %.3f) against %.3f (%.3f): with PostgreSQL at Debezium's cost per delivery the same machine would allow about %.2f× |\n")
                .formatted(
                    d.deliveries(),
                    verdict(
                        d.rate() / rival.rate() >= 1.5
                            && d.lastTenth().perClaim() <= 1.5 * d.firstTenth().perClaim()),
                    d.rate() / rival.rate(),
                    d.firstTenth().perClaim(),
                    d.lastTenth().perClaim(),
                    d.lastTenth().perClaim() / d.firstTenth().perClaim(),
                    d.everyProcessCpuPerThousand(),
                    d.serverCpuPerThousand(),
                    rival.everyProcessCpuPerThousand(),
                    rival.serverCpuPerThousand(),
                    d.boundWithRivalsDatabase(rival)));
      }
    }
    for (XminRow x : xminRows) {
      XminRow without =
          xminRows.stream()
              .filter(o -> !o.held() && o.variant().equals(x.variant()))
              .findFirst()
              .orElse(null);
      if (x.held() && without != null && x.drain().relaybus()) {
        g.append(
            "| held xmin: drain ≥ 0.9×, empty poll ≤ 2×, p99 ≤ 2× of the same without | %s: drain %.2f× of the same without; empty poll %s ms vs %s ms; p99 at %,d/s %.1f ms vs %.1f ms; dead tuples at the end %,d (without: %,d) |\n"
                .formatted(
                    verdict(
                        x.drain().rate() / without.drain().rate() >= 0.9
                            && x.emptyPolls().perClaim() <= 2 * without.emptyPolls().perClaim()
                            && x.steady().window().latencyMillis(99)
                                <= 2 * without.steady().window().latencyMillis(99)),
                    x.drain().rate() / without.drain().rate(),
                    "%.2f".formatted(x.emptyPolls().perClaim()),
                    "%.2f".formatted(without.emptyPolls().perClaim()),
                    XMIN_RATE,
                    x.steady().window().latencyMillis(99),
                    without.steady().window().latencyMillis(99),
                    x.deadTuples().values().stream().mapToLong(Long::longValue).sum(),
                    without.deadTuples().values().stream().mapToLong(Long::longValue).sum()));
      }
    }
    idleRows.stream()
        .filter(i -> i.variant().startsWith("relaybus"))
        .forEach(
            i ->
                g.append(
                    "| idle cost to PostgreSQL ≤ 1%% of one core (%s) | %s: %.2f%% of one core (no connector: %s) |\n"
                        .formatted(
                            i.variant(),
                            verdict(i.percentOfCore() <= 1),
                            i.percentOfCore(),
                            idleRows.isEmpty()
                                ? "n/a"
                                : "%.2f%%".formatted(idleRows.get(0).percentOfCore()))));
    if (debezium != null) {
      DrainRow rb =
          drainRows.stream()
              .filter(d -> d.relaybus() && d.variant().contains("256 KB"))
              .findFirst()
              .orElse(null);
      DrainRow dbz = rb == null ? null : rival(rb);
      if (rb != null && dbz != null) {
        double cpu = cpuPerThousand(rb) / cpuPerThousand(dbz);
        g.append(
            "| PostgreSQL CPU per 1,000 deliveries, publish + delivery, ≤ 1.5× Debezium (drain, %s) | %s: relaybus %.3f s vs Debezium %.3f s (%s) |\n"
                .formatted(
                    rb.variant(),
                    verdict(cpu <= 1.5),
                    cpuPerThousand(rb),
                    cpuPerThousand(dbz),
                    ratio(cpuPerThousand(rb), cpuPerThousand(dbz))));
        double wal = walPerDelivery(rb) / walPerDelivery(dbz);
        g.append(
            "| WAL per delivery, publish + delivery, ≤ 1.2× Debezium's insert + delete (drain, %s) | %s: %,.0f B vs %,.0f B (%.2f×) |\n"
                .formatted(
                    rb.variant(),
                    verdict(wal <= 1.2),
                    walPerDelivery(rb),
                    walPerDelivery(dbz),
                    wal));
      }
    }
    for (SteadyRow[] p : steadyPairs()) {
      double a = p[0].serverCpuPerThousand();
      double b = p[1].serverCpuPerThousand();
      if (b > 0) {
        g.append(
            "| PostgreSQL CPU per 1,000 deliveries ≤ 1.5× Debezium (steady %,d/s, %s) | %s: %.3f s vs %.3f s (%.2f×) |\n"
                .formatted(p[0].offered(), p[0].variant(), verdict(a / b <= 1.5), a, b, a / b));
      }
    }
    boolean noUpdates =
        drainRows.stream()
            .filter(d -> d.lanes() != null)
            .allMatch(d -> d.deliveryRows().updated() == 0);
    g.append(
        "| 0 delivery-row updates on the happy path | %s |\n"
            .formatted(noUpdates ? "met in every relaybus drain" : "**not met**"));
    return g.toString();
  }

  private static String machine() {
    String cpu = "unknown CPU";
    try {
      cpu =
          Files.readAllLines(Path.of("/proc/cpuinfo")).stream()
              .filter(l -> l.startsWith("model name"))
              .map(l -> l.substring(l.indexOf(':') + 1).strip())
              .findFirst()
              .orElse(cpu);
    } catch (Exception ignored) {
      // not Linux
    }
    String more = System.getProperty("relaybus.bench.pg.settings", "").strip();
    return "Machine: %s, %d cores, Java %s, Kafka 4.3.1 (broker and worker JVMs of their own), PostgreSQL 17 embedded (wal_level=logical, %s%s). Event ids: %s."
        .formatted(
            cpu,
            Runtime.getRuntime().availableProcessors(),
            System.getProperty("java.version"),
            PostgresServer.DURABLE
                ? "fsync and synchronous_commit on, as in production"
                : "fsync and synchronous_commit off, the embedded default",
            // relaybus.bench.pg.settings is applied after, and may override the above
            more.isEmpty() ? "" : "; then " + more,
            BenchOutbox.RANDOM_IDS
                ? "random UUIDs (relaybus.bench.ids=random)"
                : "time-ordered UUIDs (relaybus's default)");
  }

  @Override
  public void close() throws IOException {
    admin.close();
    kafka.close();
    app.close();
    postgres.close();
  }
}
