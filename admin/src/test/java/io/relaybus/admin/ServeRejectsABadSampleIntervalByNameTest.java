package io.relaybus.admin;

import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.UUID;
import org.assertj.core.api.SoftAssertions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@code serve --sample-every 0} is bad usage: exit 2 with a message that names the option, the
 * value and the rule, and no console left listening.
 */
class ServeRejectsABadSampleIntervalByNameTest {
  private PostgresOutboxStore store;
  private String prefix;

  @BeforeEach
  void createOutbox() {
    prefix = "sv" + UUID.randomUUID().toString().substring(0, 8) + "_";
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
  void zeroSampleIntervalIsAUsageErrorNamingTheOption() throws Exception {
    int port;
    try (ServerSocket free = new ServerSocket(0)) {
      port = free.getLocalPort();
    }

    CliRunner.Result r =
        CliRunner.run(
            "",
            "serve",
            "--sample-every",
            "0",
            "--port",
            Integer.toString(port),
            "--url",
            EmbeddedPostgres17.jdbcUrl(),
            "--prefix",
            prefix);

    boolean listening;
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
      listening = true;
    } catch (ConnectException e) {
      listening = false;
    }
    SoftAssertions soft = new SoftAssertions();
    soft.assertThat(r.exit()).as("exit code").isEqualTo(AdminCli.USAGE);
    soft.assertThat(r.err()).as("stderr").contains("--sample-every").contains("'0'");
    soft.assertThat(listening)
        .as("a console still listens on port %d after serve failed", port)
        .isFalse();
    soft.assertAll();
  }
}
