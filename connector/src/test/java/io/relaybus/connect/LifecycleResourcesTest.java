package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.testing.NewThreads;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import javax.management.ObjectName;
import org.apache.kafka.common.config.ConfigValue;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.errors.RetriableException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What a long-running Connect worker does to a connector many times (restart its tasks, change
 * tasks.max, delete and re-create it, validate its configuration, start it against a database that
 * refuses it) leaves nothing behind, against a real PostgreSQL 17: after N rounds the server counts
 * as many sessions of the connector's role as before (pg_stat_activity), the JVM runs the same
 * threads (pools, their housekeepers, listeners, lease and statistics threads, validation
 * executors, pgjdbc's login threads), and no relaybus MBean of the connector is left.
 */
class LifecycleResourcesTest {
  private static final int ROUNDS = 4;

  @TempDir static Path dataParent;
  private static EmbeddedPostgres server;
  private static String downUrl;

  @BeforeAll
  static void startServer() throws Exception {
    Path data = dataParent.resolve("pgdata");
    server = EmbeddedPostgres.builder().setDataDirectory(data).setCleanDataDirectory(true).start();
    try (Connection c = server.getPostgresDatabase().getConnection();
        Statement s = c.createStatement()) {
      s.execute("CREATE ROLE app LOGIN PASSWORD 'right-password'");
      s.execute("GRANT CREATE ON DATABASE postgres TO app");
      s.execute("GRANT ALL ON SCHEMA public TO app");
      Files.writeString(
          data.resolve("pg_hba.conf"),
          """
          local all all trust
          host all postgres 127.0.0.1/32 trust
          host all all 127.0.0.1/32 scram-sha-256
          """);
      s.execute("SELECT pg_reload_conf()");
    }
    try (ServerSocket socket = new ServerSocket(0)) {
      downUrl = "jdbc:postgresql://127.0.0.1:" + socket.getLocalPort() + "/postgres";
    }
    new OutboxSourceConnector().start(props("outbox.setup", "true")); // the schema, once
  }

  @AfterAll
  static void stopServer() throws IOException {
    server.close();
  }

  private static Map<String, String> props(String... overrides) {
    Map<String, String> props = new HashMap<>();
    props.put("name", "lifecycle");
    props.put("connection.url", "jdbc:postgresql://127.0.0.1:" + server.getPort() + "/postgres");
    props.put("connection.user", "app");
    props.put("connection.password", "right-password");
    props.put("connection.timeout.ms", "1000");
    props.put("outbox.setup", "false");
    props.put("poll.interval.ms", "100");
    props.put("task.lanes", "0-255");
    props.put("task.index", "0");
    for (int i = 0; i < overrides.length; i += 2) {
      props.put(overrides[i], overrides[i + 1]);
    }
    return props;
  }

  /** Sessions of the connector's role the server has now. */
  private static int sessions() throws Exception {
    try (Connection c = server.getPostgresDatabase().getConnection();
        Statement s = c.createStatement();
        ResultSet rs =
            s.executeQuery("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'")) {
      rs.next();
      return rs.getInt(1);
    }
  }

  private static Set<ObjectName> mbeans() throws Exception {
    return ManagementFactory.getPlatformMBeanServer()
        .queryNames(new ObjectName("relaybus.connect:connector=lifecycle,*"), null);
  }

  /**
   * Runs {@code round} {@link #ROUNDS} times (or {@code rounds}) and checks that sessions, threads
   * and MBeans are back where they were (threads that end by themselves after a close get 20 s).
   */
  private static void leavesNothing(String what, Consumer<Integer> round) throws Exception {
    leavesNothing(what, ROUNDS, round);
  }

  private static void leavesNothing(String what, int rounds, Consumer<Integer> round)
      throws Exception {
    int sessionsBefore = sessions();
    NewThreads threads = NewThreads.since();
    for (int i = 0; i < rounds; i++) {
      round.accept(i);
    }
    List<String> left = threads.now();
    int sessionsAfter = sessions();
    List<String> leftAtOnce = left;
    int sessionsAtOnce = sessionsAfter;
    for (long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        (!left.isEmpty() || sessionsAfter != sessionsBefore) && System.nanoTime() < deadline;
        left = threads.now(), sessionsAfter = sessions()) {
      Thread.sleep(100);
    }
    System.out.printf(
        "%s x%d: sessions %d -> %d (at once %d), new threads %s (at once %s)%n",
        what, rounds, sessionsBefore, sessionsAfter, sessionsAtOnce, left, leftAtOnce);
    assertThat(sessionsAfter).as(what + ": sessions of the role").isEqualTo(sessionsBefore);
    assertThat(left).as(what + ": threads").isEmpty();
    assertThat(mbeans()).as(what + ": MBeans").isEmpty();
  }

  private static OutboxSourceTask task(Map<String, String> props) {
    OutboxSourceTask task = new OutboxSourceTask();
    task.initialize(new TestSourceTaskContext());
    task.start(props);
    return task;
  }

  private static void poll(OutboxSourceTask task, int times) {
    try {
      for (int i = 0; i < times; i++) {
        task.poll();
      }
    } catch (InterruptedException e) {
      throw new IllegalStateException(e);
    }
  }

  /** A restart: the task runs (pool, lease and statistics threads, the LISTEN) and stops. */
  @Test
  void restartingATask() throws Exception {
    int[] held = new int[1];
    leavesNothing(
        "task start, poll, stop",
        i -> {
          OutboxSourceTask task = task(props());
          poll(task, 5); // claims, then waits for work on its listener
          try {
            held[0] = sessions();
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
          task.stop();
        });
    System.out.println("  sessions while a task ran: " + held[0]);
    // the pool's minimum (2) or more (3 at most) while a claim and a statistics scan overlap, and
    // the listener
    assertThat(held[0]).as("sessions while a task ran").isBetween(3, 4);
  }

  /**
   * tasks.max changed (2, 3, 2, ...): Connect stops every task and starts the new set; and a
   * restart whose new incarnation starts before the old one stopped (it takes the lanes over).
   */
  @Test
  void reconfiguringAndOverlappingIncarnations() throws Exception {
    OutboxSourceConnector connector = new OutboxSourceConnector();
    connector.start(props());
    leavesNothing(
        "tasks.max 2/3 reconfigure, overlapping restart",
        i -> {
          List<OutboxSourceTask> tasks =
              connector.taskConfigs(2 + i % 2).stream().map(LifecycleResourcesTest::task).toList();
          tasks.forEach(t -> poll(t, 3));
          OutboxSourceTask next = task(connector.taskConfigs(2 + i % 2).get(0));
          tasks.forEach(OutboxSourceTask::stop);
          poll(next, 3);
          next.stop();
        });
    connector.stop();
  }

  /** Delete and re-create: the connector's start (outbox.setup=true opens a store) and stop. */
  @Test
  void recreatingTheConnector() throws Exception {
    leavesNothing(
        "connector start (setup), stop",
        i -> {
          OutboxSourceConnector connector = new OutboxSourceConnector();
          connector.start(props("outbox.setup", "true"));
          connector.taskConfigs(3);
          connector.stop();
        });
  }

  /** validate(), as Connect's UI and operators call it, passing and with each kind of finding. */
  @Test
  void validating() throws Exception {
    Map<String, List<String>> cases = new java.util.LinkedHashMap<>();
    Map<String, Map<String, String>> configs =
        Map.of(
            "passes", props(),
            "wrong password", props("connection.password", "wrong"),
            "server down", props("connection.url", downUrl),
            "schema missing", props("outbox.schema", "missing"),
            "schema missing, setup=true",
                props("outbox.schema", "missing", "outbox.setup", "true"));
    for (Map.Entry<String, Map<String, String>> config : configs.entrySet()) {
      leavesNothing(
          "validate, " + config.getKey(),
          i ->
              cases.put(
                  config.getKey(),
                  new OutboxSourceConnector()
                      .validate(config.getValue()).configValues().stream()
                          .filter(v -> !v.errorMessages().isEmpty())
                          .map(ConfigValue::name)
                          .sorted()
                          .toList()));
    }
    assertThat(cases)
        .containsEntry("passes", List.of())
        .containsEntry("wrong password", List.of("connection.password", "connection.user"))
        .containsEntry("server down", List.of("connection.url"))
        .containsEntry("schema missing", List.of("outbox.schema", "outbox.table.prefix"))
        .containsEntry("schema missing, setup=true", List.of());
  }

  /**
   * Starts that fail: a missing schema or a refused login fails the task at once; a server that is
   * down leaves it running without lanes, trying again at its polls, until it is stopped; the
   * connector's setup fails on each.
   */
  @Test
  void startingAgainstADatabaseThatRefuses() throws Exception {
    leavesNothing(
        "task start, schema missing",
        i ->
            assertThatThrownBy(() -> task(props("outbox.schema", "missing")))
                .isInstanceOf(ConnectException.class)
                .hasMessageContaining("the outbox is not set up in schema missing"));
    leavesNothing(
        "task start, wrong password",
        2,
        i ->
            assertThatThrownBy(() -> task(props("connection.password", "wrong")))
                .isInstanceOf(ConnectException.class)
                .isNotInstanceOf(RetriableException.class)
                .hasMessageContaining("SQLState 28P01, permanent"));
    for (Map<String, String> refused :
        List.of(props("connection.password", "wrong"), props("connection.url", downUrl))) {
      Map<String, String> setup = new HashMap<>(refused);
      setup.put("outbox.setup", "true");
      leavesNothing(
          "connector start (setup) failing, "
              + refused.get("connection.url")
              + " "
              + refused.get("connection.password"),
          2,
          i ->
              assertThatThrownBy(() -> new OutboxSourceConnector().start(setup))
                  .isInstanceOf(ConnectException.class));
    }
    // each round takes the connect timeout at the start and at each poll: 2 rounds, 2 polls
    leavesNothing(
        "task start, polls, stop, server down",
        2,
        i -> {
          OutboxSourceTask task = task(props("connection.url", downUrl));
          poll(task, 2);
          task.stop();
        });
  }
}
