package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.mongodb.MongoOutboxStore;
import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.Config;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigValue;
import org.assertj.core.api.InstanceOfAssertFactories;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@code store.kind=mongodb}: its settings, validated in two stages like PostgreSQL's, with the
 * database check against mongo-java-server in process (the real store, the real driver).
 */
class MongoDbConfigurationTest {
  private static MongoServer server;
  private static String address;

  @BeforeAll
  static void startServer() {
    server = new MongoServer(new MemoryBackend());
    InetSocketAddress bound = server.bind();
    address = "127.0.0.1:" + bound.getPort();
  }

  @AfterAll
  static void stopServer() {
    server.shutdownNow();
  }

  private static Map<String, String> props(String uri) {
    Map<String, String> props = new HashMap<>();
    props.put("name", "orders");
    props.put("store.kind", "mongodb");
    props.put("mongodb.uri", uri);
    props.put("connection.timeout.ms", "1000");
    return props;
  }

  private static Map<String, List<String>> errors(Map<String, String> props) {
    Config config = new OutboxSourceConnector().validate(props);
    return config.configValues().stream()
        .filter(v -> !v.errorMessages().isEmpty())
        .collect(Collectors.toMap(ConfigValue::name, ConfigValue::errorMessages));
  }

  @Test
  void theConnectionStringIsAPasswordSetting() {
    ConfigDef.ConfigKey uri = OutboxSourceConfig.CONFIG_DEF.configKeys().get("mongodb.uri");

    assertThat(uri.type).isEqualTo(ConfigDef.Type.PASSWORD);
    OutboxSourceConfig config =
        new OutboxSourceConfig(props("mongodb://app:s3cret@" + address + "/shop"));
    assertThat(config.values().get("mongodb.uri").toString()).isEqualTo("[hidden]");
    assertThat(config.mongodbUri()).isEqualTo("mongodb://app:s3cret@" + address + "/shop");
    assertThat(config.mongodbDatabase()).isEqualTo("shop");
  }

  @Test
  void mongodbWithoutAConnectionStringIsReportedAgainstIt() {
    Map<String, String> props = props("");

    assertThat(errors(props))
        .containsOnlyKeys("mongodb.uri")
        .extractingByKey("mongodb.uri", InstanceOfAssertFactories.list(String.class))
        .singleElement()
        .asString()
        .startsWith("Missing required configuration \"mongodb.uri\": store.kind=mongodb");
  }

  @Test
  void aDatabaseNamedNowhereIsReportedAgainstMongodbDatabase() {
    assertThat(errors(props("mongodb://" + address)))
        .containsOnlyKeys("mongodb.database")
        .extractingByKey("mongodb.database", InstanceOfAssertFactories.list(String.class))
        .singleElement()
        .asString()
        .startsWith("Missing required configuration \"mongodb.database\": mongodb.uri names no");
  }

  @Test
  void aBadConnectionStringIsRejectedWithoutShowingIt() {
    Map<String, List<String>> errors = errors(props("mongodb://app:s3cret@/x?replicaSet"));

    assertThat(errors).containsOnlyKeys("mongodb.uri");
    assertThat(errors.get("mongodb.uri")).hasSize(1);
    assertThat(errors.get("mongodb.uri").get(0))
        .startsWith(
            "Invalid value [hidden] for configuration mongodb.uri: must be a mongodb:// or"
                + " mongodb+srv:// connection string")
        .doesNotContain("s3cret");
  }

  @Test
  void postgresStillNeedsItsJdbcUrl() {
    Map<String, String> props = new HashMap<>();
    props.put("name", "orders");

    assertThat(errors(props))
        .containsOnlyKeys("connection.url")
        .extractingByKey("connection.url", InstanceOfAssertFactories.list(String.class))
        .singleElement()
        .asString()
        .startsWith("Missing required configuration \"connection.url\": store.kind=postgres");
  }

  @Test
  void anUnreachableServerIsReportedAgainstTheUriWithoutCredentials() {
    Map<String, List<String>> errors = errors(props("mongodb://app:s3cret@127.0.0.1:1/shop"));

    assertThat(errors).containsOnlyKeys("mongodb.uri");
    assertThat(errors.get("mongodb.uri").get(0))
        .startsWith("mongodb.uri: ")
        .contains("mongodb://127.0.0.1:1/shop")
        .doesNotContain("s3cret");
  }

  /**
   * Without the TCP probe the driver's server selection retries the refused port until
   * connection.timeout.ms (here 20 s); the bound is far below that and generous for a busy machine.
   */
  @Test
  void aClosedPortIsReportedAtOnceNotAfterTheSelectionTimeout() throws Exception {
    int port;
    try (java.net.ServerSocket socket = new java.net.ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    Map<String, String> props = props("mongodb://app:s3cret@127.0.0.1:" + port + "/shop");
    props.put("connection.timeout.ms", "20000");

    long started = System.nanoTime();
    Map<String, List<String>> errors = errors(props);
    java.time.Duration took = java.time.Duration.ofNanos(System.nanoTime() - started);

    assertThat(errors).containsOnlyKeys("mongodb.uri");
    assertThat(errors.get("mongodb.uri"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "mongodb.uri: cannot reach a MongoDB server at mongodb://127.0.0.1:%d/shop: every host"
                    .formatted(port)
                + " refused the connection, nothing listens on its port")
        .doesNotContain("s3cret");
    assertThat(took).isLessThan(java.time.Duration.ofSeconds(10));
  }

  @Test
  void anUnknownHostIsReportedAtOnce() {
    Map<String, String> props = props("mongodb://no-such-host.invalid:27017/shop");
    props.put("connection.timeout.ms", "20000");

    long started = System.nanoTime();
    Map<String, List<String>> errors = errors(props);
    java.time.Duration took = java.time.Duration.ofNanos(System.nanoTime() - started);

    assertThat(errors).containsOnlyKeys("mongodb.uri");
    assertThat(errors.get("mongodb.uri").get(0))
        .startsWith(
            "mongodb.uri: cannot reach a MongoDB server at"
                + " mongodb://no-such-host.invalid:27017/shop: the host name is unknown");
    assertThat(took).isLessThan(java.time.Duration.ofSeconds(10));
  }

  @Test
  void anOutboxNotSetUpIsReportedAgainstDatabaseAndPrefixUnlessSetupIsOn() {
    Map<String, String> props = props("mongodb://" + address + "/empty");
    props.put("outbox.table.prefix", "orders_");

    Map<String, List<String>> errors = errors(props);

    assertThat(errors).containsOnlyKeys("mongodb.database", "outbox.table.prefix");
    assertThat(errors.get("outbox.table.prefix").get(0))
        .startsWith(
            "outbox.table.prefix: no usable relaybus outbox in database 'empty' with collection"
                + " prefix 'orders_' at mongodb://"
                + address
                + "/empty");
    props.put("outbox.setup", "true");
    assertThat(errors(props)).isEmpty();
  }

  @Test
  void anOutboxSetUpByTheApplicationValidatesAndOpensAsTheMongoStore() {
    Map<String, String> props = props("mongodb://" + address + "/shop");
    try (OutboxStore store = OutboxStores.open(new OutboxSourceConfig(props), "test", 2)) {
      assertThat(store).isInstanceOf(MongoOutboxStore.class);
      store.setup();
    }

    assertThat(errors(props)).isEmpty();
  }
}
