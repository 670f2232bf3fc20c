package io.relaybus.store.postgres;

import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStoreException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Creates, upgrades and checks the schema. {@link #statements()} is the single source of the DDL:
 * {@code setup()} runs it and {@code schemaSql()} renders it as a script.
 *
 * <p>Indexes of deliveries cover only columns that no happy-path statement writes (publish inserts,
 * claim writes only the lane row, completion deletes), so a delivery costs one heap tuple and three
 * index entries. The lanes table has no secondary index and 90% free space per page, so every lane
 * update is HOT.
 */
final class PostgresSchema {
  static final int CURRENT_VERSION = 1;

  /**
   * The oldest PostgreSQL major the store supports: the oldest one it is tested on (the contract
   * suite runs on 13 to 18) and the oldest that managed services still run. setup() refuses older.
   */
  static final int MIN_SERVER_MAJOR = 13;

  private static final Logger log = LoggerFactory.getLogger(PostgresSchema.class);

  private final Tables tables;

  PostgresSchema(Tables tables) {
    this.tables = tables;
  }

  /** The idempotent DDL of the current version, statement by statement. */
  List<String> statements() {
    List<String> statements = new java.util.ArrayList<>(ddl());
    // The functions, before the version row: a schema at the current version has them.
    statements.addAll(statements.size() - 2, PostgresFunctions.statements());
    return List.copyOf(statements);
  }

  private List<String> ddl() {
    return List.of(
        "CREATE SCHEMA IF NOT EXISTS {schema}",
        """
        CREATE TABLE IF NOT EXISTS {version} (
          version integer NOT NULL,
          applied_at timestamptz NOT NULL DEFAULT now()
        )""",
        // handlers: every handler the event ever had a delivery for; it outlives the deliveries
        // and makes a republish or broker redelivery add only handlers not listed (inbox dedup).
        """
        CREATE TABLE IF NOT EXISTS {events} (
          id text PRIMARY KEY,
          type text NOT NULL,
          key text,
          payload bytea NOT NULL,
          content_type text NOT NULL,
          headers json NOT NULL DEFAULT '{}', -- json, not jsonb: keeps header order
          handlers text[] NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now()
        )""",
        // BRIN: events arrive in time order, so retention finds old ones through a few KB of
        // index that costs next to nothing per publish (a btree here cost every publish a write).
        "CREATE INDEX IF NOT EXISTS {p}events_created_brin ON {events} USING brin (created_at)",
        // No foreign key to events: it would lock the event row for every delivery insert and
        // check every purge; retention removes events only once no delivery refers to them.
        """
        CREATE TABLE IF NOT EXISTS {deliveries} (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
          event_id text NOT NULL,
          handler text NOT NULL,
          lane smallint NOT NULL CHECK (lane >= 0 AND lane < 256),
          key text,
          sequence bigint,
          status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'dead')),
          attempts integer NOT NULL DEFAULT 0,
          claims integer NOT NULL DEFAULT 0,
          available_at timestamptz NOT NULL DEFAULT now(),
          last_error text,
          created_at timestamptz NOT NULL DEFAULT now(),
          updated_at timestamptz NOT NULL DEFAULT now(),
          timer_id text,
          fire_at timestamptz,
          firing_claims integer
        ) WITH (autovacuum_vacuum_scale_factor = 0.02, fillfactor = 90)""",
        // fillfactor 90: room on each page for the new version of a timer's extend (a HOT
        // update must land on the same page); at 100 the first extend on each full page was not
        // HOT (PostgresOutboxStoreTest: 1,973 of 2,000 extends HOT at 100, 2,000 at 90).
        // Timers: fire_at is the deadline of a named timer and is in no index, so an extend that
        // moves it later leaves every indexed column alone and is a HOT update. available_at (the
        // indexed due time) stays where it was; when the row comes due while fire_at is later, the
        // claim re-arms it (available_at = fire_at) instead of delivering it. firing_claims: the
        // claims counter under which a claim took the timer to fire it (firing while it equals
        // claims; any end of that claim bumps claims). NULL for others.
        // Tables created by a build of version 1 from before timers get the columns here.
        """
        ALTER TABLE {deliveries} ADD COLUMN IF NOT EXISTS timer_id text,
          ADD COLUMN IF NOT EXISTS fire_at timestamptz,
          ADD COLUMN IF NOT EXISTS firing_claims integer""",
        """
        CREATE UNIQUE INDEX IF NOT EXISTS {p}deliveries_timer_idx
          ON {deliveries} (handler, timer_id) WHERE timer_id IS NOT NULL AND status = 'pending'""",
        """
        CREATE UNIQUE INDEX IF NOT EXISTS {p}deliveries_event_handler_key
          ON {deliveries} (event_id, handler)""",
        """
        CREATE INDEX IF NOT EXISTS {p}deliveries_lane_due_idx
          ON {deliveries} (lane, available_at, id) WHERE status = 'pending'""",
        """
        CREATE INDEX IF NOT EXISTS {p}deliveries_key_seq_idx
          ON {deliveries} (lane, handler, key, sequence) WHERE key IS NOT NULL AND status = 'pending'""",
        """
        CREATE INDEX IF NOT EXISTS {p}deliveries_dead_idx
          ON {deliveries} (updated_at, id) WHERE status = 'dead'""",
        "ALTER TABLE {deliveries} SET (autovacuum_vacuum_scale_factor = 0.02, fillfactor = 90)",
        // in_flight: ids the holder claimed and has not finished; epoch: the fencing token.
        // One lane row per 8 KB page, so that every lane update is HOT however many lanes a
        // statement touches and however long in_flight grows (up to the TOAST threshold). A claim
        // records its batch in several lanes in one statement, and each new version needs room on
        // its page while the old one is still live: with the reference design's fillfactor 50
        // (~58 rows a page) the first acquire of 256 lanes was only 217/257 HOT, with fillfactor
        // 10 alone (~9 rows a page) a 200k drain was 86-90% HOT. Seeding each row with 1 KB of
        // padding under fillfactor 10 gives each its own page; the padding is dropped at once and
        // the space stays with the row. 256 pages, 2 MB.
        """
        CREATE TABLE IF NOT EXISTS {lanes} (
          lane smallint PRIMARY KEY CHECK (lane >= 0 AND lane < 256),
          epoch bigint NOT NULL DEFAULT 0,
          lease_owner text,
          lease_group text,
          lease_expires_at timestamptz,
          in_flight bigint[] NOT NULL DEFAULT '{}'
        ) WITH (fillfactor = 10)""",
        "ALTER TABLE {lanes} SET (fillfactor = 10)",
        "INSERT INTO {lanes} (lane, lease_owner) SELECT generate_series(0, "
            + (Lanes.COUNT - 1)
            + "), repeat('-', 1024) ON CONFLICT (lane) DO NOTHING",
        "UPDATE {lanes} SET lease_owner = NULL WHERE lease_owner = repeat('-', 1024)",
        // One row per ordering key; a publisher holds it (row lock) until commit, which makes the
        // key's sequence follow commit order.
        """
        CREATE TABLE IF NOT EXISTS {keys} (
          key text PRIMARY KEY,
          sequence bigint NOT NULL,
          updated_at timestamptz NOT NULL DEFAULT now()
        ) WITH (fillfactor = 70)""",
        """
        CREATE TABLE IF NOT EXISTS {completed} (
          id bigint PRIMARY KEY,
          event_id text NOT NULL,
          handler text NOT NULL,
          lane smallint NOT NULL,
          key text,
          sequence bigint,
          attempts integer NOT NULL,
          created_at timestamptz NOT NULL,
          completed_at timestamptz NOT NULL DEFAULT now()
        )""",
        "CREATE INDEX IF NOT EXISTS {p}completed_at_idx ON {completed} (completed_at)",
        // The lane function for publishers that write with plain SQL: 32-bit FNV-1a of the UTF-8
        // bytes of the key (or event id), mod 256, the same as io.relaybus.store.Lanes.
        """
        CREATE OR REPLACE FUNCTION {lane_fn}(k text) RETURNS smallint
        LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
        DECLARE
          h bigint := 2166136261;
          b bytea := convert_to(k, 'UTF8');
        BEGIN
          FOR i IN 0 .. length(b) - 1 LOOP
            h := ((h # get_byte(b, i)) * 16777619) & 4294967295;
          END LOOP;
          RETURN (h % 256)::smallint;
        END
        $$""",
        "DELETE FROM {version}",
        "INSERT INTO {version} (version) VALUES (" + CURRENT_VERSION + ")");
  }

  /** The DDL as one script, to be applied in one transaction with the workers stopped. */
  String script() {
    StringBuilder sql = new StringBuilder();
    sql.append("-- relaybus outbox schema, version ")
        .append(CURRENT_VERSION)
        .append(", schema ")
        .append(tables.schema())
        .append(", table prefix '")
        .append(tables.prefix())
        .append(
            "'\n-- Idempotent: apply it in one transaction; then start relaybus without setup.\n")
        .append("BEGIN;\n");
    for (String statement : statements()) {
      sql.append(tables.sql(statement).strip()).append(";\n\n");
    }
    return sql.append("COMMIT;\n").toString();
  }

  /**
   * Creates or upgrades the schema in one transaction under an advisory lock, so workers that start
   * together run it one after the other; the later ones find the current version and change nothing
   * (no DDL lock is taken then).
   */
  void setup(Connection connection) throws SQLException {
    checkServerVersion(connection);
    boolean autoCommit = connection.getAutoCommit();
    connection.setAutoCommit(false);
    try {
      try (PreparedStatement lock =
          connection.prepareStatement("SELECT pg_advisory_xact_lock(?)")) {
        lock.setLong(1, tables.advisoryLockKey());
        lock.execute();
      }
      Integer version = installedVersion(connection);
      if (version != null && version > CURRENT_VERSION) {
        throw new OutboxStoreException(
            "schema %s (prefix '%s') has version %d, newer than this relaybus (%d): upgrade relaybus"
                .formatted(tables.schema(), tables.prefix(), version, CURRENT_VERSION),
            false,
            null);
      }
      if (version != null
          && version == CURRENT_VERSION
          && laneCount(connection) == Lanes.COUNT
          && hasTimerColumns(connection)
          && hasFunctions(connection)) {
        connection.commit();
        return;
      }
      try (Statement statement = connection.createStatement()) {
        for (String ddl : statements()) {
          statement.execute(tables.sql(ddl));
        }
      }
      connection.commit();
      log.info(
          "Schema {} (prefix '{}') {} to version {}.",
          tables.schema(),
          tables.prefix(),
          version == null ? "created" : "upgraded",
          CURRENT_VERSION);
    } catch (SQLException | RuntimeException e) {
      connection.rollback();
      throw e;
    } finally {
      connection.setAutoCommit(autoCommit);
    }
  }

  /** Checks version and lanes; throws naming what is wrong and how to fix it. */
  void verify(Connection connection) throws SQLException {
    Integer version = installedVersion(connection);
    String where = "schema %s with table prefix '%s'".formatted(tables.schema(), tables.prefix());
    if (version == null) {
      throw new OutboxStoreException(
          "the outbox is not set up in "
              + where
              + ": run setup() (the connector does it when outbox.setup is true) or apply schemaSql()",
          false,
          null);
    }
    if (version != CURRENT_VERSION) {
      throw new OutboxStoreException(
          "the outbox in %s has schema version %d, this relaybus needs %d: run setup() to upgrade"
              .formatted(where, version, CURRENT_VERSION),
          false,
          null);
    }
    if (!hasTimerColumns(connection)) {
      throw new OutboxStoreException(
          "the deliveries table of %s has no timer columns (timer_id, fire_at, firing_claims; it was created by an earlier build of version %d): run setup() to add them"
              .formatted(where, CURRENT_VERSION),
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
