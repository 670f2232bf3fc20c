package io.relaybus.it.harness;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.connect.util.clusters.EmbeddedConnectCluster;
import org.apache.kafka.connect.util.clusters.WorkerHandle;

/**
 * A real Kafka broker and Connect workers in this JVM (Kafka's {@code EmbeddedConnectCluster}, not
 * public API: everything the tests use of it goes through here). One per test class.
 */
public final class ConnectCluster implements AutoCloseable {
  private final EmbeddedConnectCluster connect;
  private final HttpClient http = HttpClient.newHttpClient();

  private ConnectCluster(EmbeddedConnectCluster connect) {
    this.connect = connect;
  }

  public static ConnectCluster start(
      String name, int workers, Map<String, String> workerOverrides) {
    Properties broker = new Properties();
    broker.put("auto.create.topics.enable", "false");
    EmbeddedConnectCluster connect =
        new EmbeddedConnectCluster.Builder()
            .name(name)
            .numWorkers(workers)
            .numBrokers(1)
            .brokerProps(broker)
            .workerProps(new HashMap<>(DeployedConfig.worker(workerOverrides)))
            .build();
    connect.start();
    return new ConnectCluster(connect);
  }

  public String bootstrapServers() {
    return connect.kafka().bootstrapServers();
  }

  public void createTopics(int partitions, String... topics) {
    for (String topic : topics) {
      connect.kafka().createTopic(topic, partitions);
    }
  }

  /** One topic with topic-level configs (e.g. {@code max.message.bytes}). */
  public void createTopic(String topic, int partitions, Map<String, String> topicConfig) {
    connect.kafka().createTopic(topic, partitions, 1, topicConfig);
  }

  /** The task's state as GET /connectors/{name}/status reports it, or null before it has one. */
  public String taskState(String connector, int task) {
    try {
      return connect.connectorStatus(connector).tasks().stream()
          .filter(t -> t.id() == task)
          .map(t -> t.state())
          .findFirst()
          .orElse(null);
    } catch (RuntimeException e) {
      return null;
    }
  }

  /** PUT /connectors/{name}/config, as a user deploys. */
  public void deploy(String connector, Map<String, String> config) {
    HttpResponse<String> response =
        put("connectors/" + connector + "/config", DeployedConfig.toJson(config));
    if (response.statusCode() / 100 != 2) {
      throw new AssertionError(
          "deploying " + connector + " answered " + response.statusCode() + ": " + response.body());
    }
  }

  public void awaitRunning(String connector, int tasks) throws InterruptedException {
    connect
        .assertions()
        .assertConnectorAndExactlyNumTasksAreRunning(
            connector, tasks, "connector " + connector + " did not start " + tasks + " tasks");
  }

  public void restartConnectorAndTasks(String connector) {
    connect.restartConnectorAndTasks(connector, false, true, false);
  }

  public void restartTask(String connector, int task) {
    connect.restartTask(connector, task);
  }

  public void delete(String connector) {
    connect.deleteConnector(connector);
  }

  public Set<WorkerHandle> workers() {
    return connect.workers();
  }

  public void removeWorker(WorkerHandle worker) {
    connect.removeWorker(worker);
  }

  public String restUrl() {
    return connect.endpointForResource("");
  }

  public HttpResponse<String> put(String path, String json) {
    try {
      return http.send(
          HttpRequest.newBuilder(URI.create(restUrl() + path))
              .timeout(Duration.ofSeconds(60))
              .header("Content-Type", "application/json")
              .PUT(HttpRequest.BodyPublishers.ofString(json))
              .build(),
          HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  public KafkaConsumer<String, byte[]> consumer() {
    Map<String, Object> props = new HashMap<>();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "it-" + UUID.randomUUID());
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    return new KafkaConsumer<>(props, new StringDeserializer(), new ByteArrayDeserializer());
  }

  @Override
  public void close() {
    connect.stop();
  }
}
