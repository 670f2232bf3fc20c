package io.relaybus.it.connector;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import io.relaybus.it.harness.ConnectCluster;
import io.relaybus.it.harness.DeployedConfig;
import io.relaybus.it.harness.Publishers;
import io.relaybus.it.harness.Received;
import io.relaybus.it.harness.RecordCollector;
import io.relaybus.it.harness.Servers;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.mongodb.MongoOutboxStore;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The connector with {@code store.kind=mongodb} in a real Connect worker over a real broker,
 * deployed through the REST API from config/mongodb-outbox-source.json. The MongoDB is the one
 * {@code RELAYBUS_MONGODB_URI} names, else mongo-java-server in this JVM (the worker runs here too,
 * so it reaches it on loopback). The delivery path uses no transaction, so it runs whole on either;
 * publishing here is without a caller transaction.
 */
class MongoOutboxConnectorIT {
  private static final Duration DELIVERY_TIMEOUT = Duration.ofSeconds(60);
  private static final List<String> HANDLERS = List.of("billing", "shipping", "audit");
  private static final String DATABASE = "relaybus_it_" + Long.toString(System.nanoTime(), 36);

  @RegisterExtension
  static final Servers servers =
      Servers.start(() -> ConnectCluster.start("relaybus-mongo-it", 1, Map.of()));

  private static MongoServer inProcess;
  private static String uri;
  private static MongoClient client;
  private static ConnectCluster connect;

  @BeforeAll
  static void start() {
    String given = System.getenv("RELAYBUS_MONGODB_URI");
    if (given != null && !given.isBlank()) {
      uri = given.strip();
    } else {
      inProcess = new MongoServer(new MemoryBackend());
      uri = "mongodb://127.0.0.1:" + inProcess.bind().getPort();
    }
    client = MongoClients.create(uri);
  }

  @AfterAll
  static void stop() {
    if (client != null) {
      if (inProcess == null) {
        client.getDatabase(DATABASE).drop(); // a real server outlives the test
      }
      client.close();
    }
    if (inProcess != null) {
      inProcess.shutdownNow();
    }
  }

  private static MongoOutboxStore store(String prefix) {
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database(DATABASE)
            .collectionPrefix(prefix)
            .build();
    store.setup();
    return store;
  }

  /** config/mongodb-outbox-source.json, pointed at this test's MongoDB and broker. */
  private static Map<String, String> connector(String prefix, String... overrides) {
    Map<String, String> config =
        new LinkedHashMap<>(DeployedConfig.json("mongodb-outbox-source.json"));
    config.put("mongodb.uri", uri);
    config.put("mongodb.database", DATABASE);
    config.put("outbox.table.prefix", prefix);
    config.put("topic.creation.default.partitions", "3");
    config.put("topic.creation.default.replication.factor", "1");
    for (int i = 0; i < overrides.length; i += 2) {
      config.put(overrides[i], overrides[i + 1]);
    }
    return config;
  }

  @Test
  void deliversEveryEventHandlerPairOnceInKeyOrderThenDeletesTheDocuments() throws Exception {
    String prefix = "deliver_";
    List<String> topics = HANDLERS.stream().map(h -> h + "-mongo").toList();
    connect.createTopics(3, topics.toArray(String[]::new));
    try (MongoOutboxStore store = store(prefix);
        RecordCollector collector = new RecordCollector(connect.consumer(), topics)) {
      connect.deploy(
          "mongo-deliver",
          connector(prefix, "tasks.max", "2", "topic.template", "${handler}-mongo"));
      connect.awaitRunning("mongo-deliver", 2);

      List<OutboxEvent> events = new ArrayList<>();
      for (int i = 0; i < 300; i++) {
        events.add(
            OutboxEvent.builder("order.changed")
                .id("m-" + i)
                .key(i % 7 == 0 ? null : "order-" + (i % 30))
                .json("{\"n\":" + i + "}")
                .handlers(HANDLERS.toArray(String[]::new))
                .build());
      }
      for (int from = 0; from < events.size(); from += 25) {
        store.publishAll(events.subList(from, from + 25));
      }
      Set<String> expected = Publishers.pairs(events);

      collector.awaitAll(expected, DELIVERY_TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(expected).hasSize(900);
      assertThat(received).hasSize(900);
      assertThat(collector.pairs()).isEqualTo(expected);
      RecordCollector.assertPerKeyOrder(received);
      await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
      assertThat(store.statistics().totalDead()).isZero();
      assertThat(client.getDatabase(DATABASE).getCollection(prefix + "deliveries").countDocuments())
          .as("every delivery document deleted once Kafka acknowledged it")
          .isZero();
    } finally {
      connect.delete("mongo-deliver");
    }
  }

  @Test
  void badPayloadIsDeadLetteredWithItsReasonAndTheRecordsAfterItArrive() throws Exception {
    String prefix = "dead_";
    connect.createTopics(1, "billing-mongo-dead");
    try (MongoOutboxStore store = store(prefix);
        RecordCollector collector =
            new RecordCollector(connect.consumer(), List.of("billing-mongo-dead"))) {
      connect.deploy(
          "mongo-dead",
          connector(
              prefix,
              "tasks.max",
              "1",
              "topic.template",
              "${handler}-mongo-dead",
              "value.format",
              "json",
              "value.converter",
              "org.apache.kafka.connect.json.JsonConverter",
              "value.converter.schemas.enable",
              "false"));
      connect.awaitRunning("mongo-dead", 1);

      store.publish(event("ok-1", "{\"n\":1}"));
      store.publish(event("bad", "{\"n\":"));
      store.publish(event("ok-2", "{\"n\":2}"));

      collector.awaitAll(Set.of("ok-1/billing", "ok-2/billing"), DELIVERY_TIMEOUT);
      List<Received> received = collector.drain(Duration.ofSeconds(2));

      assertThat(received).extracting(Received::eventId).containsExactly("ok-1", "ok-2");
      await().atMost(Duration.ofSeconds(30)).until(() -> store.statistics().totalPending() == 0);
      List<DeliveryView> dead =
          store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items();
      assertThat(dead).extracting(DeliveryView::eventId).containsExactly("bad");
      assertThat(dead.get(0).lastError())
          .startsWith("payload is not valid JSON (value.format=json)");
    } finally {
      connect.delete("mongo-dead");
    }
  }

  private static OutboxEvent event(String id, String json) {
    return OutboxEvent.builder("t").id(id).key("k").json(json).handlers("billing").build();
  }
}
