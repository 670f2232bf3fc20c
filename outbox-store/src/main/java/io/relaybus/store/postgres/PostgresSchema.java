package io.relaybus.store.postgres;

import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.postgres.PostgresMigrations.Migration;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Creates, upgrades and checks the schema, from the numbered {@link PostgresMigrations}: {@code
 * setup()} applies those above the installed version and {@code schemaSql()} renders them.
 *
 * <p>Indexes of deliveries cover only columns that no happy-path statement writes (publish inserts,
 * claim writes only the lane row, completion deletes), so a delivery costs one heap tuple and three
 * index entries. The lanes table has no secondary index and 90% free space per page, so every lane
 * update is HOT.
 */
final class PostgresSchema {
  static final int CURRENT_VERSION = PostgresMigrations.latest(PostgresMigrations.ALL);

  /**
   * The oldest PostgreSQL major the store supports: the oldest one it is tested on (the contract
   * suite runs on 13 to 18) and the oldest that managed services still run. setup() refuses older.
   */
  static final int MIN_SERVER_MAJOR = 13;

  /**
   * How long a migration statement may wait for a table lock before its transaction gives up and is
   * retried. A waiting ACCESS EXCLUSIVE request queues every later publisher and claim on that
   * table behind it, so the wait must be short; the retry comes back when the holder is gone.
   */
  static final Duration LOCK_TIMEOUT = Duration.ofMillis(500);

  /** How long setup() keeps retrying a migration that cannot get its locks before it gives up. */
  static final Duration LOCK_RETRY_DEADLINE = Duration.ofMinutes(2);

  private static final String LOCK_NOT_AVAILABLE = "55P03";
  private static final String DEADLOCK_DETECTED = "40P01";
  private static final String UNIQUE_VIOLATION = "23505";

  private static final Logger log = LoggerFactory.getLogger(PostgresSchema.class);

  private final PostgresTables tables;
  private final Boolean notifyOnPublish;
  private final List<Migration> migrations;
  private final int currentVersion;
  private final Duration lockTimeout;
  private final Duration retryDeadline;
  private final java.util.concurrent.atomic.AtomicInteger lockRetries =
      new java.util.concurrent.atomic.AtomicInteger();

  PostgresSchema(PostgresTables tables) {
    this(tables, null);
  }

  /**
   * @param notifyOnPublish whether setup() enables ({@code true}) or disables ({@code false}) the
   *     wake-up trigger ({@link PostgresMigrations#NOTIFY_TRIGGER}); {@code null} leaves it as it
   *     is
   */
  PostgresSchema(PostgresTables tables, Boolean notifyOnPublish) {
    this(tables, PostgresMigrations.ALL, LOCK_TIMEOUT, LOCK_RETRY_DEADLINE, notifyOnPublish);
  }

  // visible for testing: an older relaybus (fewer migrations), a later one (test-only migrations)
  PostgresSchema(
      PostgresTables tables,
      List<Migration> migrations,
      Duration lockTimeout,
      Duration retryDeadline) {
    this(tables, migrations, lockTimeout, retryDeadline, null);
  }

  private PostgresSchema(
      PostgresTables tables,
      List<Migration> migrations,
      Duration lockTimeout,
      Duration retryDeadline,
      Boolean notifyOnPublish) {
    this.tables = tables;
    this.notifyOnPublish = notifyOnPublish;
    this.migrations = List.copyOf(migrations);
    this.currentVersion = PostgresMigrations.latest(migrations);
    this.lockTimeout = lockTimeout;
    this.retryDeadline = retryDeadline;
  }

  /**
   * The migrations above {@code fromVersion} (0: all) as one script with the version bookkeeping,
   * for users who run their own migrations. Each migration is its own transaction, as in setup().
   */
  String script(int fromVersion) {
    if (fromVersion < 0 || fromVersion > currentVersion) {
      throw new IllegalArgumentException(
          "fromVersion must be 0 (nothing installed) to %d (this relaybus's schema version), but was %d"
              .formatted(currentVersion, fromVersion));
    }
    StringBuilder sql = new StringBuilder();
    sql.append("-- relaybus outbox schema, version ")
        .append(currentVersion)
        .append(fromVersion == 0 ? "" : ", upgrade from version " + fromVersion)
        .append(", schema ")
        .append(tables.schema())
        .append(", table prefix '")
        .append(tables.prefix())
        .append("'\n")
        .append("-- Apply it with psql -v ON_ERROR_STOP=1 -f; then start relaybus without setup.\n")
        .append(
            "-- Each migration is one transaction that records its version; all are idempotent.\n")
        .append(
            "-- Each checks first that the installed version is the one below it, else fails.\n");
    for (Migration migration : migrations) {
      if (migration.version() <= fromVersion) {
        continue;
      }
      sql.append("\n-- version ")
          .append(migration.version())
          .append(": ")
          .append(migration.description())
          .append("\nBEGIN;\n");
      sql.append(tables.sql(expectVersion(migration.version() - 1)).strip())
          .append(";\n")
          .append("SET LOCAL lock_timeout = '")
          .append(lockTimeout.toMillis())
          .append("ms';\n\n");
      for (String statement : migration.statements()) {
        sql.append(tables.sql(PostgresMigrations.asRun(statement)).strip()).append(";\n\n");
      }
      sql.append(tables.sql(recordVersion(migration.version()))).append(";\nCOMMIT;\n");
    }
    return sql.toString();
  }

  /**
   * A guard at the top of each migration of the script: takes setup()'s advisory lock (so a script
   * and a setup() take turns), then fails (and so rolls the migration back) unless the installed
   * version is the one just below it, so a script from the wrong version stops instead of skipping
   * or repeating a step.
   */
  private String expectVersion(int previous) {
    return """
        DO $$
        DECLARE
          installed integer;
        BEGIN
          PERFORM pg_advisory_xact_lock(%d);
          IF to_regclass('{version}') IS NOT NULL THEN
            EXECUTE 'SELECT max(version) FROM {version}' INTO installed;
          END IF;
          IF installed IS DISTINCT FROM %s THEN
            RAISE EXCEPTION 'relaybus schema {schema} (prefix ''{p}''): this step upgrades version %d to %d, but the installed version is %%', coalesce(installed::text, 'none');
          END IF;
        END
        $$"""
        .formatted(
            tables.advisoryLockKey(),
            previous == 0 ? "NULL" : String.valueOf(previous),
            previous,
            previous + 1);
  }

  private static String recordVersion(int version) {
    return "INSERT INTO {version} (version) VALUES (" + version + ")";
  }

  /**
   * Brings the schema to this relaybus's version: applies each migration above the installed one,
   * in order, each in its own transaction under the advisory lock (so workers that start together
   * take turns; the later ones find it done), recording it in the version table. At the current
   * version it only reads the catalog (no DDL lock), unless a part is missing (lanes deleted,
   * functions or the wake-up trigger dropped, timer columns of a pre-release version 1): then it
   * re-runs the idempotent migrations. Last, when {@code notifyOnPublish} is set, it enables or
   * disables the wake-up trigger if it is not as wanted (see {@link #switchNotify}).
   *
   * <p>One transaction per migration, not one for all: each holds its locks only for its own
   * statements, is retried on its own when it cannot get them within {@link #LOCK_TIMEOUT}, and a
   * later failure keeps the earlier versions recorded.
   */
  void setup(Connection connection) throws SQLException {
    checkServerVersion(connection);
    boolean autoCommit = connection.getAutoCommit();
    connection.setAutoCommit(false);
    try {
      while (true) {
        Step step = withLockRetry(connection, this::nextStep);
        if (step == Step.DONE || (step == Step.REPAIR && repair(connection))) {
          break;
        }
        // one migration per transaction, until nothing is left (or the version moved)
      }
      if (notifyOnPublish != null && currentVersion >= NOTIFY_VERSION) {
        withLockRetry(connection, this::switchNotify);
      }
    } catch (SQLException | RuntimeException e) {
      Jdbc.restoreAutoCommit(connection, autoCommit, e);
      throw e;
    }
    Jdbc.restoreAutoCommit(connection, autoCommit, null);
  }

  private enum Step {
    MORE,
    DONE,
    REPAIR
  }

  /** One transaction: applies the next migration (MORE), or finds a part missing, or not. */
  private Step nextStep(Connection connection) throws SQLException {
    try (PreparedStatement lock = connection.prepareStatement("SELECT pg_advisory_xact_lock(?)")) {
      lock.setLong(1, tables.advisoryLockKey());
      lock.execute();
    }
    Integer version = installedVersion(connection);
    if (version != null && version > currentVersion) {
      throw new OutboxStoreException(
          "schema %s (prefix '%s') has version %d, newer than this relaybus (%d): upgrade relaybus"
              .formatted(tables.schema(), tables.prefix(), version, currentVersion),
          false,
          null);
    }
    int installed = version == null ? 0 : version;
    Migration next =
        migrations.stream().filter(m -> m.version() > installed).findFirst().orElse(null);
    try (Statement statement = connection.createStatement()) {
      if (next != null) {
        statement.execute("SET LOCAL lock_timeout = '" + lockTimeout.toMillis() + "ms'");
        for (String ddl : next.statements()) {
          statement.execute(tables.sql(PostgresMigrations.asRun(ddl)));
        }
        statement.execute(tables.sql(recordVersion(next.version())));
        connection.commit();
        log.info(
            "Schema {} (prefix '{}') migrated to version {}: {}.",
            tables.schema(),
            tables.prefix(),
            next.version(),
            next.description());
        return Step.MORE;
      }
      boolean complete = complete(connection);
      connection.commit();
      return complete ? Step.DONE : Step.REPAIR;
    }
  }

  /**
   * Re-applies the migrations to a schema at the current version that lacks a part, as an upgrade
   * applies them: each in its own transaction under the advisory lock, with the lock timeout and
   * its retries, so no transaction holds one table while it waits for another (all in one, it held
   * deliveries while it waited for the log, and deadlocked with a claim). A function that a later
   * migration creates again is left as it is while it exists, so no older version of it is ever
   * committed in between. False when the installed version moved meanwhile: look again.
   */
  private boolean repair(Connection connection) throws SQLException {
    for (int i = 0; i < migrations.size(); i++) {
      List<String> statements = migrations.get(i).statements();
      List<String> later =
          migrations.subList(i + 1, migrations.size()).stream()
              .flatMap(m -> m.statements().stream())
              .toList();
      boolean applied =
          withLockRetry(
              connection,
              c -> {
                try (PreparedStatement lock =
                    c.prepareStatement("SELECT pg_advisory_xact_lock(?)")) {
                  lock.setLong(1, tables.advisoryLockKey());
                  lock.execute();
                }
                Integer version = installedVersion(c);
                if (version == null || version != currentVersion) {
                  c.commit();
                  return false;
                }
                try (Statement statement = c.createStatement()) {
                  statement.execute("SET LOCAL lock_timeout = '" + lockTimeout.toMillis() + "ms'");
                  for (String ddl : statements) {
                    if (!replacedLaterAndPresent(c, ddl, later)) {
                      statement.execute(tables.sql(PostgresMigrations.asRun(ddl)));
                    }
                  }
                }
                c.commit();
                return true;
              });
      if (!applied) {
        return false;
      }
    }
    log.info(
        "Schema {} (prefix '{}') at version {} lacked a part (lanes, timer columns, functions or"
            + " the wake-up trigger): re-applied its migrations.",
        tables.schema(),
        tables.prefix(),
        currentVersion);
    return true;
  }

  /** A statement up to its function's RETURNS or LANGUAGE, white space collapsed. */
  private static String declaration(String ddl) {
    java.util.regex.Matcher end = DECLARATION_END.matcher(ddl);
    return (end.find() ? ddl.substring(0, end.start()) : ddl).replaceAll("\\s+", " ").strip();
  }

  private static final java.util.regex.Pattern DECLARATION_END =
      java.util.regex.Pattern.compile("\\b(RETURNS|LANGUAGE)\\b");

  private static final java.util.regex.Pattern CREATE_FUNCTION =
      java.util.regex.Pattern.compile("^\\s*CREATE OR REPLACE FUNCTION\\s+([^\\s(]+)\\s*\\(");

  /**
   * Whether {@code ddl} creates a function that a later statement creates again with the same
   * declaration (up to its RETURNS) and that exists now: the repair leaves it to the later one.
   */
  private boolean replacedLaterAndPresent(Connection connection, String ddl, List<String> later)
      throws SQLException {
    java.util.regex.Matcher function = CREATE_FUNCTION.matcher(ddl);
    if (!function.find()) {
      return false;
    }
    String declaration = declaration(ddl);
    if (later.stream().noneMatch(s -> declaration.equals(declaration(s)))) {
      return false;
    }
    try (PreparedStatement exists =
        connection.prepareStatement("SELECT to_regproc(?) IS NOT NULL")) {
      exists.setString(1, tables.sql(function.group(1)));
      try (ResultSet rs = exists.executeQuery()) {
        rs.next();
        return rs.getBoolean(1);
      }
    }
  }

  /** Whether every part of the current version is there; reads only the catalog and the lanes. */
  private boolean complete(Connection connection) throws SQLException {
    return laneCount(connection) == Lanes.COUNT
        && hasTimerColumns(connection)
        && (currentVersion < 2 || hasFunctions(connection))
        && (currentVersion < NOTIFY_VERSION || hasNotifyTriggers(connection));
  }

  /** The version that added the wake-up trigger. */
  static final int NOTIFY_VERSION = 3;

  /**
   * One transaction: enables or disables the wake-up trigger on each table that has it, to match
   * {@code notifyOnPublish}. ALTER TABLE ... ENABLE/DISABLE TRIGGER takes SHARE ROW EXCLUSIVE (a
   * short wait behind open publishers, under the lock timeout), so it runs only when the state
   * differs: a setup() that finds it as wanted takes no lock.
   */
  private boolean switchNotify(Connection connection) throws SQLException {
    try (PreparedStatement lock = connection.prepareStatement("SELECT pg_advisory_xact_lock(?)")) {
      lock.setLong(1, tables.advisoryLockKey());
      lock.execute();
    }
    for (String table : PostgresMigrations.NOTIFY_TABLES) {
      String state = triggerState(connection, tables, table);
      if (state == null || !"D".equals(state) == notifyOnPublish) {
        continue;
      }
      try (Statement statement = connection.createStatement()) {
        statement.execute("SET LOCAL lock_timeout = '" + lockTimeout.toMillis() + "ms'");
        statement.execute(
            tables.sql(
                "ALTER TABLE "
                    + table
                    + (notifyOnPublish ? " ENABLE" : " DISABLE")
                    + " TRIGGER "
                    + PostgresMigrations.NOTIFY_TRIGGER));
      }
      log.info(
          "Schema {} (prefix '{}'): {} the wake-up trigger {} on {} (notifyOnPublish {}).",
          tables.schema(),
          tables.prefix(),
          notifyOnPublish ? "enabled" : "disabled",
          tables.sql(PostgresMigrations.NOTIFY_TRIGGER),
          tables.sql(table),
          notifyOnPublish);
    }
    connection.commit();
    return true;
  }

  /**
   * The wake-up trigger's {@code pg_trigger.tgenabled} on {@code table} ({@code O} enabled, {@code
   * D} disabled, {@code R}/{@code A} enabled for replicas/always), or null when it is missing.
   */
  static String triggerState(Connection connection, PostgresTables tables, String table)
      throws SQLException {
    try (PreparedStatement state =
        connection.prepareStatement(
            "SELECT tgenabled FROM pg_trigger WHERE tgrelid = to_regclass(?) AND tgname = ?")) {
      state.setString(1, tables.sql(table));
      state.setString(2, tables.sql(PostgresMigrations.NOTIFY_TRIGGER));
      try (ResultSet rs = state.executeQuery()) {
        return rs.next() ? rs.getString(1) : null;
      }
    }
  }

  /** Whether every table that should carry the wake-up trigger has it (enabled or not). */
  private boolean hasNotifyTriggers(Connection connection) throws SQLException {
    for (String table : PostgresMigrations.NOTIFY_TABLES) {
      if (triggerState(connection, tables, table) == null) {
        return false;
      }
    }
    return true;
  }

  private interface Work<T> {
    T run(Connection connection) throws SQLException;
  }

  /**
   * Runs one transaction; when a statement could not get its lock within the lock timeout (or was
   * chosen as a deadlock victim), rolls back and tries again after a pause that grows to 2 s, until
   * the retry deadline.
   */
  private <T> T withLockRetry(Connection connection, Work<T> work) throws SQLException {
    long deadline = System.nanoTime() + retryDeadline.toNanos();
    long pauseMs = 50;
    for (int attempt = 1; ; attempt++) {
      try {
        return work.run(connection);
      } catch (SQLException e) {
        connection.rollback();
        boolean lockWait =
            LOCK_NOT_AVAILABLE.equals(e.getSQLState())
                || DEADLOCK_DETECTED.equals(e.getSQLState())
                || lostSchemaCreation(e);
        if (!lockWait || System.nanoTime() + pauseMs * 1_000_000 > deadline) {
          if (lockWait) {
            throw new OutboxStoreException(
                "setting up schema %s (prefix '%s'): a migration could not get its table locks within %d ms in %d attempts over %s (a long transaction holds them): end it, or run setup() again later"
                    .formatted(
                        tables.schema(),
                        tables.prefix(),
                        lockTimeout.toMillis(),
                        attempt,
                        retryDeadline),
                true,
                e);
          }
          throw e;
        }
        log.info(
            "Schema {} (prefix '{}'): a migration waited {} ms for a table lock (attempt {});"
                + " retrying in {} ms.",
            tables.schema(),
            tables.prefix(),
            lockTimeout.toMillis(),
            attempt,
            pauseMs);
        lockRetries.incrementAndGet();
        sleep(pauseMs);
        pauseMs = Math.min(pauseMs * 2, 2000);
      } catch (RuntimeException e) {
        connection.rollback();
        throw e;
      }
    }
  }

  /**
   * A concurrent setup() of another prefix created the schema first: CREATE SCHEMA IF NOT EXISTS is
   * not safe against a concurrent one, and the loser fails with a unique violation on pg_namespace
   * once the winner commits. Its retry finds the schema there.
   */
  private static boolean lostSchemaCreation(SQLException e) {
    return UNIQUE_VIOLATION.equals(e.getSQLState())
        && e.getMessage() != null
        && e.getMessage().contains("pg_namespace_nspname_index");
  }

  /** How often a migration stepped back for a lock and was retried. */
  // visible for testing
  int lockRetries() {
    return lockRetries.get();
  }

  private static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new OutboxStoreException("interrupted while setting up the schema", true, e);
    }
  }

  /** Checks version and lanes; throws naming what is wrong and how to fix it. */
  void verify(Connection connection) throws SQLException {
    String where = "schema %s with table prefix '%s'".formatted(tables.schema(), tables.prefix());
    try (Statement statement = connection.createStatement();
        ResultSet rs =
            statement.executeQuery(
                "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'")) {
      rs.next();
      if (rs.getBoolean(1) || rs.getBoolean(2)) {
        // a standby (a read replica's address) or a role or database that defaults to read-only
        // transactions: the schema may be there, but every claim and completion would fail
        String message =
            "the database serving %s is read-only (%s): the store writes (claims, completions,"
                    .formatted(
                        where,
                        rs.getBoolean(1)
                            ? "a standby in recovery: a read replica's address?"
                            : "default_transaction_read_only is on for this role or database")
                + " lane leases), so the connection must go to the primary, read-write server";
        // SQLState 25006 (read_only_sql_transaction), what the first write would have failed with
        throw new OutboxStoreException(message, false, new SQLException(message, "25006"));
      }
    }
    Integer version = installedVersion(connection);
    if (version == null) {
      throw new OutboxStoreException(
          "the outbox is not set up in "
              + where
              + ": run setup() (the connector does it when outbox.setup is true) or apply schemaSql()",
          false,
          null);
    }
    if (version != currentVersion) {
      throw new OutboxStoreException(
          "the outbox in %s has schema version %d, this relaybus needs %d: run setup() to upgrade"
              .formatted(where, version, currentVersion),
          false,
          null);
    }
    if (!hasTimerColumns(connection)) {
      throw new OutboxStoreException(
          "the deliveries table of %s has no timer columns (timer_id, fire_at, firing_claims; it was created by an earlier build of version %d): run setup() to add them"
              .formatted(where, 1),
          false,
          null);
    }
    long cache = logSequenceCache(connection);
    if (cache != 1) {
      String sequence = tables.sql("{log_seq}");
      throw new OutboxStoreException(
          ("the log sequence %s of %s has CACHE %d: relaybus needs CACHE 1 (with a cache each"
                  + " session hands out ids from a range it took earlier, so an id can be taken"
                  + " after a larger one, and the claims would miss events): run ALTER SEQUENCE %s"
                  + " CACHE 1")
              .formatted(sequence, where, cache, sequence),
          false,
          null);
    }
    int lanes = laneCount(connection);
    if (lanes != Lanes.COUNT) {
      throw new OutboxStoreException(
          "the lanes table of %s has %d of the %d lanes (lanes 0-255 must all exist): run setup() to restore them"
              .formatted(where, lanes, Lanes.COUNT),
          false,
          null);
    }
  }

  /** Refuses a server older than {@link #MIN_SERVER_MAJOR}, naming the version it found. */
  static void checkServerVersion(Connection connection) throws SQLException {
    String found;
    int number;
    try (Statement statement = connection.createStatement();
        ResultSet rs = statement.executeQuery("SHOW server_version_num")) {
      rs.next();
      number = Integer.parseInt(rs.getString(1).strip());
    }
    if (number < MIN_SERVER_MAJOR * 10000) {
      try (Statement statement = connection.createStatement();
          ResultSet rs = statement.executeQuery("SHOW server_version")) {
        rs.next();
        found = rs.getString(1);
      }
      throw new OutboxStoreException(
          "PostgreSQL %s (server_version_num %d) is too old: relaybus needs PostgreSQL %d or later"
              .formatted(found, number, MIN_SERVER_MAJOR),
          false,
          null);
    }
  }

  /** The CACHE of the log's id sequence (1 when there is none yet: before version 4). */
  private long logSequenceCache(Connection connection) throws SQLException {
    try (Statement statement = connection.createStatement();
        ResultSet rs =
            statement.executeQuery(
                tables.sql(
                    "SELECT seqcache FROM pg_sequence WHERE seqrelid = to_regclass('{log_seq}')"))) {
      return rs.next() ? rs.getLong(1) : 1;
    }
  }

  private Integer installedVersion(Connection connection) throws SQLException {
    if (!exists(connection, "{version}")) {
      return null;
    }
    try (Statement statement = connection.createStatement();
        ResultSet rs = statement.executeQuery(tables.sql("SELECT max(version) FROM {version}"))) {
      rs.next();
      int version = rs.getInt(1);
      return rs.wasNull() ? null : version;
    }
  }

  private int laneCount(Connection connection) throws SQLException {
    if (!exists(connection, "{lanes}")) {
      return 0;
    }
    try (Statement statement = connection.createStatement();
        ResultSet rs =
            statement.executeQuery(
                tables.sql(
                    "SELECT count(*) FROM {lanes} WHERE lane >= 0 AND lane < " + Lanes.COUNT))) {
      rs.next();
      return rs.getInt(1);
    }
  }

  /** Whether deliveries has the timer columns (added to version 1 before its release). */
  private boolean hasTimerColumns(Connection connection) throws SQLException {
    try (PreparedStatement columns =
        connection.prepareStatement(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(?)"
                + " AND attname IN ('timer_id', 'fire_at', 'firing_claims') AND NOT attisdropped")) {
      columns.setString(1, tables.sql("{deliveries}"));
      try (ResultSet rs = columns.executeQuery()) {
        rs.next();
        return rs.getInt(1) == 3;
      }
    }
  }

  /** Whether the SQL publish functions exist (added to version 1 after its release). */
  private boolean hasFunctions(Connection connection) throws SQLException {
    for (String signature : PostgresFunctions.SIGNATURES) {
      try (PreparedStatement exists =
          connection.prepareStatement("SELECT to_regprocedure(?) IS NOT NULL")) {
        exists.setString(1, tables.sql(signature));
        try (ResultSet rs = exists.executeQuery()) {
          rs.next();
          if (!rs.getBoolean(1)) {
            return false;
          }
        }
      }
    }
    return true;
  }

  private boolean exists(Connection connection, String table) throws SQLException {
    try (PreparedStatement exists =
        connection.prepareStatement("SELECT to_regclass(?) IS NOT NULL")) {
      exists.setString(1, tables.sql(table));
      try (ResultSet rs = exists.executeQuery()) {
        rs.next();
        return rs.getBoolean(1);
      }
    }
  }
}
