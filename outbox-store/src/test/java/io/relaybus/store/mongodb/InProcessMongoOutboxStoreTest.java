package io.relaybus.store.mongodb;

import com.mongodb.client.MongoClient;
import io.relaybus.store.testing.MongoServers;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

/** The MongoDB-only tests on mongo-java-server in process. */
class InProcessMongoOutboxStoreTest extends AbstractMongoOutboxStoreTest {
  private static MongoClient client;

  @BeforeAll
  static void connect() {
    client = MongoServers.client(MongoServers.inProcess());
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  @Override
  MongoClient client() {
    return client;
  }

  @Override
  String database() {
    return "behaviour";
  }

  @Override
  String uri() {
    return MongoServers.inProcess().uri();
  }

  @Override
  boolean hasTransactions() {
    return false;
  }
}
