package io.relaybus.store.mongodb;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.mongodb.MongoException;
import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoClient;
import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreContractTest;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.testing.MongoServers;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import org.junit.jupiter.api.AfterAll;

/**
 * The whole contract suite, caller transactions included, on a real MongoDB replica set: {@value
 * MongoServers#URI_VARIABLE}, or a Testcontainers container when Docker runs. Skipped, with the
 * reason, where there is neither. Each run uses a database of its own and drops it afterwards.
 */
class ReplicaSetMongoOutboxStoreContractTest extends OutboxStoreContractTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
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
  protected OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory) {
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(connected())
            .database(DATABASE)
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
            .client(connected())
            .database(DATABASE)
            .collectionPrefix("t" + PREFIXES.incrementAndGet() + "_")
            .strictRepublish(true)
            .build();
    store.setup();
    return store;
  }

  @Override
  protected String transactionsUnavailableReason() {
    MongoOutboxStore probe = (MongoOutboxStore) store;
    return probe.supportsTransactions()
        ? null
        : "the MongoDB at "
            + MongoServers.URI_VARIABLE
            + " has no transactions (not a replica set)";
  }

  @Override
  protected Tx begin(OutboxStore store) {
    return new SessionTx((MongoOutboxStore) store);
  }

  /**
   * A caller transaction as an application runs it with {@code ClientSession.withTransaction}: on a
   * transient failure (MongoDB fails a write conflict at once instead of waiting), abort, start
   * again and replay what the transaction did so far, then go on.
   */
  private static final class SessionTx implements Tx {
    private static final Duration GIVE_UP = Duration.ofSeconds(30);

    private final MongoOutboxStore store;
    private final ClientSession session;
    private final List<Function<ClientSession, ?>> done = new ArrayList<>();
    private final Instant deadline = Instant.now().plus(GIVE_UP);

    SessionTx(MongoOutboxStore store) {
      this.store = store;
      this.session = store.client().startSession();
      session.startTransaction();
    }

    @Override
    public PublishResult publish(OutboxEvent event) {
      return apply(s -> store.publish(s, event));
    }

    @Override
    public InboxOutcome recordHandled(OutboxEvent received, String handler) {
      return apply(s -> store.recordHandled(s, received, handler));
    }

    @Override
    public io.relaybus.store.TimerResult schedule(
        OutboxEvent event, io.relaybus.store.Timer timer) {
      return apply(s -> store.schedule(s, event, timer));
    }

    @Override
    public io.relaybus.store.TimerResult cancelTimer(String handler, String timerId) {
      return apply(s -> store.cancelTimer(s, handler, timerId));
    }

    private <T> T apply(Function<ClientSession, T> operation) {
      while (true) {
        try {
          T result = operation.apply(session);
          done.add(operation);
          return result;
        } catch (OutboxStoreException e) {
          if (!e.isTransient() || Instant.now().isAfter(deadline)) {
            throw e;
          }
          restart();
        }
      }
    }

    private void restart() {
      while (true) {
        pause();
        if (session.hasActiveTransaction()) {
          session.abortTransaction();
        }
        session.startTransaction();
        try {
          done.forEach(operation -> operation.apply(session));
          return;
        } catch (OutboxStoreException e) {
          if (!e.isTransient() || Instant.now().isAfter(deadline)) {
            throw e;
          }
        }
      }
    }

    @Override
    public void commit() {
      while (true) {
        try {
          session.commitTransaction();
          return;
        } catch (MongoException e) {
          if (Instant.now().isAfter(deadline)) {
            throw e;
          }
          if (e.hasErrorLabel(MongoException.UNKNOWN_TRANSACTION_COMMIT_RESULT_LABEL)) {
            continue;
          }
          if (!e.hasErrorLabel(MongoException.TRANSIENT_TRANSACTION_ERROR_LABEL)) {
            throw e;
          }
          restart();
        }
      }
    }

    @Override
    public void rollback() {
      session.abortTransaction();
    }

    @Override
    public void close() {
      if (session.hasActiveTransaction()) {
        session.abortTransaction();
      }
      session.close();
    }

    private static void pause() {
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted while retrying a transaction", e);
      }
    }
  }
}
