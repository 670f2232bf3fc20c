package io.relaybus.quickstart;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.quickstart.DemoWorkload.Published;
import io.relaybus.quickstart.TopicReader.Arrived;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Stream;
import org.slf4j.LoggerFactory;

/**
 * relaybus on one machine with only a JDK: PostgreSQL 17 (embedded binaries), a Kafka broker and a
 * Kafka Connect worker (each a JVM of its own, the packaged plugin in plugin.path), the connector
 * deployed over the REST API from config/postgres-outbox-source.json, a demo workload published,
 * and what arrived on Kafka printed and checked. Then it stays up until Ctrl-C, or exits with
 * {@code --no-wait}. Exit code 0 when everything arrived as promised, 1 when not, 2 on bad options.
 */
public final class Quickstart {
  static final String CONNECTOR = "relaybus-outbox";
  private static final int STEPS = 6;
  private static final int ADMIN_PORT = 8089;

  /** Marks a work directory as the quickstart's, so that a later run may empty it. */
  private static final String RUN_DIR_MARKER = ".relaybus-quickstart";

  private final Options options;
  private final Layout layout;
  private final Console console;
  private final CountDownLatch stopped = new CountDownLatch(1);
  private boolean stopping;
  private LocalPostgres postgres;
  private LocalKafka kafka;
  private PostgresOutboxStore store;
  private io.relaybus.admin.ConsoleServer adminConsole;
  private TopicTail tail;

  private Quickstart(Options options, Layout layout, Console console) {
    this.options = options;
    this.layout = layout;
    this.console = console;
  }

  public static void main(String[] args) throws InterruptedException {
    Options options;
    Layout layout;
    try {
      options = Options.parse(args);
      if (options.help()) {
        System.out.print(Options.USAGE);
        return;
      }
      layout = Layout.find(options.configDir(), options.workDir());
      prepareRunDir(layout);
    } catch (IllegalArgumentException | IllegalStateException | IOException e) {
      System.err.println("relaybus quickstart: " + e.getMessage());
      System.err.println("Run with --help for the options.");
      System.exit(2);
      return;
    }
    Quickstart quickstart = new Quickstart(options, layout, new Console(System.out, STEPS));
    Runtime.getRuntime()
        .addShutdownHook(new Thread(quickstart::stop, "relaybus-quickstart-shutdown"));
    boolean ok = quickstart.runDemo();
    if (!ok || options.noWait()) {
      quickstart.stop();
      System.exit(ok ? 0 : 1);
    }
    if (options.tail()) {
      quickstart.startTail();
    }
    quickstart.stopped.await(); // until Ctrl-C runs the shutdown hook
  }

  /** Stops what a killed run left behind, empties the run directory, sends library logs there. */
  private static void prepareRunDir(Layout layout) throws IOException {
    PidFiles.stopLeftovers(layout.runDir());
    Path marker = layout.runDir().resolve(RUN_DIR_MARKER);
    if (Files.exists(layout.runDir())) {
      boolean empty;
      try (Stream<Path> entries = Files.list(layout.runDir())) {
        empty = entries.findAny().isEmpty();
      }
      // Never empty a directory the quickstart did not make (--work-dir . would be the repository).
      if (!empty && !Files.exists(marker)) {
        throw new IllegalStateException(
            "--work-dir "
                + layout.runDir()
                + " holds files the quickstart did not write: pass a new or empty directory");
      }
      try (Stream<Path> paths = Files.walk(layout.runDir())) {
        for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
          Files.delete(p);
        }
      }
    }
    Files.createDirectories(layout.logDir());
    Files.writeString(marker, "Kafka's data and the logs of a relaybus quickstart run.\n");
    PidFiles.writeSelf(layout.runDir());
    // Before the first logger is created (slf4j-simple reads its settings once): the console is
    // the quickstart's own; PostgreSQL's, the pool's and the Kafka clients' logs go to the file.
    System.setProperty(
        "org.slf4j.simpleLogger.logFile", layout.logDir().resolve("quickstart.log").toString());
  }

  /** Runs the demo; prints what went wrong and returns false on failure. */
  private boolean runDemo() {
    try {
      List<String> problems = run();
      if (!problems.isEmpty()) {
        console.blank();
        console.line("NOT AS PROMISED:");
        problems.forEach(p -> console.line("  " + p));
        console.line("Logs: %s", Layout.show(layout.logDir()));
        return false;
      }
      printRunning();
      return true;
    } catch (Exception e) {
      if (isStopping()) {
        return false; // Ctrl-C while it ran: the failure is the shutdown's doing
      }
      LoggerFactory.getLogger(Quickstart.class).error("The quickstart failed.", e);
      console.blank();
      console.line("The quickstart failed: %s", e.getMessage());
      console.line("Logs: %s", Layout.show(layout.logDir()));
      return false;
    }
  }

  private List<String> run() throws Exception {
    console.line(
        "relaybus quickstart: PostgreSQL, a Kafka broker and a Kafka Connect worker on this"
            + " machine.");
    console.blank();
    Ports.requireFree(options.kafkaPort(), "--kafka-port");
    Ports.requireFree(options.restPort(), "--rest-port");
    ConnectRest rest = new ConnectRest(restUrl());

    try (Console.Step step = console.step("PostgreSQL 17 (embedded)")) {
      postgres = LocalPostgres.start(options.keepData(), layout.runDir());
      store = postgres.store();
      step.done(
          "localhost:"
              + postgres.port()
              + (options.keepData() == null
                  ? ""
                  : (postgres.reused() ? ", data reused from " : ", data kept in ")
                      + Layout.show(options.keepData())));
    }
    adminConsole = startAdminConsole();
    console.line("      admin console (read-only): %s", adminConsole.address());
    try (Console.Step step = console.step("Kafka broker (KRaft)")) {
      kafka = new LocalKafka(kafkaJvms(), options.kafkaPort());
      kafka.startBroker();
      step.done(kafka.bootstrapServers());
    }
    try (Console.Step step = console.step("Kafka Connect worker")) {
      kafka.startWorker(
          "worker",
          kafka.workerConfig(layout.workerConfig(), layout.pluginPath(), options.restPort()),
          rest::pluginLoaded);
      step.done("REST API " + restUrl() + ", plugin " + rest.pluginVersion());
    }
    Map<String, String> overrides = overrides();
    try (Console.Step step = console.step("Deploying connector " + CONNECTOR)) {
      Map<String, String> config = ConnectRest.readConfig(layout.connectorConfig());
      config.putAll(overrides);
      int tasks = Integer.parseInt(config.getOrDefault("tasks.max", "1"));
      rest.deploy(CONNECTOR, config);
      writeValidateExample(config);
      rest.awaitRunning(CONNECTOR, tasks, Duration.ofSeconds(60));
      step.done(tasks + " tasks running");
    }
    console.line("      PUT %s/connectors/%s/config with", restUrl(), CONNECTOR);
    console.line("      %s, changed:", Layout.show(layout.connectorConfig()));
    overrides.forEach((k, v) -> console.line("        %s=%s", k, v.isEmpty() ? "\"\"" : v));

    Published published;
    try (Console.Step step = console.step("Publishing the demo workload")) {
      DemoWorkload workload = new DemoWorkload(store, postgres.dataSource());
      step.progress(() -> String.format(Locale.ROOT, "%,d", workload.publishedSoFar()));
      published = workload.publish(options.events());
      step.done(
          String.format(
              Locale.ROOT,
              "%,d events, %,d orders, %,d transactions",
              published.events().size(),
              published.orders().size(),
              published.transactions()));
    }
    console.line(
        "      orders %s to %s move placed -> paid -> packed -> shipped; handlers billing, shipping",
        DemoWorkload.key(published.orders().get(0)),
        DemoWorkload.key(published.orders().get(published.orders().size() - 1)));
    console.line(
        "      %d events published again with the same id (a retried request): nothing added",
        published.republished().size());
    console.line(
        "      1 poison event %s for billing: its payload is not JSON", published.poison().id());

    List<Arrived> arrived;
    Duration timeout = Duration.ofSeconds(60 + options.events() / 500);
    try (Console.Step step = console.step("Consuming " + String.join(", ", DemoWorkload.HANDLERS));
        TopicReader reader = new TopicReader(kafka.bootstrapServers(), DemoWorkload.HANDLERS)) {
      arrived = reader.read(published.expectedPairs(), timeout, Duration.ofSeconds(1));
      step.done(String.format(Locale.ROOT, "%,d records", arrived.size()));
    }
    awaitNothingPending(Duration.ofSeconds(30));

    Report report = new Report(console);
    List<String> problems = new ArrayList<>(report.arrivals(published, arrived));
    problems.addAll(report.store(store, published));
    return problems;
  }

  /** The Connect REST API's base URL, without the trailing slash. */
  private String restUrl() {
    return "http://localhost:" + options.restPort();
  }

  /**
   * The broker's and the worker's JVMs: Kafka's jars only, in the run directory, logging to its
   * logs/ as kafka-log4j2.xml says, each in a session of its own (see {@link ChildJvm}).
   */
  private ChildJvm.Launcher kafkaJvms() throws IOException {
    Path logConfig = layout.runDir().resolve("log4j2.xml");
    try (InputStream in = Quickstart.class.getResourceAsStream("kafka-log4j2.xml")) {
      Files.copy(in, logConfig);
    }
    return ChildJvm.in(layout.runDir(), layout.kafkaClasspath())
        .logsIn(layout.logDir())
        .withOptions(List.of("-Dlog4j2.configurationFile=" + logConfig))
        .detached();
  }

  /** On 127.0.0.1:8089, or any free port when that one is taken. */
  private io.relaybus.admin.ConsoleServer startAdminConsole() throws java.io.IOException {
    try {
      return io.relaybus.admin.ConsoleServer.startReadOnly(store, "127.0.0.1", ADMIN_PORT);
    } catch (java.net.BindException e) {
      return io.relaybus.admin.ConsoleServer.startReadOnly(store, "127.0.0.1", 0);
    }
  }

  /** What the quickstart changes in config/postgres-outbox-source.json, and why. */
  private Map<String, String> overrides() {
    Map<String, String> overrides = new LinkedHashMap<>();
    // The embedded database instead of docker-compose's host "postgres".
    overrides.put("connection.url", postgres.jdbcUrl());
    overrides.put("connection.user", LocalPostgres.USER);
    overrides.put("connection.password", "");
    // JSON values, so that a payload that is not JSON shows what a dead letter is.
    overrides.put("value.format", "json");
    overrides.put("value.converter", "org.apache.kafka.connect.json.JsonConverter");
    overrides.put("value.converter.schemas.enable", "false");
    return overrides;
  }

  /** Deliveries are deleted in batches after Kafka acknowledged them: wait for the last batch. */
  private void awaitNothingPending(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (store.statistics().totalPending() > 0 && System.nanoTime() < deadline) {
      Thread.sleep(200);
    }
  }

  private void printRunning() {
    String rest = "localhost:" + options.restPort();
    console.blank();
    console.line(
        options.noWait()
            ? "relaybus ran (--no-wait: stopping now)."
            : "relaybus is running; Ctrl-C stops it.");
    console.line("  Connect REST API  %s", restUrl());
    console.line(
        "  Kafka broker      %s (topics %s)",
        kafka.bootstrapServers(), String.join(", ", DemoWorkload.HANDLERS));
    console.line("  PostgreSQL        %s (user postgres, no password)", postgres.jdbcUrl());
    console.line("  Admin console     %s (read-only)", adminConsole.address());
    console.line("  Logs              %s", Layout.show(layout.logDir()));
    console.blank();
    console.line("Try:");
    console.line("  curl -s %s/connectors/%s/status", rest, CONNECTOR);
    console.line("  curl -s %s/connectors/%s/config", rest, CONNECTOR);
    console.line("  curl -s -X POST '%s/connectors/%s/restart?includeTasks=true'", rest, CONNECTOR);
    console.line(
        "  curl -s -X PUT -H 'Content-Type: application/json' --data @%s \\",
        Layout.show(validateExample()));
    console.line(
        "    %s/connector-plugins/OutboxSourceConnector/config/validate"
            + "   (the deployed config with two mistakes: error_count 2, on %s and %s)",
        rest, VALIDATE_EXAMPLE_MISTAKES.get(0), VALIDATE_EXAMPLE_MISTAKES.get(1));
    console.line(
        "  psql -h localhost -p %d -U postgres -c \"%s\"", postgres.port(), DELIVERIES_SQL);
    console.line(
        "    (pending deliveries: one row per event in relaybus_log; retries, dead letters and"
            + " timers: relaybus_deliveries)");
  }

  /**
   * Deliveries per handler and status, as in psql (storage v2): a pending delivery is a handler of
   * a row of the log (struck handlers are NULL) unless it left the log for a row of deliveries,
   * which then counts instead; deliveries also holds the dead letters.
   */
  static final String DELIVERIES_SQL =
      "SELECT handler, status, count(*) FROM (SELECT h AS handler, 'pending' AS status"
          + " FROM relaybus_log g, unnest(g.handlers) h WHERE h IS NOT NULL AND NOT EXISTS"
          + " (SELECT FROM relaybus_deliveries d WHERE d.event_id = g.event_id AND d.handler = h)"
          + " UNION ALL SELECT handler, status FROM relaybus_deliveries) x"
          + " GROUP BY 1, 2 ORDER BY 1, 2";

  /** The keys validate-example.json gets wrong, on purpose. */
  static final List<String> VALIDATE_EXAMPLE_MISTAKES = List.of("value.format", "connection.url");

  private Path validateExample() {
    return layout.runDir().resolve("validate-example.json");
  }

  /**
   * The deployed configuration with two mistakes, for the validate call printed at the end: a value
   * no key takes (value.format=xml) and a database the server does not have. Everything else is
   * what runs, so the answer holds those two errors and no other.
   */
  private void writeValidateExample(Map<String, String> deployed) throws IOException {
    Map<String, String> example = new LinkedHashMap<>();
    example.put("name", CONNECTOR); // validate needs it; PUT /connectors/{name}/config does not
    example.putAll(deployed);
    example.put("value.format", "xml");
    example.put(
        "connection.url", "jdbc:postgresql://localhost:" + postgres.port() + "/no_such_database");
    Files.writeString(
        validateExample(),
        new ObjectMapper().writerWithDefaultPrettyPrinter().writeValueAsString(example) + "\n");
  }

  /** --tail: every record on the topics, the demo's first, then each as it arrives. */
  private void startTail() {
    TopicTail started;
    synchronized (this) {
      if (stopping) {
        return;
      }
      started = new TopicTail(kafka.bootstrapServers(), console);
      tail = started;
    }
    console.blank();
    console.line(
        "--tail: every record on the topics (but Kafka's and the worker's own), from the first;"
            + " Ctrl-C stops.");
    started.start();
  }

  private synchronized boolean isStopping() {
    return stopping;
  }

  /** Stops everything, in order: the worker first, so its tasks hand their lanes back. */
  private void stop() {
    synchronized (this) {
      if (stopping) {
        return;
      }
      stopping = true;
    }
    long started = System.nanoTime();
    console.blank();
    console.line(
        "Stopping the Connect worker (its tasks hand their lanes back), the broker, PostgreSQL.");
    List<String> failures = new ArrayList<>();
    if (tail != null) {
      tail.close();
    }
    try {
      if (kafka != null) {
        kafka.close();
      }
    } catch (Exception e) {
      failures.add("Kafka: " + e);
    }
    if (adminConsole != null) {
      adminConsole.close();
    }
    if (store != null) {
      store.close();
    }
    try {
      if (postgres != null) {
        postgres.close();
      }
    } catch (Exception e) {
      failures.add("PostgreSQL: " + e);
    }
    PidFiles.delete(layout.runDir().resolve(PidFiles.QUICKSTART + ".pid"));
    console.line(
        failures.isEmpty()
            ? "Stopped cleanly in %s."
                .formatted(Console.seconds(Duration.ofNanos(System.nanoTime() - started)))
            : "Stopped, with failures: " + failures);
    stopped.countDown();
  }
}
