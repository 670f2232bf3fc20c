package io.relaybus.it.connector;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.JavaAndSqlPublishes;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.SeparateJvmKafka;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.kafka.KafkaContainer;
import org.testcontainers.postgresql.PostgreSQLContainer;

/**
 * {@link PostgresVersionsIT}'s scenario on real images through Testcontainers, for users with
 * Docker: an {@value #KAFKA_IMAGE} broker, a {@code postgres:<major>} server for each major the
 * store claims, and a Connect worker JVM from the Maven-fetched Kafka jars with the packaged plugin
 * on {@code plugin.path}, deployed through REST. Every test is skipped, with the reason, where
 * Docker does not run.
 */
class ContainerConnectorIT {
  static final String KAFKA_IMAGE = "apache/kafka:4.3.1";
  private static final Duration DELIVERY_TIMEOUT = Duration.ofSeconds(120);

  @RegisterExtension
  static final Servers servers =
      Servers.start(
              () -> dockerAvailable() ? new KafkaContainer(KAFKA_IMAGE) : null,
              KafkaContainer::start)
          .and(
              started -> {
                Optional<KafkaContainer> broker = started.find(KafkaContainer.class);
                return broker.isEmpty()
                    ? null
                    : SeparateJvmKafka.against(
                        "container-it", broker.get().getBootstrapServers(), Map.of());
              },
              SeparateJvmKafka::startWorker);

  private static KafkaContainer kafka;
  private static SeparateJvmKafka connect;

  @ParameterizedTest(name = "postgres:{0}")
  @ValueSource(ints = {13, 14, 15, 16, 17, 18})
  void deliversJavaAndSqlPublishesOnceInKeyOrder(int major) throws Exception {
    assumeTrue(
        kafka != null,
        "needs Docker for the "
            + KAFKA_IMAGE
            + " and postgres:"
            + major
            + " images (Testcontainers found no Docker environment); without Docker"
            + " PostgresVersionsIT runs this scenario on embedded binaries");
    String connector = "container-" + major;
    String suffix = "-c" + major;
    List<String> topics = Publishers.HANDLERS.stream().map(h -> h + suffix).toList();
    try (PostgreSQLContainer postgres = new PostgreSQLContainer("postgres:" + major)) {
      postgres.start();
      try (PostgresOutboxStore store =
              PostgresOutboxStore.builder()
                  .jdbcUrl(postgres.getJdbcUrl())
                  .user(postgres.getUsername())
                  .password(postgres.getPassword())
                  .tablePrefix("c_")
                  .poolSize(4)
                  .build();
          RecordCollector collector =
              new RecordCollector(connect.consumer("read_uncommitted"), topics)) {
        store.setup();
        Map<String, String> config = DeployedConfig.json("postgres-outbox-source.json");
        config.put("connection.url", postgres.getJdbcUrl());
        config.put("connection.user", postgres.getUsername());
        config.put("connection.password", postgres.getPassword());
        config.put("outbox.table.prefix", "c_");
        config.put("tasks.max", "2");
        config.put("topic.template", "${handler}" + suffix);
        config.put("topic.creation.default.partitions", "3");
        config.put("topic.creation.default.replication.factor", "1");
        connect.createConnector(connector, config, 2);

        Set<String> expected = JavaAndSqlPublishes.publish(store, store.dataSource(), "c_");

        JavaAndSqlPublishes.assertDeliveredOnceInKeyOrder(
            collector, expected, store, DELIVERY_TIMEOUT);
      } finally {
        connect.delete("connectors/" + connector);
      }
    }
  }

  private static boolean dockerAvailable() {
    try {
      return DockerClientFactory.instance().isDockerAvailable();
    } catch (RuntimeException | Error e) {
      return false;
    }
  }
}
