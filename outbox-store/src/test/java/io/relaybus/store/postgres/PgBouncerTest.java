package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.testing.PgBouncer;
import java.sql.Connection;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The store behind a real PgBouncer in transaction pooling: what it refuses, and how to pass. */
class PgBouncerTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private final List<PostgresOutboxStore> stores = new ArrayList<>();

  @AfterEach
  void close() {
    stores.forEach(PostgresOutboxStore::close);
  }

  private PostgresOutboxStore store(boolean startupOptions) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(PgBouncer.shared().jdbcUrl("prepareThreshold=0"))
            .schema("bouncer")
            .tablePrefix("b" + PREFIXES.incrementAndGet() + "_")
            .connectTimeout(Duration.ofSeconds(2))
            .startupOptions(startupOptions)
            .poolSize(2)
            .build();
    stores.add(store);
    return store;
  }

  /**
   * Symptom: the store's connections were all refused and every call failed after the connect
   * timeout with "Connection is not available, request timed out", reported transient, naming
   * neither the cause nor the remedy.
   */
  @Test
  void aStoreSendingItsStartupOptionsIsRefusedNamingTheSettingThatLetsItThrough() {
    PostgresOutboxStore store = store(true);

    assertThatThrownBy(store::setup)
        .isInstanceOfSatisfying(
            OutboxStoreException.class, e -> assertThat(e.isTransient()).isFalse())
        .hasMessageContaining("setting up the outbox schema failed")
        .hasMessageContaining("unsupported startup parameter: options")
        .hasMessageContaining("startupOptions(false)")
        .hasMessageContaining("connection.startup.options=false")
        .hasMessageContaining("ALTER ROLE");
  }

  @Test
  void withoutStartupOptionsItPublishesClaimsAndCompletesAndNamesWhatTheRoleLacks()
      throws Exception {
    PostgresOutboxStore store = store(false);
    store.setup();
    for (int i = 1; i <= 3; i++) {
      store.publish(OutboxEvent.builder("t").id("e" + i).key("k").json("{}").handlers("h").build());
    }
    List<LaneLease> leases =
        store.acquireLanes("A", "g", LaneRange.all().lanes(), Duration.ofMinutes(1));
    List<ClaimedDelivery> batch = store.claim("A", leases, 10);
    assertThat(batch).extracting(ClaimedDelivery::eventId).containsExactly("e1", "e2", "e3");
    assertThat(store.complete(batch.stream().map(ClaimedDelivery::token).toList())).hasSize(3);
    assertThat(store.claim("A", leases, 10)).isEmpty();

    // the embedded server's role has none of them: what setup() warns of
    try (Connection connection = store.dataSource().getConnection()) {
      assertThat(store.missingSessionSettings(connection))
          .containsExactly(
              "statement_timeout = 0 (wanted 60000)",
              "idle_in_transaction_session_timeout = 0 (wanted 30000)",
              "jit = on (wanted off)");
    }
  }
}
