package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.testing.NewThreads;
import io.relaybus.store.testing.SilentServer;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.ConfigValue;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code validate()} against a real PostgreSQL 17 whose pg_hba.conf requires a password: a refused
 * login and a closed port are answered at once (not after {@code connection.timeout.ms}, which the
 * pool would spend retrying), named against the key to change, and never called transient; a server
 * that does not answer still takes the timeout.
 */
class ConnectorValidationConnectivityTest {
  /** Long, so that a retry loop until the timeout cannot pass for an immediate answer. */
  private static final int TIMEOUT_MS = 20_000;

  /** Far below TIMEOUT_MS, generous for a loaded machine: an answer without a retry loop. */
  private static final Duration AT_ONCE = Duration.ofMillis(TIMEOUT_MS / 2);

  @TempDir static Path dataParent;
  private static EmbeddedPostgres server;

  @BeforeAll
  static void startServerThatRequiresPasswords() throws Exception {
    Path data = dataParent.resolve("pgdata");
    server = EmbeddedPostgres.builder().setDataDirectory(data).setCleanDataDirectory(true).start();
    try (Connection c = server.getPostgresDatabase().getConnection();
        Statement s = c.createStatement()) {
      s.execute("CREATE ROLE app LOGIN PASSWORD 'right-password'");
      s.execute("CREATE ROLE blocked LOGIN PASSWORD 'right-password'");
      s.execute("CREATE ROLE reader LOGIN PASSWORD 'right-password'");
      s.execute("ALTER ROLE reader SET default_transaction_read_only = on");
      s.execute("GRANT CREATE ON DATABASE postgres TO app");
      // postgres keeps trust (the fixture's own connections); everyone else needs a password, and
      // "blocked" is refused by pg_hba.conf itself (SQLSTATE 28000).
      Files.writeString(
          data.resolve("pg_hba.conf"),
          """
          local all all trust
          host all postgres 127.0.0.1/32 trust
          host all postgres ::1/128 trust
          host all blocked 127.0.0.1/32 reject
          host all blocked ::1/128 reject
          host all all 127.0.0.1/32 scram-sha-256
          host all all ::1/128 scram-sha-256
          """);
      s.execute("SELECT pg_reload_conf()");
    }
  }

  @AfterAll
  static void stopServer() throws IOException {
    server.close();
  }

  private static Map<String, String> props(String url, String user, String password) {
    Map<String, String> props = new HashMap<>();
    props.put("name", "orders");
    props.put("connection.url", url);
    props.put("connection.user", user);
    props.put("connection.password", password);
    props.put("connection.timeout.ms", String.valueOf(TIMEOUT_MS));
    props.put("outbox.setup", "true");
    return props;
  }

  private static String url() {
    return "jdbc:postgresql://127.0.0.1:" + server.getPort() + "/postgres";
  }

  /** validate() with the connector a worker creates (the real store), and how long it took. */
  private record Answer(Map<String, List<String>> errors, Duration took) {}

  private static Answer validate(Map<String, String> props) {
    long started = System.nanoTime();
    Map<String, List<String>> errors =
        new OutboxSourceConnector()
            .validate(props).configValues().stream()
                .filter(v -> !v.errorMessages().isEmpty())
                .collect(Collectors.toMap(ConfigValue::name, ConfigValue::errorMessages));
    return new Answer(errors, Duration.ofNanos(System.nanoTime() - started));
  }

  @Test
  void theRightPasswordPasses() {
    Answer answer = validate(props(url(), "app", "right-password"));

    assertThat(answer.errors()).isEmpty();
  }

  /**
   * A read replica's address, or a role whose transactions default to read-only: the connector
   * writes, so validation says so against the URL, outbox.setup=true or not (before, it passed, and
   * every task failed at its first lease).
   */
  @Test
  void aReadOnlyDatabaseIsReportedAgainstTheUrl() {
    Answer answer = validate(props(url(), "reader", "right-password"));

    assertThat(answer.errors()).containsOnlyKeys("connection.url");
    assertThat(answer.errors().get("connection.url"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith("connection.url: the database serving schema public with table prefix")
        .contains("is read-only (default_transaction_read_only is on for this role or database)")
        .contains("the connection must go to the primary, read-write server")
        .endsWith("(checked at %s)".formatted(url()));
    assertThat(answer.took()).isLessThan(AT_ONCE);
  }

  @Test
  void aWrongPasswordIsARefusedLoginReportedAtOnceAgainstUserAndPassword() {
    Answer answer = validate(props(url(), "app", "wrong-password"));

    assertThat(answer.errors()).containsOnlyKeys("connection.user", "connection.password");
    assertThat(answer.errors().get("connection.password"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "connection.password: the database at %s refused the login of user 'app' (SQLSTATE 28P01)"
                .formatted(url()))
        .contains("password authentication failed for user \"app\"")
        .endsWith("check connection.user and connection.password")
        .doesNotContainIgnoringCase("transient")
        .doesNotContain("wrong-password");
    assertThat(answer.errors().get("connection.user").get(0))
        .startsWith("connection.user: the database at")
        .contains("SQLSTATE 28P01")
        .doesNotContainIgnoringCase("transient");
    assertThat(answer.took()).isLessThan(AT_ONCE);
  }

  @Test
  void aLoginPgHbaRejectsIsReportedAtOnceWithSqlState28000() {
    Answer answer = validate(props(url(), "blocked", "right-password"));

    assertThat(answer.errors()).containsOnlyKeys("connection.user", "connection.password");
    assertThat(answer.errors().get("connection.user").get(0))
        .startsWith(
            "connection.user: the database at %s refused the login of user 'blocked' (SQLSTATE 28000)"
                .formatted(url()))
        .contains("pg_hba.conf rejects connection")
        .doesNotContainIgnoringCase("transient");
    assertThat(answer.took()).isLessThan(AT_ONCE);
  }

  @Test
  void aClosedPortIsReportedAtOnceAgainstTheUrlWithThePasswordRedacted() throws IOException {
    int port;
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    String closed = "jdbc:postgresql://127.0.0.1:" + port + "/postgres?password=secret";

    Answer answer = validate(props(closed, "app", "right-password"));

    assertThat(answer.errors()).containsOnlyKeys("connection.url");
    assertThat(answer.errors().get("connection.url"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "connection.url: cannot connect to the database at"
                + " jdbc:postgresql://127.0.0.1:%d/postgres?password=****: the host refused the"
                    .formatted(port)
                + " connection, nothing listens on that port")
        .doesNotContain("secret")
        .doesNotContainIgnoringCase("transient");
    assertThat(answer.took()).isLessThan(AT_ONCE);
  }

  @Test
  void anUnknownHostIsReportedAtOnceAgainstTheUrl() {
    String unknown = "jdbc:postgresql://no-such-host.invalid:5432/postgres";

    Answer answer = validate(props(unknown, "app", "right-password"));

    assertThat(answer.errors()).containsOnlyKeys("connection.url");
    assertThat(answer.errors().get("connection.url"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "connection.url: cannot connect to the database at "
                + unknown
                + ": the host name is unknown")
        .contains("no-such-host.invalid");
    assertThat(answer.took()).isLessThan(AT_ONCE);
  }

  @Test
  void aDatabaseTheServerDoesNotHaveIsReportedAtOnceAgainstTheUrl() {
    String noSuchDatabase = "jdbc:postgresql://127.0.0.1:" + server.getPort() + "/no_such_database";

    Answer answer = validate(props(noSuchDatabase, "postgres", ""));

    assertThat(answer.errors()).containsOnlyKeys("connection.url");
    assertThat(answer.errors().get("connection.url"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .startsWith(
            "connection.url: the server at "
                + noSuchDatabase
                + " has no database of that name (SQLSTATE 3D000)")
        .contains("database \"no_such_database\" does not exist")
        .doesNotContainIgnoringCase("transient");
    assertThat(answer.took()).isLessThan(AT_ONCE);
  }

  /** A server that accepts the connection and never answers: only the timeout can tell. */
  @Test
  void aServerThatNeverAnswersStillGetsTheTimeout() throws Exception {
    try (SilentServer silent = SilentServer.start()) {
      Map<String, String> props = props(silent.jdbcUrl("postgres"), "app", "right-password");
      props.put("connection.timeout.ms", "2000");

      Answer answer = validate(props);

      assertThat(answer.errors()).containsOnlyKeys("connection.url");
      assertThat(answer.errors().get("connection.url").get(0))
          .startsWith("connection.url: cannot connect to the database at")
          .contains("within connection.timeout.ms=2000 ms");
      assertThat(answer.took()).isGreaterThanOrEqualTo(Duration.ofMillis(1900));
    }
  }

  /**
   * A server that accepts connections and never answers (stopped, a frozen VM, a network that drops
   * the connection after the handshake): each validate() gives up at the timeout, and leaves
   * nothing behind. Before, pgjdbc's login thread (loginTimeout runs the connect on a thread of its
   * own and stops waiting for it, not the thread) stayed blocked reading the silent socket for as
   * long as the server was silent: one thread and one socket per validate() call, which Connect's
   * UI and operators make often.
   */
  @Test
  void aServerThatNeverAnswersLeavesNoThreadBehind() throws Exception {
    try (SilentServer silent = SilentServer.start()) {
      NewThreads threads = NewThreads.since(silent.acceptor());
      // pgjdbc bounds its wait for the answer to an SSL request (sslResponseTimeout, 5 s), not
      // for the answer to the startup message that follows, or comes first with sslmode=disable
      for (String database : List.of("postgres", "postgres?sslmode=disable")) {
        Map<String, String> props = props(silent.jdbcUrl(database), "app", "right-password");
        props.put("connection.timeout.ms", "1000");
        for (int i = 0; i < 3; i++) {
          assertThat(validate(props).errors()).containsOnlyKeys("connection.url");
        }
      }

      assertThat(silent.accepted()).isEqualTo(6); // the server stays silent on all of them
      // the login threads end at their socket timeout (1 s) after validate() gave up on them
      assertThat(threads.leftAfter(Duration.ofSeconds(20))).isEmpty();
    }
  }
}
