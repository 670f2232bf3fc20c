package io.relaybus.store.postgres;

import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.PublishResult;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerContract;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.testing.PostgresServers;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Types;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The timer contract ({@link TimerContract}, with the publish contract it extends) on PostgreSQL,
 * with the caller's transaction scheduling and cancelling timers through the SQL functions {@code
 * <prefix>schedule} and {@code <prefix>cancel_timer} instead of the Java calls: what an application
 * in another language gets must hold what the Java store promises, races with the claim included (a
 * call answered ALREADY_FIRING holds nothing up; a keyed timer cancelled or moved earlier in an
 * open transaction lets its key's follower go once it commits).
 *
 * <p>A function's error aborts the statement only: the call runs under a savepoint and a refused
 * call rolls back to it, as an application that catches the error and goes on would. Publishing in
 * the transaction and the store's own calls stay Java.
 */
class SqlTimerFunctionsContractTest extends TimerContract {
  private static final AtomicInteger PREFIXES = new AtomicInteger();

  /** Each store's functions: schema and table prefix. */
  private final Map<OutboxStore, String> functions = new IdentityHashMap<>();

  @Override
  protected OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory) {
    return store(
        PostgresOutboxStore.builder()
            .retryPolicy(retryPolicy)
            .completionHistory(completionHistory));
  }

  @Override
  protected OutboxStore newStrictStore() {
    return store(PostgresOutboxStore.builder().strictRepublish(true));
  }

  private PostgresOutboxStore store(PostgresOutboxStore.Builder builder) {
    String prefix = "sqlt" + PREFIXES.incrementAndGet() + "_";
    PostgresOutboxStore store =
        builder
            .jdbcUrl(PostgresServers.embeddedJdbcUrl(PostgresServers.selectedMajor()))
            .schema("contract")
            .tablePrefix(prefix)
            .poolSize(4)
            .build();
    store.setup();
    functions.put(store, "contract." + prefix);
    return store;
  }

  @Override
  protected Tx begin(OutboxStore store) {
    PostgresOutboxStore pg = (PostgresOutboxStore) store;
    String functions = this.functions.get(store);
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
        public TimerResult schedule(OutboxEvent event, Timer timer) {
          return call(
              connection,
              "SELECT outcome, event_id FROM "
                  + functions
                  + "schedule(?, ?, ?, ?, ?, ?::json, ?,"
                  + " coalesce(?::timestamptz, now() + ?::bigint * interval '1 microsecond'),"
                  + " ?, ?)",
              ps -> {
                ps.setString(1, event.id());
                ps.setString(2, event.type());
                ps.setString(3, event.key());
                ps.setBytes(4, event.payload());
                ps.setString(5, event.contentType());
                ps.setString(6, PostgresPublisher.json(event.headers()));
                ps.setArray(7, connection.createArrayOf("text", event.handlers().toArray()));
                if (timer.at() != null) {
                  ps.setObject(8, OffsetDateTime.ofInstant(timer.at(), ZoneOffset.UTC));
                  ps.setNull(9, Types.BIGINT);
                } else {
                  Duration in = timer.in();
                  ps.setNull(8, Types.TIMESTAMP_WITH_TIMEZONE);
                  ps.setLong(9, in.toSeconds() * 1_000_000L + in.toNanosPart() / 1_000);
                }
                ps.setString(10, timer.id());
                ps.setString(11, timer.onConflict() == null ? null : timer.onConflict().name());
              });
        }

        @Override
        public TimerResult cancelTimer(String handler, String timerId) {
          return call(
              connection,
              "SELECT outcome, event_id FROM " + functions + "cancel_timer(?, ?)",
              ps -> {
                ps.setString(1, handler);
                ps.setString(2, timerId);
              });
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

  private interface Binder {
    void bind(PreparedStatement statement) throws SQLException;
  }

  /**
   * One function call under a savepoint: its one row as a result; a refusal (22023) as the {@code
   * IllegalArgumentException} the Java call throws, with the server's message.
   */
  private static TimerResult call(Connection connection, String sql, Binder binder) {
    try {
      Savepoint savepoint = connection.setSavepoint();
      try (PreparedStatement statement = connection.prepareStatement(sql)) {
        binder.bind(statement);
        TimerResult result;
        try (ResultSet rs = statement.executeQuery()) {
          rs.next();
          result = new TimerResult(TimerOutcome.valueOf(rs.getString(1)), rs.getString(2));
          if (rs.next()) {
            throw new IllegalStateException("the function returned more than one row");
          }
        }
        connection.releaseSavepoint(savepoint);
        return result;
      } catch (SQLException e) {
        connection.rollback(savepoint);
        if ("22023".equals(e.getSQLState())) {
          throw new IllegalArgumentException(e.getMessage(), e);
        }
        throw e;
      }
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
