package io.relaybus.store.postgres;

import io.relaybus.store.Lanes;
import java.util.List;

/**
 * The numbered schema migrations: {@code setup()} applies those above the installed version, in
 * order, each in its own transaction, and records each in the version table; {@code schemaSql()}
 * renders them as a script.
 *
 * <p>Rules for a migration: once released it never changes (MigrationsTest pins each one's text; a
 * change to the schema is a new migration), it is idempotent (IF NOT EXISTS, OR REPLACE), because
 * setup() re-runs all of them to repair a schema that lost a part and a script may be applied
 * twice, and it keeps DDL that takes an ACCESS EXCLUSIVE lock on a hot table (deliveries, lanes,
 * events, key_sequences) to statements that finish at once once they hold the lock (catalog-only
 * changes: no table rewrite, no validating scan; build an index with a separate CONCURRENTLY step
 * instead).
 */
final class PostgresMigrations {
  private PostgresMigrations() {}

  /** One numbered step: its version, a one-line description, its statements (templates). */
  record Migration(int version, String description, List<String> statements) {
    Migration {
      statements = List.copyOf(statements);
    }
  }

  /**
   * Version 1 as it was released (commit 207c0e8, unchanged up to the SQL functions), frozen: its
   * DDL verbatim, without its two version-bookkeeping statements ({@code DELETE FROM {version}},
   * {@code INSERT ... VALUES (1)}), which setup() and the script now write per migration. Never
   * edit it; a version-1 database in the field was built from exactly this.
   */
  static final List<String> BASELINE =
      List.of(
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
          // indexed due time) stays where it was; when the row comes due while fire_at is later,
          // the
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
        $$""");

  static final List<Migration> ALL =
      List.of(
          new Migration(1, "baseline: tables, indexes, 256 lanes, lane function", BASELINE),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table, so it runs under load.
          new Migration(
              2,
              "SQL functions publish, schedule, cancel_timer and their helpers",
              PostgresFunctions.statements()));

  /** The version of the newest migration. */
  static int latest(List<Migration> migrations) {
    return migrations.get(migrations.size() - 1).version();
  }
}
