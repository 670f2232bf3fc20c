package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.testing.DataDirectories;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A failover to an asynchronous standby loses the commits the standby had not received: the new
 * primary hands out again the log ids (the sequence), transaction ids and row places the old one
 * had used since. A token the store handed out on the old primary then names a row of another event
 * on the new one. The standby here is the primary's data directory copied while it was stopped
 * cleanly; the primary then goes on (publishes, the store claims), and fails; the copy is promoted
 * on the primary's port, without what the primary did after the copy.
 */
class PostgresAsynchronousFailoverTest {

  @TempDir Path dir;

  /**
   * Symptom: the completion of deliveries handed out on the old primary, acknowledged by Kafka
   * after the failover, deleted the rows of other events the new primary had given the same log
   * ids: those events never went out.
   */
  @Test
  void aCompletionOfTokensFromTheLostPrimaryFinishesNoEventOfTheNewOne() throws Exception {
    try (Failover failover = new Failover(dir)) {
      List<ClaimedDelivery> lost = failover.threeLostThreeNew();

      Set<Long> done = failover.tolerating(() -> failover.store.complete(tokens(lost)));

      assertThat(done).as("tokens of events the new primary does not have").isEmpty();
      assertThat(failover.drain()).containsExactly("y1", "y2", "y3");
    }
  }

  /**
   * As above, with the store's claim first on the new primary: it notices the server changed, reads
   * the lane again and hands out the new events, under the log ids the lost ones had.
   */
  @Test
  void aTokenFromTheLostPrimaryIsNotTheTokenOfTheEventThatTookItsLogId() throws Exception {
    try (Failover failover = new Failover(dir)) {
      List<ClaimedDelivery> lost = failover.threeLostThreeNew();
      List<ClaimedDelivery> claimed =
          failover.tolerating(() -> failover.store.claim("o", failover.leases, 10));
      assertThat(claimed).extracting(ClaimedDelivery::eventId).containsExactly("y1", "y2", "y3");

      assertThat(tokens(claimed)).doesNotContainAnyElementsOf(tokens(lost));
      assertThat(failover.store.complete(tokens(lost)))
          .as("tokens of events the new primary does not have")
          .isEmpty();
      assertThat(failover.store.complete(tokens(claimed))).hasSize(3);
    }
  }

  /**
   * A retry asked through a token from the old primary (a record the broker rejected, reported
   * after the failover) moved the new primary's event of the same log id off the happy path: it
   * waited for its backoff, charged with an attempt it never had.
   */
  @Test
  void aRetryThroughATokenFromTheLostPrimaryMovesNoEventOfTheNewOne() throws Exception {
    try (Failover failover = new Failover(dir)) {
      List<ClaimedDelivery> lost = failover.threeLostThreeNew();

      FailOutcome outcome =
          failover.tolerating(() -> failover.store.reschedule(lost.get(0).token(), "rejected"));

      assertThat(outcome).isEqualTo(FailOutcome.LOST);
      assertThat(failover.drain()).containsExactly("y1", "y2", "y3");
    }
  }

  /**
   * A delivery retried is a row of {@code deliveries} whose id follows from its log id, so the new
   * primary's retry of another event has the id the old one's had: the completion of the old
   * retry's token deleted the new one.
   */
  @Test
  void aCompletionOfARetryFromTheLostPrimaryFinishesNoRetryOfTheNewOne() throws Exception {
    try (Failover failover = new Failover(dir)) {
      ClaimedDelivery lost = failover.retriedOnce("x1");
      failover.promoteTheStandby();
      ClaimedDelivery retried = failover.retriedOnce("y1");
      assertThat(retried.token().deliveryId()).isEqualTo(lost.token().deliveryId());

      assertThat(failover.store.complete(List.of(lost.token()))).isEmpty();
      assertThat(failover.store.complete(List.of(retried.token())))
          .containsExactly(retried.token().deliveryId());
    }
  }

  private static List<DeliveryToken> tokens(List<ClaimedDelivery> deliveries) {
    return deliveries.stream().map(ClaimedDelivery::token).toList();
  }

  /** A primary, a copy of it as a standby that stopped receiving, and a store on the address. */
  private static final class Failover implements AutoCloseable {
    private final Path primaryData;
    private final Path standbyData;
    private final int port;
    private final String url;
    private EmbeddedPostgres server;
    final PostgresOutboxStore store;
    final List<LaneLease> leases;

    Failover(Path dir) throws Exception {
      primaryData = dir.resolve("primary");
      standbyData = dir.resolve("standby");
      server = DataDirectories.startIn(primaryData, 0);
      port = server.getPort();
      url = server.getJdbcUrl("postgres", "postgres");
      store =
          PostgresOutboxStore.builder()
              .jdbcUrl(url)
              .schema("async")
              .poolSize(2)
              .retryPolicy(new RetryPolicy(10, Duration.ZERO, Duration.ZERO, 0)) // due at once
              .build();
      store.setup();
      store.sweepEvery(Duration.ofHours(1));
      leases = store.acquireLanes("o", "g", LaneRange.all().lanes(), Duration.ofMinutes(10));
      publish("before");
      assertThat(drain()).containsExactly("before");
      server.close(); // pg_ctl stop -m fast: the standby has everything up to here
      DataDirectories.copyAsStandby(primaryData, standbyData);
      server = DataDirectories.startIn(primaryData, port);
    }

    /** Published, then handed out (on the primary: after the standby stopped receiving). */
    List<ClaimedDelivery> publishAndClaimOnThePrimary(String... ids) throws Exception {
      publish(ids);
      List<ClaimedDelivery> claimed = tolerating(() -> store.claim("o", leases, 10));
      assertThat(claimed).extracting(ClaimedDelivery::eventId).containsExactly(ids);
      return claimed;
    }

    /**
     * x1, x2 and x3 handed out on the primary, then lost with it; y1, y2 and y3 published on the
     * new primary, under their log ids. Returns the lost ones as handed out.
     */
    List<ClaimedDelivery> threeLostThreeNew() throws Exception {
      List<ClaimedDelivery> lost = publishAndClaimOnThePrimary("x1", "x2", "x3");
      promoteTheStandby();
      publish("y1", "y2", "y3");
      return lost;
    }

    /** Published, claimed, rescheduled and claimed again: handed out as a retry. */
    ClaimedDelivery retriedOnce(String id) throws Exception {
      ClaimedDelivery first = publishAndClaimOnThePrimary(id).get(0);
      assertThat(tolerating(() -> store.reschedule(first.token(), "rejected")))
          .isEqualTo(FailOutcome.RESCHEDULED);
      List<ClaimedDelivery> again = tolerating(() -> store.claim("o", leases, 10));
      assertThat(again).extracting(ClaimedDelivery::eventId).containsExactly(id);
      return again.get(0);
    }

    /** The primary fails; the standby, without what the primary did since the copy, takes over. */
    void promoteTheStandby() throws Exception {
      server.close();
      server = DataDirectories.startIn(standbyData, port);
      try (Connection c = DriverManager.getConnection(url);
          Statement statement = c.createStatement();
          ResultSet rs = statement.executeQuery("SELECT pg_promote(true, 60)")) {
        rs.next();
        assertThat(rs.getBoolean(1)).as("promoted").isTrue();
      }
    }

    /** Each event under one key (one lane), each in a transaction of its own. */
    void publish(String... ids) throws SQLException {
      for (String id : ids) {
        try (Connection c = DriverManager.getConnection(url)) {
          c.setAutoCommit(false);
          store.publish(
              c, OutboxEvent.builder("t").id(id).key("k").json("{}").handlers("h").build());
          c.commit();
        }
      }
    }

    List<String> drain() throws InterruptedException {
      List<ClaimedDelivery> batch = tolerating(() -> store.claim("o", leases, 50));
      assertThat(store.complete(tokens(batch))).hasSize(batch.size());
      return batch.stream().map(ClaimedDelivery::eventId).toList();
    }

    /** A call through connections the failover cut: a transient failure is tried again. */
    <T> T tolerating(Supplier<T> call) throws InterruptedException {
      for (int attempt = 0; ; attempt++) {
        try {
          return call.get();
        } catch (OutboxStoreException e) {
          if (!e.isTransient() || attempt >= 10) {
            throw e;
          }
          Thread.sleep(100);
        }
      }
    }

    @Override
    public void close() throws java.io.IOException {
      try {
        store.close();
      } finally {
        server.close();
      }
    }
  }
}
