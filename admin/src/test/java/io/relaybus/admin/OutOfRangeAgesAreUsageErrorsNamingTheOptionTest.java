package io.relaybus.admin;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.util.UUID;
import org.assertj.core.api.SoftAssertions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * operations.md: bad usage exits 2 and "the message names the option, the value and the rule". An
 * age too large to be a duration is bad usage like any other malformed age.
 */
class OutOfRangeAgesAreUsageErrorsNamingTheOptionTest {
  private PostgresOutboxStore store;
  private String prefix;

  @BeforeEach
  void createOutbox() {
    prefix = "ag" + UUID.randomUUID().toString().substring(0, 8) + "_";
    store =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix(prefix)
            .build();
    store.setup();
  }

  @AfterEach
  void closeStore() {
    store.close();
  }

  @Test
  void hugeAgesNameTheOptionAndExit2() {
    String url = EmbeddedPostgres17.jdbcUrl();
    CliRunner.Result digits =
        CliRunner.run(
            "", "dead", "--older-than", "99999999999999999999s", "--url", url, "--prefix", prefix);
    CliRunner.Result days =
        CliRunner.run(
            "", "dead", "--older-than", "9999999999999999d", "--url", url, "--prefix", prefix);

    SoftAssertions soft = new SoftAssertions();
    soft.assertThat(digits.exit()).as("exit, 99999999999999999999s").isEqualTo(AdminCli.USAGE);
    soft.assertThat(digits.err())
        .as("stderr, 99999999999999999999s")
        .startsWith("error: --older-than must be")
        .contains("'99999999999999999999s'");
    soft.assertThat(days.exit()).as("exit, 9999999999999999d").isEqualTo(AdminCli.USAGE);
    soft.assertThat(days.err())
        .as("stderr, 9999999999999999d")
        .startsWith("error: --older-than must be")
        .contains("'9999999999999999d'");
    soft.assertAll();
  }
}
