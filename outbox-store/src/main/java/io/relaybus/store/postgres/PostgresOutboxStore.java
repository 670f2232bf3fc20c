package io.relaybus.store.postgres;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.TransactionalPublisher;
import java.sql.Connection;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Set;
import javax.sql.DataSource;

/** The PostgreSQL store (pgjdbc + HikariCP). SKELETON: being implemented. */
public final class PostgresOutboxStore implements OutboxStore, TransactionalPublisher<Connection> {

  public static Builder builder() {
    return new Builder();
  }

  /** Settings of a {@link PostgresOutboxStore}; {@link #build()} validates them. */
  public static final class Builder {
    /** Connect with a pool the store creates, owns and closes. */
    public Builder jdbcUrl(String jdbcUrl) {
      throw new UnsupportedOperationException();
    }

    public Builder user(String user) {
      throw new UnsupportedOperationException();
    }

    public Builder password(String password) {
      throw new UnsupportedOperationException();
    }

    /** Use the caller's pool instead (not closed by {@link #close()}). */
    public Builder dataSource(DataSource dataSource) {
      throw new UnsupportedOperationException();
    }

    /** Schema of the tables, default {@code public}; must match {@code [a-z_][a-z0-9_]*}. */
    public Builder schema(String schema) {
      throw new UnsupportedOperationException();
    }

    /** Prefix of the table names, default {@code relaybus_}; {@code [a-z_][a-z0-9_]*} or empty. */
    public Builder tablePrefix(String tablePrefix) {
      throw new UnsupportedOperationException();
    }

    public Builder retryPolicy(RetryPolicy retryPolicy) {
      throw new UnsupportedOperationException();
    }

    /** Keep an append-only history of completions (one insert per completion). Default off. */
    public Builder completionHistory(boolean enabled) {
      throw new UnsupportedOperationException();
    }

    /** Size of the owned pool, default 10. */
    public Builder poolSize(int poolSize) {
      throw new UnsupportedOperationException();
    }

    /** How long to wait for a connection (and for the server to answer a connect), default 10 s. */
    public Builder connectTimeout(Duration timeout) {
      throw new UnsupportedOperationException();
    }

    /** Shown in {@code pg_stat_activity.application_name}, default {@code relaybus}. */
    public Builder applicationName(String name) {
      throw new UnsupportedOperationException();
    }

    public PostgresOutboxStore build() {
      throw new UnsupportedOperationException();
    }
  }

  /** The DDL {@link #setup()} applies, as one script for users who run their own migrations. */
  public String schemaSql() {
    throw new UnsupportedOperationException();
  }

  @Override
  public void setup() {
    throw new UnsupportedOperationException();
  }

  @Override
  public void verifySchema() {
    throw new UnsupportedOperationException();
  }

  @Override
  public PublishResult publish(OutboxEvent event) {
    throw new UnsupportedOperationException();
  }

  @Override
  public List<PublishResult> publishAll(List<OutboxEvent> events) {
    throw new UnsupportedOperationException();
  }

  @Override
  public PublishResult publish(Connection transaction, OutboxEvent event) {
    throw new UnsupportedOperationException();
  }

  @Override
  public List<PublishResult> publishAll(Connection transaction, List<OutboxEvent> events) {
    throw new UnsupportedOperationException();
  }

  @Override
  public List<LaneLease> acquireLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration) {
    throw new UnsupportedOperationException();
  }

  @Override
  public List<LaneLease> renewLanes(String owner, Collection<LaneLease> leases, Duration duration) {
    throw new UnsupportedOperationException();
  }

  @Override
  public int relinquishLanes(String owner, Collection<LaneLease> leases) {
    throw new UnsupportedOperationException();
  }

  @Override
  public List<ClaimedDelivery> claim(String owner, Collection<LaneLease> leases, int limit) {
    throw new UnsupportedOperationException();
  }

  @Override
  public Set<Long> complete(Collection<DeliveryToken> tokens) {
    throw new UnsupportedOperationException();
  }

  @Override
  public FailOutcome reschedule(DeliveryToken token, String reason) {
    throw new UnsupportedOperationException();
  }

  @Override
  public boolean bury(DeliveryToken token, String reason) {
    throw new UnsupportedOperationException();
  }

  @Override
  public int release(Collection<DeliveryToken> tokens) {
    throw new UnsupportedOperationException();
  }

  @Override
  public int requeue(Collection<Long> deliveryIds) {
    throw new UnsupportedOperationException();
  }

  @Override
  public int requeueDead(String handler) {
    throw new UnsupportedOperationException();
  }

  @Override
  public DeliveryPage listDeliveries(DeliveryQuery query) {
    throw new UnsupportedOperationException();
  }

  @Override
  public OutboxStatistics statistics() {
    throw new UnsupportedOperationException();
  }

  @Override
  public PurgeResult purge(RetentionPolicy retention) {
    throw new UnsupportedOperationException();
  }

  @Override
  public RetryPolicy retryPolicy() {
    throw new UnsupportedOperationException();
  }

  @Override
  public void close() {}
}
