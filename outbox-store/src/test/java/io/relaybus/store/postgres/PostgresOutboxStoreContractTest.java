package io.relaybus.store.postgres;

import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreContractTest;
import io.relaybus.store.PublishResult;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.testing.PostgresServers;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The contract suite on a real PostgreSQL, 17 unless {@value PostgresServers#MAJOR_PROPERTY} names
 * another major (the embedded binaries of 13 to 18); each test gets its own table prefix.
 */
class PostgresOutboxStoreContractTest extends OutboxStoreContractTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();

  /** The server the suite runs on. */
  protected String jdbcUrl() {
    return PostgresServers.embeddedJdbcUrl(PostgresServers.selectedMajor());
  }

  /** A builder for the suite's server, before the suite's own settings. */
  protected PostgresOutboxStore.Builder builder() {
    return PostgresOutboxStore.builder().jdbcUrl(jdbcUrl());
  }

  @Override
  protected OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory) {
    PostgresOutboxStore store =
        builder()
            .schema("contract")
            .tablePrefix("t" + PREFIXES.incrementAndGet() + "_")
            .retryPolicy(retryPolicy)
            .completionHistory(completionHistory)
            .poolSize(4)
            .build();
    store.setup();
    return store;
  }

  @Override
  protected OutboxStore newStrictStore() {
    PostgresOutboxStore store =
        builder()
            .schema("contract")
            .tablePrefix("t" + PREFIXES.incrementAndGet() + "_")
            .strictRepublish(true)
            .poolSize(4)
            .build();
    store.setup();
    return store;
  }

  @Override
  protected Tx begin(OutboxStore store) {
    PostgresOutboxStore pg = (PostgresOutboxStore) store;
    try {
      Connection connection = pg.dataSource().getConnection();
      connection.setAutoCommit(false);
      return new Tx() {
        @Override
        public PublishResult publish(OutboxEvent event) {
          return pg.publish(connection, event);
        }

        @Override
        public InboxOutcome recordHandled(OutboxEvent received, String handler) {
          return pg.recordHandled(connection, received, handler);
        }

        @Override
        public io.relaybus.store.TimerResult schedule(
            OutboxEvent event, io.relaybus.store.Timer timer) {
          return pg.schedule(connection, event, timer);
        }

        @Override
        public io.relaybus.store.TimerResult cancelTimer(String handler, String timerId) {
          return pg.cancelTimer(connection, handler, timerId);
        }

        @Override
        public void commit() {
          run(connection::commit);
        }

        @Override
        public void rollback() {
          run(connection::rollback);
        }

        @Override
        public void close() {
          run(connection::close);
        }
      };
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  private interface SqlAction {
    void run() throws SQLException;
  }

  private static void run(SqlAction action) {
    try {
      action.run();
    } catch (SQLException e) {
      throw new IllegalStateException(e);
    }
  }
}
