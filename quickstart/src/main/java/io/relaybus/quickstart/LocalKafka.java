package io.relaybus.quickstart;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
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
 * Kafka as a user runs it: a KRaft broker and a distributed Connect worker, each a JVM of its own
 * started from Kafka's jars only ({@link Layout#kafkaClasspath}), so the worker loads the connector
 * from {@code plugin.path} under Connect's plugin isolation, as in production. The worker is
 * configured from config/connect-distributed.properties with what the README tells users to set
 * (bootstrap.servers, plugin.path) and a REST listener on localhost. Both listen on loopback only.
 */
final class LocalKafka implements AutoCloseable {
  static final Duration START_TIMEOUT = Duration.ofSeconds(120);

  private final Layout layout;
  private final int kafkaPort;
  private final int restPort;
  private ChildJvm broker;
  private ChildJvm worker;

  LocalKafka(Layout layout, int kafkaPort, int restPort) {
    this.layout = layout;
    this.kafkaPort = kafkaPort;
    this.restPort = restPort;
  }

  /** Fails at once, naming the option, when a port this run needs is taken. */
  static void requireFree(int port, String option) {
    try (ServerSocket socket = new ServerSocket(port, 1, InetAddress.getLoopbackAddress())) {
      socket.setReuseAddress(true);
    } catch (IOException e) {
      throw new IllegalStateException(
          "port %d on localhost is in use (%s): stop what listens there or pass %s with a free port"
              .formatted(port, e.getMessage(), option));
    }
  }

  String bootstrapServers() {
    return "127.0.0.1:" + kafkaPort;
  }

  /** The REST API's base URL, without the trailing slash. */
  String restUrl() {
    return "http://localhost:" + restPort;
  }

  /** Formats the storage and starts the broker; returns once it answers. */
  void startBroker() throws Exception {
    Path dir = layout.runDir();
    try (InputStream logConfig = LocalKafka.class.getResourceAsStream("kafka-log4j2.xml")) {
      Files.copy(logConfig, dir.resolve("log4j2.xml"));
    }
    int controllerPort = freePort();
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
    server.put("log.dirs", dir.resolve("kafka-data").toString());
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
    store(server, dir.resolve("server.properties"));
    ChildJvm.run(
        "kafka-storage-format",
        dir,
        layout.kafkaClasspath(),
        "kafka.tools.StorageTool",
        "format",
        "-t",
        Uuid.randomUuid().toString(),
        "-c",
        "server.properties");
    broker =
        ChildJvm.start(
            "broker", dir, layout.kafkaClasspath(), "512m", "kafka.Kafka", "server.properties");
    try (Admin admin =
        Admin.create(
            Map.of(
                AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers(),
                AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 2000,
                AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 2000))) {
      awaitUp(broker, () -> admin.describeCluster().nodes().get(2, TimeUnit.SECONDS).size() == 1);
    }
  }

  /** Starts the worker; returns once its REST API lists the relaybus connector plugin. */
  void startWorker(ConnectRest rest) throws Exception {
    Path dir = layout.runDir();
    Properties worker = new Properties();
    try (InputStream in = Files.newInputStream(layout.workerConfig())) {
      worker.load(in);
    }
    worker.put("bootstrap.servers", bootstrapServers());
    worker.put("plugin.path", layout.pluginPath().toString());
    worker.put("listeners", "http://127.0.0.1:" + restPort);
    store(worker, dir.resolve("worker.properties"));
    this.worker =
        ChildJvm.start(
            "worker",
            dir,
            layout.kafkaClasspath(),
            "768m",
            "org.apache.kafka.connect.cli.ConnectDistributed",
            "worker.properties");
    awaitUp(this.worker, rest::pluginLoaded);
  }

  ChildJvm broker() {
    return broker;
  }

  ChildJvm worker() {
    return worker;
  }

  /** Stops the worker first (its tasks hand their lanes back), then the broker. */
  @Override
  public void close() throws InterruptedException {
    if (worker != null) {
      worker.close();
      worker = null;
    }
    if (broker != null) {
      broker.close();
      broker = null;
    }
  }

  interface Probe {
    boolean up() throws Exception;
  }

  /** Polls {@code probe} until it says up; fails with the log's end if the process dies. */
  private static void awaitUp(ChildJvm process, Probe probe)
      throws InterruptedException, TimeoutException {
    long deadline = System.nanoTime() + START_TIMEOUT.toNanos();
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
        process
            + " did not come up within "
            + START_TIMEOUT.toSeconds()
            + " s; see "
            + process.log());
  }

  private static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    }
  }

  private static void store(Properties properties, Path file) throws IOException {
    try (OutputStream out = Files.newOutputStream(file)) {
      properties.store(out, "written by the relaybus quickstart");
    }
  }
}
