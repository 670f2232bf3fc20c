package io.relaybus.store.mongodb;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.mongodb.client.MongoClient;
import io.relaybus.store.testing.MongoServers;
import org.junit.jupiter.api.AfterAll;

/**
 * The MongoDB-only tests on a real replica set ({@value MongoServers#URI_VARIABLE} or
 * Testcontainers); skipped, with the reason, where there is none.
 */
class ReplicaSetMongoOutboxStoreTest extends AbstractMongoOutboxStoreTest {
  private static final String DATABASE = "relaybus_test_" + Long.toString(System.nanoTime(), 36);
  private static MongoClient client;

  /**
   * Each test, not the class, checks for a server: an assumption failing in {@code @BeforeAll}
   * reports no test at all, while one failing per test reports every test as skipped, with the
   * reason.
   */
  private static synchronized MongoClient connected() {
    assumeTrue(MongoServers.replicaSet().isPresent(), MongoServers.replicaSetUnavailableReason());
    if (client == null) {
      client = MongoServers.client(MongoServers.replicaSet().orElseThrow());
    }
    return client;
  }

  @AfterAll
  static void dropDatabase() {
    if (client != null) {
      client.getDatabase(DATABASE).drop();
      client.close();
    }
  }

  @Override
  MongoClient client() {
    return connected();
  }

  @Override
  String database() {
    return DATABASE;
  }

  @Override
  String uri() {
    return MongoServers.replicaSet().orElseThrow().uri();
  }

  @Override
  boolean hasTransactions() {
    return true;
  }
}
