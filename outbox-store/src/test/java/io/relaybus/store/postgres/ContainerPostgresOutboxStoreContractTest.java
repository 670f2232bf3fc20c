package io.relaybus.store.postgres;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import io.relaybus.store.testing.PostgresServers;
import org.testcontainers.postgresql.PostgreSQLContainer;

/**
 * The contract suite on the official {@code postgres} image through Testcontainers, major {@value
 * PostgresServers#MAJOR_PROPERTY} (17 by default): {@code -Drelaybus.postgres.major=13
 * -Dtest=ContainerPostgresOutboxStoreContractTest} and so on for the matrix. Every test is skipped,
 * with the reason, where Docker does not run.
 */
class ContainerPostgresOutboxStoreContractTest extends PostgresOutboxStoreContractTest {
  /**
   * Each test, not the class, checks for Docker: an assumption failing in {@code @BeforeAll}
   * reports no test at all, while one failing per test reports every test as skipped, with the
   * reason.
   */
  @Override
  protected String jdbcUrl() {
    int major = PostgresServers.selectedMajor();
    var container = PostgresServers.container(major);
    assumeTrue(container.isPresent(), PostgresServers.containerUnavailableReason(major));
    PostgreSQLContainer postgres = container.orElseThrow();
    String url = postgres.getJdbcUrl();
    return url
        + (url.contains("?") ? "&" : "?")
        + "user="
        + postgres.getUsername()
        + "&password="
        + postgres.getPassword();
  }
}
