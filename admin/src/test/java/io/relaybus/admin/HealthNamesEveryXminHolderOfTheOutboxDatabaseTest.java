package io.relaybus.admin;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.EmbeddedPostgres17;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@code health} names exactly what holds back vacuum of the outbox tables: a session of the outbox
 * database that wrote and sits idle in a READ COMMITTED transaction holds the horizon with its
 * transaction id (pg_stat_activity shows backend_xid, not backend_xmin); a session of another
 * database holds nothing here (PostgreSQL computes a table's horizon from its own database's
 * sessions) and must not be blamed, with advice to terminate it.
 */
class HealthNamesEveryXminHolderOfTheOutboxDatabaseTest {
  private PostgresOutboxStore store;
  private String prefix;

  @BeforeEach
  void createOutbox() {
    prefix = "hx" + UUID.randomUUID().toString().substring(0, 8) + "_";
    store =
        PostgresOutboxStore.builder()
            .dataSource(EmbeddedPostgres17.dataSource())
            .tablePrefix(prefix)
            .retryPolicy(new RetryPolicy(10, Duration.ofHours(1), Duration.ofHours(1), 0))
            .build();
    store.setup();
  }

  @AfterEach
  void closeStore() {
    store.close();
  }

  private CliRunner.Result cli(String... args) {
    List<String> all = new ArrayList<>(List.of(args));
    all.addAll(List.of("--url", EmbeddedPostgres17.jdbcUrl(), "--prefix", prefix));
    return CliRunner.run("", all.toArray(String[]::new));
  }

  private static List<String> holderNames(String json) throws Exception {
    List<String> names = new ArrayList<>();
    for (JsonNode h : Text.JSON.readTree(json).get("holders")) {
      names.add(h.get("name").asText());
    }
    return names;
  }

  private static int pid(Statement s) throws SQLException {
    try (ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
      rs.next();
      return rs.getInt(1);
    }
  }

  /** The classic forgotten session: it inserted, then its client never committed. */
  @Test
  void aWriterIdleInAReadCommittedTransactionIsNamed() throws Exception {
    try (Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = holder.createStatement()) {
      s.execute("SET application_name = 'forgotten-writer'");
      int pid = pid(s);
      holder.setAutoCommit(false);
      s.execute("CREATE TEMP TABLE forgotten (x int)");
      s.execute("INSERT INTO forgotten VALUES (1)");

      // what PostgreSQL shows of it: a transaction id, no snapshot
      try (Connection look = EmbeddedPostgres17.dataSource().getConnection();
          Statement q = look.createStatement();
          ResultSet rs =
              q.executeQuery(
                  "SELECT state, backend_xmin IS NULL, backend_xid IS NOT NULL"
                      + " FROM pg_stat_activity WHERE pid = "
                      + pid)) {
        assertThat(rs.next()).isTrue();
        assertThat(rs.getString(1)).isEqualTo("idle in transaction");
        assertThat(rs.getBoolean(2)).as("backend_xmin is null").isTrue();
        assertThat(rs.getBoolean(3)).as("backend_xid is set").isTrue();
      }

      CliRunner.Result js = cli("health", "--warn-after", "0s", "--json");
      CliRunner.Result text = cli("health", "--warn-after", "0s");

      assertThat(holderNames(js.out()))
          .as("holders reported while pid %d is idle in transaction after a write", pid)
          .contains("pid " + pid);
      assertThat(text.exit()).isEqualTo(AdminCli.WARNING);
      assertThat(text.out()).contains("WARNING: xmin horizon held by backend pid " + pid);
      holder.rollback();
    }
  }

  /** A snapshot held in another database of the same server does not hold the outbox back. */
  @Test
  void aSessionOfAnotherDatabaseIsNotBlamed() throws Exception {
    String otherDb = "hx_other_db";
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = c.createStatement()) {
      try (ResultSet rs =
          s.executeQuery("SELECT count(*) FROM pg_database WHERE datname = '" + otherDb + "'")) {
        rs.next();
        if (rs.getLong(1) == 0) {
          s.execute("CREATE DATABASE " + otherDb);
        }
      }
    }
    javax.sql.DataSource other = EmbeddedPostgres17.server().getDatabase("postgres", otherDb);
    try (Connection holder = other.getConnection();
        Statement s = holder.createStatement()) {
      s.execute("SET application_name = 'other-app-report'");
      int pid = pid(s);
      holder.setAutoCommit(false);
      s.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      s.executeQuery("SELECT count(*) FROM pg_class").close();

      // the premise: with that snapshot open, VACUUM here still removes the rows deleted here
      String table = prefix + "vacuum_probe";
      try (Connection here = EmbeddedPostgres17.dataSource().getConnection();
          Statement h = here.createStatement()) {
        h.execute("CREATE TABLE " + table + " (x int)");
        h.execute("INSERT INTO " + table + " SELECT generate_series(1, 1000)");
        h.execute("DELETE FROM " + table);
        h.execute("VACUUM (VERBOSE) " + table);
        StringBuilder notices = new StringBuilder();
        for (java.sql.SQLWarning w = h.getWarnings(); w != null; w = w.getNextWarning()) {
          notices.append(w.getMessage()).append('\n');
        }
        assertThat(notices.toString())
            .as("VACUUM of a table of this database")
            .containsPattern("tuples: \\d+ removed, 0 remain, 0 are dead but not yet removable");
        h.execute("DROP TABLE " + table);
      }

      CliRunner.Result js = cli("health", "--warn-after", "0s", "--json");
      CliRunner.Result text = cli("health", "--warn-after", "0s");

      assertThat(holderNames(js.out()))
          .as("holders reported; pid %d is in database %s", pid, otherDb)
          .doesNotContain("pid " + pid);
      assertThat(text.out()).doesNotContain("pg_terminate_backend(" + pid + ")");
      holder.rollback();
    }
  }
}
