package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import io.relaybus.it.fault.FaultSuite;
import io.relaybus.it.fault.FaultWorkload;
import io.relaybus.it.fault.Verifier;
import io.relaybus.it.harness.ConnectWorkerClasspath;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.PostgresServer;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.it.harness.Servers;
import io.relaybus.quickstart.ChildJvm;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.File;
import java.io.IOException;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.awaitility.core.ConditionTimeoutException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The packaged plugin in Connect workers of other Kafka versions, each a JVM of its own started
 * from that version's jars only (connect-runtime and its dependencies from Maven Central, see
 * {@link io.relaybus.it.harness.ConnectWorkerClasspath}), against one Kafka 4.3.1 broker: the
 * plugin loads under plugin isolation, and a short exact scenario runs: publishers committing out
 * of order, one task restarted through REST mid-stream, then every (event, handler) received, in
 * key order, nothing unexpected, no delivery row left.
 *
 * <p>Both deployment forms: the Confluent Hub style archive unpacked into {@code plugin.path} (with
 * {@code plugin.discovery=hybrid_warn}) and the single connector JAR ({@code
 * connector-<version>-all.jar}) dropped into {@code plugin.path} ({@code service_load}, which finds
 * plugins through their ServiceLoader manifest only); with the JAR, a MongoDB outbox delivers too
 * (the JAR keeps the MongoDB driver's packages as they are: this shows they load and work).
 *
 * <p>CI runs the oldest and the newest supported version, one form each; {@code
 * -Drelaybus.compat=all} runs every supported version in both forms, and {@code
 * -Drelaybus.compat=4.1.2,4.2.1} the versions named (both forms). Results are appended to {@code
 * target/compat-results.md}.
 */
class ConnectCompatibilityIT {
  /** The versions the README claims; {@code all} runs each of them. */
  static final List<String> SUPPORTED =
      List.of("3.9.2", "4.0.2", "4.1.2", "4.2.1", "4.3.2", "4.4.0");

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String CONNECTOR_CLASS = "io.relaybus.connect.OutboxSourceConnector";
  private static final int TASKS = 2;
  private static final int BATCH = 50;
  private static final int FLUSH = 100;

  /** Events (3 per transaction, 2 handlers each) published before the publishers stop. */
  private static final int EVENTS = 450;

  private static final List<String> RESULTS = Collections.synchronizedList(new ArrayList<>());

  @RegisterExtension
  static final Servers servers =
      Servers.start(PostgresServer::start)
          // The broker only; each test starts a worker of its version in place of the one before.
          .and(() -> SeparateJvmKafka.start("compat", Map.of()));

  private static PostgresServer postgres;
  private static SeparateJvmKafka kafka;

  enum Form {
    /** The connect-plugin zip, unpacked into a directory on plugin.path. */
    ARCHIVE("hybrid_warn"),
    /** The single connector-<version>-all.jar in a directory on plugin.path. */
    JAR("service_load");

    final String discovery;

    Form(String discovery) {
      this.discovery = discovery;
    }
  }

  static Stream<Object[]> deployments() {
    String which = System.getProperty("relaybus.compat", "ci").strip();
    if ("ci".equals(which)) {
      return Stream.of(
          new Object[] {SUPPORTED.get(0), Form.ARCHIVE},
          new Object[] {SUPPORTED.get(SUPPORTED.size() - 1), Form.JAR});
    }
    List<String> versions =
        "all".equals(which)
            ? SUPPORTED
            : Arrays.stream(which.split(",")).map(String::strip).toList();
    return versions.stream()
        .flatMap(v -> Stream.of(new Object[] {v, Form.ARCHIVE}, new Object[] {v, Form.JAR}));
  }

  @AfterAll
  static void stop() throws Exception {
    if (!RESULTS.isEmpty()) {
      String table =
          "| Connect | form | discovery | events | pairs | lost | unexpected | duplicates"
              + " | order violations | rows left | seconds |\n"
              + "|---|---|---|---|---|---|---|---|---|---|---|\n"
              + String.join("\n", RESULTS)
              + "\n";
      System.out.println(table);
      Files.writeString(
          Path.of("target", "compat-results.md"),
          table,
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    }
  }

  /** The README and the archive's manifest claim exactly the versions run here, and Java 17. */
  @Test
  void readmeAndManifestClaimTheTestedVersions() throws Exception {
    String readme =
        Files.readString(Path.of(System.getProperty("relaybus.readme", "../README.md")));
    Path archive = pluginLocation(Form.ARCHIVE, SeparateJvmKafka.pluginPath());
    JsonNode manifest = JSON.readTree(archive.resolve("manifest.json").toFile());
    String requirements = manifest.path("requirements").toString();
    int from = readme.indexOf("**Supported Kafka Connect versions**");
    assertThat(from).as("README section").isNotNegative();
    String section = readme.substring(from, readme.indexOf("The plugin comes in two forms", from));
    assertThat(section).contains("**Java 17**");
    for (String version : SUPPORTED) {
      assertThat(section).as("README supported versions").contains(version);
      assertThat(requirements).as("manifest.json requirements").contains(version);
    }
    assertThat(requirements).contains("Java 17");
  }

  @ParameterizedTest(name = "Kafka Connect {0}, {1}")
  @MethodSource("deployments")
  void pluginDeliversExactlyInAWorkerOfThisVersion(String version, Form form) throws Exception {
    long started = System.nanoTime();
    String tag = "compat-" + version.replace(".", "") + "-" + form.name().toLowerCase();
    String prefix = tag.replace('-', '_') + "_";

    String classpath = ConnectWorkerClasspath.of(version);
    assertThat(classpath.split(File.pathSeparator))
        .anyMatch(entry -> entry.endsWith("connect-runtime-" + version + ".jar"))
        .noneMatch(entry -> entry.matches(".*connect-runtime-(?!" + version + ").*"))
        .noneMatch(
            entry -> entry.matches(".*(relaybus|outbox-store|postgresql|HikariCP|mongodb).*"));

    Path pluginPath = pluginPath(form);
    Path location = pluginLocation(form, pluginPath);
    Map<String, String> worker = new LinkedHashMap<>();
    worker.put("plugin.path", pluginPath.toString());
    worker.put("plugin.discovery", form.discovery);
    worker.put("group.id", tag);
    worker.put("config.storage.topic", tag + "-configs");
    worker.put("offset.storage.topic", tag + "-offsets");
    worker.put("status.storage.topic", tag + "-status");
    worker.put("offset.flush.interval.ms", "1000");
    ChildJvm process =
        kafka.startWorker(
            "worker-" + tag,
            classpath,
            List.of(
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
                "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common=warn",
                "-Dorg.slf4j.simpleLogger.log.org.eclipse.jetty=warn",
                "-Dorg.slf4j.simpleLogger.log.org.reflections=warn"),
            worker);

    // The worker is of the version claimed, and it took the connector from plugin.path.
    assertThat(JSON.readTree(kafka.get("").body()).path("version").asText()).isEqualTo(version);
    JsonNode plugins = JSON.readTree(kafka.get("connector-plugins").body());
    assertThat(plugins.findValuesAsText("class")).contains(CONNECTOR_CLASS);
    assertThat(process.output())
        .contains("Loading plugin from: " + location)
        .contains("Added plugin '" + CONNECTOR_CLASS + "'");

    try (PostgresOutboxStore store = postgres.store(prefix);
        RecordCollector collector =
            new RecordCollector(kafka.consumer("read_uncommitted"), FaultSuite.topics(tag))) {
      Map<String, String> overrides = new LinkedHashMap<>();
      overrides.put("tasks.max", Integer.toString(TASKS));
      overrides.put("batch.size", Integer.toString(BATCH));
      overrides.put("completion.flush.size", Integer.toString(FLUSH));
      overrides.put("topic.template", "${handler}-" + tag);
      HttpResponse<String> deployed =
          kafka.put(
              "connectors/" + tag + "/config",
              DeployedConfig.toJson(DeployedConfig.connector(postgres, prefix, overrides)));
      assertThat(deployed.statusCode()).as(deployed.body()).isEqualTo(201);
      kafka.awaitTasksRunning(tag, TASKS);

      List<OutboxEvent> events;
      try (FaultWorkload workload =
          FaultWorkload.start(
              store, postgres.dataSource(), tag, prefix, 3, 20, Duration.ofMillis(30))) {
        await()
            .atMost(SeparateJvmKafka.TIMEOUT)
            .until(() -> collector.drain(Duration.ZERO).size() >= 200);

        // A task restart mid-stream, as an operator does it.
        int committedAtRestart = workload.committedSoFar().size();
        HttpResponse<String> restarted = kafka.post("connectors/" + tag + "/tasks/0/restart");
        assertThat(restarted.statusCode()).as(restarted.body()).isBetween(200, 204);
        kafka.awaitTasksRunning(tag, TASKS);
        await()
            .atMost(SeparateJvmKafka.TIMEOUT)
            .until(
                () ->
                    workload.committedSoFar().size() >= Math.max(EVENTS, committedAtRestart + 150));
        events = workload.stop();
      }

      collector.awaitAll(Publishers.pairs(events), SeparateJvmKafka.TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));
      try {
        await()
            .atMost(Duration.ofSeconds(60))
            .until(() -> Verifier.rows(postgres.dataSource(), prefix)[0] == 0);
      } catch (ConditionTimeoutException e) {
        // reported below as rows left, with the rows
      }
      long[] rows = Verifier.rows(postgres.dataSource(), prefix);
      Verifier.Report report =
          Verifier.verify(tag, events, received, rows[0], rows[1])
              .withRecovery((System.nanoTime() - started) / 1e9);
      RESULTS.add(
          "| %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %.0f |"
              .formatted(
                  version,
                  form == Form.JAR ? "single JAR" : "archive",
                  form.discovery,
                  events.size(),
                  report.published(),
                  report.lost(),
                  report.unexpected(),
                  report.duplicates(),
                  report.orderViolations(),
                  report.rowsLeft(),
                  report.recoverySeconds()));

      assertThat(events).hasSizeGreaterThanOrEqualTo(EVENTS);
      assertThat(report.clean())
          .as(
              "%s%nrows left: %s",
              report, Verifier.rowsLeft(postgres.dataSource(), prefix).toString())
          .isTrue();
      assertThat(report.dead()).isZero();
      // At least once: only what the restarted task had sent but not yet deleted may come twice.
      assertThat(report.duplicates()).isLessThanOrEqualTo(4 * BATCH + FLUSH);
      // The restarted task stopped through the connector's own stop() (its log reached the
      // worker's SLF4J binding from inside the plugin's class loader).
      assertThat(process.output()).contains("lanes relinquished");

      HttpResponse<String> deleted = kafka.delete("connectors/" + tag);
      assertThat(deleted.statusCode()).as(deleted.body()).isBetween(200, 204);
    }
    if (form == Form.JAR) {
      mongoDbDeliversFromTheSameJar(tag);
    }
  }

  /**
   * {@code store.kind=mongodb} from the single JAR, where the MongoDB driver is not relocated: it
   * loads under plugin isolation, connects (to mongo-java-server in this JVM) and delivers; every
   * delivery document is deleted afterwards.
   */
  private static void mongoDbDeliversFromTheSameJar(String tag) throws Exception {
    String connector = tag + "-mongo";
    String prefix = tag.replace('-', '_') + "_mongo_";
    MongoServer server = new MongoServer(new MemoryBackend());
    String uri = "mongodb://127.0.0.1:" + server.bind().getPort();
    try (MongoClient client = MongoClients.create(uri);
        MongoOutboxStore store =
            MongoOutboxStore.builder()
                .client(client)
                .database("relaybus")
                .collectionPrefix(prefix)
                .build();
        RecordCollector collector =
            new RecordCollector(kafka.consumer("read_uncommitted"), FaultSuite.topics(connector))) {
      store.setup();
      Map<String, String> config =
          new LinkedHashMap<>(DeployedConfig.json("mongodb-outbox-source.json"));
      config.put("mongodb.uri", uri);
      config.put("mongodb.database", "relaybus");
      config.put("outbox.table.prefix", prefix);
      config.put("tasks.max", "1");
      config.put("topic.template", "${handler}-" + connector);
      config.put("topic.creation.default.partitions", "3");
      config.put("topic.creation.default.replication.factor", "1");
      kafka.createConnector(connector, config, 1);

      List<OutboxEvent> events = new ArrayList<>();
      for (int i = 0; i < 60; i++) {
        events.add(
            OutboxEvent.builder("order.changed")
                .id(connector + "-" + i)
                .key("order-" + (i % 7))
                .json("{\"n\":" + i + "}")
                .handlers("billing", "shipping")
                .build());
      }
      store.publishAll(events);
      collector.awaitAll(Publishers.pairs(events), SeparateJvmKafka.TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(received).hasSize(120);
      assertThat(collector.pairs()).isEqualTo(Publishers.pairs(events));
      RecordCollector.assertPerKeyOrder(received);
      await().atMost(Duration.ofSeconds(60)).until(() -> store.statistics().totalPending() == 0);
      assertThat(store.statistics().totalDead()).isZero();
      assertThat(
              client.getDatabase("relaybus").getCollection(prefix + "deliveries").countDocuments())
          .isZero();
      HttpResponse<String> deleted = kafka.delete("connectors/" + connector);
      assertThat(deleted.statusCode()).as(deleted.body()).isBetween(200, 204);
    } finally {
      server.shutdownNow();
    }
  }

  static Path pluginPath(Form form) {
    return form == Form.JAR
        ? Path.of(System.getProperty("relaybus.plugin.jar.path")).toAbsolutePath()
        : SeparateJvmKafka.pluginPath();
  }

  /** The one plugin in {@code pluginPath}: the unpacked archive's directory, or the JAR. */
  static Path pluginLocation(Form form, Path pluginPath) throws IOException {
    try (Stream<Path> entries = Files.list(pluginPath)) {
      List<Path> all = entries.toList();
      assertThat(all).as("plugin.path %s", pluginPath).hasSize(1);
      Path location = all.get(0);
      if (form == Form.JAR) {
        assertThat(location.getFileName().toString()).endsWith("-all.jar");
      } else {
        assertThat(location.resolve("manifest.json")).exists();
      }
      return location;
    }
  }
}
