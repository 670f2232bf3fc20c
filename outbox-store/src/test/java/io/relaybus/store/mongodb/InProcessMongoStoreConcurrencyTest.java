package io.relaybus.store.mongodb;

import com.mongodb.client.MongoClient;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.randomized.StoreConcurrencyTest;
import io.relaybus.store.testing.MongoServers;
import org.junit.jupiter.api.AfterAll;

/**
 * The randomized concurrency test on mongo-java-server in process: the store without transactions,
 * as on a standalone server (docs/outbox-store.md, "How the delivery path works without
 * transactions" and "What is transactional"). Every check of the {@code Checker} and the {@code
 * Drain} applies unchanged: without a transaction the store still promises per-key order as
 * sequences were taken (a claim holds a key back while one of its sequences is taken and not yet
 * written), that a claim never hands out a delivery whose event is missing, exact fencing, the
 * takeover's charge, and that nothing is lost. The documented limits (a reservation expires after a
 * minute, a delivery without its event is dead-lettered after ten) lie far beyond the run's length,
 * and the publishers here never die half-way.
 *
 * <p>Each run uses a collection prefix of its own; the database is dropped after the class. The
 * short form is 2,500 calls here, not 4,000 (which took 17 to 51 s on 2 shared cores), to keep the
 * build's time; {@code -Drelaybus.random.ops} sets more. mongo-java-server scans where MongoDB uses
 * an index and runs one command per collection at a time, so a claim costs far more than a publish:
 * in a long run the claims fall behind and the backlog grows, which slows every call (a 20,000-call
 * run had 11,000 deliveries pending after 20 minutes). 10,000 to 15,000 calls took 3 to 13 minutes
 * (a 15,000-call run found reliability row 153).
 */
class InProcessMongoStoreConcurrencyTest extends StoreConcurrencyTest {
  private static final String DATABASE = "relaybus_random";
  private static MongoClient client;

  @Override
  protected long defaultOperations() {
    return 2_500;
  }

  @Override
  protected OutboxStore newStore(RetryPolicy policy) {
    synchronized (InProcessMongoStoreConcurrencyTest.class) {
      if (client == null) {
        client = MongoServers.client(MongoServers.inProcess());
      }
    }
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database(DATABASE)
            .collectionPrefix("r" + Long.toString(System.nanoTime(), 36) + "_")
            .retryPolicy(policy)
            .build();
    store.setup();
    return store;
  }

  @AfterAll
  static void dropDatabase() {
    if (client != null) {
      client.getDatabase(DATABASE).drop();
      client.close();
      client = null;
    }
  }
}
