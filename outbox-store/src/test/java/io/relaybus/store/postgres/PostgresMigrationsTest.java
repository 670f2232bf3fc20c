package io.relaybus.store.postgres;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assumptions.assumeThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.postgres.PostgresMigrations.Migration;
import io.relaybus.store.testing.EmbeddedPostgres17;
import io.relaybus.store.testing.FirstColumn;
import io.relaybus.store.testing.PostgresServers;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Numbered migrations: what setup() and schemaSql() build, upgrades, locks, old relaybus. */
class PostgresMigrationsTest {
  static final String SCHEMA = "mig";
  private static final Path PSQL = Path.of(System.getProperty("relaybus.psql", "/usr/bin/psql"));
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private final List<PostgresOutboxStore> stores = new ArrayList<>();

  @AfterEach
  void close() {
    stores.forEach(PostgresOutboxStore::close);
  }

  private static String freshPrefix() {
    return "mg" + PREFIXES.incrementAndGet() + "_";
  }

  private PostgresOutboxStore store(String prefix) {
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
            .schema(SCHEMA)
            .tablePrefix(prefix)
            .poolSize(3)
            .build();
    stores.add(store);
    return store;
  }

  /** A relaybus that knows only version 1: the released baseline, nothing after it. */
  static PostgresSchema versionOne(String prefix) {
    return new PostgresSchema(
        new PostgresTables(SCHEMA, prefix),
        List.of(PostgresMigrations.ALL.get(0)),
        PostgresSchema.LOCK_TIMEOUT,
        PostgresSchema.LOCK_RETRY_DEADLINE);
  }

  /** setup() in another thread, for a test that holds locks meanwhile. */
  static CompletableFuture<Void> setupAsync(PostgresSchema schema) {
    return CompletableFuture.runAsync(
        () -> {
          try {
            setup(schema);
          } catch (SQLException e) {
            throw new IllegalStateException(e);
          }
        });
  }

  static void setup(PostgresSchema schema) throws SQLException {
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection()) {
      schema.setup(c);
    }
  }

  static void verify(PostgresSchema schema) throws SQLException {
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection()) {
      schema.verify(c);
    }
  }

  static void execute(String sql) throws SQLException {
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = c.createStatement()) {
      s.execute(sql); // the simple query protocol runs a whole script, as psql -f would
    }
  }

  static List<String> rows(String sql, Object... args) throws SQLException {
    List<String> rows = new ArrayList<>();
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection();
        PreparedStatement s = c.prepareStatement(sql)) {
      for (int i = 0; i < args.length; i++) {
        s.setObject(i + 1, args[i]);
      }
      try (ResultSet rs = s.executeQuery()) {
        int columns = rs.getMetaData().getColumnCount();
        while (rs.next()) {
          StringBuilder row = new StringBuilder();
          for (int i = 1; i <= columns; i++) {
            row.append(i > 1 ? " | " : "").append(rs.getString(i));
          }
          rows.add(row.toString());
        }
      }
    }
    return rows;
  }

  /**
   * The schema of one prefix from pg_catalog, with the prefix written as P_: relations with their
   * kind and options, columns with type, nullability, default and identity, constraints, indexes,
   * functions with their full definitions (the advisory-lock classes, which derive from the prefix,
   * written as KEY_CLASS and LANE_CLASS), triggers, and the number of lanes and the recorded
   * versions.
   */
  static List<String> dump(String prefix) throws SQLException {
    String owned = "n.nspname = '" + SCHEMA + "' AND left(c.relname, length(?)) = ?";
    List<String> dump = new ArrayList<>();
    dump.addAll(
        rows(
            "SELECT 'column', c.relname, c.relkind, c.reloptions, a.attnum, a.attname,"
                + " format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,"
                + " pg_get_expr(d.adbin, d.adrelid)"
                + " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                + " LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
                + " AND NOT a.attisdropped"
                + " LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum"
                + " WHERE c.relkind IN ('r', 'S') AND "
                + owned
                + " ORDER BY c.relname, a.attnum",
            prefix,
            prefix));
    dump.addAll(
        rows(
            "SELECT 'constraint', c.relname, k.conname, pg_get_constraintdef(k.oid)"
                + " FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
                + " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE "
                + owned
                + " ORDER BY 2, 3",
            prefix,
            prefix));
    dump.addAll(
        rows(
            "SELECT 'index', c.relname, c.reloptions, pg_get_indexdef(c.oid)"
                + " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                + " WHERE c.relkind = 'i' AND "
                + owned
                + " ORDER BY 2",
            prefix,
            prefix));
    dump.addAll(
        rows(
            "SELECT 'function', p.proname, pg_get_function_identity_arguments(p.oid),"
                + " pg_get_functiondef(p.oid) FROM pg_proc p"
                + " JOIN pg_namespace n ON n.oid = p.pronamespace"
                + " WHERE n.nspname = '"
                + SCHEMA
                + "' AND left(p.proname, length(?)) = ? ORDER BY 2, 3",
            prefix,
            prefix));
    dump.addAll(
        rows(
            "SELECT 'trigger', c.relname, t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t"
                + " JOIN pg_class c ON c.oid = t.tgrelid"
                + " JOIN pg_namespace n ON n.oid = c.relnamespace"
                + " WHERE NOT t.tgisinternal AND "
                + owned
                + " ORDER BY 2, 3",
            prefix,
            prefix));
    dump.addAll(rows("SELECT 'lanes', count(*) FROM " + SCHEMA + "." + prefix + "lanes"));
    dump.addAll(
        rows(
            "SELECT 'version', version, applied_at IS NOT NULL FROM "
                + SCHEMA
                + "."
                + prefix
                + "schema_version ORDER BY version"));
    // the advisory-lock classes of the per-key publish locks are derived from the prefix
    PostgresTables tables = new PostgresTables(SCHEMA, prefix);
    String keyClass = "(" + tables.keyLockClass() + ", ";
    String laneClass = "(" + tables.laneLockClass() + ", ";
    return dump.stream()
        .map(
            row ->
                row.replace(prefix, "P_")
                    .replace(keyClass, "(KEY_CLASS, ")
                    .replace(laneClass, "(LANE_CLASS, "))
        .toList();
  }

  /**
   * Four ways to the current version build the same schema: setup() on nothing, schemaSql() applied
   * by JDBC, the released version 1 upgraded by setup(), and version 1 upgraded by schemaSql(1).
   */
  @Test
  void everyPathToTheCurrentVersionBuildsTheSameSchema() throws Exception {
    String fresh = freshPrefix();
    String script = freshPrefix();
    String upgraded = freshPrefix();
    String upgradeScript = freshPrefix();

    store(fresh).setup();
    execute(store(script).schemaSql());
    setup(versionOne(upgraded));
    assertThat(dump(upgraded)).contains("version | 1 | t").doesNotContain("version | 2 | t");
    store(upgraded).setup();
    setup(versionOne(upgradeScript));
    execute(store(upgradeScript).schemaSql(1));

    List<String> expected = dump(fresh);
    assertThat(expected)
        .contains("lanes | 256")
        .containsAll(
            PostgresMigrations.ALL.stream().map(m -> "version | " + m.version() + " | t").toList())
        .filteredOn(row -> row.startsWith("function | P_publish |"))
        .hasSize(1);
    assertThat(expected.stream().filter(row -> row.startsWith("index |"))).hasSize(17);
    assertThat(expected.stream().filter(row -> row.startsWith("function |")))
        .extracting(row -> row.split(" \\| ")[1])
        .containsExactly(
            "P_arm_",
            "P_cancel_timer",
            "P_check_event",
            "P_java_length_",
            "P_lane",
            "P_lock_key_row_",
            "P_lock_keys",
            "P_lock_timer_",
            "P_log_boundary_",
            "P_notify_work",
            "P_publish",
            "P_pull_followers_",
            "P_remove_timer_",
            "P_route_delivery_",
            "P_schedule");
    // the functions of storage v2 replaced version 2's: publish writes the log, no key row
    assertThat(expected)
        .filteredOn(row -> row.startsWith("function | P_publish |"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .contains("INSERT INTO mig.P_log ")
        .doesNotContain("P_key_sequences")
        .doesNotContain("P_deliveries");
    assertThat(expected)
        .filteredOn(row -> row.startsWith("function | P_arm_ |"))
        .singleElement(org.assertj.core.api.InstanceOfAssertFactories.STRING)
        .contains("nextval('mig.P_log_id_seq')")
        .doesNotContain("P_key_sequences");
    assertThat(expected.stream().filter(row -> row.startsWith("trigger |")))
        .extracting(row -> row.split(" \\| ")[2])
        .containsExactly(
            "P_deliveries_route", "P_notify_work", "P_key_sequences_lock", "P_notify_work");
    // versions 15 and 16: the wake-up trigger fires only while a task waits
    assertThat(expected)
        .filteredOn(row -> row.startsWith("trigger |") && row.contains("P_notify_work"))
        .hasSize(2)
        .allMatch(
            row -> row.contains("WHEN (((pg_sequence_last_value('mig.P_waiting'::regclass) > 0)"));
    assertThat(dump(script)).isEqualTo(expected);
    assertThat(dump(upgraded)).isEqualTo(expected);
    assertThat(dump(upgradeScript)).isEqualTo(expected);
    for (String prefix : List.of(fresh, script, upgraded, upgradeScript)) {
      store(prefix).verifySchema();
      store(prefix).publish(OutboxEvent.builder("t").key("k").handlers("h").build());
    }
  }

  /**
   * Versions 15 and 16 put a condition on the wake-up trigger by replacing it, which enables a
   * trigger; one disabled by {@code notifyOnPublish(false)} stays disabled, whether setup() or the
   * printed script upgrades it.
   */
  @Test
  void theWakeUpConditionKeepsATriggerDisabled() throws Exception {
    String bySetup = freshPrefix();
    String byScript = freshPrefix();
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection()) {
      versionFourteenWithTheLogsTriggerDisabled(c, bySetup);
      versionFourteenWithTheLogsTriggerDisabled(c, byScript);
      new PostgresSchema(new PostgresTables(SCHEMA, bySetup)).setup(c); // notifyOnPublish unset
      execute(c, store(byScript).schemaSql(14));

      for (String prefix : List.of(bySetup, byScript)) {
        assertThat(wakeUpTriggers(c, prefix))
            .as(prefix)
            .containsExactly(prefix + "deliveries | O | true", prefix + "log | D | true");
      }
    }
  }

  /**
   * PostgreSQL 13 has no CREATE OR REPLACE TRIGGER: versions 15 and 16 drop the trigger and create
   * it again there, and give it back its state the same way.
   */
  @Test
  void onPostgreSql13TheWakeUpConditionKeepsATriggerDisabled() throws Exception {
    String prefix = freshPrefix();
    try (Connection c = DriverManager.getConnection(PostgresServers.embeddedJdbcUrl(13))) {
      execute(c, "CREATE SCHEMA IF NOT EXISTS " + SCHEMA);
      versionFourteenWithTheLogsTriggerDisabled(c, prefix);

      new PostgresSchema(new PostgresTables(SCHEMA, prefix)).setup(c);

      assertThat(wakeUpTriggers(c, prefix))
          .containsExactly(prefix + "deliveries | O | true", prefix + "log | D | true");
    }
  }

  /** Version 14 under {@code prefix}, set up on {@code c}, its wake-up trigger on the log off. */
  private static void versionFourteenWithTheLogsTriggerDisabled(Connection c, String prefix)
      throws SQLException {
    new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            PostgresMigrations.ALL.subList(0, 14),
            PostgresSchema.LOCK_TIMEOUT,
            PostgresSchema.LOCK_RETRY_DEADLINE)
        .setup(c);
    execute(c, "ALTER TABLE mig." + prefix + "log DISABLE TRIGGER " + prefix + "notify_work");
  }

  /** Each wake-up trigger of {@code prefix}: "table | tgenabled | whether it has a condition". */
  private static List<String> wakeUpTriggers(Connection c, String prefix) throws SQLException {
    return FirstColumn.of(
        c,
        "SELECT c.relname || ' | ' || t.tgenabled::text || ' | '"
            + " || (pg_get_triggerdef(t.oid) LIKE '%WHEN%')"
            + " FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            + " WHERE c.relnamespace = 'mig'::regnamespace AND t.tgname = '"
            + prefix
            + "notify_work' ORDER BY 1");
  }

  /**
   * "A plain database user is enough": a role that owns the schema the outbox goes into (created
   * for it by an administrator, the usual arrangement on managed PostgreSQL), but has no CREATE on
   * the database, can set the outbox up there, and repair it. PostgreSQL checks CREATE on the
   * database before it looks whether the schema of a CREATE SCHEMA IF NOT EXISTS exists, so the
   * baseline's first statement must not be run against a schema that is there.
   */
  @Test
  void aRoleThatOwnsTheSchemaButCannotCreateSchemasSetsTheOutboxUp() throws Exception {
    execute(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_owner') THEN"
            + " CREATE ROLE outbox_owner LOGIN NOSUPERUSER NOCREATEDB; END IF; END $$");
    execute("CREATE SCHEMA IF NOT EXISTS owned_by_app AUTHORIZATION outbox_owner");
    assertThat(rows("SELECT has_database_privilege('outbox_owner', 'postgres', 'CREATE')"))
        .containsExactly("f");
    PostgresOutboxStore store =
        PostgresOutboxStore.builder()
            .jdbcUrl(EmbeddedPostgres17.server().getJdbcUrl("outbox_owner", "postgres"))
            .schema("owned_by_app")
            .tablePrefix(freshPrefix())
            .poolSize(2)
            .build();
    stores.add(store);

    store.setup();
    store.verifySchema();
    assertThat(store.publish(OutboxEvent.builder("t").key("k").handlers("h").build()).newEvent())
        .isTrue();
    // and the repair of a lost part (a lane deleted), which re-runs every migration
    try (Connection c = store.dataSource().getConnection();
        Statement st = c.createStatement()) {
      st.execute("DELETE FROM " + store.tableName("lanes") + " WHERE lane = 7");
    }
    store.setup();
    store.verifySchema();
  }

  /**
   * Two outboxes (two table prefixes) in one schema that does not exist yet, set up at the same
   * time (two services, or a service and its connector with another prefix, starting together):
   * each setup() takes only its own prefix's advisory lock, so their baselines run side by side,
   * and both must succeed. PostgreSQL's CREATE SCHEMA IF NOT EXISTS is not safe against a
   * concurrent one: the loser fails with a unique violation on pg_namespace.
   */
  @Test
  void twoOutboxesSetUpAtOnceInOneNewSchemaBothSucceed() throws Exception {
    List<String> failures = new ArrayList<>();
    for (int round = 0; round < 15; round++) {
      String schema = "race" + PREFIXES.incrementAndGet() + "_" + System.nanoTime() % 100000;
      java.util.concurrent.CyclicBarrier start = new java.util.concurrent.CyclicBarrier(3);
      List<CompletableFuture<Void>> setups = new ArrayList<>();
      for (int i = 0; i < 3; i++) {
        PostgresOutboxStore store =
            PostgresOutboxStore.builder()
                .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
                .schema(schema)
                .tablePrefix("p" + i + "_")
                .poolSize(1)
                .build();
        stores.add(store);
        setups.add(
            CompletableFuture.runAsync(
                () -> {
                  try {
                    start.await(10, TimeUnit.SECONDS);
                  } catch (Exception e) {
                    throw new IllegalStateException(e);
                  }
                  store.setup();
                },
                java.util.concurrent.Executors.newSingleThreadExecutor()));
      }
      for (CompletableFuture<Void> setup : setups) {
        try {
          setup.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
          failures.add(schema + ": " + e.getCause().getMessage());
        }
      }
    }
    assertThat(failures).as("setups that failed").isEmpty();
  }

  /**
   * A schema name the builder accepts ({@code [a-z_][a-z0-9_]*}) must either work or be refused by
   * the builder naming the rule: "anything else is rejected before it gets near SQL". SQL's
   * reserved words match the pattern but cannot stand unquoted as a schema ({@code
   * user.relaybus_events} is a syntax error), and names are never quoted.
   */
  @Test
  void aSchemaNamedByAReservedWordIsEitherUsableOrRefusedByTheBuilder() {
    for (String schema : List.of("user", "order", "group", "table")) {
      PostgresOutboxStore store;
      try {
        store =
            PostgresOutboxStore.builder()
                .jdbcUrl(EmbeddedPostgres17.jdbcUrl())
                .schema(schema)
                .tablePrefix(freshPrefix())
                .poolSize(1)
                .build();
      } catch (IllegalArgumentException refused) {
        assertThat(refused).hasMessageContaining("schema").hasMessageContaining("'" + schema + "'");
        continue;
      }
      stores.add(store);
      assertThatCode(store::setup).as("setup() in schema %s", schema).doesNotThrowAnyException();
      assertThat(store.publish(OutboxEvent.builder("t").key("k").handlers("h").build()).newEvent())
          .isTrue();
    }
  }

  /** The scripts as psql applies them, stopping at the first error, build the same schema. */
  @Test
  void psqlAppliesTheScriptsAsPrinted() throws Exception {
    assumeThat(Files.isExecutable(PSQL)).as("needs the psql client at " + PSQL).isTrue();
    String fresh = freshPrefix();
    String script = freshPrefix();
    String upgradeScript = freshPrefix();
    store(fresh).setup();

    assertThat(psql(store(script).schemaSql())).isZero();
    assertThat(psql(versionOne(upgradeScript).script(0))).isZero();
    assertThat(dump(upgradeScript)).contains("version | 1 | t").doesNotContain("version | 2 | t");
    assertThat(psql(store(upgradeScript).schemaSql(1))).isZero();

    assertThat(dump(script)).isEqualTo(dump(fresh));
    assertThat(dump(upgradeScript)).isEqualTo(dump(fresh));
    // applied again, each step refuses (its version check) and changes nothing
    assertThat(psql(store(script).schemaSql(1))).isNotZero();
    assertThat(dump(script)).isEqualTo(dump(fresh));
  }

  private static int psql(String script) throws Exception {
    Path file = Files.createTempFile("relaybus-migration", ".sql");
    Files.writeString(file, script);
    file.toFile().deleteOnExit();
    Process process =
        new ProcessBuilder(
                PSQL.toString(),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                "postgresql://postgres@localhost:"
                    + EmbeddedPostgres17.server().getPort()
                    + "/postgres",
                "-f",
                file.toString())
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .start();
    assertThat(process.waitFor(60, TimeUnit.SECONDS)).isTrue();
    return process.exitValue();
  }

  /** A script from the wrong version stops at its first step and changes nothing. */
  @Test
  void scriptFromTheWrongVersionStopsAtItsFirstStep() throws Exception {
    String prefix = freshPrefix();
    setup(versionOne(prefix));
    List<String> before = dump(prefix);

    assertThatThrownBy(() -> execute(store(prefix).schemaSql()))
        .isInstanceOf(SQLException.class)
        .hasMessageContaining(
            "relaybus schema mig (prefix '"
                + prefix
                + "'): this step upgrades version 0 to 1, but the installed version is 1");
    assertThat(dump(prefix)).isEqualTo(before);
    int current = PostgresSchema.CURRENT_VERSION;
    assertThatThrownBy(() -> store(prefix).schemaSql(current + 1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "fromVersion must be 0 (nothing installed) to %d (this relaybus's schema version), but was %d"
                .formatted(current, current + 1));
  }

  /**
   * setup() at the current version takes no DDL lock: it returns while another session holds ACCESS
   * EXCLUSIVE on the hot tables and EXCLUSIVE on the lanes and the version table, and rewrites no
   * catalog row. (The next test shows such a lock does stop a setup that runs DDL.)
   */
  @Test
  void setupAtTheCurrentVersionTakesNoLockAndChangesNothing() throws Exception {
    String prefix = freshPrefix();
    store(prefix).setup();
    String catalog =
        "SELECT string_agg(relname || ':' || xmin, ',' ORDER BY relname) FROM pg_class"
            + " WHERE relnamespace = 'mig'::regnamespace AND left(relname, length(?)) = ?"
            + " UNION ALL SELECT string_agg(proname || ':' || xmin, ',' ORDER BY proname)"
            + " FROM pg_proc WHERE pronamespace = 'mig'::regnamespace"
            + " AND left(proname, length(?)) = ?";
    List<String> before = rows(catalog, prefix, prefix, prefix, prefix);
    PostgresSchema impatient =
        new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            PostgresMigrations.ALL,
            Duration.ofMillis(100),
            Duration.ofMillis(500));

    try (Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = holder.createStatement()) {
      holder.setAutoCommit(false);
      String t = SCHEMA + "." + prefix;
      s.execute(
          "LOCK TABLE %sevents, %sdeliveries, %skey_sequences, %scompleted_deliveries, %slog, %slane_cursors IN ACCESS EXCLUSIVE MODE"
              .formatted(t, t, t, t, t, t));
      s.execute("LOCK TABLE %slanes, %sschema_version IN EXCLUSIVE MODE".formatted(t, t));

      setup(impatient);
      setup(impatient);
      holder.rollback();
    }
    assertThat(rows(catalog, prefix, prefix, prefix, prefix)).isEqualTo(before);
    assertThat(rows("SELECT version FROM mig." + prefix + "schema_version ORDER BY 1"))
        .containsExactlyElementsOf(versions(PostgresMigrations.ALL));
  }

  /** A setup with DDL to run (a lane was deleted) that cannot get a lock gives up, saying why. */
  @Test
  void setupThatMustRunDdlGivesUpOnLockTimeoutsNamingTheCause() throws Exception {
    String prefix = freshPrefix();
    store(prefix).setup();
    String t = SCHEMA + "." + prefix;
    execute("DELETE FROM " + t + "lanes WHERE lane = 9");
    PostgresSchema impatient =
        new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            PostgresMigrations.ALL,
            Duration.ofMillis(100),
            Duration.ofMillis(500));

    try (Connection holder = EmbeddedPostgres17.dataSource().getConnection();
        Statement s = holder.createStatement()) {
      holder.setAutoCommit(false);
      s.execute("LOCK TABLE %sevents IN ACCESS EXCLUSIVE MODE".formatted(t));

      assertThatThrownBy(() -> setup(impatient))
          .isInstanceOf(OutboxStoreException.class)
          .hasMessageStartingWith(
              "setting up schema mig (prefix '"
                  + prefix
                  + "'): a migration could not get its table locks within 100 ms in ")
          .hasMessageEndingWith(
              "(a long transaction holds them): end it, or run setup() again later")
          .satisfies(e -> assertThat(((OutboxStoreException) e).isTransient()).isTrue());
      holder.rollback();
    }
    setup(impatient);
    assertThat(rows("SELECT count(*) FROM " + t + "lanes")).containsExactly("256");
  }

  /**
   * A migration that needs ACCESS EXCLUSIVE on events while a publisher's transaction is open does
   * not queue the other publishers behind it: it waits at most its lock timeout, steps back and
   * retries, so a publish made meanwhile commits while the long transaction is still open. With no
   * lock timeout (lockTimeout 0) that publish waits for the long transaction.
   */
  @Test
  void migrationWaitingForALockLetsPublishersThrough() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = store(prefix);
    store.setup();
    PostgresSchema withColumn =
        new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            withTestMigration(),
            Duration.ofMillis(Long.getLong("relaybus.test.lockTimeoutMs", 200)),
            Duration.ofMinutes(2));

    try (Connection longTx = store.dataSource().getConnection()) {
      longTx.setAutoCommit(false);
      store.publish(longTx, OutboxEvent.builder("t").id("long").key("k").handlers("h").build());
      CompletableFuture<Void> migration = setupAsync(withColumn);
      // the migration has asked for its lock at least once
      await()
          .atMost(Duration.ofSeconds(30))
          .until(
              () ->
                  !rows("SELECT 1 FROM pg_stat_activity WHERE query LIKE 'ALTER TABLE mig."
                          + prefix
                          + "events ADD COLUMN IF NOT EXISTS probe%'")
                      .isEmpty());

      CompletableFuture<Void> publish =
          CompletableFuture.runAsync(
              () ->
                  store.publish(
                      OutboxEvent.builder("t").id("other").key("other").handlers("h").build()));
      publish.get(30, TimeUnit.SECONDS); // before the long transaction ends
      assertThat(migration).isNotDone();

      longTx.commit();
      migration.get(60, TimeUnit.SECONDS);
    }
    assertThat(rows("SELECT version FROM mig." + prefix + "schema_version ORDER BY 1"))
        .containsExactlyElementsOf(versions(withTestMigration()));
    assertThat(rows("SELECT id, probe FROM mig." + prefix + "events ORDER BY 1"))
        .containsExactly("long | null", "other | null");
    assertThat(rows("SELECT event_id FROM mig." + prefix + "log ORDER BY id"))
        .containsExactly("long", "other");
  }

  /**
   * A migration holds one table's strong lock at a time, so it cannot deadlock with a transaction
   * of the delivery path that takes the same tables in another order. A claim reads the log (its
   * boundary probe) before events (its page); a publisher writes events before the log. A migration
   * that took ACCESS EXCLUSIVE on events and then asked for the log, while a claim held the log and
   * queued for events behind it, deadlocked: its lock timeout (500 ms, shorter than PostgreSQL's
   * deadlock_timeout) ended each attempt, and under a steady stream of claims every attempt
   * (SchemaUpgradeUnderLoadTest on a loaded CI machine: 48 over 2 minutes, then setup() failed).
   */
  @Test
  void aMigrationNeverHoldsOneTableWhileWaitingForAnother() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = store(prefix);
    store.setup();
    String t = "mig." + prefix;
    // A lock timeout longer than the test's steps between the migration's first wait and the
    // publisher's commit (on a loaded machine those took more than the 500 ms of setup()'s own:
    // one attempt ended by it, no deadlock), and longer than PostgreSQL's deadlock_timeout (1 s):
    // a deadlock is still ended by PostgreSQL and counted as a retry.
    PostgresSchema withColumns =
        new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            withTestMigration(),
            Duration.ofSeconds(30),
            Duration.ofMinutes(2));
    try (Connection publisher = store.dataSource().getConnection();
        Connection claim = store.dataSource().getConnection()) {
      publisher.setAutoCommit(false);
      store.publish(publisher, OutboxEvent.builder("t").id("open").key("k").handlers("h").build());
      CompletableFuture<Void> migration = setupAsync(withColumns);
      awaitLockWait("ALTER TABLE " + t + "events ADD COLUMN IF NOT EXISTS probe%");
      // as a claim: the log first, then events (queued behind the migration's request)
      claim.setAutoCommit(false);
      try (Statement s = claim.createStatement()) {
        s.execute("SELECT count(*) FROM " + t + "log");
      }
      CompletableFuture<Void> page =
          CompletableFuture.runAsync(
              () -> {
                try (Statement s = claim.createStatement()) {
                  s.execute("SELECT count(*) FROM " + t + "events /* page */");
                  claim.commit();
                } catch (SQLException e) {
                  throw new IllegalStateException(e);
                }
              });
      awaitLockWait("SELECT count(*) FROM " + t + "events /* page */%");

      publisher.commit();
      page.get(60, TimeUnit.SECONDS);
      migration.get(60, TimeUnit.SECONDS);
    }
    assertThat(withColumns.lockRetries()).as("attempts ended by the lock timeout").isZero();
    assertThat(rows("SELECT version FROM " + t + "schema_version ORDER BY 1"))
        .containsExactlyElementsOf(versions(withTestMigration()));
  }

  /**
   * The repair of a schema at the current version that lost a part (here a lane) re-runs every
   * migration in one transaction: it holds ACCESS EXCLUSIVE on deliveries (version 1's ADD COLUMN
   * IF NOT EXISTS, version 4's DROP TRIGGER) and SHARE on events while it asks for ACCESS EXCLUSIVE
   * on the log (version 10's ADD COLUMN IF NOT EXISTS): the shape the rule in PostgresMigrations
   * forbids. A claim that read the log and then queues for deliveries deadlocks with it, and the
   * repair loses the attempt to its lock timeout, as the test above shows a multi-table migration
   * did (under steady claims: every attempt, until setup() gives up after 2 minutes).
   */
  @Test
  void aRepairNeverHoldsOneTableWhileWaitingForAnother() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = store(prefix);
    store.setup();
    String t = "mig." + prefix;
    execute("DELETE FROM " + t + "lanes WHERE lane = 9");
    PostgresSchema repair =
        new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            PostgresMigrations.ALL,
            PostgresSchema.LOCK_TIMEOUT,
            Duration.ofMinutes(2));
    try (Connection claim = store.dataSource().getConnection()) {
      // as a claim: the log first (its boundary), then deliveries (its page)
      claim.setAutoCommit(false);
      try (Statement s = claim.createStatement()) {
        s.execute("SELECT count(*) FROM " + t + "log");
      }
      CompletableFuture<Void> repaired = setupAsync(repair);
      awaitLockWait("ALTER TABLE " + t + "log ADD COLUMN IF NOT EXISTS event_tid%");
      CompletableFuture<Void> page =
          CompletableFuture.runAsync(
              () -> {
                try (Statement s = claim.createStatement()) {
                  s.execute("SELECT count(*) FROM " + t + "deliveries /* page */");
                  claim.commit();
                } catch (SQLException e) {
                  throw new IllegalStateException(e);
                }
              });
      page.get(60, TimeUnit.SECONDS);
      repaired.get(60, TimeUnit.SECONDS);
    }
    assertThat(rows("SELECT count(*) FROM " + t + "lanes")).containsExactly("256");
    assertThat(repair.lockRetries()).as("attempts ended by the lock timeout").isZero();
  }

  private static void awaitLockWait(String queryLike) {
    await()
        .atMost(Duration.ofSeconds(30))
        .until(
            () ->
                !rows(
                        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                            + " AND query LIKE ?",
                        queryLike)
                    .isEmpty());
  }

  static List<String> versions(List<Migration> migrations) {
    return migrations.stream().map(m -> String.valueOf(m.version())).toList();
  }

  /**
   * The versions after the current one, for tests only: a catalog-only column on each table a
   * publisher (events, log) and a consumer (deliveries, lanes) write, each of which takes ACCESS
   * EXCLUSIVE; one table per migration, as the rule in {@link PostgresMigrations} asks.
   */
  static List<Migration> withTestMigration() {
    List<Migration> migrations = new ArrayList<>(PostgresMigrations.ALL);
    List<String> tables = List.of("events", "log", "deliveries", "lanes");
    for (int i = 0; i < tables.size(); i++) {
      migrations.add(
          new Migration(
              PostgresSchema.CURRENT_VERSION + 1 + i,
              "test only: a nullable column on " + tables.get(i),
              List.of("ALTER TABLE {" + tables.get(i) + "} ADD COLUMN IF NOT EXISTS probe text")));
    }
    return migrations;
  }

  /**
   * A database at the current version refuses a relaybus that knows only an older one (version 1,
   * and each later one), with the messages version 1 has always given, because it reads the version
   * as version 1 did (max of the version table).
   */
  @Test
  void theCurrentVersionRefusesARelaybusThatKnowsOnlyAnOlderOne() throws Exception {
    String prefix = freshPrefix();
    store(prefix).setup();
    int current = PostgresSchema.CURRENT_VERSION;
    assertThat(rows("SELECT max(version) FROM mig." + prefix + "schema_version"))
        .containsExactly(String.valueOf(current));

    for (int known = 1; known < current; known++) {
      PostgresSchema old =
          new PostgresSchema(
              new PostgresTables(SCHEMA, prefix),
              PostgresMigrations.ALL.subList(0, known),
              PostgresSchema.LOCK_TIMEOUT,
              PostgresSchema.LOCK_RETRY_DEADLINE);
      assertThatThrownBy(() -> verify(old))
          .isInstanceOf(OutboxStoreException.class)
          .hasMessage(
              "the outbox in schema mig with table prefix '%s' has schema version %d, this relaybus needs %d: run setup() to upgrade"
                  .formatted(prefix, current, known));
      assertThatThrownBy(() -> setup(old))
          .isInstanceOf(OutboxStoreException.class)
          .hasMessage(
              "schema mig (prefix '%s') has version %d, newer than this relaybus (%d): upgrade relaybus"
                  .formatted(prefix, current, known));
    }
  }

  /**
   * The claims rely on ids being taken in order (a claim's floor is the last id taken): a log
   * sequence given a cache by hand hands ids out of order across sessions, so it is refused, naming
   * the fix.
   */
  @Test
  void aLogSequenceWithACacheIsRefusedNamingTheFix() throws Exception {
    String prefix = freshPrefix();
    PostgresOutboxStore store = store(prefix);
    store.setup();
    String sequence = store.tableName("log_seq");
    execute("ALTER SEQUENCE " + sequence + " CACHE 20");

    assertThatThrownBy(store::verifySchema)
        .isInstanceOf(OutboxStoreException.class)
        .hasMessageStartingWith(
            "the log sequence %s of schema %s with table prefix '%s' has CACHE 20: relaybus needs CACHE 1"
                .formatted(sequence, SCHEMA, prefix))
        .hasMessageEndingWith("run ALTER SEQUENCE %s CACHE 1".formatted(sequence));
    execute("ALTER SEQUENCE " + sequence + " CACHE 1");
    store.verifySchema();
  }

  /** A new relaybus on a version-1 database says to upgrade, and setup() does. */
  @Test
  void versionOneAsksANewRelaybusToUpgrade() throws Exception {
    String prefix = freshPrefix();
    setup(versionOne(prefix));
    verify(versionOne(prefix));

    assertThatThrownBy(store(prefix)::verifySchema)
        .isInstanceOf(OutboxStoreException.class)
        .hasMessageContaining(
            "has schema version 1, this relaybus needs %d: run setup() to upgrade"
                .formatted(PostgresSchema.CURRENT_VERSION));
    store(prefix).setup();
    store(prefix).verifySchema();
  }

  /**
   * Version 11's path for one key takes the same locks as the general path: a second publisher of
   * the key waits (however it names its keys), a call of more than 128 keys (version 13; 64 before)
   * waits for the lane a one-key call holds, and a keyless call takes nothing.
   */
  @Test
  void oneKeysLocksAreTheGeneralPathsLocks() throws Exception {
    String lockKeys = lockKeysOfANewOutbox();
    try (Connection first = transaction(false);
        Connection second = transaction(true)) {
      String otherKeys = "SELECT %s(ARRAY[5, 7]::smallint[], ARRAY['k', 'z'])".formatted(lockKeys);
      String manyKeys = lockCall(lockKeys, "x", 129, List.of(5, 6));

      execute(first, "SELECT %s(ARRAY[5]::smallint[], ARRAY['k'])".formatted(lockKeys));
      assertWaitsForALock(second, otherKeys, "the key's exclusive lock");
      assertWaitsForALock(
          second, manyKeys, "lane 5's exclusive lock against the one-key call's shared");
      first.commit();
      execute(second, otherKeys);
      second.commit();

      execute(first, "SELECT %s(ARRAY[5]::smallint[], ARRAY[NULL]::text[])".formatted(lockKeys));
      execute(second, manyKeys);
      second.commit();
      first.commit();
    }
  }

  /**
   * Version 13: a call of up to 128 distinct keys takes key locks, so two publishers of batches of
   * 100 keys that share lanes but no key do not wait for each other (versions 4 to 12 locked the
   * lanes of a call of more than 64 keys exclusively: the second waited for the first's commit).
   */
  @Test
  void batchesOfAHundredKeysInTheSameLanesWaitOnlyForASharedKey() throws Exception {
    String lockKeys = lockKeysOfANewOutbox();
    try (Connection first = transaction(false);
        Connection second = transaction(true)) {
      execute(first, lockCall(lockKeys, "a", 100, List.of(5, 6)));
      execute(second, lockCall(lockKeys, "b", 100, List.of(5, 6)));
      second.commit();
      assertWaitsForALock(
          second,
          lockCall(lockKeys, "a", 1, List.of(5)),
          "a key of the first batch, until it commits");
      first.commit();
    }
  }

  /**
   * Version 13: a call takes its lanes before its keys. Versions 4 to 12 took each key's lane just
   * before the key, in key order: a call holding lane 5 while it waited for key {@code a} (held by
   * a third transaction), and a call of more than 64 keys holding lane 3 exclusively while it
   * waited for lane 5, deadlocked once {@code a} was free and the first call went on to lane 3
   * (SQLState 40P01 after {@code deadlock_timeout}). Now the first holds both lanes while it waits
   * for its key, the batch waits for them, and all three commit.
   */
  @Test
  void aCallWaitingForAKeyHoldsEveryLaneItNeedsSoABatchOfLanesCannotDeadlockIt() throws Exception {
    String lockKeys = lockKeysOfANewOutbox();
    try (Connection holder = transaction(false);
        Connection twoKeys = transaction(false);
        Connection batch = transaction(false)) {
      execute(holder, "SELECT %s(ARRAY[5]::smallint[], ARRAY['a'])".formatted(lockKeys));
      // key 'a' on lane 5 sorts before key 'b' on lane 3
      CompletableFuture<Void> first =
          inTransaction(
              twoKeys, "SELECT %s(ARRAY[5, 3]::smallint[], ARRAY['a', 'b'])".formatted(lockKeys));
      awaitLockWait("SELECT %lock_keys(ARRAY[5, 3]::smallint[]%");
      CompletableFuture<Void> second =
          inTransaction(batch, lockCall(lockKeys, "x", 129, List.of(3, 5)));
      awaitLockWait("SELECT %lock_keys(ARRAY[3, 5, 3%");
      holder.commit();
      first.get(30, TimeUnit.SECONDS);
      second.get(30, TimeUnit.SECONDS);
    }
  }

  /**
   * Version 17: a call of many keys takes its lanes' locks in one query and its keys' in another (a
   * loop ran one query per lock: 272 against 105 us for 100 keys), and the same locks: each lane of
   * a keyed event shared, each key exclusive, none for a keyless event.
   */
  @Test
  void aCallOfManyKeysLocksItsLanesInOneQueryAndItsKeysInAnother() throws Exception {
    String lockKeys = lockKeysOfANewOutbox();
    String lockQueries =
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements"
            + " WHERE query LIKE '%pg_advisory_xact_lock%' AND query NOT LIKE '%pg_stat_statements%'";
    try (Connection tx = transaction(false)) {
      execute(tx, "SET LOCAL pg_stat_statements.track = 'all'"); // the function's own queries
      long before = Long.parseLong(rows(lockQueries).get(0));
      List<Integer> lanes = List.of(5, 6, 7);
      String call = lockCall(lockKeys, "m", 100, lanes);
      execute(tx, call.replace("ARRAY['m0'", "ARRAY[NULL")); // m0's lane (5) is also m3's

      assertThat(Long.parseLong(rows(lockQueries).get(0)) - before).isEqualTo(2);
      List<String> held =
          FirstColumn.of(
              tx,
              "SELECT objid || ' ' || mode FROM pg_locks WHERE locktype = 'advisory'"
                  + " AND pid = pg_backend_pid() ORDER BY 1");
      assertThat(held)
          .filteredOn(lock -> lock.endsWith("ShareLock"))
          .containsExactly("5 ShareLock", "6 ShareLock", "7 ShareLock");
      assertThat(held)
          .filteredOn(lock -> lock.endsWith("ExclusiveLock"))
          .hasSize(
              Integer.parseInt(
                  rows("SELECT count(DISTINCT hashtext('m' || i))"
                          + " FROM generate_series(1, 99) i")
                      .get(0)));
      tx.rollback();
    }
  }

  /** The name of the {@code lock_keys} function of a new outbox at the current version. */
  private String lockKeysOfANewOutbox() throws SQLException {
    String prefix = freshPrefix();
    store(prefix).setup();
    return SCHEMA + "." + prefix + "lock_keys";
  }

  /** A connection in a transaction, waiting at most 200 ms for a lock when {@code impatient}. */
  private static Connection transaction(boolean impatient) throws SQLException {
    Connection connection = EmbeddedPostgres17.dataSource().getConnection();
    if (impatient) {
      // outside the transaction, so that no rollback undoes it
      execute(connection, "SET lock_timeout = '200ms'");
    }
    connection.setAutoCommit(false);
    return connection;
  }

  /** {@code sql} on an impatient connection waits for a lock {@code held}; rolls back. */
  private static void assertWaitsForALock(Connection connection, String sql, String held)
      throws SQLException {
    assertThatThrownBy(() -> execute(connection, sql))
        .as("lock_not_available: " + held)
        .isInstanceOf(SQLException.class)
        .extracting(e -> ((SQLException) e).getSQLState())
        .isEqualTo("55P03");
    connection.rollback();
  }

  /** {@code lock_keys} of {@code count} keys named prefix + i, spread over {@code lanes}. */
  private static String lockCall(String lockKeys, String prefix, int count, List<Integer> lanes) {
    List<String> laneList = new ArrayList<>();
    List<String> keyList = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      laneList.add(String.valueOf(lanes.get(i % lanes.size())));
      keyList.add("'" + prefix + i + "'");
    }
    return "SELECT %s(ARRAY[%s]::smallint[], ARRAY[%s])"
        .formatted(lockKeys, String.join(", ", laneList), String.join(", ", keyList));
  }

  /** Runs {@code sql} on {@code connection} in another thread and commits. */
  private static CompletableFuture<Void> inTransaction(Connection connection, String sql) {
    return CompletableFuture.runAsync(
        () -> {
          try {
            execute(connection, sql);
            connection.commit();
          } catch (SQLException e) {
            throw new IllegalStateException(e.getSQLState() + ": " + e.getMessage(), e);
          }
        });
  }

  private static void execute(Connection connection, String sql) throws SQLException {
    try (Statement s = connection.createStatement()) {
      s.execute(sql);
    }
  }

  /**
   * Released migrations never change: their text is pinned here. A schema change is a new
   * migration; if this fails, undo the edit and add one.
   */
  @Test
  void releasedMigrationsAreFrozen() throws Exception {
    assertThat(PostgresMigrations.ALL)
        .extracting(Migration::version)
        .containsExactly(
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24,
            25, 26, 27);
    assertThat(sha256(PostgresMigrations.ALL.get(0)))
        .as("version 1, the released baseline")
        .isEqualTo("df97e48e2646924f690c82347152d2b3e7300e8bfdc0be68f8fab73698eb7eb2");
    assertThat(sha256(PostgresMigrations.ALL.get(1)))
        .as("version 2 (pinned when it first landed, with the timer functions pulling followers)")
        .isEqualTo("1fdf64d94a9c8afcf5347db420ad93d6e5850ecb3044fbf65ab77f07e6c37daa");
    assertThat(sha256(PostgresMigrations.ALL.get(2)))
        .as("version 3 (pinned when it first landed: the wake-up trigger)")
        .isEqualTo("1abfe55babf857a1424f5744a3de53be0563cacc7d3b29ac7cecba5191fd5939");
    assertThat(sha256(PostgresMigrations.ALL.get(3)))
        .as("version 4, storage v2's log (pinned when it first landed)")
        .isEqualTo("3cfd96feafeb34cefd599f3a69b725ad28940a420d57dc512548d7785643ff6f");
    assertThat(sha256(PostgresMigrations.ALL.get(4)))
        .as("version 5, the SQL functions on the log (pinned when it first landed)")
        .isEqualTo("98f091e0973bd6d00e229c1bfa92bce1090fb5d64dae095b0f96bde1762afeed");
    assertThat(sha256(PostgresMigrations.ALL.get(5)))
        .as("version 6, the publish that notifies lowers the waiting flag (pinned when it landed)")
        .isEqualTo("5c0aee9c1914180caa7fcd0eafcdd5fc3633971f713f0978bc034513969d0222");
    assertThat(sha256(PostgresMigrations.ALL.get(6)))
        .as("version 7, a claim wakes nobody (pinned when it landed)")
        .isEqualTo("7bfc274697dabb24184d0e0ae03bcbb31f6671b2a25a07b7bf736eb3275a709b");
    assertThat(sha256(PostgresMigrations.ALL.get(7)))
        .as("version 8, the claim's boundary probes the xid index (pinned when it landed)")
        .isEqualTo("0eb43df07319beed6ece82216f81fd57e1e1ddbd857898a3be9a0cf355988ac9");
    assertThat(sha256(PostgresMigrations.ALL.get(8)))
        .as("version 9, the claim's floor read under the sequence's lock (pinned when it landed)")
        .isEqualTo("9886267b4f2893f37682e9815333059406a0c5022cb270ec08a651698805619e");
    assertThat(sha256(PostgresMigrations.ALL.get(9)))
        .as("version 10, log rows say where their event row is (pinned when it landed)")
        .isEqualTo("b4b5cec573d6a31ec6b4355951e2efeae5d7e338a79627e1d4f74f4ce97d8281");
    assertThat(sha256(PostgresMigrations.ALL.get(10)))
        .as("version 11, one key's publish locks without a query (pinned when it landed)")
        .isEqualTo("5608d562d571510908122c5687c4434bba746e6488bbe0e917dd2314b75fe067");
    assertThat(sha256(PostgresMigrations.ALL.get(11)))
        .as("version 12, the waiting flag is an unlogged sequence (pinned when it landed)")
        .isEqualTo("7974f2a8dec19629617eb8743195700355dceaec86ef3f0e65015583456e2bac");
    assertThat(sha256(PostgresMigrations.ALL.get(12)))
        .as(
            "version 13, publish locks: lanes first, key locks up to 128 keys (pinned when it landed)")
        .isEqualTo("0a42d129c29178d822422561bb9b344fd7559dec4b99143a474b1fb7f1865063");
    assertThat(sha256(PostgresMigrations.ALL.get(13)))
        .as("version 14, lease expiry per holder (pinned when it landed)")
        .isEqualTo("93ea43678b6cfabe7cc04df83f384eb4ec10f34e09fdfd719c8da74d9f17d958");
    assertThat(sha256(PostgresMigrations.ALL.get(14)))
        .as(
            "version 15, the wake-up trigger on deliveries while a task waits (pinned when it landed)")
        .isEqualTo("1876e5c60d901630e9e1b9a7bef192ee858f1ad101090c311ea7f2f308e0ef2a");
    assertThat(sha256(PostgresMigrations.ALL.get(15)))
        .as("version 16, the wake-up trigger on the log while a task waits (pinned when it landed)")
        .isEqualTo("5f83f3d1b3e97414350264b21c8acc0281b3ac77df4c3ed8f02ebd38b863cda3");
    assertThat(sha256(PostgresMigrations.ALL.get(16)))
        .as("version 17, publish locks in one query each (pinned when it landed)")
        .isEqualTo("490dfd53941dc68859b16e5c756487ba05968ced4087a400b6843e4e079dfa2d");
    assertThat(sha256(PostgresMigrations.ALL.get(17)))
        .as("version 18, the server's incarnation (pinned when it landed)")
        .isEqualTo("4dc0a53f4d2905ef51f4dac1a8e81df8b51a2accbaf13989104c2e36c17f55da");
    assertThat(sha256(PostgresMigrations.ALL.get(18)))
        .as("version 19, the SQL functions refuse U+0000 in headers (pinned when it landed)")
        .isEqualTo("34303d86c00fb0c44f9844a6d50863b14501fcfe156d301cc0dabcd3468a879f");
    assertThat(sha256(PostgresMigrations.ALL.get(19)))
        .as("version 20, the SQL functions refuse more than 1000 handlers (pinned when it landed)")
        .isEqualTo("04bc2a8fbc868c9b180607b4046f3124545a9e24f457d2f0a7523dd51dc9d160");
    assertThat(sha256(PostgresMigrations.ALL.get(20)))
        .as("version 21, the SQL timer functions pull followers by rank (pinned when it landed)")
        .isEqualTo("91c26d1fca90cf19f9e7730188ee04e06b237a00505bcd11baf493527dc036ba");
    assertThat(sha256(PostgresMigrations.ALL.get(21)))
        .as(
            "version 22, the SQL timer functions lock only what they change (pinned when it landed)")
        .isEqualTo("b6050d45d36df573035e8b53f95af54c00d3cf00e4345fdb5498efae9fffd952");
    assertThat(sha256(PostgresMigrations.ALL.get(22)))
        .as("version 23, log rows left with no handler deleted (pinned when it landed)")
        .isEqualTo("6c0fd51d26f40e6fee5b212ec78efb3b4eda9465f226f305d824ed9f1ec69e1b");
    assertThat(sha256(PostgresMigrations.ALL.get(23)))
        .as(
            "version 24, arm_ keeps every timer's deadline, cancel_timer checks its arguments (pinned when it landed)")
        .isEqualTo("75298b936362e86bb32b1c2a99a550cf1e71b1a089cda49ac9959e9a60155ece");
    assertThat(sha256(PostgresMigrations.ALL.get(24)))
        .as("version 25, log ids above every sequence of deliveries (pinned when it landed)")
        .isEqualTo("2d2405401387eae91a836f1492a4f0581d0b47d4b12688805b7f3e9861fde655");
    assertThat(sha256(PostgresMigrations.ALL.get(25)))
        .as(
            "version 26, schedule refuses a deadline outside the years 1 to 9999 (pinned when it landed)")
        .isEqualTo("a08aa1388aaa81c5c9f48571968c3bbd0c524601434228c7f3b019ef99f4ab2d");
    assertThat(sha256(PostgresMigrations.ALL.get(26)))
        .as(
            "version 27, the SQL functions check text and timer ids as Java does (pinned when it landed)")
        .isEqualTo("a3a4d6817bff57b0a2aa36b71e7f645c5b92f188c6950456dbff0a93fb6c2aff");
  }

  /**
   * Version 23: a log row left by an earlier version with every handler struck (two strikes that
   * raced, reliability row 105) leaves the log at the upgrade, and the lane's next claim of one
   * takes the event behind it instead of reading that row again.
   */
  @Test
  void anUpgradeDeletesLogRowsLeftWithNoHandler() throws Exception {
    String prefix = freshPrefix();
    setup(
        new PostgresSchema(
            new PostgresTables(SCHEMA, prefix),
            PostgresMigrations.ALL.subList(0, 22),
            PostgresSchema.LOCK_TIMEOUT,
            PostgresSchema.LOCK_RETRY_DEADLINE));
    PostgresOutboxStore older = store(prefix);
    older.publish(OutboxEvent.builder("t").id("e1").key("k").handlers("a", "b").build());
    older.publish(OutboxEvent.builder("t").id("e2").key("k").handlers("h").build());
    execute(
        "UPDATE %s.%slog SET handlers = '{NULL,NULL}' WHERE event_id = 'e1'"
            .formatted(SCHEMA, prefix));
    String log =
        "SELECT event_id || ':' || array_to_string(handlers, ',', '-') FROM %s.%slog ORDER BY id"
            .formatted(SCHEMA, prefix);
    assertThat(rows(log)).containsExactly("e1:-,-", "e2:h");

    PostgresOutboxStore upgraded = store(prefix);
    upgraded.setup();

    assertThat(rows("SELECT max(version)::text FROM %s.%sschema_version".formatted(SCHEMA, prefix)))
        .containsExactly(String.valueOf(PostgresMigrations.latest(PostgresMigrations.ALL)));
    assertThat(rows(log)).containsExactly("e2:h");
    List<io.relaybus.store.LaneLease> leases =
        upgraded.acquireLanes(
            "A", "g", List.of(io.relaybus.store.Lanes.laneOf("k", "e2")), Duration.ofMinutes(1));
    assertThat(upgraded.claim("A", leases, 1))
        .extracting(d -> d.eventId() + "/" + d.handler())
        .containsExactly("e2/h");
  }

  /** Publishes one event the way a version-1 instance does, in a transaction of its own. */
  private static void publishAsVersionOne(String prefix, String id, String key) throws Exception {
    try (Connection c = EmbeddedPostgres17.dataSource().getConnection()) {
      new VersionOneClient(new PostgresTables(SCHEMA, prefix))
          .publishAll(c, List.of(OutboxEvent.builder("t").id(id).key(key).handlers("h").build()));
    }
  }

  /**
   * The legacy key-counter purge (key_sequences, which only version-1 publishers still write)
   * deletes the counter of a key whose only delivery left is dead, as version 1's did. Since
   * version 4 that restarts nothing: a version-1 publisher's delivery becomes a log row numbered on
   * the log's sequence, whatever its counter says, so the key's next event sorts after the requeued
   * dead letter. (What reliability row 117 fixed for MongoDB and the in-memory store does not
   * happen here.)
   */
  @Test
  void aVersionOnePublishAfterItsKeysCounterWasPurgedGoesAfterTheRequeuedDeadLetter()
      throws Exception {
    String prefix = freshPrefix();
    setup(versionOne(prefix));
    PostgresOutboxStore store = store(prefix);
    store.setup();
    publishAsVersionOne(prefix, "e0", "k");
    publishAsVersionOne(prefix, "e1", "k");
    List<io.relaybus.store.LaneLease> leases =
        store.acquireLanes(
            "A", "g", List.of(io.relaybus.store.Lanes.laneOf("k", "e0")), Duration.ofMinutes(1));
    List<io.relaybus.store.ClaimedDelivery> first = store.claim("A", leases, 10);
    assertThat(first).extracting(d -> d.eventId()).containsExactly("e0", "e1");
    store.complete(List.of(first.get(0).token()));
    assertThat(store.bury(first.get(1).token(), "broken")).isTrue();

    io.relaybus.store.PurgeResult purged =
        store.purge(
            new io.relaybus.store.RetentionPolicy(
                Duration.ZERO, Duration.ofDays(7), Duration.ZERO));
    assertThat(purged.keyCounters()).as("k's counter, with only a dead letter left").isEqualTo(1);
    assertThat(store.requeue(List.of(first.get(1).deliveryId()))).isEqualTo(1);
    publishAsVersionOne(prefix, "e2", "k");

    assertThat(store.claim("A", leases, 1))
        .as("the requeued e1, pending before e2 was published")
        .extracting(d -> d.eventId())
        .containsExactly("e1");
  }

  /**
   * Symptom: after an upgrade from version 1, a requeued dead letter was overtaken by its key's
   * next event. Version 1's purge deleted the counter of a key whose only delivery left was dead
   * (the defect reliability row 117 fixed for MongoDB and the in-memory store), so the dead
   * letter's sequence could lie above every counter left; version 4 started the log's ids above the
   * counters only, and the key's next event got a log id below the dead letter's sequence.
   */
  @Test
  void aDeadLetterOfVersionOneWhoseCounterWasPurgedIsNotOvertakenAfterTheUpgrade()
      throws Exception {
    String prefix = freshPrefix();
    setup(versionOne(prefix));
    for (String id : List.of("e0", "e1", "e2")) {
      publishAsVersionOne(prefix, id, "k");
    }
    // version 1: e0 and e1 completed (their rows deleted), e2 dead after its attempts, then its
    // purge deleted k's counter (its statement: no delivery of the key pending)
    execute(
        ("DELETE FROM %1$s.%2$sdeliveries WHERE event_id IN ('e0', 'e1');"
                + " UPDATE %1$s.%2$sdeliveries SET status = 'dead', last_error = 'broken'"
                + " WHERE event_id = 'e2';"
                + " DELETE FROM %1$s.%2$skey_sequences k WHERE NOT EXISTS (SELECT 1 FROM"
                + " %1$s.%2$sdeliveries d WHERE d.key = k.key AND d.status = 'pending')")
            .formatted(SCHEMA, prefix));
    assertThat(rows("SELECT sequence::text FROM %s.%sdeliveries".formatted(SCHEMA, prefix)))
        .containsExactly("3");

    PostgresOutboxStore store = store(prefix);
    store.setup();
    long e2 =
        store
            .listDeadLetters(io.relaybus.store.DeadLetterFilter.all(), null, 10)
            .items()
            .get(0)
            .id();
    assertThat(store.requeue(List.of(e2))).isEqualTo(1);
    store.publish(OutboxEvent.builder("t").id("e3").key("k").handlers("h").build());

    List<io.relaybus.store.LaneLease> leases =
        store.acquireLanes(
            "A", "g", List.of(io.relaybus.store.Lanes.laneOf("k", "e3")), Duration.ofMinutes(1));
    assertThat(store.claim("A", leases, 1))
        .as("the requeued e2, pending before e3 was published")
        .extracting(d -> d.eventId())
        .containsExactly("e2");
  }

  /**
   * Version 12: the waiting flag, raised and lowered by a setval at every wait, writes no WAL on
   * PostgreSQL 15 and later (an unlogged sequence), whether the outbox was built at this version or
   * upgraded from version 1; and the flag still wakes a waiting task.
   */
  @Test
  void theWaitingFlagIsAnUnloggedSequence() throws Exception {
    String fresh = freshPrefix();
    String upgraded = freshPrefix();
    store(fresh).setup();
    setup(versionOne(upgraded));
    store(upgraded).setup();
    for (String prefix : List.of(fresh, upgraded)) {
      assertThat(
              rows(
                  "SELECT relpersistence FROM pg_class WHERE oid = ?::regclass",
                  SCHEMA + "." + prefix + "waiting"))
          .containsExactly("u");
    }
    PostgresOutboxStore waiter = store(fresh);
    PostgresOutboxStore publisher = store(fresh);
    Thread later =
        new Thread(
            () -> {
              try {
                Thread.sleep(300);
                publisher.publish(OutboxEvent.builder("t").key("k").handlers("h").build());
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            });
    later.start();
    long started = System.nanoTime();
    assertThat(waiter.awaitWork(java.time.Duration.ofSeconds(20))).isTrue();
    later.join();
    assertThat(java.time.Duration.ofNanos(System.nanoTime() - started))
        .isLessThan(java.time.Duration.ofSeconds(10));
  }

  private static String sha256(Migration migration) throws Exception {
    MessageDigest digest = MessageDigest.getInstance("SHA-256");
    for (String statement : migration.statements()) {
      digest.update(statement.getBytes(StandardCharsets.UTF_8));
      digest.update((byte) 0);
    }
    return HexFormat.of().formatHex(digest.digest());
  }
}
