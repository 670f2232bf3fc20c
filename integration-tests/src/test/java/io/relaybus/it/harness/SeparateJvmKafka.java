package io.relaybus.it.harness;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Kafka as a user runs it: a KRaft broker and a distributed Connect worker, each a JVM of its own
 * started from the Maven-fetched Kafka jars listed in target/kafka-classpath.txt (no relaybus
 * class, no JDBC driver among them), the packaged plugin reaching the worker only through {@code
 * plugin.path}. The worker is configured from config/connect-distributed.properties with what the
 * README tells users to set (bootstrap.servers, plugin.path) plus a REST port.
 */
public final class SeparateJvmKafka implements AutoCloseable, Servers.Logs {
  private static final ObjectMapper JSON = new ObjectMapper();
  public static final Duration TIMEOUT = Duration.ofSeconds(120);

  private final Path dir;
  private final String classpath;
  private final String bootstrap;
  private String rest;
  private final HttpClient http = HttpClient.newHttpClient();
  private final JvmProcess broker;
  private JvmProcess worker;
  private int workers;

  private SeparateJvmKafka(Path dir, String classpath, Map<String, String> workerOverrides)
      throws Exception {
    this(dir, classpath, null, workerOverrides);
  }

  /** With {@code externalBootstrap} null, starts a broker JVM; else the worker uses that broker. */
  private SeparateJvmKafka(
      Path dir, String classpath, String externalBootstrap, Map<String, String> workerOverrides)
      throws Exception {
    this.dir = dir;
    this.classpath = classpath;
    if (externalBootstrap == null) {
      int brokerPort = JvmProcess.freePort();
      int controllerPort = JvmProcess.freePort();
      this.bootstrap = "127.0.0.1:" + brokerPort;
      formatKraftBroker(dir, classpath, bootstrap, controllerPort);
      broker =
          JvmProcess.start("broker", dir, classpath, "512m", "kafka.Kafka", "server.properties");
    } else {
      this.bootstrap = externalBootstrap;
      broker = null;
    }
    try (Admin admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
      await()
          .atMost(TIMEOUT)
          .ignoreExceptions()
          .until(() -> admin.describeCluster().nodes().get().size() == 1);
    }

    int restPort = JvmProcess.freePort();
    rest = "http://127.0.0.1:" + restPort + "/";
    Properties worker = new Properties();
    worker.putAll(DeployedConfig.properties("connect-distributed.properties"));
    worker.put("bootstrap.servers", bootstrap);
    worker.put("plugin.path", pluginPath().toString());
    worker.put("listeners", "http://127.0.0.1:" + restPort);
    worker.putAll(workerOverrides);
    store(worker, dir.resolve("worker.properties"));
  }

  /** Starts a broker in {@code target/<name>}; call {@link #startWorker()} next. */
  public static SeparateJvmKafka start(String name, Map<String, String> workerOverrides)
      throws Exception {
    Path dir = Path.of("target", name).toAbsolutePath();
    deleteRecursively(dir);
    Files.createDirectories(dir);
    return new SeparateJvmKafka(dir, classpath(), workerOverrides);
  }

  /**
   * A worker (after {@link #startWorker()}) against a broker that runs elsewhere, e.g. a
   * Testcontainers Kafka; no broker JVM is started.
   */
  public static SeparateJvmKafka against(
      String name, String bootstrapServers, Map<String, String> workerOverrides) throws Exception {
    Path dir = Path.of("target", name).toAbsolutePath();
    deleteRecursively(dir);
    Files.createDirectories(dir);
    return new SeparateJvmKafka(dir, classpath(), bootstrapServers, workerOverrides);
  }

  public static String classpath() throws IOException {
    return Files.readString(Path.of(System.getProperty("relaybus.kafka.classpath"))).strip();
  }

  public static Path pluginPath() {
    return Path.of(System.getProperty("relaybus.plugin.path")).toAbsolutePath();
  }

  /** Starts a (new) worker JVM and waits for its REST API. */
  public JvmProcess startWorker() {
    return startWorker(List.of());
  }

  /** As above, with JVM options (e.g. a {@code -javaagent:}) as a user puts in KAFKA_OPTS. */
  public JvmProcess startWorker(List<String> jvmOptions) {
    worker =
        JvmProcess.start(
            "worker-" + ++workers,
            dir,
            classpath,
            "768m",
            jvmOptions,
            "org.apache.kafka.connect.cli.ConnectDistributed",
            "worker.properties");
    awaitRest();
    return worker;
  }

  /**
   * Stops the running worker, if any, and starts {@code name} in its place with another classpath
   * (e.g. a Connect worker of another Kafka version) on a REST port of its own, configured with
   * worker.properties plus {@code overrides} (plugin.path, group, internal topics, ...).
   */
  public JvmProcess startWorker(
      String name, String workerClasspath, List<String> jvmOptions, Map<String, String> overrides)
      throws IOException, InterruptedException {
    if (worker != null) {
      worker.close();
    }
    Properties props = new Properties();
    try (InputStream in = Files.newInputStream(dir.resolve("worker.properties"))) {
      props.load(in);
    }
    int restPort = JvmProcess.freePort();
    props.put("listeners", "http://127.0.0.1:" + restPort);
    props.putAll(overrides);
    store(props, dir.resolve(name + ".properties"));
    rest = "http://127.0.0.1:" + restPort + "/";
    worker =
        JvmProcess.start(
            name,
            dir,
            workerClasspath,
            "768m",
            jvmOptions,
            "org.apache.kafka.connect.cli.ConnectDistributed",
            name + ".properties");
    awaitRest();
    return worker;
  }

  private void awaitRest() {
    await()
        .atMost(TIMEOUT)
        .ignoreExceptions()
        .until(() -> get("connector-plugins").statusCode() == 200);
  }

  /** SIGKILL of the running worker, as a crashed machine. */
  public void killWorker() throws InterruptedException {
    worker.kill();
  }

  public JvmProcess worker() {
    return worker;
  }

  public String bootstrapServers() {
    return bootstrap;
  }

  public void awaitTasksRunning(String connector, int tasks) {
    awaitStatus(connector, "RUNNING", tasks);
  }

  /**
   * Creates the connector through REST (the test fails with Connect's answer unless it is 201
   * Created) and waits until its tasks run.
   */
  public void createConnector(String connector, Map<String, String> config, int tasks)
      throws IOException, InterruptedException {
    HttpResponse<String> created =
        put("connectors/" + connector + "/config", DeployedConfig.toJson(config));
    assertThat(created.statusCode()).as(created.body()).isEqualTo(201);
    awaitTasksRunning(connector, tasks);
  }

  public KafkaConsumer<String, byte[]> consumer(String isolationLevel) {
    Map<String, Object> props = new HashMap<>();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "it-" + Uuid.randomUuid());
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolationLevel);
    // The connector creates the topics: notice them soon after.
    props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "500");
    return new KafkaConsumer<>(props, new StringDeserializer(), new ByteArrayDeserializer());
  }

  public HttpResponse<String> get(String path) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(rest + path)).timeout(Duration.ofSeconds(30)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  public HttpResponse<String> put(String path, String json)
      throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(rest + path))
            .timeout(Duration.ofSeconds(60))
            .header("Content-Type", "application/json")
            .PUT(HttpRequest.BodyPublishers.ofString(json))
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  public HttpResponse<String> post(String path) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(rest + path))
            .timeout(Duration.ofSeconds(60))
            .POST(HttpRequest.BodyPublishers.noBody())
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  public HttpResponse<String> delete(String path) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(rest + path))
            .timeout(Duration.ofSeconds(60))
            .DELETE()
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /** Waits until the connector and all its tasks report {@code state} (RUNNING, PAUSED). */
  public void awaitState(String connector, String state) {
    awaitStatus(connector, state, -1);
  }

  /** The connector and its tasks ({@code tasks} of them; -1: any number but 0) in {@code state}. */
  private void awaitStatus(String connector, String state, int tasks) {
    await()
        .atMost(TIMEOUT)
        .ignoreExceptions()
        .until(
            () -> {
              JsonNode status = JSON.readTree(get("connectors/" + connector + "/status").body());
              int count = status.path("tasks").size();
              return state.equals(status.path("connector").path("state").asText())
                  && (tasks < 0 ? count > 0 : count == tasks)
                  && status.path("tasks").findValuesAsText("state").stream()
                      .allMatch(state::equals);
            });
  }

  /** {@code target/<name>}: the broker's and workers' logs, configs and data. */
  @Override
  public Path logDirectory() {
    return dir;
  }

  @Override
  public void close() throws InterruptedException {
    if (worker != null) {
      worker.close();
    }
    if (broker != null) {
      broker.close();
    }
  }

  /**
   * Writes {@code server.properties} of a single-node KRaft broker (broker and controller) for
   * one-replica test topics and formats its log directory; shared by every fixture that runs the
   * broker in a JVM of its own.
   */
  public static void formatKraftBroker(
      Path dir, String classpath, String bootstrap, int controllerPort) throws Exception {
    Properties server = new Properties();
    server.put("process.roles", "broker,controller");
    server.put("node.id", "1");
    server.put("controller.quorum.voters", "1@127.0.0.1:" + controllerPort);
    server.put(
        "listeners", "PLAINTEXT://" + bootstrap + ",CONTROLLER://127.0.0.1:" + controllerPort);
    server.put("advertised.listeners", "PLAINTEXT://" + bootstrap);
    server.put("controller.listener.names", "CONTROLLER");
    server.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
    server.put("inter.broker.listener.name", "PLAINTEXT");
    server.put("log.dirs", dir.resolve("kraft").toString());
    server.put("offsets.topic.replication.factor", "1");
    server.put("transaction.state.log.replication.factor", "1");
    server.put("transaction.state.log.min.isr", "1");
    server.put("share.coordinator.state.topic.replication.factor", "1");
    server.put("share.coordinator.state.topic.min.isr", "1");
    server.put("group.initial.rebalance.delay.ms", "0");
    server.put("num.partitions", "3");
    server.put("auto.create.topics.enable", "false");
    store(server, dir.resolve("server.properties"));
    JvmProcess.run(
        "kafka-storage-format",
        dir,
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "-t",
        Uuid.randomUuid().toString(),
        "-c",
        "server.properties");
  }

  /** Writes {@code properties} to {@code file}, as a worker or broker reads them. */
  public static void store(Properties properties, Path file) throws IOException {
    try (OutputStream out = Files.newOutputStream(file)) {
      properties.store(out, null);
    }
  }

  /** Deletes {@code dir} and everything below it; nothing when it does not exist. */
  public static void deleteRecursively(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(dir)) {
      for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
        Files.delete(p);
      }
    }
  }
}
