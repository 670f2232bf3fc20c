package io.relaybus.store.postgres;

import io.relaybus.store.Lanes;
import java.util.List;
import java.util.stream.Stream;

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
 *
 * <p>A migration takes such a lock on one hot table only: two in one transaction can deadlock with
 * the delivery path, which takes the same tables in other orders (a publisher writes events, then
 * the log; a claim reads the log, then events). Holding events and waiting for the log while a
 * claim holds the log and waits for events, the migration loses each attempt to its lock timeout
 * (shorter than PostgreSQL's deadlock_timeout), and under steady claims every attempt
 * (PostgresMigrationsTest.aMigrationNeverHoldsOneTableWhileWaitingForAnother). A change to several
 * tables is several migrations. Version 4 is the exception: it locks key_sequences and deliveries
 * at its start, in the order a version-1 publisher takes them, and only version-1 code uses the
 * tables until it is in.
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

  /**
   * How setup() and the script run version 1's first statement: PostgreSQL checks CREATE on the
   * database before it looks whether the schema of a CREATE SCHEMA IF NOT EXISTS exists, so a role
   * that owns the schema but cannot create schemas failed there (42501). Version 1's text stays.
   */
  static String asRun(String statement) {
    return statement.equals(BASELINE.get(0)) ? CREATE_SCHEMA_IF_MISSING : statement;
  }

  private static final String CREATE_SCHEMA_IF_MISSING =
      """
        DO $$
        BEGIN
          IF to_regnamespace('{schema}') IS NULL THEN
            CREATE SCHEMA IF NOT EXISTS {schema};
          END IF;
        END
        $$""";

  /**
   * The trigger that wakes listeners ({@link PostgresWakeups}) when deliveries are inserted; its
   * name on each table it is attached to (trigger names are per table). {@code
   * PostgresOutboxStore.Builder#notifyOnPublish} enables or disables it.
   */
  static final String NOTIFY_TRIGGER = "{p}notify_work";

  /** The tables that carry {@link #NOTIFY_TRIGGER}: setup() checks and switches each. */
  static final List<String> NOTIFY_TABLES = List.of("{deliveries}", "{log}");

  /**
   * Version 3: a NOTIFY on the store's channel ({@link PostgresTables#notifyChannel()}) when a
   * statement inserted deliveries, so a waiting connector task claims at once instead of at its
   * next poll. It is sent by the database, so every publisher wakes it: the Java store, the SQL
   * functions, plain INSERTs. One notification per statement (FOR EACH STATEMENT), and PostgreSQL
   * folds equal notifications of one transaction into one, sent at commit only (a rollback sends
   * none).
   *
   * <p>The function takes nothing of the table it fires on, so another table gets the same wake-up
   * with one {@code CREATE TRIGGER {p}notify_work AFTER INSERT ON <table> FOR EACH STATEMENT
   * EXECUTE FUNCTION {schema}.{p}notify_work()} (and an entry in {@link #NOTIFY_TABLES}).
   *
   * <p>CREATE TRIGGER takes SHARE ROW EXCLUSIVE on deliveries (it waits for open publishing
   * transactions, and publishers queue behind it while it waits, up to the lock timeout); it is a
   * catalog change that finishes at once. It runs only when the trigger is missing (PostgreSQL 13
   * has no CREATE OR REPLACE TRIGGER, and DROP TRIGGER would take ACCESS EXCLUSIVE), and leaves an
   * existing trigger's enabled or disabled state alone.
   */
  static final List<String> NOTIFY_ON_INSERT =
      List.of(
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}notify_work() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('{notify_channel}', '');
          RETURN NULL;
        END
        $$""",
          notifyTrigger("{deliveries}"));

  /** {@code {lock_keys}} as version 4 created it: keys in key order, lanes above 64 keys. */
  static final String LOCK_KEYS =
      """
        CREATE OR REPLACE FUNCTION {lock_keys}(p_lanes smallint[], p_keys text[]) RETURNS void
        LANGUAGE plpgsql AS $$
        DECLARE
          pair record;
          n integer;
        BEGIN
          SELECT count(DISTINCT k) INTO n FROM unnest(p_keys) AS k WHERE k IS NOT NULL;
          IF n = 0 THEN
            RETURN;
          ELSIF n > 64 THEN
            FOR pair IN SELECT DISTINCT l FROM unnest(p_lanes, p_keys) AS t(l, k)
                        WHERE k IS NOT NULL ORDER BY l LOOP
              PERFORM pg_advisory_xact_lock({lane_lock_class}, pair.l);
            END LOOP;
          ELSE
            FOR pair IN SELECT DISTINCT l, k FROM unnest(p_lanes, p_keys) AS t(l, k)
                        WHERE k IS NOT NULL ORDER BY k, l LOOP
              PERFORM pg_advisory_xact_lock_shared({lane_lock_class}, pair.l);
              PERFORM pg_advisory_xact_lock({key_lock_class}, hashtext(pair.k));
            END LOOP;
          END IF;
        END
        $$""";

  /**
   * Storage v2 (docs/design/storage-v2.md): events are delivered from an insert-only log read
   * through per-lane snapshot windows; {deliveries} keeps only what left the happy path (retries,
   * dead letters, timers, deliveries parked behind a blocked key). Publishers of an older relaybus
   * keep working: their delivery inserts are turned into log rows and their key-sequence upserts
   * take the same per-key lock, so commit order per key holds across versions.
   */
  static final List<String> LOG_STORAGE =
      List.of(
          // First, in the order a version-1 publish takes them (key_sequences, then deliveries):
          // taken after the ALTER of deliveries below, a publisher holding its key row and queued
          // for deliveries behind that ALTER and this migration waiting for the key row deadlocked,
          // each attempt ending in the lock timeout (SchemaUpgradeUnderLoadTest: 49 attempts of
          // 500 ms over 2 minutes under four version-1 publishers). Held to the end: no version-1
          // publish starts until the triggers are in place.
          "LOCK TABLE {keys}, {deliveries} IN SHARE ROW EXCLUSIVE MODE",
          // cache 1 (the default): ids leave the sequence in the order publishers ask for them,
          // which under the key lock is commit order per key
          "CREATE SEQUENCE IF NOT EXISTS {log_seq}",
          // one row per (event, handlers added at once); no primary key: (lane, id) is unique by
          // the sequence. xid: the publishing transaction, for the claim's snapshot windows.
          """
        CREATE TABLE IF NOT EXISTS {log} (
          id bigint NOT NULL,
          xid xid8 NOT NULL,
          lane smallint NOT NULL,
          event_id text NOT NULL,
          handlers text[] NOT NULL,
          key text,
          created_at timestamptz NOT NULL DEFAULT now()
        )""",
          "CREATE INDEX IF NOT EXISTS {p}log_lane_id_idx ON {log} (lane, id)",
          // late committers: rows of transactions a window's lower snapshot saw in progress
          "CREATE INDEX IF NOT EXISTS {p}log_xid_idx ON {log} (xid)",
          // Insert-only: the latest row (highest epoch, then version) of a lane is its cursor: the
          // oldest window not done (lo .. handed: where the lane resumes) and the newest window
          // (lo2, hi2, handed2: with the first, what a takeover charges). A claim appends a row
          // for each lane it handed deliveries from; nothing updates a row.
          """
        CREATE TABLE IF NOT EXISTS {cursors} (
          lane smallint NOT NULL,
          epoch bigint NOT NULL,
          version bigint NOT NULL,
          lo pg_snapshot NOT NULL,
          lo_x xid8 NOT NULL,
          start_pos bigint NOT NULL,
          hi pg_snapshot NOT NULL,
          hi_floor bigint NOT NULL,
          hi_x xid8 NOT NULL,
          ceil bigint NOT NULL,
          handed bigint NOT NULL,
          lo2 pg_snapshot NOT NULL,
          hi2 pg_snapshot NOT NULL,
          handed2 bigint NOT NULL,
          written_at timestamptz NOT NULL DEFAULT now()
        )""",
          "CREATE INDEX IF NOT EXISTS {p}lane_cursors_idx ON {cursors} (lane, epoch DESC, version DESC)",
          // xid of a keyed timer's transaction: the claim hands the timer out only once the lane's
          // log has handed out every event committed before it. '1' (older than any snapshot):
          // rows that need no such wait. NULL: rows of version 1, older than every log row.
          "ALTER TABLE {deliveries} ADD COLUMN IF NOT EXISTS xid xid8",
          // A claim that opens windows first reads the sequence (the floor), then takes an xid
          // (the bound), in this order; its next statement's snapshot is the windows' upper end.
          // A transaction that took a log id at or below the floor took its xid before (a
          // publisher takes its xid first), so below the bound: the next window looks for such
          // ids by xid, which finds them even when the snapshot did not list the transaction.
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}log_boundary_(
          p_read pg_snapshot, OUT floor bigint, OUT bound xid8, OUT quiet pg_snapshot)
        LANGUAGE plpgsql AS $$
        BEGIN
          quiet := pg_current_snapshot();
          SELECT last_value INTO floor FROM {log_seq};
          -- p_read: the snapshot up to which every window was read (NULL: not known). A row that
          -- snapshot did not see has an xid it listed as running or one at or above its xmax;
          -- while no such row has committed, nothing new can be in a next window, so none opens
          -- and no xid is taken (an idle claim writes nothing), and every log row committed
          -- before `quiet` (taken before the probes) was read: a keyed timer it sees may go. Two
          -- probes of the xid index, over rows that came after the snapshot: a held xmin horizon
          -- leaves none dead there.
          IF p_read IS NULL
             OR EXISTS (SELECT 1 FROM {log} g WHERE g.xid >= pg_snapshot_xmax(p_read))
             OR EXISTS (SELECT 1 FROM {log} g
                        WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(p_read)))) THEN
            bound := pg_current_xact_id();
            quiet := NULL;
          END IF;
        END
        $$""",
          // Per-key commit order without a key row: a publisher locks its keys (shared lock on the
          // lane, exclusive on the key) before it takes log ids, so a second publisher of the key
          // gets its ids after the first committed. In key order, as version 1 locked its key rows:
          // no deadlock between two calls. Above 64 distinct keys one call locks whole lanes
          // instead (exclusive, in lane order), so a large batch holds at most 256 locks of the
          // shared lock table; such a call and a concurrent one of keys in other lanes may
          // deadlock, which PostgreSQL breaks by aborting one (SQLState 40P01, transient).
          // Version 13 (LOCK_KEYS_LANES_FIRST) takes a call's lanes first and removes that case.
          LOCK_KEYS,
          // An older relaybus's publish upserts the key's sequence row first: it takes the lock.
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}lock_key_row_() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM {lock_keys}(ARRAY[{lane_fn}(NEW.key)], ARRAY[NEW.key]);
          RETURN NEW;
        END
        $$""",
          // An older relaybus's delivery insert: a publish becomes a log row (numbered now, under
          // the key lock its key-sequence upsert took); a timer (named, or due at another time
          // than its transaction's start, which a publish always is) is numbered on the log's
          // sequence and remembers its transaction. Rows this version writes carry an xid.
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}route_delivery_() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.xid IS NOT NULL THEN
            RETURN NEW;
          ELSIF NEW.timer_id IS NOT NULL OR NEW.available_at <> now() THEN
            IF NEW.key IS NOT NULL THEN
              PERFORM {lock_keys}(ARRAY[NEW.lane], ARRAY[NEW.key]);
              NEW.sequence := nextval('{log_seq}');
            END IF;
            NEW.xid := pg_current_xact_id();
            RETURN NEW;
          END IF;
          PERFORM {lock_keys}(ARRAY[NEW.lane], ARRAY[NEW.key]);
          INSERT INTO {log} (id, xid, lane, event_id, handlers, key)
          VALUES (nextval('{log_seq}'), pg_current_xact_id(), NEW.lane, NEW.event_id,
                  ARRAY[NEW.handler], NEW.key);
          RETURN NULL;
        END
        $$""",
          "DROP TRIGGER IF EXISTS {p}key_sequences_lock ON {keys}",
          """
        CREATE TRIGGER {p}key_sequences_lock BEFORE INSERT OR UPDATE ON {keys}
          FOR EACH ROW EXECUTE FUNCTION {schema}.{p}lock_key_row_()""",
          "DROP TRIGGER IF EXISTS {p}deliveries_route ON {deliveries}",
          """
        CREATE TRIGGER {p}deliveries_route BEFORE INSERT ON {deliveries}
          FOR EACH ROW EXECUTE FUNCTION {schema}.{p}route_delivery_()""",
          // A NOTIFY serializes the commits of the transactions that send one (a database-wide lock
          // at commit: 72-86% fewer commits/s at 8 publishers, docs/benchmarks.md), so a
          // publisher sends it only while a listener waits: a waiting task sets {p}waiting to 1
          // (a sequence: non-transactional, no row version, no dead tuple); since version 6 the
          // publish that notifies sets it back to 0. Busy tasks do not wait, so under load
          // publishers send nothing.
          "CREATE SEQUENCE IF NOT EXISTS {schema}.{p}waiting MINVALUE 0 MAXVALUE 1 START 0",
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}notify_work() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          IF (SELECT last_value FROM {schema}.{p}waiting) > 0 THEN
            PERFORM pg_notify('{notify_channel}', '');
          END IF;
          RETURN NULL;
        END
        $$""",
          // storage v2 publishes into the log: it wakes listeners the same way (version 3)
          notifyTrigger("{log}"),
          // Log ids start above every key sequence of version 1 (read under the lock above), so a
          // pending delivery of version 1 sorts before every log event of its key. Never backwards.
          """
        SELECT setval('{log_seq}', greatest(
          (SELECT coalesce(max(sequence), 0) FROM {keys}) + 1,
          (SELECT last_value FROM {log_seq})))""");

  /**
   * Version 6: the publish that notifies lowers the waiting flag, not the task it wakes. The flag
   * is shared by every task of the outbox, each waiting on a listener of its own; a task lowering
   * it when its own wait ended (at once, because something was published since its last claim) left
   * the others waiting with the flag down, so the next publishes sent nothing and they slept to
   * their poll interval. A NOTIFY reaches every listener of the channel, so the publish that sends
   * it may lower the flag for all of them: still at most one NOTIFY per wait begun. SECURITY
   * DEFINER, so a publisher's role needs no UPDATE on the sequence (setval), only the trigger's
   * owner, who created it; the search path is pinned as for any such function.
   */
  static final List<String> NOTIFY_LOWERS_THE_FLAG =
      List.of(
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}notify_work() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
          IF (SELECT last_value FROM {schema}.{p}waiting) > 0 THEN
            PERFORM pg_notify('{notify_channel}', '');
            PERFORM setval('{schema}.{p}waiting', 0);
          END IF;
          RETURN NULL;
        END
        $$""");

  /**
   * Version 7: a claim wakes nobody. Its statement parks rows in {@code {deliveries}} (a statement
   * trigger fires even when it inserts none), so while one task waited, every other task's claim
   * sent a NOTIFY: the tasks of a connector woke each other for empty claims (part of the 4,100 to
   * 8,100 claims per 1,000 deliveries of four tasks at 100 events/s; WakeupsBenchmark). What a
   * claim inserts is on its own lanes, for itself. The claim transaction says so in a
   * transaction-local setting, {@code relaybus.claiming} (its first statement, the boundary, sets
   * it); the trigger sends nothing for it. An older relaybus's claim does not set it and notifies
   * as before. And a notification from the log says so (payload {@value #FROM_THE_LOG}): a waiting
   * task whose lanes it is not for goes on waiting (PostgresWakeups), where any other wakes it.
   */
  static final List<String> CLAIMS_WAKE_NOBODY =
      List.of(
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}notify_work() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        BEGIN
          IF (SELECT last_value FROM {schema}.{p}waiting) > 0
             AND current_setting('relaybus.claiming', true) IS DISTINCT FROM 'on' THEN
            PERFORM pg_notify('{notify_channel}',
                              CASE WHEN TG_TABLE_NAME = '{p}log' THEN 'log' ELSE '' END);
            PERFORM setval('{schema}.{p}waiting', 0);
          END IF;
          RETURN NULL;
        END
        $$""");

  /**
   * Version 8: the boundary's two probes for rows committed since the windows were read are ordered
   * lookups of the {@code (xid)} index. As {@code EXISTS} they were planned as scans of the whole
   * log: the planner expects a third of the rows at or above an unknown xid and many rows per
   * listed xid, so a sequential scan finds one soonest; there is none to find on the happy path, so
   * every claim read the whole log twice (500 buffers at a backlog of 20,000, growing with depth).
   * Ordered by xid with one row wanted, only the index can answer without a sort of all.
   */
  static final List<String> BOUNDARY_READS_THE_INDEX =
      List.of(
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}log_boundary_(
          p_read pg_snapshot, OUT floor bigint, OUT bound xid8, OUT quiet pg_snapshot)
        LANGUAGE plpgsql AS $$
        BEGIN
          quiet := pg_current_snapshot();
          SELECT last_value INTO floor FROM {log_seq};
          -- p_read: the snapshot up to which every window was read (NULL: not known); see
          -- version 4. Each probe wants the lowest matching xid, so it reads where the index
          -- says and stops: a held xmin horizon leaves no dead entries there.
          IF p_read IS NULL
             OR (SELECT g.xid FROM {log} g WHERE g.xid >= pg_snapshot_xmax(p_read)
                 ORDER BY g.xid LIMIT 1) IS NOT NULL
             OR (SELECT g.xid FROM {log} g
                 WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(p_read)))
                 ORDER BY g.xid LIMIT 1) IS NOT NULL THEN
            bound := pg_current_xact_id();
            quiet := NULL;
          END IF;
        END
        $$""");

  /**
   * Version 9: the claim's floor is read with {@code pg_sequence_last_value()}, under the sequence
   * page's buffer lock, not by selecting from the sequence. {@code nextval} logs 32 values ahead:
   * inside its critical section the sequence tuple briefly holds the value 32 fetches on, then the
   * value fetched; a {@code SELECT last_value} scan reads the tuple holding only a pin, so, rarely,
   * it returned a value no transaction had taken yet. A floor above ids taken after it put those
   * ids below the next windows' start, where rows are read only by the xids the window's lower
   * snapshot missed before the bound; transactions that took their xids after the bound were read
   * by neither part and stranded (4 to 10 consecutive publishes, in every lane of one task that had
   * one, a few times per hour under the held-xmin benchmark). The function reads under the lock, so
   * it sees the tuple before or after a {@code nextval}, never in between.
   */
  static final List<String> FLOOR_READ_UNDER_THE_LOCK =
      List.of(
          """
        CREATE OR REPLACE FUNCTION {schema}.{p}log_boundary_(
          p_read pg_snapshot, OUT floor bigint, OUT bound xid8, OUT quiet pg_snapshot)
        LANGUAGE plpgsql AS $$
        BEGIN
          quiet := pg_current_snapshot();
          -- never SELECT last_value FROM the sequence here: see version 9
          floor := coalesce(pg_sequence_last_value('{log_seq}'::regclass), 0);
          -- p_read: the snapshot up to which every window was read (NULL: not known); see
          -- versions 4 and 8.
          IF p_read IS NULL
             OR (SELECT g.xid FROM {log} g WHERE g.xid >= pg_snapshot_xmax(p_read)
                 ORDER BY g.xid LIMIT 1) IS NOT NULL
             OR (SELECT g.xid FROM {log} g
                 WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(p_read)))
                 ORDER BY g.xid LIMIT 1) IS NOT NULL THEN
            bound := pg_current_xact_id();
            quiet := NULL;
          END IF;
        END
        $$""");

  /**
   * Version 10: a log row says where its event row was written ({@code event_tid}, the event's
   * {@code ctid} as the publish's insert returned it), so the claim fetches the event from there
   * instead of descending the events' primary key for every row it hands out (about a third of the
   * page statement's time at 500 rows). The id is checked against the fetched tuple, and the
   * primary key used when the tuple there is not the event's visible version (the event updated,
   * the table rewritten) or when the row has none (NULL: rows from before, from a version-1
   * publisher through the trigger, and those a republish adds). A nullable column without a default
   * changes only the catalog (ACCESS EXCLUSIVE on the log for a moment, under the lock timeout);
   * older relaybus instances name the log's columns and keep working, leaving it NULL.
   */
  static final List<String> EVENT_TID =
      Stream.concat(
              Stream.of("ALTER TABLE {log} ADD COLUMN IF NOT EXISTS event_tid tid"),
              PostgresFunctions.v3Statements().stream())
          .toList();

  /**
   * Version 11: {@code {lock_keys}} takes the one key a typical publish names without a query: the
   * same two locks in the same order (shared on the lane, exclusive on the key), no lock for a null
   * key, as the general path does for one key; 8 to 15 microseconds less per publish of one event
   * (pgbench, 2026-12-05: the general path's count and ordered loop over {@code unnest}).
   */
  static final List<String> LOCK_ONE_KEY =
      List.of(
          PostgresFunctions.replaceOnce(
              LOCK_KEYS,
              "BEGIN\n  SELECT count(DISTINCT k)",
              """
              BEGIN
                -- one key, the typical publish: the same locks in the same order, no query
                IF cardinality(p_keys) = 1 THEN
                  IF p_keys[1] IS NOT NULL THEN
                    PERFORM pg_advisory_xact_lock_shared({lane_lock_class}, p_lanes[1]);
                    PERFORM pg_advisory_xact_lock({key_lock_class}, hashtext(p_keys[1]));
                  END IF;
                  RETURN;
                END IF;
                SELECT count(DISTINCT k)"""));

  /**
   * Version 12: the waiting flag {@code {p}waiting} is an unlogged sequence (PostgreSQL 15 and
   * later; on older servers it stays as it was). Its value is a hint, raised by a task that waits
   * and lowered by the publish that notifies, and every {@code setval} of a logged sequence writes
   * a WAL record: 8 to 73 bytes per delivery at a steady 1,000 events/s with four tasks, the more
   * the more often they wait (SteadyWalBenchmark, 2026-12-05). After a crash, or on a promoted
   * standby, an unlogged sequence starts again at 0, nobody waiting: the waiting tasks' listeners
   * were cut with it, and a task raises the flag again when it next waits. ALTER SEQUENCE takes
   * ACCESS EXCLUSIVE on the sequence (publishers read it in {@code notify_work()}) for a moment,
   * under the lock timeout.
   */
  static final List<String> UNLOGGED_FLAG =
      List.of(
          """
        DO $$
        BEGIN
          IF current_setting('server_version_num')::int >= 150000 THEN
            ALTER SEQUENCE {schema}.{p}waiting SET UNLOGGED;
          END IF;
        END
        $$""");

  /**
   * Version 13: {@code {lock_keys}} takes a call's lane locks first, all of them in lane order, and
   * then its key locks in key order; and a call takes key locks for up to 128 distinct keys (64
   * before).
   *
   * <p>Versions 4 to 12 took a lane's shared lock just before each key's, in key order, so a call
   * held the shared lock of a lane while it waited for a lane further on; a call of more than 64
   * keys takes its lanes' exclusive locks in lane order, and the two deadlocked whenever each held
   * a lane the other wanted next (pgbench, 8 clients, calls of 20 keys and one in eleven of 300
   * keys, 2026-12-05: 13% of transactions aborted by the deadlock detector, each after {@code
   * deadlock_timeout}, 6.6 transactions/s; with this order none, 1,884/s). Now a call waits for a
   * lane only while it holds no key, and while it holds keys it waits only for keys, which every
   * call takes in key order (the order the documentation asks of separate calls, so a {@code
   * publishAll} and a transaction publishing the same keys one by one in key order do not deadlock
   * either).
   *
   * <p>128 keys: a call holds at most 128 key locks and 128 lane locks, the 256 entries of the
   * shared lock table that the lane path holds at most, so the bound on one call is unchanged; and
   * publishers of batches of up to 128 distinct keys wait only for a key they share, not for a lane
   * (the delivery benchmark's 8 publishers of 100 keys per transaction waited for one another's
   * lanes). A call of one key is the same two locks as before.
   */
  static final String LOCK_KEYS_LANES_FIRST =
      """
        CREATE OR REPLACE FUNCTION {lock_keys}(p_lanes smallint[], p_keys text[]) RETURNS void
        LANGUAGE plpgsql AS $$
        DECLARE
          item record;
          n integer;
        BEGIN
          -- one key, the typical publish: its lane, then the key, without a query
          IF cardinality(p_keys) = 1 THEN
            IF p_keys[1] IS NOT NULL THEN
              PERFORM pg_advisory_xact_lock_shared({lane_lock_class}, p_lanes[1]);
              PERFORM pg_advisory_xact_lock({key_lock_class}, hashtext(p_keys[1]));
            END IF;
            RETURN;
          END IF;
          SELECT count(DISTINCT k) INTO n FROM unnest(p_keys) AS k WHERE k IS NOT NULL;
          IF n = 0 THEN
            RETURN;
          ELSIF n > 128 THEN
            FOR item IN SELECT DISTINCT l FROM unnest(p_lanes, p_keys) AS t(l, k)
                        WHERE k IS NOT NULL ORDER BY l LOOP
              PERFORM pg_advisory_xact_lock({lane_lock_class}, item.l);
            END LOOP;
          ELSE
            FOR item IN SELECT DISTINCT l FROM unnest(p_lanes, p_keys) AS t(l, k)
                        WHERE k IS NOT NULL ORDER BY l LOOP
              PERFORM pg_advisory_xact_lock_shared({lane_lock_class}, item.l);
            END LOOP;
            FOR item IN SELECT DISTINCT k FROM unnest(p_keys) AS k
                        WHERE k IS NOT NULL ORDER BY k LOOP
              PERFORM pg_advisory_xact_lock({key_lock_class}, hashtext(item.k));
            END LOOP;
          END IF;
        END
        $$""";

  /**
   * Version 14: a lease's expiry is its holder's, one row per holder (owner) in {@code {holders}},
   * so a renewal writes that row instead of every lane row the holder has: 28.8 KB of WAL per
   * renewal of 256 lanes (112 B per lane row, more as the first change of each lane's page after a
   * checkpoint), one every third of the lease, about 250 MB a day for an idle connector. A lane's
   * lease lasts until the later of its own {@code lease_expires_at} (set when it was granted, and
   * still renewed by older instances) and its owner's row; older instances read only the lane's, so
   * they see a lease of this version lapse one lease after its grant (see PostgresLanes). A new
   * table: no lock on any existing one.
   */
  static final List<String> LEASE_HOLDERS =
      List.of(
          """
        CREATE TABLE IF NOT EXISTS {holders} (
          owner text PRIMARY KEY,
          expires_at timestamptz NOT NULL
        ) WITH (fillfactor = 50)""");

  /**
   * Versions 15 and 16: the wake-up trigger on {@code {deliveries}} (15) and on {@code {log}} (16)
   * fires only while a task waits. Its condition, a {@code WHEN} on the statement trigger, reads
   * the flag as the function did, at the same point (the end of the inserting statement, after its
   * log ids were taken; see PostgresWakeups); a publish while no task waits, the common case under
   * load, no longer calls the PL/pgSQL function: 10 of a one-event publish's 45 us of server time
   * (2026-12-06, PostgreSQL 15). The condition is evaluated with the publisher's rights, so version
   * 15 first grants SELECT on the flag to PUBLIC (it says only whether a task waits); the function
   * keeps its own check and still lowers the flag with its owner's rights.
   *
   * <p>One table per version: each takes a lock on its table (PostgreSQL 14 and later: CREATE OR
   * REPLACE TRIGGER, SHARE ROW EXCLUSIVE, which waits for open publishers; 13: DROP and CREATE,
   * ACCESS EXCLUSIVE for a catalog change), under the lock timeout. A trigger's enabled or disabled
   * state ({@code notifyOnPublish}) is kept; a missing trigger is created.
   */
  static final List<String> WAKE_UP_WHILE_WAITING_ON_DELIVERIES =
      List.of(
          "GRANT SELECT ON SEQUENCE {schema}.{p}waiting TO PUBLIC",
          notifyTriggerWhileWaiting("{deliveries}"));

  /** Version 16: see {@link #WAKE_UP_WHILE_WAITING_ON_DELIVERIES}. */
  static final List<String> WAKE_UP_WHILE_WAITING_ON_THE_LOG =
      List.of(notifyTriggerWhileWaiting("{log}"));

  /**
   * Attaches {@code {p}notify_work()} to {@code table} with the condition of version 15, in place
   * of the trigger there (its enabled state kept) or as a new one.
   */
  private static String notifyTriggerWhileWaiting(String table) {
    return """
        DO $$
        DECLARE
          state "char";
          definition text := 'TRIGGER {p}notify_work AFTER INSERT ON @TABLE@ FOR EACH STATEMENT'
            || ' WHEN (pg_sequence_last_value(''{schema}.{p}waiting''::regclass) > 0'
            || '       AND current_setting(''relaybus.claiming'', true) IS DISTINCT FROM ''on'')'
            || ' EXECUTE FUNCTION {schema}.{p}notify_work()';
        BEGIN
          SELECT tgenabled INTO state FROM pg_trigger
          WHERE tgrelid = '@TABLE@'::regclass AND tgname = '{p}notify_work';
          IF current_setting('server_version_num')::int >= 140000 THEN
            EXECUTE 'CREATE OR REPLACE ' || definition;
          ELSE
            EXECUTE 'DROP TRIGGER IF EXISTS {p}notify_work ON @TABLE@';
            EXECUTE 'CREATE ' || definition;
          END IF;
          -- a trigger created or replaced is enabled ('O'): give it back the state it had
          IF state = 'D' THEN
            ALTER TABLE @TABLE@ DISABLE TRIGGER {p}notify_work;
          ELSIF state = 'R' THEN
            ALTER TABLE @TABLE@ ENABLE REPLICA TRIGGER {p}notify_work;
          ELSIF state = 'A' THEN
            ALTER TABLE @TABLE@ ENABLE ALWAYS TRIGGER {p}notify_work;
          END IF;
        END
        $$"""
        .replace("@TABLE@", table);
  }

  /**
   * Version 17: {@code {lock_keys}} takes a call's lane locks and then its key locks in one query
   * each, as a count over the lanes (keys) in lane (key) order, instead of a PL/pgSQL loop running
   * one query per lock: the same locks in the same order (a subquery with ORDER BY is not pulled
   * up, so its rows reach the aggregate, which takes each lock, in that order). A call of 100 keys:
   * 272 against 105 us (psql on PostgreSQL 15, 2,000 calls in a loop, 2026-12-06), about 1.7 us of
   * a batch publish's 21 to 23 per event.
   */
  static final String LOCK_KEYS_IN_ONE_QUERY_EACH =
      """
        CREATE OR REPLACE FUNCTION {lock_keys}(p_lanes smallint[], p_keys text[]) RETURNS void
        LANGUAGE plpgsql AS $$
        DECLARE
          n integer;
        BEGIN
          -- one key, the typical publish: its lane, then the key, without a query
          IF cardinality(p_keys) = 1 THEN
            IF p_keys[1] IS NOT NULL THEN
              PERFORM pg_advisory_xact_lock_shared({lane_lock_class}, p_lanes[1]);
              PERFORM pg_advisory_xact_lock({key_lock_class}, hashtext(p_keys[1]));
            END IF;
            RETURN;
          END IF;
          SELECT count(DISTINCT k) INTO n FROM unnest(p_keys) AS k WHERE k IS NOT NULL;
          IF n = 0 THEN
            RETURN;
          ELSIF n > 128 THEN
            PERFORM count(pg_advisory_xact_lock({lane_lock_class}, s.l)::text)
            FROM (SELECT DISTINCT l FROM unnest(p_lanes, p_keys) AS t(l, k)
                  WHERE k IS NOT NULL ORDER BY l) s;
          ELSE
            PERFORM count(pg_advisory_xact_lock_shared({lane_lock_class}, s.l)::text)
            FROM (SELECT DISTINCT l FROM unnest(p_lanes, p_keys) AS t(l, k)
                  WHERE k IS NOT NULL ORDER BY l) s;
            PERFORM count(pg_advisory_xact_lock({key_lock_class}, hashtext(s.k))::text)
            FROM (SELECT DISTINCT k FROM unnest(p_keys) AS k WHERE k IS NOT NULL ORDER BY k) s;
          END IF;
        END
        $$""";

  /** The payload of a notification sent for rows of the log (version 7); others send ''. */
  static final String FROM_THE_LOG = "log";

  /**
   * Attaches {@code {p}notify_work()} to {@code table}, unless it is there (no CREATE OR REPLACE).
   */
  private static String notifyTrigger(String table) {
    return """
        DO $$
        BEGIN
          IF NOT EXISTS (SELECT 1 FROM pg_trigger
                         WHERE tgrelid = 'TABLE'::regclass AND tgname = '{p}notify_work') THEN
            CREATE TRIGGER {p}notify_work AFTER INSERT ON TABLE
              FOR EACH STATEMENT EXECUTE FUNCTION {schema}.{p}notify_work();
          END IF;
        END
        $$"""
        .replace("TABLE", table);
  }

  /**
   * Version 18: {@code {incarnation}}, an unlogged table of one row, which says whether the server
   * has lost what it had not yet written to disk since a store last looked. A crash (of the server,
   * or of one backend, which makes the postmaster throw shared memory away) or a failover to a
   * standby that was behind loses the WAL not yet written, and with it transaction ids the server
   * had handed out: the transactions after recovery get them again. A store's windows in memory
   * hold snapshots taken before, which count such an id as a transaction that had ended, so an
   * event published under it was taken for one already read (PostgresCrashAndFailoverTest).
   * PostgreSQL empties an unlogged table in both cases (at the end of crash recovery, and on a
   * promoted standby, which never has its data), so a store that finds the row gone, or another
   * store's value in it, drops its windows and resumes each lane from its latest cursor row (one
   * that survived came with all the WAL before it, which holds the end of everything its snapshots
   * saw). Unlogged: its writes cost no WAL. A new table: no lock on any existing one.
   */
  static final List<String> INCARNATION =
      List.of(
          """
        CREATE UNLOGGED TABLE IF NOT EXISTS {incarnation} (
          one boolean PRIMARY KEY DEFAULT true CHECK (one),
          value bigint NOT NULL
        )""");

  /**
   * Version 25: the log's ids go on above every sequence of {deliveries}, not only above the key
   * counters. Version 4 started them above the counters of key_sequences, which version 1's purge
   * deleted for a key whose only delivery left was dead (the defect of reliability row 117, on
   * version 1): such a dead letter's sequence could lie above every counter left, and once requeued
   * it was overtaken by its key's next event, whose log id was lower (reliability row 136). Draws
   * the ids up to the highest sequence (and one more) with nextval, never setval: the sequence
   * never goes back under publishers drawing ids meanwhile, no lock is taken (ACCESS SHARE on
   * deliveries for one scan of the table, which since version 4 holds only what left the happy
   * path), and once past it draws none (idempotent).
   */
  private static final List<String> LOG_IDS_ABOVE_EVERY_SEQUENCE =
      List.of(
          """
          SELECT count(nextval('{log_seq}')) FROM generate_series(1,
            (SELECT coalesce(max(sequence), 0) FROM {deliveries}) + 1
              - (SELECT last_value FROM {log_seq}))""");

  /**
   * Version 23: before it, two strikes of different handlers of one log row could leave the row
   * with every handler struck (reliability row 105). Nothing of such a row is left to send, but a
   * claim's page counted it against its limit (a lane read it again at every claim of one), the
   * sweep took it out with a false warning, and purge kept its event. Since version 23 a strike
   * that would leave no handler deletes the row; this deletes the rows left before. Idempotent: a
   * row whose every handler is struck is finished, whoever reads it later.
   */
  private static final List<String> LEFT_WITH_NO_HANDLER =
      List.of(
          """
          DELETE FROM {log} g
          WHERE NOT EXISTS (SELECT FROM unnest(g.handlers) AS h(handler) WHERE h.handler IS NOT NULL)""");

  static final List<Migration> ALL =
      List.of(
          new Migration(1, "baseline: tables, indexes, 256 lanes, lane function", BASELINE),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table, so it runs under load.
          new Migration(
              2,
              "SQL functions publish, schedule, cancel_timer and their helpers",
              PostgresFunctions.statements()),
          new Migration(
              3, "NOTIFY on the store's channel when deliveries are inserted", NOTIFY_ON_INSERT),
          new Migration(
              4,
              "storage v2: the insert-only event log, lane cursors, per-key publish locks",
              LOG_STORAGE),
          // Only CREATE OR REPLACE FUNCTION, as version 2: no lock on any table.
          new Migration(
              5,
              "SQL functions publish and schedule on the event log (no key-sequence row)",
              PostgresFunctions.v2Statements()),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              6, "the publish that notifies lowers the waiting flag", NOTIFY_LOWERS_THE_FLAG),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(7, "a claim wakes nobody", CLAIMS_WAKE_NOBODY),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              8,
              "the claim's boundary probes the xid index, not the log",
              BOUNDARY_READS_THE_INDEX),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              9, "the claim's floor read under the sequence's lock", FLOOR_READ_UNDER_THE_LOCK),
          // ACCESS EXCLUSIVE on the log for a catalog change, under the lock timeout (retried).
          new Migration(10, "log rows say where their event row is (event_tid)", EVENT_TID),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(11, "one key's publish locks taken without a query", LOCK_ONE_KEY),
          // ACCESS EXCLUSIVE on the flag's sequence for a moment, under the lock timeout (retried).
          new Migration(
              12,
              "the waiting flag is an unlogged sequence (PostgreSQL 15 and later)",
              UNLOGGED_FLAG),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              13,
              "publish locks: a call's lanes first, key locks up to 128 keys",
              List.of(LOCK_KEYS_LANES_FIRST)),
          // A new table: no lock on any existing one.
          new Migration(14, "lease expiry per holder: a renewal writes one row", LEASE_HOLDERS),
          // SHARE ROW EXCLUSIVE on deliveries (13: ACCESS EXCLUSIVE), under the lock timeout.
          new Migration(
              15,
              "the wake-up trigger on deliveries fires only while a task waits",
              WAKE_UP_WHILE_WAITING_ON_DELIVERIES),
          // SHARE ROW EXCLUSIVE on the log (13: ACCESS EXCLUSIVE), under the lock timeout.
          new Migration(
              16,
              "the wake-up trigger on the log fires only while a task waits",
              WAKE_UP_WHILE_WAITING_ON_THE_LOG),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              17,
              "publish locks: lanes, then keys, one query each",
              List.of(LOCK_KEYS_IN_ONE_QUERY_EACH)),
          // A new table: no lock on any existing one.
          new Migration(
              18,
              "the server's incarnation: a crash or failover that lost WAL is noticed",
              INCARNATION),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              19,
              "the SQL functions refuse U+0000 in headers",
              PostgresFunctions.checkEventRefusingNul()),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              20,
              "the SQL functions refuse more than 1000 handlers",
              PostgresFunctions.checkEventLimitingHandlers()),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              21,
              "the SQL timer functions pull a key's followers by rank, not by log id distance",
              PostgresFunctions.timersPullingByRank()),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              22,
              "the SQL timer functions lock only what they change and pull followers in a"
                  + " statement of their own",
              PostgresFunctions.timersLockingOnlyWhatTheyChange()),
          // ROW EXCLUSIVE on the log, as a completion's delete; a sequential scan of the log once.
          new Migration(
              23,
              "log rows left with no handler by two racing strikes are deleted",
              LEFT_WITH_NO_HANDLER),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              24,
              "the SQL timer functions: arm_ keeps every timer's deadline in fire_at, cancel_timer"
                  + " refuses what the Java call refuses",
              PostgresFunctions.everyTimerKeepsItsDeadline()),
          // No lock but ACCESS SHARE on deliveries (one scan); ids drawn with nextval.
          new Migration(
              25,
              "log ids go on above every sequence of deliveries, a version-1 dead letter's too",
              LOG_IDS_ABOVE_EVERY_SEQUENCE),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              26,
              "the SQL function schedule refuses a deadline outside the years 1 to 9999",
              PostgresFunctions.scheduleRefusingDeadlinesOutsideTheYears1To9999()),
          // Only CREATE OR REPLACE FUNCTION: no lock on any table.
          new Migration(
              27,
              "the SQL functions take white space as Java does, and refuse a header's surrogate"
                  + " without its pair as Java does",
              PostgresFunctions.checkEventAsJavaChecksText()));

  /** The version of the newest migration. */
  static int latest(List<Migration> migrations) {
    return migrations.get(migrations.size() - 1).version();
  }
}
