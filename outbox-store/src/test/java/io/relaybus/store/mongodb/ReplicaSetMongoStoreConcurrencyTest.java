package io.relaybus.store.mongodb;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.mongodb.client.MongoClient;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.randomized.StoreConcurrencyTest;
import io.relaybus.store.testing.MongoServers;
import org.junit.jupiter.api.AfterAll;

/**
 * The randomized concurrency test on a real MongoDB replica set ({@value
 * MongoServers#URI_VARIABLE}, or Testcontainers with Docker); skipped, with the reason, where there
 * is none: the store with transactions (a publish in one). {@link
 * InProcessMongoStoreConcurrencyTest} runs it without, on the in-process server.
 */
class ReplicaSetMongoStoreConcurrencyTest extends StoreConcurrencyTest {
  private static final String DATABASE = "relaybus_random_" + Long.toString(System.nanoTime(), 36);
  private static MongoClient client;

  @Override
  protected OutboxStore newStore(RetryPolicy policy) {
    assumeTrue(MongoServers.replicaSet().isPresent(), MongoServers.replicaSetUnavailableReason());
    synchronized (ReplicaSetMongoStoreConcurrencyTest.class) {
      if (client == null) {
        client = MongoServers.client(MongoServers.replicaSet().orElseThrow());
      }
    }
    MongoOutboxStore store =
        MongoOutboxStore.builder().client(client).database(DATABASE).retryPolicy(policy).build();
    store.setup();
    return store;
  }

  @AfterAll
  static void dropDatabase() {
    if (client != null) {
      client.getDatabase(DATABASE).drop();
      client.close();
    }
  }
}
