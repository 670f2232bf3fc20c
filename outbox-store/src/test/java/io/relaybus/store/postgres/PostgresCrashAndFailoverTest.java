package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.testing.BackendCrash;
import io.relaybus.store.testing.DataDirectories;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A server crash loses what PostgreSQL had not yet written to its WAL, and with it transaction ids
 * it had handed out: after crash recovery the next transactions get them again. A store's windows
 * in memory hold snapshots taken before the crash, which count such an id as a transaction that had
 * ended before them. Its own server, not the shared one: the test crashes it.
 */
class PostgresCrashAndFailoverTest {

  /**
   * Symptom: after a backend crash, an event published on a held lane did not go out at the next
   * claims (only the safety net's sweep, a minute later, would have moved it): its transaction had
   * an id the crash had made free again, below the newest snapshot the store's windows had read up
   * to, so every claim took it for a transaction already read.
   */
  @Test
  void anEventWhoseTransactionIdACrashReusedGoesOutAtTheNextClaim() throws Exception {
    try (EmbeddedPostgres server =
        EmbeddedPostgres.builder()
            // a commit that wrote anything waits for its WAL, as PostgreSQL ships (the embedded
            // default does not); what the crash must find unwritten stays in the WAL buffers: the
            // WAL writer waits 10 s, the background writer and autovacuum (whose writes flush the
            // WAL) do nothing
            .setServerConfig("synchronous_commit", "on")
            .setServerConfig("wal_writer_delay", "10000")
            .setServerConfig("bgwriter_lru_maxpages", "0")
            .setServerConfig("autovacuum", "off")
            .start()) {
      String url = server.getJdbcUrl("postgres", "postgres");
      try (PostgresOutboxStore store = store(url, "crash")) {
        store.setup();
        LaneRange held = new LaneRange(0, 127);
        List<LaneLease> leases = store.acquireLanes("o", "g", held.lanes(), Duration.ofMinutes(10));
        String heldKey = keyOnLanes(0, 127);
        String otherKey = keyOnLanes(128, 255);

        publish(store, url, "before", heldKey);
        assertThat(drain(store, leases)).containsExactly("before");

        // a publish on a lane this store does not hold: the claim after it opens windows, and
        // its commit writes the WAL up to here to disk
        publish(store, url, "elsewhere", otherKey);
        long xmaxBeforeLoss;
        try (Connection side = DriverManager.getConnection(url);
            Statement statement = side.createStatement()) {
          // transactions that end with nothing written to disk: their ids are lost in a crash
          for (int i = 0; i < 5; i++) {
            statement.execute("BEGIN");
            statement.execute("SELECT pg_current_xact_id()");
            statement.execute("ROLLBACK");
          }
          xmaxBeforeLoss = bigint(statement, "SELECT pg_snapshot_xmax(pg_current_snapshot())");
        }
        // windows opened up to a snapshot after those transactions; nothing on the held lanes
        assertThat(drain(store, leases)).isEmpty();

        crashABackend(server.getPostgresDatabase());

        long xid = publish(store, url, "after", heldKey);
        assertThat(xid)
            .as("the crash gave the publish a transaction id handed out before it")
            .isLessThan(xmaxBeforeLoss);
        List<String> delivered = new ArrayList<>();
        for (int claim = 0; claim < 5 && delivered.isEmpty(); claim++) {
          delivered.addAll(drainTolerating(store, leases));
        }
        assertThat(delivered).containsExactly("after");
      }
    }
  }

  /**
   * Symptom: a store whose address reached a standby while it ran (a failover in progress) failed
   * its claims for good (SQLState 0A000, "cannot access temporary or unlogged relations during
   * recovery", or XX000 where the claim takes a transaction id), so the connector's task stopped
   * until someone restarted it. Later (the fault suite's full form) a completion did the same: it
   * reads the unlogged incarnation row, to act where its claim read the rows only on the server it
   * read them on. The standby here is the primary's data directory, stopped cleanly, copied and
   * started in recovery on the same port.
   */
  @Test
  void aClaimOrACompletionThatReachesAStandbyIsRefusedAsReadOnlyAndTriedAgainLater(
      @TempDir Path dir) throws Exception {
    Failover failover = new Failover(dir);
    String url = failover.url;
    try (PostgresOutboxStore store = store(url, "failover")) {
      store.setup();
      List<LaneLease> leases = drainedOnce(store, url, "on-the-primary");
      publish(store, url, "out", "k");
      List<DeliveryToken> out =
          store.claim("o", leases, 10).stream().map(ClaimedDelivery::token).toList();
      assertThat(out).hasSize(1);
      try (EmbeddedPostgres standby = failover.standbyInPlaceOfThePrimary()) {
        try (Connection c = standby.getPostgresDatabase().getConnection();
            Statement statement = c.createStatement();
            ResultSet rs = statement.executeQuery("SELECT pg_is_in_recovery()")) {
          rs.next();
          assertThat(rs.getBoolean(1)).as("a standby").isTrue();
        }
        assertRefusedAsReadOnly(() -> store.complete(out));
        assertRefusedAsReadOnly(() -> store.claim("o", leases, 10));
      }
    }
  }

  /**
   * {@code call} on a standby, tried until it fails other than on a connection the stop cut:
   * refused as read-only, transient.
   */
  private static void assertRefusedAsReadOnly(Runnable call) {
    OutboxStoreException refused = null;
    for (int attempt = 0; attempt < 10 && refused == null; attempt++) {
      try {
        call.run();
      } catch (OutboxStoreException e) {
        // the pool's first borrow may find a connection the stop cut (08006, transient too)
        if (e.getMessage().contains("SQLState 25006")) {
          refused = e;
        } else if (!e.isTransient()) {
          throw e;
        }
      }
    }
    assertThat(refused).as("refused as read-only").isNotNull();
    assertThat(refused.isTransient()).isTrue();
    assertThat(refused).hasMessageContaining("the server is a standby (in recovery)");
  }

  /**
   * Symptom (the fault suite's exactly-once failover): a claim failed on the standby, which was
   * promoted before the store asked it whether it was in recovery; the answer "no" made the failure
   * (0A000, reading the unlogged incarnation row) permanent, and the connector's task failed for
   * good. The server's incarnation row then says the server changed since the store's last claim.
   * The DataSource here promotes the standby just before it hands out the store's next connection
   * after the failing claim's.
   */
  @Test
  void aClaimThatFailedOnAStandbyPromotedBeforeTheStoreAskedIsTriedAgainLater(@TempDir Path dir)
      throws Exception {
    Failover failover = new Failover(dir);
    String url = failover.url;
    PromotingDataSource dataSource = new PromotingDataSource(url);
    try (PostgresOutboxStore store =
        PostgresOutboxStore.builder().dataSource(dataSource).schema("promoted").build()) {
      store.setup();
      store.sweepEvery(Duration.ofHours(1)); // no sweep takes a connection in between
      List<LaneLease> leases = drainedOnce(store, url, "before");
      try (EmbeddedPostgres standby = failover.standbyInPlaceOfThePrimary()) {
        assertThat(standby.getPort()).isEqualTo(failover.port);
        dataSource.promoteAtConnection(2); // the first is the claim's, on the standby
        assertThatThrownBy(() -> store.claim("o", leases, 10))
            .isInstanceOfSatisfying(
                OutboxStoreException.class, e -> assertThat(e.isTransient()).isTrue())
            .hasMessageContaining("promoted from a standby");
        assertThat(dataSource.promoted)
            .as("promoted between the failure and the question")
            .isTrue();
        publish(store, url, "after", "k");
        assertThat(drainTolerating(store, leases)).containsExactly("after");
      }
    }
  }

  /** Connections to {@code url}; promotes the server just before handing out a chosen one. */
  private static final class PromotingDataSource extends org.postgresql.ds.PGSimpleDataSource {
    private final java.util.concurrent.atomic.AtomicInteger untilPromotion =
        new java.util.concurrent.atomic.AtomicInteger(-1);
    volatile boolean promoted;

    PromotingDataSource(String url) {
      setURL(url);
    }

    void promoteAtConnection(int n) {
      untilPromotion.set(n);
    }

    @Override
    public Connection getConnection() throws SQLException {
      if (untilPromotion.get() > 0 && untilPromotion.decrementAndGet() == 0) {
        try (Connection side = super.getConnection();
            Statement statement = side.createStatement();
            ResultSet rs = statement.executeQuery("SELECT pg_promote(true, 60)")) {
          rs.next();
          promoted = rs.getBoolean(1);
        }
      }
      return super.getConnection();
    }
  }

  /**
   * An operator's multi-host URL (pgjdbc's {@code targetServerType=primary}, what a failover
   * without a virtual address needs): the store sets up, publishes and claims on the host that is
   * not in recovery, though the first host the URL names is a standby. Without the parameter the
   * same hosts reach the standby, which the store refuses.
   */
  @Test
  void aUrlNamingAStandbyFirstAndThenThePrimaryReachesThePrimary(@TempDir Path dir)
      throws Exception {
    Path primaryData = dir.resolve("primary");
    DataDirectories.startIn(primaryData, 0)
        .close(); // initialized and stopped cleanly: a copy of it starts as a standby
    Path standbyData = standbyCopyOf(primaryData);
    try (EmbeddedPostgres primary = DataDirectories.startIn(primaryData, 0);
        EmbeddedPostgres standby = DataDirectories.startIn(standbyData, 0)) {
      String hosts =
          "jdbc:postgresql://localhost:"
              + standby.getPort()
              + ",localhost:"
              + primary.getPort()
              + "/postgres?user=postgres";
      String url = hosts + "&targetServerType=primary";
      try (PostgresOutboxStore store = store(url, "hosts")) {
        store.setup();
        drainedOnce(store, url, "on-the-primary");
      }
      try (PostgresOutboxStore store = store(hosts, "hosts")) {
        assertThatThrownBy(store::verifySchema)
            .isInstanceOf(OutboxStoreException.class)
            .hasMessageContaining("in recovery");
      }
    }
  }

  /**
   * A primary on a data directory of its own under a test's folder, and then a standby in its
   * place: the primary's data directory, stopped cleanly, copied and started in recovery on the
   * same port.
   */
  private static final class Failover {
    private final Path primaryData;
    private final EmbeddedPostgres primary;
    final int port;
    final String url;

    /** Starts the primary on {@code dir}/primary. */
    Failover(Path dir) throws java.io.IOException {
      primaryData = dir.resolve("primary");
      primary = DataDirectories.startIn(primaryData, 0);
      port = primary.getPort();
      url = primary.getJdbcUrl("postgres", "postgres");
    }

    /** Stops the primary and starts a standby of its data directory on its port. */
    EmbeddedPostgres standbyInPlaceOfThePrimary() throws java.io.IOException {
      primary.close(); // pg_ctl stop -m fast: a clean stop, everything written
      return DataDirectories.startIn(standbyCopyOf(primaryData), port);
    }
  }

  /**
   * Copies the data directory {@code primaryData} of a server stopped cleanly to a sibling {@code
   * standby}, to start as a standby; returns the copy.
   */
  private static Path standbyCopyOf(Path primaryData) throws java.io.IOException {
    Path standbyData = primaryData.resolveSibling("standby");
    DataDirectories.copyAsStandby(primaryData, standbyData);
    return standbyData;
  }

  /**
   * Acquires every lane, publishes {@code id} and drains it: the store's first claim, on the
   * primary. Returns the leases.
   */
  private static List<LaneLease> drainedOnce(PostgresOutboxStore store, String url, String id)
      throws SQLException {
    List<LaneLease> leases =
        store.acquireLanes("o", "g", LaneRange.all().lanes(), Duration.ofMinutes(10));
    publish(store, url, id, "k");
    assertThat(drain(store, leases)).containsExactly(id);
    return leases;
  }

  private static PostgresOutboxStore store(String url, String schema) {
    return PostgresOutboxStore.builder().jdbcUrl(url).schema(schema).poolSize(2).build();
  }

  private static String keyOnLanes(int first, int last) {
    for (int i = 0; ; i++) {
      int lane = Lanes.laneOf("k" + i, "unused");
      if (lane >= first && lane <= last) {
        return "k" + i;
      }
    }
  }

  /** Publishes {@code id} under {@code key} in a transaction of its own; returns its xid. */
  private static long publish(PostgresOutboxStore store, String url, String id, String key)
      throws SQLException {
    try (Connection c = DriverManager.getConnection(url)) {
      c.setAutoCommit(false);
      store.publish(c, OutboxEvent.builder("t").id(id).key(key).json("{}").handlers("h").build());
      long xid;
      try (Statement statement = c.createStatement()) {
        xid = bigint(statement, "SELECT pg_current_xact_id()::text::bigint");
      }
      c.commit();
      return xid;
    }
  }

  private static long bigint(Statement statement, String sql) throws SQLException {
    try (ResultSet rs = statement.executeQuery(sql)) {
      rs.next();
      return Long.parseLong(rs.getString(1));
    }
  }

  private static List<String> drain(PostgresOutboxStore store, List<LaneLease> leases) {
    List<ClaimedDelivery> batch = store.claim("o", leases, 50);
    if (!batch.isEmpty()) {
      assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList()))
          .hasSize(batch.size());
    }
    return batch.stream().map(ClaimedDelivery::eventId).toList();
  }

  /** A claim through connections the crash may have cut: a transient failure is tried again. */
  private static List<String> drainTolerating(PostgresOutboxStore store, List<LaneLease> leases)
      throws InterruptedException {
    for (int attempt = 0; ; attempt++) {
      try {
        return drain(store, leases);
      } catch (OutboxStoreException e) {
        if (!e.isTransient() || attempt >= 10) {
          throw e;
        }
        Thread.sleep(200);
      }
    }
  }

  /**
   * Kills a backend as the kernel's OOM killer would: the postmaster ends every session, throws
   * away shared memory (the WAL not yet written with it) and recovers from what is on disk.
   */
  private static void crashABackend(DataSource server) throws Exception {
    try (Connection victim = server.getConnection();
        Statement statement = victim.createStatement()) {
      BackendCrash.kill(server, bigint(statement, "SELECT pg_backend_pid()"));
    } catch (SQLException closing) {
      // the killed session's connection, closed
    }
  }
}
