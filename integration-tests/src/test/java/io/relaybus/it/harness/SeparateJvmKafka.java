package io.relaybus.it.harness;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.quickstart.ChildJvm;
import io.relaybus.quickstart.LocalKafka;
import io.relaybus.quickstart.Ports;
import java.io.IOException;
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
 * Kafka as a user runs it, as the quickstart runs it ({@link LocalKafka}): a KRaft broker and a
 * distributed Connect worker, each a JVM of its own started from the Maven-fetched Kafka jars
 * listed in target/kafka-classpath.txt (no relaybus class, no JDBC driver among them), the packaged
 * plugin reaching the worker only through {@code plugin.path}. The worker is configured from
 * config/connect-distributed.properties with what the README tells users to set (bootstrap.servers,
 * plugin.path) plus a REST port. Beyond the quickstart: worker overrides, a worker restarted or
 * killed, a worker of another classpath, and REST and consumer helpers.
 */
public final class SeparateJvmKafka implements AutoCloseable, Servers.Logs {
  private static final ObjectMapper JSON = new ObjectMapper();
  public static final Duration TIMEOUT = LocalKafka.START_TIMEOUT;

  private final Path dir;
  private final LocalKafka kafka;
  private final Properties workerConfig;
  private String rest;
  private final HttpClient http = HttpClient.newHttpClient();
  private int workers;

  private SeparateJvmKafka(Path dir, LocalKafka kafka, Map<String, String> workerOverrides)
      throws Exception {
    this.dir = dir;
    this.kafka = kafka;
    int restPort = Ports.free();
    rest = "http://127.0.0.1:" + restPort + "/";
    workerConfig =
        kafka.workerConfig(
            DeployedConfig.configDir().resolve("connect-distributed.properties"),
            pluginPath(),
            restPort);
    workerConfig.putAll(workerOverrides);
  }

  /** Starts a broker in {@code target/<name>}; call {@link #startWorker()} next. */
  public static SeparateJvmKafka start(String name, Map<String, String> workerOverrides)
      throws Exception {
    Path dir = emptyDirectory(name);
    LocalKafka kafka = new LocalKafka(ChildJvm.in(dir, classpath()), Ports.free());
    try {
      kafka.startBroker();
    } catch (Exception e) {
      kafka.close();
      throw e;
    }
    return new SeparateJvmKafka(dir, kafka, workerOverrides);
  }

  /**
   * A worker (after {@link #startWorker()}) against a broker that runs elsewhere, e.g. a
   * Testcontainers Kafka; no broker JVM is started.
   */
  public static SeparateJvmKafka against(
      String name, String bootstrapServers, Map<String, String> workerOverrides) throws Exception {
    Path dir = emptyDirectory(name);
    LocalKafka kafka = LocalKafka.against(ChildJvm.in(dir, classpath()), bootstrapServers);
    try (Admin admin =
        Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers))) {
      await()
          .atMost(TIMEOUT)
          .ignoreExceptions()
          .until(() -> admin.describeCluster().nodes().get().size() == 1);
    }
    return new SeparateJvmKafka(dir, kafka, workerOverrides);
  }

  private static Path emptyDirectory(String name) throws IOException {
    Path dir = Path.of("target", name).toAbsolutePath();
    deleteRecursively(dir);
    Files.createDirectories(dir);
    return dir;
  }

  public static String classpath() throws IOException {
    return Files.readString(Path.of(System.getProperty("relaybus.kafka.classpath"))).strip();
  }

  public static Path pluginPath() {
    return Path.of(System.getProperty("relaybus.plugin.path")).toAbsolutePath();
  }

  /** Starts a (new) worker JVM and waits for its REST API. */
  public ChildJvm startWorker() throws Exception {
    return startWorker(List.of());
  }

  /** As above, with JVM options (e.g. a {@code -javaagent:}) as a user puts in KAFKA_OPTS. */
  public ChildJvm startWorker(List<String> jvmOptions) throws Exception {
    return kafka.startWorker(
        kafka.jvms().withOptions(jvmOptions), "worker-" + ++workers, workerConfig, this::restUp);
  }

  /**
   * Stops the running worker, if any, and starts {@code name} in its place with another classpath
   * (e.g. a Connect worker of another Kafka version) on a REST port of its own, configured as the
   * first worker plus {@code overrides} (plugin.path, group, internal topics, ...).
   */
  public ChildJvm startWorker(
      String name, String workerClasspath, List<String> jvmOptions, Map<String, String> overrides)
      throws Exception {
    if (kafka.worker() != null) {
      kafka.worker().close();
    }
    Properties props = new Properties();
    props.putAll(workerConfig);
    int restPort = Ports.free();
    props.put("listeners", "http://127.0.0.1:" + restPort);
    props.putAll(overrides);
    rest = "http://127.0.0.1:" + restPort + "/";
    return kafka.startWorker(
        kafka.jvms().withClasspath(workerClasspath).withOptions(jvmOptions),
        name,
        props,
        this::restUp);
  }

  private boolean restUp() throws IOException, InterruptedException {
    return get("connector-plugins").statusCode() == 200;
  }

  /** SIGKILL of the running worker, as a crashed machine. */
  public void killWorker() {
    kafka.worker().kill();
  }

  public ChildJvm worker() {
    return kafka.worker();
  }

  /** The broker's JVM; null when the broker is not this harness's (started against another). */
  public ChildJvm broker() {
    return kafka.broker();
  }

  public String bootstrapServers() {
    return kafka.bootstrapServers();
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
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers());
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
  public void close() {
    kafka.close();
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
