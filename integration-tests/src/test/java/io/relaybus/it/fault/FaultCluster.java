package io.relaybus.it.fault;

import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.SeparateJvmKafka;
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
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The processes a user runs, for fault injection: one KRaft broker and several distributed Connect
 * workers of one group, each a JVM of its own started from the Maven-fetched Kafka jars, the
 * packaged plugin reaching the workers only through {@code plugin.path} (the quickstart's {@link
 * LocalKafka}, as {@link SeparateJvmKafka}, which runs one worker at a time). Unlike it, this one
 * restarts the broker on the same ports and log directory, runs workers side by side (each with its
 * REST port), and stops, kills, freezes (SIGSTOP) and resumes (SIGCONT) each worker.
 */
final class FaultCluster implements AutoCloseable {
  private static final ObjectMapper JSON = new ObjectMapper();
  static final Duration TIMEOUT = Duration.ofSeconds(180);

  /** A worker JVM and its REST address. */
  record Worker(ChildJvm process, int port) {
    String url() {
      return url(port);
    }

    static String url(int port) {
      return "http://127.0.0.1:" + port + "/";
    }

    /** The worker id Connect reports in a connector's status. */
    String id() {
      return "127.0.0.1:" + port;
    }
  }

  private final LocalKafka kafka;
  private final Map<String, String> workerOverrides;
  private final HttpClient http = HttpClient.newHttpClient();
  private final List<Worker> workers = new ArrayList<>(); // started and answering REST
  private final List<ChildJvm> processes = new ArrayList<>(); // every worker JVM started
  private final java.util.Set<Worker> frozen = java.util.concurrent.ConcurrentHashMap.newKeySet();
  private int started;

  private FaultCluster(LocalKafka kafka, Map<String, String> workerOverrides) {
    this.kafka = kafka;
    this.workerOverrides = Map.copyOf(workerOverrides);
  }

  /** A broker in {@code target/<name>}; start workers with {@link #startWorker()}. */
  static FaultCluster start(String name, Map<String, String> workerOverrides) throws Exception {
    Path dir = Path.of("target", name).toAbsolutePath();
    SeparateJvmKafka.deleteRecursively(dir);
    Files.createDirectories(dir);
    FaultCluster cluster =
        new FaultCluster(
            new LocalKafka(ChildJvm.in(dir, SeparateJvmKafka.classpath()), Ports.free())
                .startTimeout(TIMEOUT),
            workerOverrides);
    try {
      cluster.startBroker();
    } catch (Exception e) {
      cluster.close();
      throw e;
    }
    return cluster;
  }

  /** Starts the broker (again: same ports, same log directory) and waits until it answers. */
  void startBroker() throws Exception {
    kafka.startBroker();
  }

  /**
   * SIGTERM to the broker, waiting for its controlled shutdown (SIGKILL after 30 s); returns its
   * exit code (143 after a clean shutdown, 137 when it had to be killed).
   */
  int stopBroker() throws InterruptedException {
    return kafka.stopBroker();
  }

  /** Starts one more worker JVM of the group and waits for its REST API. */
  Worker startWorker() throws Exception {
    return startWorker(Map.of());
  }

  /**
   * Starts one more worker JVM of the group with these system properties (e.g. the connector's
   * test-only {@code relaybus.test.crash}) and waits for its REST API.
   */
  Worker startWorker(Map<String, String> systemProperties) throws Exception {
    int port = Ports.free();
    Properties props =
        kafka.workerConfig(
            DeployedConfig.configDir().resolve("connect-distributed.properties"),
            SeparateJvmKafka.pluginPath(),
            port);
    props.putAll(workerOverrides);
    ChildJvm process =
        kafka.startWorker(
            kafka
                .jvms()
                .withOptions(
                    systemProperties.entrySet().stream()
                        .map(e -> "-D" + e.getKey() + "=" + e.getValue())
                        .toList()),
            "worker-" + ++started,
            props,
            () -> get(Worker.url(port), "connector-plugins").statusCode() == 200);
    Worker worker = new Worker(process, port);
    processes.add(process);
    workers.add(worker);
    return worker;
  }

  List<Worker> workers() {
    return List.copyOf(workers);
  }

  /** SIGKILL: no shutdown hook, no graceful stop, like a crashed machine. */
  void kill(Worker worker) {
    worker.process().kill();
    workers.remove(worker);
  }

  /**
   * Waits until the worker's JVM ended by itself (a test crash point halted it); then it is gone
   * from the group's live workers.
   */
  void awaitCrash(Worker worker, Duration timeout) throws InterruptedException {
    if (!worker.process().awaitExit(timeout)) {
      throw new AssertionError(worker.process() + " did not crash within " + timeout);
    }
    workers.remove(worker);
  }

  /** SIGTERM: Connect stops its tasks gracefully (they hand their lanes back). */
  void stop(Worker worker) {
    worker.process().close();
    workers.remove(worker);
  }

  /** SIGSTOP: the JVM freezes, sockets stay open, leases and group membership lapse. */
  void freeze(Worker worker) throws IOException, InterruptedException {
    signal(worker, "STOP");
    frozen.add(worker);
  }

  /** SIGCONT: the frozen JVM runs on, unaware it was away. */
  void resume(Worker worker) throws IOException, InterruptedException {
    signal(worker, "CONT");
    frozen.remove(worker);
  }

  private static void signal(Worker worker, String signal)
      throws IOException, InterruptedException {
    Process kill =
        new ProcessBuilder("kill", "-" + signal, Long.toString(worker.process().pid()))
            .inheritIO()
            .start();
    if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
      throw new IllegalStateException("kill -" + signal + " " + worker.process() + " failed");
    }
  }

  String bootstrapServers() {
    return kafka.bootstrapServers();
  }

  /** The connector's status from any live worker. */
  JsonNode status(String connector) throws IOException, InterruptedException {
    return JSON.readTree(get(anyWorker().url(), "connectors/" + connector + "/status").body());
  }

  /**
   * Waits until the connector and exactly {@code tasks} tasks run, all on live workers that are not
   * frozen.
   */
  void awaitTasksRunning(String connector, int tasks) {
    await()
        .atMost(TIMEOUT)
        .pollInterval(Duration.ofMillis(500))
        .ignoreExceptions()
        .until(
            () -> {
              JsonNode status = status(connector);
              List<String> live =
                  workers.stream().filter(w -> !frozen.contains(w)).map(Worker::id).toList();
              return "RUNNING".equals(status.path("connector").path("state").asText())
                  && status.path("tasks").size() == tasks
                  && status.path("tasks").findValuesAsText("state").stream()
                      .allMatch("RUNNING"::equals)
                  && live.containsAll(status.path("tasks").findValuesAsText("worker_id"));
            });
  }

  /**
   * As {@link #awaitTasksRunning}, but restarts every FAILED task through the REST API, as an
   * operator would (POST .../tasks/N/restart); returns how many restarts that took.
   */
  int awaitTasksRunningRestartingFailed(String connector, int tasks) {
    int[] restarts = new int[1];
    await()
        .atMost(TIMEOUT)
        .pollInterval(Duration.ofMillis(500))
        .ignoreExceptions()
        .until(
            () -> {
              for (JsonNode t : status(connector).path("tasks")) {
                if ("FAILED".equals(t.path("state").asText())) {
                  HttpResponse<String> restarted =
                      post(
                          "connectors/"
                              + connector
                              + "/tasks/"
                              + t.path("id").asInt()
                              + "/restart");
                  if (restarted.statusCode() / 100 == 2) {
                    restarts[0]++;
                    System.out.printf(
                        "[fault-suite] restarted FAILED task %s-%d: %s%n",
                        connector,
                        t.path("id").asInt(),
                        t.path("trace").asText().lines().findFirst().orElse(""));
                  }
                }
              }
              return tasksRunning(connector, tasks);
            });
    return restarts[0];
  }

  private boolean tasksRunning(String connector, int tasks)
      throws IOException, InterruptedException {
    JsonNode status = status(connector);
    List<String> live = workers.stream().filter(w -> !frozen.contains(w)).map(Worker::id).toList();
    return "RUNNING".equals(status.path("connector").path("state").asText())
        && status.path("tasks").size() == tasks
        && status.path("tasks").findValuesAsText("state").stream().allMatch("RUNNING"::equals)
        && live.containsAll(status.path("tasks").findValuesAsText("worker_id"));
  }

  HttpResponse<String> post(String path) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(anyWorker().url() + path))
            .timeout(Duration.ofSeconds(60))
            .POST(HttpRequest.BodyPublishers.noBody())
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /** The worker a task of the connector runs on. */
  Worker workerOf(String connector, int task) throws IOException, InterruptedException {
    for (JsonNode t : status(connector).path("tasks")) {
      if (t.path("id").asInt() == task) {
        String id = t.path("worker_id").asText();
        return workers.stream().filter(w -> w.id().equals(id)).findFirst().orElseThrow();
      }
    }
    throw new IllegalStateException("no task " + task + " of " + connector);
  }

  KafkaConsumer<String, byte[]> consumer() {
    return consumer("read_uncommitted");
  }

  KafkaConsumer<String, byte[]> consumer(String isolationLevel) {
    Map<String, Object> props = new HashMap<>();
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolationLevel);
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers());
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "it-" + Uuid.randomUuid());
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "500");
    return new KafkaConsumer<>(props, new StringDeserializer(), new ByteArrayDeserializer());
  }

  HttpResponse<String> put(String path, String json) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(anyWorker().url() + path))
            .timeout(Duration.ofSeconds(60))
            .header("Content-Type", "application/json")
            .PUT(HttpRequest.BodyPublishers.ofString(json))
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  HttpResponse<String> delete(String path) throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(anyWorker().url() + path))
            .timeout(Duration.ofSeconds(60))
            .DELETE()
            .build(),
        HttpResponse.BodyHandlers.ofString());
  }

  private HttpResponse<String> get(String url, String path)
      throws IOException, InterruptedException {
    return http.send(
        HttpRequest.newBuilder(URI.create(url + path)).timeout(Duration.ofSeconds(30)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  private Worker anyWorker() {
    return workers.stream()
        .filter(w -> w.process().isAlive() && !frozen.contains(w))
        .reduce((a, b) -> b)
        .orElseThrow(() -> new IllegalStateException("no live worker"));
  }

  /**
   * Kills every worker JVM this cluster started (resuming frozen ones first), then the broker, so
   * that no worker hands its lanes back on the way out.
   */
  @Override
  public void close() {
    boolean interrupted = false;
    for (Worker worker : List.copyOf(frozen)) {
      try {
        resume(worker);
      } catch (IOException | RuntimeException e) {
        // already gone
      } catch (InterruptedException e) {
        interrupted = true; // SIGKILL below ends it all the same, frozen or not
      }
    }
    for (ChildJvm process : processes) {
      process.kill();
    }
    workers.clear();
    if (kafka.broker() != null) {
      kafka.broker().kill();
    }
    kafka.close(); // a worker that did not come up
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }
}
