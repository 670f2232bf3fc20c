package io.relaybus.it.fault;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.awaitility.core.ConditionTimeoutException;

/**
 * The machinery of the fault suites ({@link FaultInjectionIT} at least once, {@link
 * FaultExactlyOnceIT} exactly once): a real PostgreSQL server of its own (restartable), a {@link
 * FaultCluster} (KRaft broker and two Connect workers, each a JVM), and {@link Scenario}s: one
 * connector with its own outbox (table prefix), topics, {@link FaultWorkload} and consumer, and a
 * {@link Verifier} report at the end that must be clean.
 */
public final class FaultSuite implements AutoCloseable {
  public static final boolean FULL = "full".equals(System.getProperty("relaybus.faults"));
  public static final Duration TIMEOUT = FaultCluster.TIMEOUT;
  public static final int TASKS = 4;
  public static final int BATCH = 50;
  public static final int FLUSH = 100;

  /**
   * Deliveries one task may have sent but not deleted when it dies: four unacknowledged batches
   * plus what was acknowledged since the last completion flush.
   */
  public static final int IN_FLIGHT_PER_TASK = 4 * BATCH + FLUSH;

  /** The connector's test-only crash point (CrashPoints in the connector). */
  public static final String CRASH_PROPERTY = "relaybus.test.crash";

  private static final Pattern CRASH =
      Pattern.compile(
          "relaybus TEST CRASH: halting the worker JVM at (\\S+) pass \\d+ with (\\d+)");

  public final PostgresServer postgres;
  public final FaultCluster cluster;
  private final boolean exactlyOnce;
  private final List<Verifier.Report> reports = Collections.synchronizedList(new ArrayList<>());

  private final FaultCluster.Worker secondWorker;

  private FaultSuite(
      PostgresServer postgres,
      FaultCluster cluster,
      FaultCluster.Worker secondWorker,
      boolean exactlyOnce) {
    this.postgres = postgres;
    this.cluster = cluster;
    this.secondWorker = secondWorker;
    this.exactlyOnce = exactlyOnce;
  }

  /**
   * PostgreSQL in {@code target/<name>-pg} and a broker with two workers in {@code target/<name>}.
   * {@code exactlyOnce}: workers with {@code exactly.once.source.support=enabled}, connectors with
   * {@code exactly.once.support=required}, a read_committed consumer, and no duplicate allowed.
   */
  public static FaultSuite start(String name, boolean exactlyOnce) throws Exception {
    return start(name, exactlyOnce, Map.of());
  }

  /**
   * As above, the second worker started with {@code secondWorkerProperties} (system properties,
   * e.g. a crash point armed from the start, which saves a worker start in CI).
   */
  public static FaultSuite start(
      String name, boolean exactlyOnce, Map<String, String> secondWorkerProperties)
      throws Exception {
    Path pgData = Path.of("target", name + "-pg").toAbsolutePath();
    SeparateJvmKafka.deleteRecursively(pgData);
    PostgresServer postgres = PostgresServer.startRestartable(pgData);
    Map<String, String> worker = new LinkedHashMap<>();
    // A departed worker's tasks move at once rather than after the production 60 s.
    worker.put("scheduled.rebalance.max.delay.ms", "0");
    // A frozen worker leaves the group after 6 s instead of 10 s.
    worker.put("session.timeout.ms", "6000");
    worker.put("heartbeat.interval.ms", "1000");
    worker.put("offset.flush.interval.ms", "1000");
    if (exactlyOnce) {
      worker.put("exactly.once.source.support", "enabled");
      // A killed or frozen task's open transaction holds back read_committed readers (the new
      // task's offset reader among them) until it is fenced or times out (default 60 s).
      worker.put("producer.transaction.timeout.ms", "10000");
    }
    FaultCluster cluster = null;
    try {
      cluster = FaultCluster.start(name, worker);
      cluster.startWorker();
      FaultCluster.Worker second = cluster.startWorker(secondWorkerProperties);
      return new FaultSuite(postgres, cluster, second, exactlyOnce);
    } catch (Exception | Error e) {
      if (cluster != null) {
        cluster.close();
      }
      postgres.close();
      throw e;
    }
  }

  @FunctionalInterface
  public interface Action {
    void run() throws Exception;
  }

  @FunctionalInterface
  public interface Faults {
    /** Injects the scenario's faults; returns how many tasks' in-flight records may repeat. */
    int inject(Scenario scenario, String connector) throws Exception;
  }

  /** One connector, its outbox (own table prefix), topics, workload and consumer. */
  public final class Scenario {
    private final String name;
    private final String connector;
    private final String prefix;
    private final PostgresOutboxStore store;
    private final RecordCollector collector;
    private final FaultWorkload workload;
    private double worstRecovery;
    private int minDuplicates;
    private int operatorRestarts;
    // a failover to a standby that lagged: commits the publishers saw may be gone, and with them
    // completions; from when the standby stopped receiving to the failover
    private boolean databaseLostCommits;
    private Instant lagFrom;
    private Instant lagTo;
    private int completionsTheDatabaseLost;

    Scenario(String name, String connector, int tasks) throws Exception {
      this.name = name;
      this.connector = connector;
      this.prefix = connector + "_";
      this.store = postgres.store(prefix);
      this.collector =
          new RecordCollector(
              cluster.consumer(exactlyOnce ? "read_committed" : "read_uncommitted"),
              topics(connector));
      deploy(tasks);
      cluster.awaitTasksRunning(connector, tasks);
      this.workload =
          FaultWorkload.start(
              store, postgres.dataSource(), connector, prefix, 3, 30, Duration.ofMillis(30));
    }

    void deploy(int tasks) throws Exception {
      Map<String, String> overrides = new LinkedHashMap<>();
      overrides.put("tasks.max", Integer.toString(tasks));
      overrides.put("batch.size", Integer.toString(BATCH));
      overrides.put("completion.flush.size", Integer.toString(FLUSH));
      overrides.put("lease.duration.ms", "3000");
      overrides.put("topic.template", "${handler}-" + connector);
      if (exactlyOnce) {
        overrides.put("exactly.once.support", "required");
      }
      Map<String, String> config = DeployedConfig.connector(postgres, prefix, overrides);
      HttpResponse<String> deployed =
          cluster.put("connectors/" + connector + "/config", DeployedConfig.toJson(config));
      assertThat(deployed.statusCode()).as(deployed.body()).isBetween(200, 201);
    }

    /** Lets the workload run while the consumer reads. */
    void streamFor(Duration duration) {
      collector.drain(duration);
    }

    /**
     * At least this many second copies must arrive (deliveries Kafka had when a worker crashed
     * before deleting them are sent again, unless exactly once).
     */
    void expectDuplicatesAtLeast(int count) {
      minDuplicates += count;
    }

    /**
     * Waits for the tasks to run again, restarting FAILED ones as an operator would; each restart
     * is reported with the scenario (it is recovery that needed an operator).
     */
    void awaitTasksRunningRestartingFailed() {
      operatorRestarts += cluster.awaitTasksRunningRestartingFailed(connector, TASKS);
    }

    /**
     * Injects a fault, waits for {@code recovered} (e.g. tasks running again), then until every
     * pair committed before the fault arrived; records how long that took.
     */
    void fault(Action inject, Action recovered) throws Exception {
      List<OutboxEvent> committedBefore = workload.committedSoFar();
      Set<String> before = Publishers.pairs(committedBefore);
      Instant start = Instant.now();
      log("%s: fault injected (%d pairs committed before it)", connector, before.size());
      inject.run();
      recovered.run();
      if (databaseLostCommits) {
        before = Publishers.pairs(workload.inTheDatabase(committedBefore));
      }
      log(
          "%s: tasks running after %d ms",
          connector, Duration.between(start, Instant.now()).toMillis());
      collector.awaitAll(before, TIMEOUT);
      double seconds = Duration.between(start, Instant.now()).toMillis() / 1000.0;
      log("%s: every pair committed before the fault arrived after %.1f s", connector, seconds);
      worstRecovery = Math.max(worstRecovery, seconds);
    }

    /**
     * Streams for 2 s, then fails PostgreSQL over to its standby ({@link
     * PostgresServer#failOverToTheStandby}) as a fault, until the tasks run again.
     */
    void failOverAfterStreaming() throws Exception {
      failOverAfterStreaming(Duration.ofMillis(2000));
    }

    private void failOverAfterStreaming(Duration streaming) throws Exception {
      streamFor(streaming);
      fault(
          () ->
              log(
                  "%s: no primary for %d ms",
                  connector, postgres.failOverToTheStandby().toMillis()),
          () -> cluster.awaitTasksRunning(connector, TASKS));
    }

    /**
     * As {@link #failOverAfterStreaming}, to a standby that lags: it stops receiving (its WAL
     * sender frozen) 1.5 s before the failover, which loses what the primary committed meanwhile
     * (as one to an asynchronous standby does). The scenario then counts only the events the new
     * primary has: the others the database lost, not the connector.
     */
    void failOverToALaggingStandbyAfterStreaming() throws Exception {
      streamFor(Duration.ofMillis(2000));
      postgres.pauseTheStandby();
      lagFrom = Instant.now();
      log("%s: the standby receives nothing from here", connector);
      streamFor(Duration.ofMillis(1500));
      databaseLostCommits = true;
      lagTo = Instant.now();
      failOverAfterStreaming(Duration.ZERO);
    }

    /**
     * Starts a worker whose JVM halts at the {@code pass}-th pass of the connector's crash point
     * {@code point} (before-send, before-delete), lets the tasks spread onto it, waits for the
     * crash while streaming, and then for the recovery as a fault. Returns how many deliveries the
     * crashed task held at that point.
     */
    int crashWorkerAt(String point, int pass) throws Exception {
      FaultCluster.Worker crashing = cluster.startWorker(armed(point, pass));
      log("%s: started %s armed with %s:%d", connector, crashing.process(), point, pass);
      return awaitCrash(crashing, point);
    }

    /**
     * Waits, streaming, for {@code crashing} (a worker armed with {@code point}) to halt, and then
     * for the recovery as a fault. Returns how many deliveries the crashed task held at that point.
     */
    int awaitCrash(FaultCluster.Worker crashing, String point) throws Exception {
      await()
          .atMost(TIMEOUT)
          .pollInterval(Duration.ofMillis(200))
          .until(
              () -> {
                collector.drain(Duration.ZERO);
                return !crashing.process().isAlive();
              });
      int[] held = new int[1];
      fault(
          () -> {
            cluster.awaitCrash(crashing, Duration.ofSeconds(10));
            Matcher m = CRASH.matcher(crashing.process().output());
            assertThat(m.find()).as("%s halted at its crash point", crashing.process()).isTrue();
            assertThat(m.group(1)).isEqualTo(point);
            held[0] = Integer.parseInt(m.group(2));
            log(
                "%s: %s halted at %s with %d deliveries",
                connector, crashing.process(), point, held[0]);
          },
          () -> cluster.awaitTasksRunning(connector, TASKS));
      return held[0];
    }

    Verifier.Report finish() throws Exception {
      List<OutboxEvent> committed = workload.stop();
      Set<String> lostByTheDatabase = Set.of();
      if (databaseLostCommits) {
        List<OutboxEvent> kept = workload.inTheDatabase(committed);
        Set<String> gone = new java.util.HashSet<>();
        committed.forEach(e -> gone.add(e.id()));
        kept.forEach(e -> gone.remove(e.id()));
        lostByTheDatabase = gone;
        assertThat(lostByTheDatabase)
            .as("commits the failover lost (the standby lagged): what the scenario is about")
            .isNotEmpty();
        committed = kept;
      }
      Set<String> expected = Publishers.pairs(committed);
      try {
        collector.awaitAll(expected, TIMEOUT);
      } catch (ConditionTimeoutException e) {
        // Reported as lost below, with examples.
      }
      List<Received> received = collector.drain(Duration.ofSeconds(3));
      if (databaseLostCommits) {
        received = withoutWhatTheDatabaseLost(received, lostByTheDatabase);
      }
      try {
        await()
            .atMost(Duration.ofSeconds(20))
            .until(() -> Verifier.rows(postgres.dataSource(), prefix)[0] == 0);
      } catch (ConditionTimeoutException e) {
        // Reported as rows left below.
      }
      long[] rows = Verifier.rows(postgres.dataSource(), prefix);
      String title =
          operatorRestarts == 0
              ? name
              : name + " (" + operatorRestarts + " FAILED tasks restarted by REST)";
      Verifier.Report report =
          Verifier.verify(title, committed, received, rows[0], rows[1]).withRecovery(worstRecovery);
      if (collector.reread() > 0) {
        log(
            "%s: the consumer read %d records again after its position was reset (not counted)",
            connector, collector.reread());
      }
      List<Received> duplicates = RecordCollector.duplicates(received);
      if (!duplicates.isEmpty()) {
        log(
            "%s: first duplicates (second copies) %s",
            connector, duplicates.subList(0, Math.min(5, duplicates.size())));
      }
      if (rows[0] > 0) {
        log("%s: rows left %s", connector, Verifier.rowsLeft(postgres.dataSource(), prefix));
      }
      return report;
    }

    /**
     * The records of events the new primary has: those of events it lost (sent before the failover)
     * are left out and counted. Deliveries the old primary completed after the standby stopped
     * receiving are pending again on the new one and go out again: those second copies are allowed,
     * counted as the pairs of events published from 5 s before the lag (a delivery's completion
     * follows its publish within that here) to the failover.
     */
    private List<Received> withoutWhatTheDatabaseLost(
        List<Received> received, Set<String> lostByTheDatabase) {
      List<Received> kept =
          received.stream().filter(r -> !lostByTheDatabase.contains(r.eventId())).toList();
      long from = lagFrom.minusSeconds(5).toEpochMilli();
      long to = lagTo.toEpochMilli();
      completionsTheDatabaseLost =
          (int)
              kept.stream()
                  .filter(r -> r.timestamp() >= from && r.timestamp() <= to)
                  .map(Received::pair)
                  .distinct()
                  .count();
      log(
          "%s: the database lost %d committed events; %d records of them had been sent; %d pairs"
              + " were published around the lag (their completions may be lost, second copies"
              + " allowed)",
          connector,
          lostByTheDatabase.size(),
          received.size() - kept.size(),
          completionsTheDatabaseLost);
      return kept;
    }

    /** Cleans up without masking the scenario's own failure: problems are only printed. */
    void close() {
      workload.close();
      try {
        collector.close();
        cluster.delete("connectors/" + connector);
      } catch (Exception e) {
        System.out.println("[fault-suite] cleaning up " + connector + " failed: " + e);
      } finally {
        store.close();
      }
    }
  }

  /** The system properties of a worker whose JVM halts at the {@code pass}-th {@code point}. */
  public static Map<String, String> armed(String point, int pass) {
    return Map.of(CRASH_PROPERTY, point + ":" + pass);
  }

  /** As above, counting only the passes of the tasks of {@code connector}. */
  public static Map<String, String> armed(String point, int pass, String connector) {
    return Map.of(CRASH_PROPERTY, point + ":" + pass + "@" + connector);
  }

  /** The second worker the suite started (armed, if it was started so). */
  public FaultCluster.Worker secondWorker() {
    return secondWorker;
  }

  public void run(String name, String connector, int tasks, Faults faults) throws Exception {
    run(name, connector, tasks, true, faults);
  }

  public void run(String name, String connector, int tasks, boolean assertRowsLeft, Faults faults)
      throws Exception {
    Scenario scenario = new Scenario(name, connector, tasks);
    try {
      await().atMost(TIMEOUT).until(() -> scenario.collector.drain(Duration.ZERO).size() > 100);
      int tasksAtFault = faults.inject(scenario, connector);
      Verifier.Report report = scenario.finish();
      reports.add(report);
      System.out.println("[fault-suite] " + report);

      assertThat(report.examples()).as("first findings of %s", name).isEmpty();
      if (assertRowsLeft) {
        assertThat(report.rowsLeft()).as("rows left (%d dead)", report.dead()).isZero();
      }
      assertThat(report.lost()).as("lost").isZero();
      assertThat(report.unexpected()).as("unexpected").isZero();
      assertThat(report.orderViolations()).as("per-key order violations").isZero();
      if (exactlyOnce) {
        assertThat(report.duplicates()).as("duplicates (exactly once, read_committed)").isZero();
      } else {
        assertThat(report.duplicates())
            .as("duplicates: only deliveries in flight at a fault")
            .isLessThanOrEqualTo(
                tasksAtFault * IN_FLIGHT_PER_TASK + scenario.completionsTheDatabaseLost)
            .isGreaterThanOrEqualTo(scenario.minDuplicates);
      }
      assertThat(report.published()).isPositive();
    } finally {
      scenario.close();
    }
  }

  public static void log(String format, Object... args) {
    System.out.println("[fault-suite] " + Instant.now() + " " + format.formatted(args));
  }

  /** pg_terminate_backend of every connection the connector's tasks and validation hold. */
  public int terminateConnectorConnections() throws Exception {
    return (int) onTheConnectorsConnections("count(*) FILTER (WHERE pg_terminate_backend(pid))");
  }

  /** kill -9 of one connection of the connector's tasks: the server's crash recovery. */
  public Duration crashAConnectorBackend() throws Exception {
    long pid = onTheConnectorsConnections("coalesce(min(pid), 0)");
    if (pid == 0) {
      throw new IllegalStateException("the connector holds no connection to kill");
    }
    return postgres.crashBackend(pid);
  }

  /**
   * {@code aggregate} over the connections of the connector (a bigint, 0 for none), once it holds
   * any: right after a termination it may have none for a moment (its pools reconnect at the next
   * borrow, its listeners a second later), so this waits up to 5 s rather than find nothing.
   */
  private long onTheConnectorsConnections(String aggregate) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
    while (true) {
      try (Connection c = postgres.dataSource().getConnection();
          Statement s = c.createStatement();
          ResultSet rs =
              s.executeQuery(
                  "SELECT "
                      + aggregate
                      + " FROM pg_stat_activity WHERE application_name LIKE 'relaybus-connect%'")) {
        rs.next();
        long found = rs.getLong(1);
        if (found > 0 || System.nanoTime() > deadline) {
          return found;
        }
      }
      Thread.sleep(50);
    }
  }

  public static List<String> topics(String connector) {
    return Publishers.HANDLERS.stream().map(h -> h + "-" + connector).toList();
  }

  /** Stops the workers, the broker and PostgreSQL; prints and appends the results table. */
  @Override
  public void close() throws IOException {
    try {
      cluster.close();
    } finally {
      try {
        postgres.close();
      } finally {
        writeResults();
      }
    }
  }

  private void writeResults() throws IOException {
    if (reports.isEmpty()) {
      return;
    }
    StringBuilder out = new StringBuilder();
    out.append("\n### ")
        .append(FULL ? "full" : "ci")
        .append(exactlyOnce ? " exactly-once" : "")
        .append(" run, ")
        .append(Instant.now())
        .append(", ")
        .append(Runtime.getRuntime().availableProcessors())
        .append(" cores\n\n")
        .append(Verifier.TABLE_HEADER)
        .append('\n');
    for (Verifier.Report r : reports) {
      out.append(r.tableRow()).append('\n');
    }
    System.out.println(out);
    Files.writeString(
        Path.of("target", "fault-results.md"),
        out,
        StandardOpenOption.CREATE,
        StandardOpenOption.APPEND);
  }
}
