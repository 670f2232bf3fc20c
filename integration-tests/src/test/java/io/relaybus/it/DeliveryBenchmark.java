package io.relaybus.it;

import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import io.relaybus.it.BenchConsumer.Accounting;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.RecordHeaders;
import io.relaybus.store.postgres.PostgresOutboxStore;
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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
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
 * rates with commit-to-consumer latency. Statements are counted per database role (each party has
 * its own), WAL from {@code pg_current_wal_insert_lsn()} (the write position moves in whole pages),
 * CPU from {@code /proc}.
 */
final class DeliveryBenchmark implements AutoCloseable {
  enum Mode {
    SMOKE(400, 2_000, List.of(1, 2), List.of(200), 3),
    QUICK(4_000, 20_000, List.of(1, 2, 4), List.of(500, 1_000, 2_000), 10),
    FULL(20_000, 200_000, List.of(1, 2, 4), List.of(500, 1_000, 2_000, 4_000, 8_000), 20);

    final int publishEvents;
    final int backlog;
    final List<Integer> taskCounts;
    final List<Integer> rates;
    final double steadySeconds;

    Mode(
        int publishEvents,
        int backlog,
        List<Integer> taskCounts,
        List<Integer> rates,
        double steadySeconds) {
      this.publishEvents = publishEvents;
      this.backlog = backlog;
      this.taskCounts = taskCounts;
      this.rates = rates;
      this.steadySeconds = steadySeconds;
    }
  }

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
      double serverMillis) {
    double rate() {
      return events / seconds;
    }
  }

  record DrainRow(
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
      double serverCpu,
      Accounting accounting) {
    double rate() {
      return deliveries / seconds;
    }
  }

  record SteadyRow(
      String variant,
      int offered,
      double committedRate,
      double deliveredRate,
      Accounting window,
      long maxBacklog,
      long statements,
      double workerCpu,
      double serverCpu,
      boolean saturated) {}

  /** Claim and completion statements: calls and total server milliseconds. */
  record StatementTimes(long claims, double claimMillis, long completes, double completeMillis) {
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
              .formatted(
                  claimMillis / claims,
                  completes == 0 ? 0.0 : completeMillis / completes,
                  claims,
                  completes);
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
  private int runs;

  DeliveryBenchmark(Mode mode) throws Exception {
    this.mode = mode;
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
    postmasterPid = postmasterPid();
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
    kafka.startWorker();
    admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers()));
  }

  /** Every scenario of the mode, in the order the report lists them. */
  void runAll() throws Exception {
    publishOnly();
    sqlOnlyDrain();
    rawProducer();
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
    steadyState();
  }

  // ---------------------------------------------------------------- publish only

  void publishOnly() throws Exception {
    try (PostgresOutboxStore store = appStore("pub_")) {
      BenchOutbox relaybus = BenchOutbox.relaybus(store, "publish-only");
      BenchOutbox debezium = BenchOutbox.debezium(postgres.dataSource(), "pub_dbz_outbox", "bench");
      for (int publishers : List.of(1, 8)) {
        for (int batch : List.of(1, 100)) {
          publishRows.add(publishCell("relaybus", relaybus, publishers, batch));
          publishRows.add(
              publishCell("Debezium outbox (insert + delete)", debezium, publishers, batch));
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
    long t0 = System.nanoTime();
    p.publish(mode.publishEvents, batch);
    double seconds = (System.nanoTime() - t0) / 1e9;
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
        statementMillis(APP) - ms0);
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
    int n = ++runs;
    String prefix = "d" + n + "_";
    String topic = "relaybus-drain-" + n;
    try (PostgresOutboxStore store = appStore(prefix)) {
      drain(
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

  void drainDebezium(boolean tuned) throws Exception {
    int n = ++runs;
    String table = "dbz" + n + "_outbox";
    String topic = "debezium-drain-" + n;
    BenchOutbox outbox = BenchOutbox.debezium(postgres.dataSource(), table, "bench");
    drain(
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

  private void drain(
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
    createTopic(topic);
    deployPaused(connector, config, tasks, slot);
    try (BenchConsumer consumer =
        new BenchConsumer(kafka.bootstrapServers(), topic, PARTITIONS, idHeader)) {
      BenchPublishers publishers = new BenchPublishers(app, outbox, DRAIN_PUBLISHERS, KEYS);
      execute("CHECKPOINT");
      long wal0 = wal();
      publishers.publish(mode.backlog, 100);
      long wal1 = wal();
      long s0 = statements(role);
      StatementTimes times0 = statementTimes(role);
      double worker0 = ProcessCpu.seconds(kafka.worker().pid());
      double server0 = ProcessCpu.serverSeconds(postmasterPid);
      long t0 = System.nanoTime();
      kafka.put("connectors/" + connector + "/resume", "");
      boolean all = consumer.awaitAll(publishers.committed().keySet(), DEADLINE);
      double seconds = ((all ? consumer.lastNewAt() : System.nanoTime()) - t0) / 1e9;
      awaitRowsLeftZero(outbox);
      long wal2 = wal();
      long stmts = statements(role) - s0;
      StatementTimes times = statementTimes(role).minus(times0);
      double workerCpu = ProcessCpu.seconds(kafka.worker().pid()) - worker0;
      double serverCpu = ProcessCpu.serverSeconds(postmasterPid) - server0;
      Thread.sleep(1_000); // duplicates, if any, arrive
      removeConnector(connector, role, slot);
      closePublisherConnections();
      Accounting accounting =
          consumer.account(publishers.committed(), outbox.rowsLeft(postgres.dataSource()), null);
      boolean relaybus = slot == null;
      // relaybus: the deliveries table (and the events it keeps); Debezium: its outbox table
      TableCounters deliveryRows = table(relaybus ? tables + "deliveries" : tables);
      drainRows.add(
          new DrainRow(
              variant,
              mode.backlog,
              seconds,
              wal1 - wal0,
              wal2 - wal1,
              stmts,
              times,
              relaybus ? table(tables + "lanes") : null,
              deliveryRows,
              deliveryRows.dead() + (relaybus ? table(tables + "events").dead() : 0),
              workerCpu,
              serverCpu,
              accounting));
    }
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
    for (int rate : mode.rates) {
      if (!relaybusSaturated) {
        relaybusSaturated = steadyCell(true, rate).saturated();
      }
      if (!debeziumSaturated) {
        debeziumSaturated = steadyCell(false, rate).saturated();
      }
      if (relaybusSaturated && debeziumSaturated) {
        return;
      }
    }
  }

  private SteadyRow steadyCell(boolean relaybus, int rate) throws Exception {
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
      Map<String, String> config =
          relaybus ? relaybusShipped(prefix, 1, 10) : debeziumTuned(table, slot, topic, 10);
      kafka.put("connectors/" + topic + "/config", DeployedConfig.toJson(config));
      kafka.awaitTasksRunning(topic, 1);
      awaitSlotActive(slot);
      try (BenchConsumer consumer =
          new BenchConsumer(
              kafka.bootstrapServers(), topic, PARTITIONS, relaybus ? HANDLER_HEADER_ID : "id")) {
        BenchPublishers publishers = new BenchPublishers(app, outbox, 4, KEYS);
        long s0 = statements(role);
        double worker0 = ProcessCpu.seconds(kafka.worker().pid());
        double server0 = ProcessCpu.serverSeconds(postmasterPid);
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
        publishers.publishAtRate(rate, mode.steadySeconds);
        long published = System.nanoTime();
        boolean all = consumer.awaitAll(publishers.committed().keySet(), Duration.ofSeconds(60));
        sampler.interrupt();
        sampler.join();
        long statements = statements(role) - s0;
        double workerCpu = ProcessCpu.seconds(kafka.worker().pid()) - worker0;
        double serverCpu = ProcessCpu.serverSeconds(postmasterPid) - server0;
        double tail = (consumer.lastNewAt() - published) / 1e9;
        int count = publishers.committed().size();
        Thread.sleep(1_000); // duplicates, if any, arrive
        removeConnector(topic, role, slot);
        SteadyRow row =
            new SteadyRow(
                relaybus
                    ? "relaybus, tasks.max=1, poll.interval.ms=10"
                    : "Debezium 3.6.1 + EventRouter, poll.interval.ms=10",
                rate,
                count / ((published - t0) / 1e9),
                count / ((consumer.lastNewAt() - t0) / 1e9),
                consumer.account(
                    publishers.committed(), outbox.rowsLeft(postgres.dataSource()), null),
                maxBacklog.get(),
                statements,
                workerCpu,
                serverCpu,
                !all || tail > 5 || count < 0.9 * rate * mode.steadySeconds);
        steadyRows.add(row);
        return row;
      }
    }
  }

  // ---------------------------------------------------------------- connectors

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
    var response = kafka.put("connectors/" + connector + "/config", DeployedConfig.toJson(config));
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
    admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
  }

  // ---------------------------------------------------------------- database probes

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

  /** The first line of postmaster.pid in the data directory. */
  private long postmasterPid() throws Exception {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SHOW data_directory")) {
      rs.next();
      return Long.parseLong(
          Files.readAllLines(Path.of(rs.getString(1), "postmaster.pid")).get(0).strip());
    }
  }

  /** Calls and server time of the claim and the completion statements of {@code role} so far. */
  private StatementTimes statementTimes(String role) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        PreparedStatement s =
            c.prepareStatement(
                "SELECT coalesce(sum(calls) FILTER (WHERE query LIKE '%held AS MATERIALIZED%'), 0),"
                    + " coalesce(sum(total_exec_time) FILTER (WHERE query LIKE '%held AS MATERIALIZED%'), 0),"
                    + " coalesce(sum(calls) FILTER (WHERE query LIKE '%done AS%'), 0),"
                    + " coalesce(sum(total_exec_time) FILTER (WHERE query LIKE '%done AS%'), 0)"
                    + " FROM pg_stat_statements p JOIN pg_roles r ON r.oid = p.userid WHERE r.rolname = ?")) {
      s.setString(1, role);
      try (ResultSet rs = s.executeQuery()) {
        rs.next();
        return new StatementTimes(rs.getLong(1), rs.getDouble(2), rs.getLong(3), rs.getDouble(4));
      }
    }
  }

  private long queryLong(String sql) throws SQLException {
    try (Connection c = postgres.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      rs.next();
      return rs.getLong(1);
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

    DrainRow debezium =
        drainRows.stream().filter(d -> d.variant().startsWith("Debezium")).findFirst().orElse(null);
    r.append(
        "**Publish only** (%,d events per cell, no connector reading; statements and WAL of the application's role):\n\n"
            .formatted(mode.publishEvents));
    r.append(
        "| outbox | publishers | events per transaction | events/s | WAL B/event | WAL records/event | full-page images | statements/event | server µs/event | relaybus ÷ Debezium |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i + 1 < publishRows.size(); i += 2) {
      PublishRow rb = publishRows.get(i);
      PublishRow dbz = publishRows.get(i + 1);
      for (PublishRow p : List.of(rb, dbz)) {
        r.append(
            "| %s | %d | %d | %,.0f | %,d | %.1f | %,d | %.2f | %,.0f | %s |\n"
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
                    p == rb ? "**%.2f×**".formatted(rb.rate() / dbz.rate()) : ""));
      }
    }

    r.append(
        "\n**Drain of a %,d-event backlog** (4 publishers, 100 per transaction, with the connector paused; time from resume to the last new record at the verifying consumer; one topic of %d partitions; %,d keys):\n\n"
            .formatted(mode.backlog, PARTITIONS, KEYS));
    r.append(
        "| variant | deliveries/s | ÷ Debezium | ÷ SQL-only | WAL B/delivery publish + drain | statements/delivery | server ms per claim / complete (calls) | lane updates HOT | delivery rows updated | dead tuples after | worker CPU s/1k | PostgreSQL CPU s/1k | exactness |\n");
    r.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    double sqlRate = sqlDrain.deliveries() / sqlDrain.seconds();
    for (DrainRow d : drainRows) {
      r.append(
          "| %s | %,.0f | %s | %.2f× | %,d + %,d | %.4f | %s | %s | %s | %,d | %.3f | %.3f | %s |\n"
              .formatted(
                  d.variant(),
                  d.rate(),
                  rival(d) == null ? "n/a" : "**%.2f×**".formatted(d.rate() / rival(d).rate()),
                  d.rate() / sqlRate,
                  d.walPublish() / d.deliveries(),
                  d.walDrain() / d.deliveries(),
                  (double) d.statements() / d.deliveries(),
                  d.times().describe(),
                  d.lanes() == null ? "n/a" : d.lanes().hot(),
                  d.lanes() == null ? "n/a" : "%,d".formatted(d.deliveryRows().updated()),
                  d.deadTuplesAfter(),
                  1000 * d.workerCpu() / d.deliveries(),
                  1000 * d.serverCpu() / d.deliveries(),
                  d.accounting().summary()));
    }
    r.append(
        "| ceiling: SQL-only drain (relaybus claim %d + complete, one session, no Kafka) | %,.0f | | 1.00× | | %.4f | | | | | | | %,d drained |\n"
            .formatted(
                sqlDrain.batch(),
                sqlRate,
                (double) (sqlDrain.claims() + sqlDrain.completes() + sqlDrain.others())
                    / sqlDrain.deliveries(),
                sqlDrain.deliveries()));
    r.append(
        "| ceiling: raw Kafka producer of the same records (acks=all) | %,.0f | | | | | | | | | | | |\n"
            .formatted(mode.backlog / rawProducerSeconds));

    r.append(
        "\n**Steady state** (4 publishers, one event per transaction, at a fixed offered rate for %.0f s each, rising until saturated; latency from the publisher's commit returning to the consumer's poll returning the record):\n\n"
            .formatted(mode.steadySeconds));
    r.append(
        "| variant | offered/s | committed/s | delivered/s | p50 ms | p95 ms | p99 ms | max ms | max backlog | statements/delivery | worker CPU s/1k | PostgreSQL CPU s/1k | exactness |\n");
    r.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (SteadyRow s : steadyRows) {
      int count = s.window().latenciesMicros().length;
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
    r.append("\n").append(notes);
    r.append("\n").append(goals(debezium));
    return r.toString();
  }

  /** The Debezium drain run with the same producer settings as {@code d}. */
  private DrainRow rival(DrainRow d) {
    boolean tuned = d.variant().contains("256 KB");
    return drainRows.stream()
        .filter(x -> x.variant().startsWith("Debezium"))
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
      DrainRow one = relaybus.get(0);
      long rbWal = (one.walPublish() + one.walDrain()) / one.deliveries();
      long dbzWal = (debezium.walPublish() + debezium.walDrain()) / debezium.deliveries();
      g.append(
          "| WAL per delivery ≤ Debezium's insert + delete | %s: %,d B (relaybus, publish + drain) vs %,d B |\n"
              .formatted(rbWal <= dbzWal ? "met" : "**not met**", rbWal, dbzWal));
    }
    steadyRows.stream()
        .filter(s -> s.variant().startsWith("relaybus") && s.offered() == 1_000)
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
                                    d -> d.variant().startsWith("Debezium") && d.offered() == 1_000)
                                .findFirst()
                                .map(d -> "%.1f ms".formatted(d.window().latencyMillis(99)))
                                .orElse("n/a"))));
    boolean allHot =
        drainRows.stream()
            .filter(d -> d.lanes() != null)
            .allMatch(d -> d.lanes().updated() == d.lanes().hotUpdated());
    g.append(
        "| lane updates 100%% HOT | %s |\n"
            .formatted(allHot ? "met in every relaybus drain" : "**not met**"));
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
    return "Machine: %s, %d cores, Java %s, Kafka 4.3.1 (broker and worker JVMs of their own), PostgreSQL 17 embedded (wal_level=logical)."
        .formatted(
            cpu, Runtime.getRuntime().availableProcessors(), System.getProperty("java.version"));
  }

  @Override
  public void close() throws Exception {
    admin.close();
    kafka.close();
    app.close();
    postgres.close();
  }
}
