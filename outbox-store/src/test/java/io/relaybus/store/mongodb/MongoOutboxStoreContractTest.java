package io.relaybus.store.mongodb;

import com.mongodb.client.MongoClient;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreContractTest;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.testing.MongoServers;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;

/**
 * The contract suite on mongo-java-server in process: everything but caller transactions, which it
 * does not have (those tests are skipped with the reason; {@link
 * ReplicaSetMongoOutboxStoreContractTest} runs them on a real replica set). Each test gets its own
 * collection prefix.
 */
class MongoOutboxStoreContractTest extends OutboxStoreContractTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
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
  protected OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory) {
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database("contract")
            .collectionPrefix("t" + PREFIXES.incrementAndGet() + "_")
            .retryPolicy(retryPolicy)
            .completionHistory(completionHistory)
            .build();
    store.setup();
    return store;
  }

  @Override
  protected OutboxStore newStrictStore() {
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database("contract")
            .collectionPrefix("t" + PREFIXES.incrementAndGet() + "_")
            .strictRepublish(true)
            .build();
    store.setup();
    return store;
  }

  @Override
  protected String transactionsUnavailableReason() {
    return "needs a MongoDB replica set with transactions (mongo-java-server has none):"
        + " ReplicaSetMongoOutboxStoreContractTest runs it when "
        + MongoServers.URI_VARIABLE
        + " is set or Docker runs";
  }

  @Override
  protected Tx begin(OutboxStore store) {
    return Assumptions.abort(transactionsUnavailableReason());
  }
}
