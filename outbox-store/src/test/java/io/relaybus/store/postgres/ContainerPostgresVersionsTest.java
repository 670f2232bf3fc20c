package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.testing.PostgresServers;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.testcontainers.postgresql.PostgreSQLContainer;

/**
 * Every major the store claims, on the official {@code postgres:<major>} image through
 * Testcontainers: setup, a Java and a SQL-function publish of one key, a claim in sequence order.
 * Skipped, with the reason, where Docker does not run (the embedded binaries of each major run the
 * whole contract suite without Docker: {@code -Drelaybus.postgres.major=N}).
 */
class ContainerPostgresVersionsTest {
  static List<Integer> majors() {
    return PostgresServers.SUPPORTED;
  }

  @ParameterizedTest(name = "postgres:{0}")
  @MethodSource("majors")
  void publishesAndClaimsInKeyOrder(int major) throws Exception {
    var container = PostgresServers.container(major);
    assumeTrue(container.isPresent(), PostgresServers.containerUnavailableReason(major));
    PostgreSQLContainer postgres = container.orElseThrow();
    try (PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(postgres.getJdbcUrl())
            .user(postgres.getUsername())
            .password(postgres.getPassword())
            .schema("versions")
            .poolSize(2)
            .build()) {
      store.setup();
      store.publish(
          OutboxEvent.builder("order.placed")
              .id("o-1")
              .key("order-1")
              .json("{}")
              .handlers("billing")
              .build());
      try (Connection c = store.dataSource().getConnection();
          PreparedStatement ps =
              c.prepareStatement(
                  "SELECT * FROM versions.relaybus_publish('o-2', 'order.paid', 'order-1',"
                      + " convert_to('{}', 'UTF8'), 'application/json', '{}', ARRAY['billing'])")) {
        c.setAutoCommit(false);
        ps.executeQuery().close();
        c.commit();
      }
      int lane = Lanes.laneOf("order-1", "o-1");
      List<LaneLease> leases = store.acquireLanes("w", "w", List.of(lane), Duration.ofSeconds(30));
      assertThat(store.claim("w", leases, 10))
          .extracting(ClaimedDelivery::eventId, ClaimedDelivery::sequence)
          .containsExactly(
              org.assertj.core.groups.Tuple.tuple("o-1", 1L),
              org.assertj.core.groups.Tuple.tuple("o-2", 2L));
    }
  }
}
