package io.relaybus.quickstart;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.common.Uuid;

/**
 * Kafka as a user runs it: a KRaft broker and distributed Connect workers, each a JVM of its own
 * started from Kafka's jars only (the {@link ChildJvm.Launcher}'s classpath), so a worker loads the
 * connector from {@code plugin.path} under Connect's plugin isolation, as in production. A worker
 * is configured from config/connect-distributed.properties with what the README tells users to set
 * (bootstrap.servers, plugin.path) and a REST listener ({@link #workerConfig}). Both listen on
 * loopback only. Used by the quickstart and by the integration tests' harness (integration-tests'
 * {@code SeparateJvmKafka} and {@code FaultCluster}).
 */
public final class LocalKafka implements AutoCloseable {
  public static final Duration START_TIMEOUT = Duration.ofSeconds(120);
  private static final String CONNECT_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed";

  private final ChildJvm.Launcher jvms;
  private final int kafkaPort; // 0: the broker runs elsewhere
  private final String bootstrap;
  private Duration startTimeout = START_TIMEOUT;
  private boolean formatted;
  private ChildJvm broker;
  private ChildJvm worker;

  /** A broker to start on {@code kafkaPort} of loopback ({@link #startBroker}). */
  public LocalKafka(ChildJvm.Launcher jvms, int kafkaPort) {
    this(jvms, kafkaPort, "127.0.0.1:" + kafkaPort);
  }

  private LocalKafka(ChildJvm.Launcher jvms, int kafkaPort, String bootstrap) {
    this.jvms = jvms;
    this.kafkaPort = kafkaPort;
    this.bootstrap = bootstrap;
  }

  /** Workers only, against a broker that runs elsewhere (e.g. a Testcontainers Kafka). */
  public static LocalKafka against(ChildJvm.Launcher jvms, String bootstrapServers) {
    return new LocalKafka(jvms, 0, bootstrapServers);
  }

  /** How long a broker or worker may take to come up (default {@link #START_TIMEOUT}). */
  public LocalKafka startTimeout(Duration timeout) {
    this.startTimeout = timeout;
    return this;
  }

  public ChildJvm.Launcher jvms() {
    return jvms;
  }

  public String bootstrapServers() {
    return bootstrap;
  }

  /**
   * Starts the broker and returns once it answers; the first start formats its storage, a later one
   * (after {@link #stopBroker}) runs on the same ports and data.
   */
  public void startBroker() throws Exception {
    if (kafkaPort == 0) {
      throw new IllegalStateException("the broker runs elsewhere: " + bootstrap);
    }
    if (!formatted) {
      formatStorage(Ports.free());
      formatted = true;
    }
    broker = jvms.start("broker", "512m", "kafka.Kafka", "server.properties");
    try (Admin admin =
        Admin.create(
            Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 2000,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 2000))) {
      awaitUp(
          broker,
          startTimeout,
          () -> admin.describeCluster().nodes().get(2, TimeUnit.SECONDS).size() == 1);
    }
  }

  /**
   * SIGTERM to the broker, waiting for its controlled shutdown (SIGKILL after 30 s); returns its
   * exit code (143 after a clean shutdown, 137 when it had to be killed).
   */
  public int stopBroker() throws InterruptedException {
    broker.close();
    if (Thread.interrupted()) {
      throw new InterruptedException("interrupted while the broker stopped");
    }
    return broker.exitValue();
  }

  /** Writes server.properties of a single-node KRaft broker and formats its storage. */
  private void formatStorage(int controllerPort) throws IOException, InterruptedException {
    Properties server = new Properties();
    server.put("process.roles", "broker,controller");
    server.put("node.id", "1");
    server.put("controller.quorum.voters", "1@127.0.0.1:" + controllerPort);
    server.put(
        "listeners",
        "PLAINTEXT://127.0.0.1:" + kafkaPort + ",CONTROLLER://127.0.0.1:" + controllerPort);
    server.put("advertised.listeners", "PLAINTEXT://127.0.0.1:" + kafkaPort);
    server.put("controller.listener.names", "CONTROLLER");
    server.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
    server.put("inter.broker.listener.name", "PLAINTEXT");
    server.put("log.dirs", jvms.dir().resolve("kafka-data").toString());
    // One broker: every internal topic with one replica.
    server.put("offsets.topic.replication.factor", "1");
    server.put("transaction.state.log.replication.factor", "1");
    server.put("transaction.state.log.min.isr", "1");
    server.put("share.coordinator.state.topic.replication.factor", "1");
    server.put("share.coordinator.state.topic.min.isr", "1");
    server.put("group.initial.rebalance.delay.ms", "0");
    // The connector creates its topics (topic.creation.* in the connector config) with the
    // broker's default partition count.
    server.put("num.partitions", "3");
    server.put("auto.create.topics.enable", "false");
    store(server, jvms.dir().resolve("server.properties"));
    jvms.run(
        "kafka-storage-format",
        "kafka.tools.StorageTool",
        "format",
        "-t",
        Uuid.randomUuid().toString(),
        "-c",
        "server.properties");
  }

  /**
   * A worker's configuration as the README tells users to write it: {@code deployedConfig}
   * (config/connect-distributed.properties) with this broker, {@code pluginPath} and a REST
   * listener on {@code restPort} of loopback.
   */
  public Properties workerConfig(Path deployedConfig, Path pluginPath, int restPort)
      throws IOException {
    Properties worker = new Properties();
    try (InputStream in = Files.newInputStream(deployedConfig)) {
      worker.load(in);
    }
    worker.put("bootstrap.servers", bootstrap);
    worker.put("plugin.path", pluginPath.toString());
    worker.put("listeners", "http://127.0.0.1:" + restPort);
    return worker;
  }

  /** As below, with this one's launcher. */
  public ChildJvm startWorker(String name, Properties config, Probe up)
      throws IOException, InterruptedException, TimeoutException {
    return startWorker(jvms, name, config, up);
  }

  /**
   * Writes {@code config} to {@code <name>.properties}, starts a worker from it with {@code
   * launcher} (another classpath, JVM options) and returns once {@code up} says so; the worker is
   * then {@link #worker()}, stopped by {@link #close()} before the broker.
   */
  public ChildJvm startWorker(ChildJvm.Launcher launcher, String name, Properties config, Probe up)
      throws IOException, InterruptedException, TimeoutException {
    String file = name + ".properties";
    store(config, launcher.dir().resolve(file));
    worker = launcher.start(name, "768m", CONNECT_MAIN, file);
    awaitUp(worker, startTimeout, up);
    return worker;
  }

  public ChildJvm broker() {
    return broker;
  }

  /** The worker started last. */
  public ChildJvm worker() {
    return worker;
  }

  /** Stops the worker first (its tasks hand their lanes back), then the broker. */
  @Override
  public void close() {
    if (worker != null) {
      worker.close();
      worker = null;
    }
    if (broker != null) {
      broker.close();
      broker = null;
    }
  }

  /** Whether a starting process answers yet; an exception means not yet. */
  public interface Probe {
    boolean up() throws Exception;
  }

  /** Polls {@code probe} until it says up; fails with the log's end if the process dies. */
  public static void awaitUp(ChildJvm process, Duration timeout, Probe probe)
      throws InterruptedException, TimeoutException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline) {
      if (!process.isAlive()) {
        throw new IllegalStateException(
            process + " exited; the end of " + process.log() + ":\n" + process.tail());
      }
      try {
        if (probe.up()) {
          return;
        }
      } catch (InterruptedException e) {
        throw e;
      } catch (Exception e) {
        // not up yet: connection refused, timeout, not the answer yet
      }
      Thread.sleep(250);
    }
    throw new TimeoutException(
        process + " did not come up within " + timeout.toSeconds() + " s; see " + process.log());
  }

  /** Writes {@code properties} to {@code file}, as a broker or worker reads them. */
  public static void store(Properties properties, Path file) throws IOException {
    try (OutputStream out = Files.newOutputStream(file)) {
      properties.store(out, "written by relaybus's LocalKafka");
    }
  }
}
