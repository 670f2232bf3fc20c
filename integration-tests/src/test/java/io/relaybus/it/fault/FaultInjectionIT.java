package io.relaybus.it.fault;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Servers;
import java.time.Duration;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.awaitility.core.ConditionTimeoutException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.parallel.Isolated;

/**
 * design.md's guarantees under faults, with the processes a user runs: a KRaft broker and two
 * distributed Connect workers, each a JVM of its own, the packaged plugin in {@code plugin.path},
 * PostgreSQL as its own server. A {@link FaultWorkload} publishes a keyed workload continuously
 * while a fault is injected; the {@link Verifier} then accounts for every (event, handler) by id.
 *
 * <p>Every scenario must end with lost 0, unexpected 0, per-key order violations 0 and rows left 0;
 * duplicates are allowed only for deliveries in flight at a fault (bounded below, reported). The
 * recovery time is from the fault until every pair committed before it arrived, with no operator
 * action.
 *
 * <p>CI runs the reduced form (one SIGSTOP zombie, PostgreSQL restarted once, connections
 * terminated twice, one worker halted between Kafka's acknowledgement and the completion DELETE,
 * small counts). {@code -Drelaybus.faults=full} adds repetitions at different moments, halts before
 * the send, kill -9 from outside, a graceful stop, a broker restart and tasks.max changes: {@code
 * ./mvnw -pl integration-tests -am verify -Dit.test='Fault*' -Dtest=NONE
 * -Dsurefire.failIfNoSpecifiedTests=false -Drelaybus.faults=full}. Results are printed and appended
 * to {@code target/fault-results.md}. The same faults in exactly-once mode: {@link
 * FaultExactlyOnceIT}.
 */
// Alone: faults land at chosen moments and recovery times are reported.
@Isolated
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class FaultInjectionIT {
  private static final boolean FULL = FaultSuite.FULL;
  private static final int TASKS = FaultSuite.TASKS;

  private static final String CRASH_POINT_CONNECTOR = "crashpoint";

  @RegisterExtension
  static final Servers servers =
      Servers.start(
          // The second worker is armed from the start to halt in the crash-point scenario (one JVM
          // start less in CI); no other connector's tasks count.
          () ->
              FaultSuite.start(
                  "fault-suite",
                  false,
                  FaultSuite.armed("before-delete", 3, CRASH_POINT_CONNECTOR)));

  private static FaultSuite suite;
  private static PostgresServer postgres;
  private static FaultCluster cluster;

  @BeforeAll
  static void start() {
    postgres = suite.postgres;
    cluster = suite.cluster;
  }

  @Test
  @Order(4)
  void killMinus9OfAWorkerMidStreamLosesNothingAndKeepsKeyOrder() throws Exception {
    // CI kills at instrumented moments instead (below), which covers this and more.
    assumeTrue(FULL, "full suite only (-Drelaybus.faults=full)");
    int repetitions = 3;
    run(
        "kill -9 of one of two workers mid-stream (tasks move) x" + repetitions,
        "kill9",
        TASKS,
        (scenario, connector) -> {
          for (int i = 0; i < repetitions; i++) {
            // Different moments: a worker dies while its tasks have batches unacknowledged, and
            // while acknowledged deliveries wait for their completion flush (every 500 ms).
            scenario.streamFor(Duration.ofMillis(1500 + 1700L * i));
            FaultCluster.Worker victim = cluster.workerOf(connector, i % TASKS);
            scenario.fault(
                () -> cluster.kill(victim), () -> cluster.awaitTasksRunning(connector, TASKS));
            // Two workers again for the next fault.
            cluster.startWorker();
            cluster.awaitTasksRunning(connector, TASKS);
          }
          return repetitions * TASKS;
        });
  }

  /**
   * A worker JVM halted (as kill -9) by the connector's test-only crash point at exact moments:
   * with a batch claimed but not yet produced, and with a batch Kafka acknowledged but not yet
   * deleted. The acknowledged batch must come again (at least its size in duplicates), nothing else
   * is lost or reordered.
   */
  @Test
  @Order(3)
  void killMinus9AtInstrumentedMomentsLosesNothingAndRepeatsOnlyWhatWasInFlight() throws Exception {
    run(
        FULL
            ? "kill -9 (JVM halt) after the ack before the delete x2, before the send x2"
            : "kill -9 (JVM halt) after the ack before the delete x1",
        CRASH_POINT_CONNECTOR,
        TASKS,
        (scenario, connector) -> {
          // Kafka has the halted batch and the outbox still lists it: it is sent again.
          scenario.expectDuplicatesAtLeast(
              scenario.awaitCrash(suite.secondWorker(), "before-delete"));
          if (!FULL) {
            return TASKS;
          }
          scenario.crashWorkerAt("before-send", 10);
          scenario.crashWorkerAt("before-send", 25);
          scenario.expectDuplicatesAtLeast(scenario.crashWorkerAt("before-delete", 7));
          // Two workers again for the scenarios that follow.
          cluster.startWorker();
          cluster.awaitTasksRunning(connector, TASKS);
          return 4 * TASKS;
        });
  }

  /**
   * Every connection of the connector's tasks killed by the server (pg_terminate_backend), twice:
   * nothing lost, order kept, no delivered row left behind, the tasks carry on by themselves.
   */
  @Test
  @Order(2)
  void terminatedDatabaseConnectionsLoseNothingAndTheTasksCarryOn() throws Exception {
    terminateConnections("pgkill", FULL ? 5 : 2, 900, true);
  }

  /**
   * The whole PostgreSQL server stopped ({@code pg_ctl stop -m fast}: every connection closed) and
   * started again on the same port and data directory while the workload publishes: the tasks lose
   * their leases by their own clock, take their lanes anew when the server is back, and carry on
   * without an operator (no task fails).
   */
  @Test
  @Order(2)
  void postgresRestartedAsAWholeLosesNothingAndTheTasksCarryOn() throws Exception {
    serverFaults(
        "PostgreSQL restarted (pg_ctl stop -m fast, 2 s down, start)",
        "pgrestart",
        "unreachable for",
        () -> postgres.restart(Duration.ofSeconds(2)));
  }

  /**
   * A fault of the whole server, once (3 times, 1 / 2.5 / 4 s apart, in full), each followed by the
   * tasks running again; {@code fault} returns how long the server was away.
   */
  private static void serverFaults(
      String name, String connector, String away, java.util.concurrent.Callable<Duration> fault)
      throws Exception {
    int repetitions = FULL ? 3 : 1;
    run(
        name + " x" + repetitions,
        connector,
        TASKS,
        (scenario, deployed) -> {
          for (int i = 0; i < repetitions; i++) {
            scenario.streamFor(Duration.ofMillis(1000 + 1500L * i));
            scenario.fault(
                () -> log("%s: PostgreSQL %s %d ms", deployed, away, fault.call().toMillis()),
                () -> cluster.awaitTasksRunning(deployed, TASKS));
          }
          return repetitions * TASKS;
        });
  }

  /**
   * A backend of the connector killed (kill -9, as the kernel's OOM killer does): the postmaster
   * ends every session, throws away the WAL it had not yet written (and the transaction ids that
   * went with it, which it hands out again) and recovers from disk. The tasks notice at their next
   * claim (the unlogged incarnation row is gone), resume their lanes from their cursor rows and
   * carry on: nothing lost, order kept, and no row left for the safety net's sweep.
   */
  @Test
  @Order(2)
  void aCrashedBackendMakesPostgresRecoverAndTheTasksCarryOn() throws Exception {
    String before = workersOutput();
    serverFaults(
        "kill -9 of a connector backend (crash recovery)",
        "pgcrash",
        "recovered in",
        suite::crashAConnectorBackend);
    assertTheClaimsResumedFromTheirCursorRows(before);
  }

  /**
   * The primary fails (stopped as {@code pg_ctl stop -m immediate} does) and its address moves to a
   * streaming standby that had every commit (synchronous replication), which is then promoted: the
   * tasks' connections break, reconnect to a server still in recovery (a claim there is refused as
   * read-only, a transient failure), then to the new primary, whose unlogged incarnation row is
   * empty, so the claims resume their lanes from the cursor rows. Nothing lost, order kept, no row
   * left for the safety net's sweep, no task failed.
   */
  @Test
  @Order(8)
  void aFailoverToASynchronousStandbyLosesNothingAndTheTasksCarryOn() throws Exception {
    postgres.addStandby();
    String before = workersOutput();
    run(
        "failover: primary stopped at once, its address moved to a synchronous standby, promoted",
        "pgfailover",
        TASKS,
        (scenario, connector) -> {
          scenario.failOverAfterStreaming();
          return TASKS;
        });
    assertTheClaimsResumedFromTheirCursorRows(before);
  }

  /**
   * As above, to a standby that lagged: it received nothing in the last 1.5 s before the failover,
   * so the new primary lacks what the old one committed then (as after a failover to an
   * asynchronous standby), and hands its log ids, transaction ids and row places to new events. The
   * tasks hold tokens of deliveries the old primary handed out; Kafka's acknowledgements of them
   * complete nothing of the new events. Every event the new primary has goes out, in order; what it
   * lost is counted, not required; deliveries whose completion it lost may go out again.
   */
  @Test
  @Order(9)
  void aFailoverToALaggingStandbyLosesNoEventTheNewPrimaryHas() throws Exception {
    assumeTrue(FULL, "full suite only (-Drelaybus.faults=full)");
    postgres.addStandby(false);
    String before = workersOutput();
    run(
        "failover to a standby that lagged 1.5 s (asynchronous): primary stopped at once, promoted",
        "pglagging",
        TASKS,
        (scenario, connector) -> {
          scenario.failOverToALaggingStandbyAfterStreaming();
          return TASKS;
        });
    assertTheClaimsResumedFromTheirCursorRows(before);
  }

  /**
   * Since {@code before} (the workers' output then), a claim noticed that the server lost what it
   * had not written (the incarnation row) and the sweep sent no row on.
   */
  private static void assertTheClaimsResumedFromTheirCursorRows(String before) {
    String after = workersOutput();
    String noticed = "PostgreSQL lost what it had not yet written to disk";
    assertThat(count(after, noticed) - count(before, noticed))
        .as("claims that noticed the server's crash recovery or promotion")
        .isPositive();
    String sentOn = "was behind the lane's read position";
    assertThat(count(after, sentOn) - count(before, sentOn))
        .as("log rows the safety net had to send on (each a stall)")
        .isZero();
  }

  /** Every worker's output so far, in the order the workers started. */
  private static String workersOutput() {
    StringBuilder all = new StringBuilder();
    cluster.workers().forEach(w -> all.append(w.process().output()));
    return all.toString();
  }

  private static int count(String text, String phrase) {
    int n = 0;
    for (int i = text.indexOf(phrase); i >= 0; i = text.indexOf(phrase, i + 1)) {
      n++;
    }
    return n;
  }

  @Test
  @Order(2)
  void terminatedDatabaseConnectionsLeaveNoDeliveredRowBehind() throws Exception {
    // Regression: a completion DELETE that failed dropped its batch, leaving delivered rows.
    assumeTrue(FULL, "full suite only (-Drelaybus.faults=full)");
    // Ten terminations 0.5 s apart: one of them lands in a completion DELETE (each did in our
    // runs).
    terminateConnections("pgrows", 10, 0, true);
  }

  private static void terminateConnections(
      String connector, int repetitions, long stepMillis, boolean rowsLeft) throws Exception {
    run(
        "pg_terminate_backend of every connector connection x" + repetitions,
        connector,
        TASKS,
        rowsLeft,
        (scenario, name) -> {
          for (int i = 0; i < repetitions; i++) {
            scenario.streamFor(Duration.ofMillis(500 + stepMillis * i));
            scenario.fault(
                () -> assertThat(terminateConnectorConnections()).isPositive(), () -> {});
          }
          // A task whose lease renewal failed lets its 3 s leases lapse by its own clock and
          // acquires its lanes anew (a new epoch): what it had in flight is sent again.
          return repetitions * TASKS;
        });
  }

  @Test
  @Order(1)
  void frozenWorkerPastItsLeaseIsFencedAndStopsEmitting() throws Exception {
    int repetitions = FULL ? 2 : 1;
    run(
        "SIGSTOP of a worker past its lease, SIGCONT (zombie) x" + repetitions,
        "zombie",
        TASKS,
        (scenario, connector) -> {
          for (int i = 0; i < repetitions; i++) {
            scenario.streamFor(Duration.ofMillis(2000 + 1500L * i));
            FaultCluster.Worker zombie = cluster.workerOf(connector, 0);
            String before = zombie.process().output();
            scenario.fault(
                () -> cluster.freeze(zombie),
                () -> {
                  // The others take its tasks (after session.timeout.ms) and its lanes at once.
                  cluster.awaitTasksRunning(connector, TASKS);
                });
            // Past the 3 s lease, then the zombie runs on, unaware.
            Thread.sleep(4000);
            cluster.resume(zombie);
            // It notices its lanes were taken (next renewal) and Connect stops its old tasks.
            try {
              await()
                  .atMost(Duration.ofSeconds(30))
                  .until(
                      () -> lostLaneNotices(zombie.process().output()) > lostLaneNotices(before));
            } catch (ConditionTimeoutException e) {
              // Connect may stop the zombie's tasks before their renewal runs: nothing to notice.
            }
            System.out.printf(
                "[fault-suite] zombie %s logged %d lost-lane notices after SIGCONT%n",
                zombie.process(),
                lostLaneNotices(zombie.process().output()) - lostLaneNotices(before));
            cluster.awaitTasksRunning(connector, TASKS);
          }
          return repetitions * TASKS;
        });
  }

  @Test
  @Order(5)
  void gracefulStopOfAWorkerHandsItsLanesBack() throws Exception {
    assumeTrue(FULL, "full suite only (-Drelaybus.faults=full)");
    run(
        "graceful stop (SIGTERM) of one of two workers x2",
        "graceful",
        TASKS,
        (scenario, connector) -> {
          for (int i = 0; i < 2; i++) {
            scenario.streamFor(Duration.ofMillis(2000 + 1300L * i));
            FaultCluster.Worker leaving = cluster.workerOf(connector, 0);
            scenario.fault(
                () -> cluster.stop(leaving), () -> cluster.awaitTasksRunning(connector, TASKS));
            cluster.startWorker();
            cluster.awaitTasksRunning(connector, TASKS);
          }
          // A graceful stop hands lanes back; only records Kafka had not acknowledged within
          // Connect's offset.flush.timeout.ms are sent again.
          return 2 * TASKS;
        });
  }

  @Test
  @Order(6)
  void brokerRestartLosesNothing() throws Exception {
    assumeTrue(FULL, "full suite only (-Drelaybus.faults=full)");
    run(
        "broker restart (SIGTERM, 5 s down, start)",
        "broker",
        TASKS,
        (scenario, connector) -> {
          scenario.streamFor(Duration.ofSeconds(3));
          scenario.fault(
              () -> {
                // Each phase timed, to tell the broker's own restart from the clients' recovery.
                long t0 = System.nanoTime();
                int exit = cluster.stopBroker();
                log("%s: broker stopped after %d ms, exit code %d", connector, ms(t0), exit);
                Thread.sleep(5000);
                long t1 = System.nanoTime();
                cluster.startBroker();
                log("%s: broker answering %d ms after its start", connector, ms(t1));
              },
              () -> cluster.awaitTasksRunning(connector, TASKS));
          return TASKS;
        });
  }

  @Test
  @Order(7)
  void changingTasksMaxWhileRunningLosesNothing() throws Exception {
    assumeTrue(FULL, "full suite only (-Drelaybus.faults=full)");
    run(
        "tasks.max changed while running (4 -> 2 -> 6)",
        "retask",
        TASKS,
        (scenario, connector) -> {
          int[] counts = {2, 6};
          for (int tasks : counts) {
            scenario.streamFor(Duration.ofSeconds(2));
            scenario.fault(
                () -> scenario.deploy(tasks), () -> cluster.awaitTasksRunning(connector, tasks));
          }
          return 2 * 6;
        });
  }

  private static void run(String name, String connector, int tasks, FaultSuite.Faults faults)
      throws Exception {
    suite.run(name, connector, tasks, faults);
  }

  private static void run(
      String name, String connector, int tasks, boolean assertRowsLeft, FaultSuite.Faults faults)
      throws Exception {
    suite.run(name, connector, tasks, assertRowsLeft, faults);
  }

  private static int terminateConnectorConnections() throws Exception {
    return suite.terminateConnectorConnections();
  }

  static void log(String format, Object... args) {
    FaultSuite.log(format, args);
  }

  private static long ms(long startNanos) {
    return (System.nanoTime() - startNanos) / 1_000_000;
  }

  private static int lostLaneNotices(String log) {
    Matcher m = Pattern.compile("lost lanes \\[").matcher(log);
    int n = 0;
    while (m.find()) {
      n++;
    }
    return n;
  }
}
