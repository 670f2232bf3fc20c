package io.relaybus.store.postgres;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.RetryPolicy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The happy path of storage v2: deliveries handed out of the insert-only event log, lane by lane,
 * through snapshot windows (docs/design/storage-v2.md). Only PostgreSQL has a log: the other stores
 * keep every delivery as a row and claim it the way {@link PostgresClaims} claims its rows.
 *
 * <p><b>Windows.</b> A lane reads the log in windows {@code (lo, hi]}: the log rows of the lane
 * whose transaction is visible in snapshot {@code hi} and not in {@code lo}, that is exactly the
 * transactions that committed between the two, so a transaction that started early and committed
 * late is read in the window where it committed, never missed and never read twice. Inside a window
 * rows go out in id order, which the publishers' key lock makes commit order per key. Two index
 * ranges find a window's rows: ids above {@code start} (every row of the lane visible in {@code lo}
 * has an id at or below it) through {@code (lane, id)}, and below it only the rows of the
 * transactions {@code lo} saw in progress, through {@code (xid)}. Neither range holds a row that
 * was already completed (completion deletes it), so a claim reads what it returns plus the rows of
 * transactions still in progress: no dead index entry of an earlier window is visited, whatever the
 * depth or the age of the xmin horizon.
 *
 * <p><b>Cursors.</b> The window and the greatest id handed out are kept here, per lane and epoch,
 * and appended to {@code {cursors}} by the claim that hands out a lane's rows (insert-only: no dead
 * tuple, no update): by the first under the lane's epoch, then at most once per cursor interval (a
 * second by default; a row per claim was a quarter of the WAL of a steady 1,000 events/s). Between
 * two rows the latest is an earlier state of the same windows: a restart resuming from it reads
 * again only rows still in the log (completion deletes the rest), and a takeover charges what it
 * names as handed out, not what was handed out since. A lane opens its next window as soon as the
 * current one is read; the cursor row names the oldest window whose deliveries are not all done, so
 * after a crash or a takeover the lane resumes there: the rows of that window still in the log,
 * then one window reaching to the present, which covers every later one. A takeover first moves
 * what the previous holder had handed out (of the oldest window up to its {@code handed}, of every
 * window after it, of the newest up to its {@code handed2}) to {@code {deliveries}} with an attempt
 * charged, as version 1 charges its in-flight deliveries.
 *
 * <p><b>Off the happy path</b> a delivery becomes a row of {@code {deliveries}} with the id of its
 * token ({@link #tokenId}): rescheduled, buried, released, charged at a takeover, or parked behind
 * a pending delivery of its key there (a retry, a keyed timer, a dead letter requeued), where the
 * claim of version 1 orders it by its sequence, the log id.
 */
final class PostgresLog {
  private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(PostgresLog.class);

  /** A snapshot in which no transaction is visible: the lower end of a lane's first window. */
  static final String NOTHING_VISIBLE = "3:3:";

  /** The first normal transaction id: no transaction took log ids below it. */
  static final String FIRST_XID = "3";

  /** Handler slots per log id in a token id; an event has at most {@value} handlers. */
  static final int HANDLER_SLOTS = 1024;

  /** The claims counter of a token of the log: version 1's counters are never negative. */
  static final int LOG_CLAIMS = -1;

  /**
   * Ids of deliveries of the log start here, far above the identity ids of {deliveries}, so a
   * delivery keeps its id when it moves there and ids still grow with the log.
   */
  static final long TOKEN_BASE = 1L << 62;

  /** The id of the delivery of log row {@code logId} to its handler number {@code index} (1-). */
  static long tokenId(long logId, int index) {
    return TOKEN_BASE + logId * HANDLER_SLOTS + index - 1;
  }

  static boolean isLogToken(DeliveryToken token) {
    return token.claims() == LOG_CLAIMS;
  }

  static long logId(long tokenId) {
    return (tokenId - TOKEN_BASE) / HANDLER_SLOTS;
  }

  static int handlerIndex(long tokenId) {
    return (int) ((tokenId - TOKEN_BASE) % HANDLER_SLOTS) + 1;
  }

  /** A window of one lane: its bounds, how far it was read, what it handed out and is not done. */
  private static final class Window {
    String lo;
    String loX; // every transaction that took log ids up to lo's floor has an xid below this
    String hi;
    long hiFloor; // the sequence read before hi (and its xid bound) were taken: the next start
    String hiX;
    long start; // lo's floor: ids above it are read by id, those at or below it by xid
    long ceil; // the sequence read after hi: no id visible in hi is above it
    long position; // the last id handed out in this window, 0: none yet
    boolean empty; // opened with no row in it (the page statement's probe): no tail to look at
    // log id -> handler indexes handed out and not finished
    final Map<Long, Map<Integer, Boolean>> outstanding = new HashMap<>();
    // log id -> where the claim read the row (its ctid; the completion fetches it from there) and
    // the row's event
    final Map<Long, RowRead> readAt = new HashMap<>();

    Window(
        String lo,
        String loX,
        long start,
        String hi,
        long hiFloor,
        String hiX,
        long ceil,
        long position) {
      this.lo = lo;
      this.loX = loX;
      this.start = start;
      this.hi = hi;
      this.hiFloor = hiFloor;
      this.hiX = hiX;
      this.ceil = ceil;
      this.position = position;
    }

    Window copy() {
      Window copy = new Window(lo, loX, start, hi, hiFloor, hiX, ceil, position);
      copy.empty = empty;
      return copy;
    }
  }

  /**
   * One lane's reading position for the epoch it was loaded under: the window being read, and the
   * windows read before it whose deliveries are not all done yet (oldest first). A lane opens its
   * next window as soon as the current one is read, acknowledged or not; the oldest window not done
   * is where the lane resumes after a restart (the window after it, opened then, reaches to the
   * present and so covers every later one).
   */
  private static final class Cursor {
    final long epoch;
    long version;
    Window current;
    final java.util.ArrayDeque<Window> older = new java.util.ArrayDeque<>();
    final Map<Long, Window> where = new HashMap<>(); // outstanding log id -> its window
    boolean exhausted;
    String covered = NOTHING_VISIBLE; // hi of the last window read to its end
    // the lower snapshot the last sweep looked up to: the next looks at what it did not see
    String sweptFrom = NOTHING_VISIBLE;
    boolean appended; // a row of this cursor was appended under its epoch (by this store)
    long appendedAt; // System.nanoTime() of the last append
    long takenSince; // deliveries handed out of the lane since

    Cursor(long epoch) {
      this.epoch = epoch;
    }

    Window oldest() {
      return older.isEmpty() ? current : older.getFirst();
    }
  }

  /**
   * A lane's cursor as one claim moves it, applied only once the claim's transaction commits:
   * {@code chain} holds a working copy of the cursor's current window, then each window the claim
   * opened; each collects what the claim took from it.
   */
  private static final class Plan {
    final Cursor cursor;
    final List<Window> chain = new ArrayList<>();
    long version;
    boolean exhausted;
    boolean wrote; // the claim took rows of the lane
    int taken; // deliveries it handed out of the lane
    boolean appends; // and appends the lane's cursor row (see commit)
    long appendsAt;
    String covered;

    Plan(Cursor cursor) {
      this.cursor = cursor;
      chain.add(cursor.current.copy());
      version = cursor.version;
      exhausted = cursor.exhausted;
      covered = cursor.covered;
    }

    Window current() {
      return chain.get(chain.size() - 1);
    }

    /** The oldest window with deliveries not done once this claim commits. */
    Window oldest() {
      if (!cursor.older.isEmpty()) {
        return cursor.older.getFirst();
      }
      if (chain.size() == 1
          || !chain.get(0).outstanding.isEmpty()
          || !cursor.current.outstanding.isEmpty()) {
        return chain.get(0);
      }
      for (Window w : chain) {
        if (!w.outstanding.isEmpty() || w == current()) {
          return w;
        }
      }
      return current();
    }
  }

  /** What a claim read, applied to the cursors only once its transaction committed. */
  final class Read {
    private Boundary boundary;
    final List<ClaimedDelivery> batch = new ArrayList<>();
    final Map<DeliveryToken, String> unreadable = new LinkedHashMap<>();
    private final Map<DeliveryToken, Boolean> unreadableLast = new HashMap<>();
    private final List<DeliveryToken> overflow = new ArrayList<>();
    private final Map<Integer, Plan> plans = new LinkedHashMap<>();
    private String opened; // the snapshot of the last statement of this read that opened windows

    Read(Boundary boundary) {
      this.boundary = boundary;
    }

    void commit() {
      lock.lock();
      try {
        if (opened != null) {
          lastSnapshot = opened;
          lookedFrom = opened;
        }
        for (Map.Entry<Integer, Plan> entry : plans.entrySet()) {
          Plan plan = entry.getValue();
          Cursor cursor = plan.cursor;
          if (cursors.get(entry.getKey()) != cursor) {
            continue; // replaced meanwhile (a takeover, a forgotten read)
          }
          // the first of the chain is the cursor's current window, moved on
          Window base = cursor.current;
          Window read = plan.chain.get(0);
          base.lo = read.lo;
          base.loX = read.loX;
          base.hi = read.hi;
          base.hiFloor = read.hiFloor;
          base.hiX = read.hiX;
          base.start = read.start;
          base.ceil = read.ceil;
          base.position = read.position;
          base.empty = read.empty;
          List<Window> chain = new ArrayList<>(plan.chain);
          chain.set(0, base);
          for (int i = 0; i < chain.size(); i++) {
            Window w = chain.get(i);
            Map<Long, Map<Integer, Boolean>> taken = plan.chain.get(i).outstanding;
            if (w != plan.chain.get(i)) {
              w.outstanding.putAll(taken);
              w.readAt.putAll(plan.chain.get(i).readAt);
            }
            taken.keySet().forEach(id -> cursor.where.put(id, w));
            if (i < chain.size() - 1 && !w.outstanding.isEmpty()) {
              cursor.older.addLast(w); // read to its end, not all done yet
            }
          }
          cursor.current = chain.get(chain.size() - 1);
          cursor.version = plan.version;
          if (plan.appends) {
            cursor.appended = true;
            cursor.appendedAt = plan.appendsAt;
            cursor.takenSince = 0;
          } else {
            cursor.takenSince += plan.taken;
          }
          cursor.exhausted = plan.exhausted;
          cursor.covered = plan.covered;
        }
      } finally {
        lock.unlock();
      }
    }

    /** The boundary the read was taken under. */
    Boundary boundary() {
      return boundary;
    }

    /** Per lease (in the claim's order): the covered snapshot once this read has committed. */
    List<String> covered() {
      return plans.values().stream().map(p -> p.covered).toList();
    }

    /**
     * The commit's outcome is unknown: the cursors stay as they were before this read, so the next
     * claim hands out again what this one read (its caller never got it), and nothing handed out
     * before. Had it committed, its parking and its cursor rows are there all the same: rows parked
     * have left the log, and a cursor row of this read is a state of the same windows as good as
     * any earlier one; the next row of each lane goes after it.
     */
    void forget() {
      lock.lock();
      try {
        for (Map.Entry<Integer, Plan> entry : plans.entrySet()) {
          Plan plan = entry.getValue();
          if (plan.appends && cursors.get(entry.getKey()) == plan.cursor) {
            plan.cursor.version = plan.version;
          }
        }
      } finally {
        lock.unlock();
      }
    }
  }

  /**
   * Whether log row {@code g} must wait in {deliveries} for every one of its handlers: its key has
   * a pending delivery there at or before it (a retry, a keyed timer, a requeued dead letter, a
   * delivery parked earlier), or an earlier row in the tail this statement parks ({@code behind}:
   * the statement cannot see its own insert). Dead ones block nothing. Nothing can block a row
   * unless {deliveries} has a pending keyed delivery or the tail has a row ({@code blocking}: once
   * per statement), so on the happy path a row costs no probe of either: the page's rows, where it
   * was a subplan per row, about a tenth of the statement's time at 500 rows.
   */
  private static final String BLOCKED =
      """
      ((SELECT k.any FROM blocking k) AND g.key IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM unnest(g.handlers) AS hh(handler)
        WHERE hh.handler IS NOT NULL AND NOT ((SELECT pending FROM blocking) AND EXISTS (
          SELECT 1 FROM {deliveries} d
          WHERE d.lane = g.lane AND d.handler = hh.handler AND d.key = g.key AND d.key IS NOT NULL
            AND d.status = 'pending' AND d.sequence <= g.id))
        AND NOT EXISTS (
          SELECT 1 FROM behind b
          WHERE b.lane = g.lane AND b.key = g.key AND b.handler = hh.handler AND b.id < g.id)))""";

  /**
   * Parks the deliveries of CTE {@code aside} (id, lane, event_id, handler, key, created_at, idx: a
   * log row's handler and its position) that this statement took out of the log: pending rows of
   * {deliveries} under their token ids, the log id as a keyed one's sequence, in log order. {@code
   * {took}} (lane, id, handlers) names the rows the statement's own delete or strike finished, with
   * their handlers as they were when it did: a handler parked from the statement's snapshot that a
   * transaction committed after it had finished (an older holder's completion of what it had out
   * past its last cursor row, its snapshot at the old epoch) went out again and was completed a
   * second time.
   */
  private static final String PARK =
      """
      INSERT INTO {deliveries}
        (id, event_id, handler, lane, key, sequence, claims, created_at, xid)
        OVERRIDING SYSTEM VALUE
      SELECT 4611686018427387904 + a.id * 1024 + a.idx - 1, a.event_id, a.handler, a.lane,
             a.key, CASE WHEN a.key IS NULL THEN NULL ELSE a.id END, 1, a.created_at, '1'
      FROM aside a JOIN ({took}) t
        ON t.lane = a.lane AND t.id = a.id AND t.handlers[a.idx::int] = a.handler
      ORDER BY a.id, a.idx
      ON CONFLICT DO NOTHING""";

  /**
   * The rows of one lane's window below its floor (ids in {@code (from, to]}): only rows of the
   * transactions its lower snapshot saw in progress or that took their ids below the floor ({@code
   * late}, {@code late_from}, {@code late_to}), visible in {@code seen}. Read from {@code
   * late_rows} when it holds them all, else from the lane's (lane, id) range; {@code when}: the
   * lane's other conditions.
   */
  private static final String LATE =
      """
      SELECT g.id, g.lane, g.event_id, g.handlers, g.key, g.created_at, g.event_tid, g.log_tid FROM late_rows g
      WHERE {condition} AND (SELECT read FROM late_all)
      UNION ALL
      SELECT g.id, g.lane, g.event_id, g.handlers, g.key, g.created_at, g.event_tid, g.ctid AS log_tid FROM {log} g
      WHERE {condition} AND NOT (SELECT read FROM late_all)"""
          .replace(
              "{condition}",
              """
              (g.xid = ANY (h.{late}) OR (g.xid >= h.{late}_from AND g.xid < h.{late}_to))
                AND g.lane = h.lane AND g.id > {from} AND g.id <= {to}
                AND pg_visible_in_snapshot(g.xid, h.{seen}) AND {when}""");

  /**
   * One statement: open the windows asked for (hi = this statement's snapshot, ceil = the sequence
   * read after it, so every id visible in hi is at most ceil), read up to `limit` rows lane by lane
   * in turn order, skipping rows blocked for all their handlers, park those and the blocked
   * handlers of the rows read (they go out after their blocker, through the claim of version 1),
   * park what is left of a window being closed (rows that were blocked when it was read), and
   * return the rows with their events. Held lanes are read, not locked; the lanes the batch takes
   * from are locked (FOR SHARE: a lock, not a new row version), so a takeover that commits while
   * the claim runs drops its lane from the batch, as in version 1.
   *
   * <p>What a claim costs follows the rows, not the lanes held: one probe of the {@code (xid)}
   * index finds the lanes with rows in the windows opening now (those of the transactions their
   * shared lower snapshot did not see), so a lane whose window opens empty is not looked into, and
   * a window closing is looked at again (the tail) only if it had rows: one the probe found empty
   * stays empty. The marker row names the lanes whose window opened empty.
   */
  private static final String PAGE =
      """
      WITH req AS (
        -- the lanes sent with their window's bounds (ord: the lane's place in the turn order)
        SELECT * FROM unnest(?::smallint[], ?::bigint[], ?::text[], ?::text[], ?::text[],
                             ?::bigint[], ?::bigint[], ?::bigint[], ?::boolean[], ?::text[],
                             ?::text[], ?::bigint[], ?::bigint[], ?::bigint[], ?::boolean[],
                             ?::bigint[])
          AS r(lane, epoch, lo, lo_x, hi, start_pos, ceil, pos, open, old_lo, old_lo_x,
               old_start, old_ceil, old_pos, old_rows, ord)
      ), now_snap AS MATERIALIZED (
        SELECT pg_current_snapshot() AS snap, {log_last_id} AS ceil
      ), fresh AS MATERIALIZED (
        -- The lanes with rows in a window opened now from snapshot `since` (the lo most lanes
        -- open from): exactly the rows of the transactions `since` did not see that have committed
        -- now, found through the (xid) index in xid order: the transactions `since` saw running,
        -- and those at or above its xmax. A lane opening from `since` with none of them has an
        -- empty window and is not looked into. Bounded: past `limit` rows of either kind every
        -- lane is looked into (`complete` false).
        SELECT array_agg(DISTINCT f.lane) AS lanes,
               count(*) FILTER (WHERE f.running) < ? AND count(*) FILTER (WHERE NOT f.running) < ?
                 AS complete
        FROM (
          SELECT * FROM (
            SELECT g.lane, true AS running FROM {log} g CROSS JOIN now_snap n
            WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(?::pg_snapshot)))
              AND pg_visible_in_snapshot(g.xid, n.snap)
            ORDER BY g.xid LIMIT ?) a
          UNION ALL
          SELECT * FROM (
            SELECT g.lane, false FROM {log} g CROSS JOIN now_snap n
            WHERE g.xid >= pg_snapshot_xmax(?::pg_snapshot) AND pg_visible_in_snapshot(g.xid, n.snap)
            ORDER BY g.xid LIMIT ?) b
        ) f
      ), looked AS MATERIALIZED (
        -- a window opening empty is not looked into, and its lane is left out of what follows
        -- unless the window it closes had rows (the tail): what a claim costs follows the rows
        SELECT r.*, NOT coalesce(r.open AND r.lo = ? AND f.complete
                                 AND NOT coalesce(r.lane = ANY (f.lanes), false), false) AS look
        FROM req r CROSS JOIN fresh f
        UNION ALL
        -- the lanes sent as their lane alone: each opens a window from `since` (with the same xid
        -- bound and floor) and has no closing window to look at again, so only those the probe
        -- found rows for are looked into, and the others cost the statement next to nothing
        SELECT p.lane, p.epoch, ?::text, ?::text, ?::text, ?::bigint, NULL::bigint, 0::bigint,
               true, NULL::text, NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, false,
               p.ord, true
        FROM unnest(?::smallint[], ?::bigint[], ?::bigint[]) AS p(lane, epoch, ord)
        CROSS JOIN fresh f
        WHERE NOT f.complete OR p.lane = ANY (f.lanes)
      ), held AS MATERIALIZED (
        SELECT r.lane, r.epoch, r.ord, r.open, r.lo::pg_snapshot AS lo,
               CASE WHEN r.open THEN n.snap ELSE r.hi::pg_snapshot END AS hi,
               r.start_pos, CASE WHEN r.open THEN n.ceil ELSE r.ceil END AS ceil, r.pos,
               ARRAY(SELECT pg_snapshot_xip(r.lo::pg_snapshot)) AS late,
               pg_snapshot_xmax(r.lo::pg_snapshot) AS late_from, r.lo_x::xid8 AS late_to,
               r.old_lo::pg_snapshot AS old_lo, r.old_start, r.old_ceil, r.old_pos,
               ARRAY(SELECT pg_snapshot_xip(r.old_lo::pg_snapshot)) AS old_late,
               pg_snapshot_xmax(r.old_lo::pg_snapshot) AS old_late_from,
               r.old_lo_x::xid8 AS old_late_to, r.old_rows,
               -- late: the transactions lo saw in progress, or that started after it but took their
               -- log ids below its floor; ids below the start are read only when there are any
               EXISTS (SELECT FROM pg_snapshot_xip(r.lo::pg_snapshot))
                 OR pg_snapshot_xmax(r.lo::pg_snapshot) < r.lo_x::xid8 AS any_late,
               r.look
        FROM looked r CROSS JOIN now_snap n
        JOIN {lanes} l ON l.lane = r.lane AND l.epoch = r.epoch AND l.lease_owner = ?
        WHERE r.look OR (r.open AND r.old_rows)
      ), late_ranges AS MATERIALIZED (
        -- xids from a lower snapshot's xmax up to the xid bound taken before it: usually none
        -- (min and max of xid8 are not in PostgreSQL 13)
        SELECT v.f, v.t FROM held h CROSS JOIN LATERAL (
          VALUES (h.late_from, h.late_to), (h.old_late_from, h.old_late_to)) v(f, t)
        WHERE v.f < v.t
      ), late_xids AS MATERIALIZED (
        SELECT DISTINCT x FROM held h CROSS JOIN LATERAL unnest(h.late || h.old_late) AS x
      ), late_rows AS MATERIALIZED (
        -- The log rows of the transactions the held lanes' lower snapshots (and the closing
        -- windows') saw in progress, or that took their ids below a window's floor: below a
        -- window's floor only these can be new. Read for all lanes at once through the (xid)
        -- index, since the lane's (lane, id) range below the floor holds an entry for every row
        -- the lane ever completed until vacuum removes it (never, while the xmin horizon is held).
        -- Bounded: past that many rows each lane reads its own range instead (`late_all` false).
        -- Two parts, not one OR: the planner reads the whole log for the OR of an open range.
        SELECT * FROM (
          SELECT g.id, g.lane, g.xid, g.event_id, g.handlers, g.key, g.created_at, g.event_tid,
                 g.ctid AS log_tid FROM {log} g
          WHERE g.xid = ANY (ARRAY(SELECT x FROM late_xids))
          UNION ALL
          SELECT g.id, g.lane, g.xid, g.event_id, g.handlers, g.key, g.created_at, g.event_tid,
                 g.ctid AS log_tid FROM {log} g
          WHERE EXISTS (SELECT FROM late_ranges)
            AND g.xid >= (SELECT v.f FROM late_ranges v ORDER BY v.f LIMIT 1)
            AND g.xid < (SELECT v.t FROM late_ranges v ORDER BY v.t DESC LIMIT 1)
            AND g.xid <> ALL (ARRAY(SELECT x FROM late_xids))
        ) r
        LIMIT ?
      ), late_all AS MATERIALIZED (
        SELECT count(*) < ? AS read FROM late_rows
      ), tail AS MATERIALIZED (
        {tail}
      ), behind AS MATERIALIZED (
        -- per key and handler, the first row of the tail: it goes before the key's rows read now
        SELECT t.lane, t.key, hh.handler, min(t.id) AS id
        FROM tail t CROSS JOIN LATERAL unnest(t.handlers) AS hh(handler)
        WHERE t.key IS NOT NULL AND hh.handler IS NOT NULL
        GROUP BY t.lane, t.key, hh.handler
      ), blocking AS MATERIALIZED (
        -- whether anything can block a row at all: rarely, off the happy path
        SELECT p.pending OR EXISTS (SELECT 1 FROM behind) AS any, p.pending
        FROM (SELECT EXISTS (SELECT 1 FROM {deliveries} d
                             WHERE d.key IS NOT NULL AND d.status = 'pending') AS pending) p
      ), page AS MATERIALIZED (
        SELECT x.*, h.epoch, h.ord FROM (SELECT * FROM held {gate}ORDER BY ord) h CROSS JOIN LATERAL (
          SELECT u.* FROM (
            -- the rows below the floor, of transactions that committed late; unblocked ones only,
            -- as in the branch below (which must filter them itself: its LIMIT counts them)
            SELECT l.* FROM ({late:page}) l WHERE NOT {blocked:l}
            UNION ALL
            -- in id order and no further than the page can take, so the (lane, id) index stops
            -- there: read whole, a lane's window is the backlog's depth over the lanes (3,900
            -- rows at 1,000,000 deep over 256 lanes) for a page of 500
            (SELECT g.id, g.lane, g.event_id, g.handlers, g.key, g.created_at, g.event_tid, g.ctid AS log_tid FROM {log} g
             WHERE g.lane = h.lane AND g.id > greatest(h.pos, h.start_pos) AND g.id <= h.ceil
               AND pg_visible_in_snapshot(g.xid, h.hi) AND NOT pg_visible_in_snapshot(g.xid, h.lo)
               AND h.look AND NOT {blocked:g}
             ORDER BY g.id LIMIT ?)
          ) u
          ORDER BY u.id LIMIT ?
        ) x
        LIMIT ?
      ), locked AS MATERIALIZED (
        -- the lanes the batch takes from, in lane order as every statement that locks several:
        -- a takeover that committed meanwhile moved the epoch, and its lane drops out here
        SELECT l.lane FROM {lanes} l
        JOIN (SELECT DISTINCT lane, epoch FROM page) g ON l.lane = g.lane AND l.epoch = g.epoch
        WHERE l.lease_owner = ?
        ORDER BY l.lane
        FOR SHARE OF l
      ), page_end AS MATERIALIZED (
        -- once: as a subquery of the join below it was counted again for every lane held
        SELECT count(*) AS total, max(ord) AS last_ord FROM page
      {items}{parking}
      SELECT * FROM (
        SELECT i.lane, i.id, i.idx, i.handler, i.event_id, i.key, i.blocked, i.epoch, i.ord,
               e.type, e.payload, e.content_type, e.headers, e.created_at,
               NULL::text AS snap, NULL::bigint AS next_ceil, NULL::bigint AS page_rows,
               NULL::bigint AS page_last, NULL::smallint[] AS empty_lanes,
               NULL::smallint[] AS fresh_lanes, NULL::boolean AS fresh_complete,
               i.log_tid::text AS log_tid, NULL::boolean AS could_block,
               {handlers} AS handlers
        -- the event where the publish wrote it (the log row's ctid of it: a heap fetch, no index
        -- descent), else by its primary key: the tuple there may no longer be this event's
        -- visible version (an update, a republish, a VACUUM FULL) or the row came without one
        -- (a version-1 publisher, a republish's added handlers). The id is checked, so a reused
        -- slot is never taken for the event; LIMIT 1 runs the second branch only when the first
        -- found nothing, and keeps either one lookup per item whatever the plan thinks of the
        -- table's size (a generic plan made while it was nearly empty hashed all of it).
        FROM items i LEFT JOIN LATERAL (
          SELECT * FROM (
            SELECT * FROM {events} e WHERE e.ctid = i.event_tid AND e.id = i.event_id
            UNION ALL
            SELECT * FROM {events} e WHERE e.id = i.event_id) e
          WHERE NOT i.blocked LIMIT 1) e ON true
        UNION ALL
        -- what the page read, lanes taken over meanwhile included: where it stopped
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               NULL, n.snap::text, n.ceil, t.total, t.last_ord,
               ARRAY(SELECT lane FROM looked WHERE NOT look), f.lanes, f.complete, NULL,
               (SELECT b.any FROM blocking b), NULL
        FROM now_snap n CROSS JOIN fresh f CROSS JOIN page_end t
      ) r""";

  /** The tail: what is left of the windows being closed that had rows, read again and parked. */
  private static final String TAIL =
      """
        SELECT s.* FROM held h CROSS JOIN LATERAL (
          {late:tail}
          UNION ALL
          SELECT g.id, g.lane, g.event_id, g.handlers, g.key, g.created_at, g.event_tid, g.ctid AS log_tid FROM {log} g
          WHERE h.open AND h.old_rows AND g.lane = h.lane AND g.id > greatest(h.old_pos, h.old_start)
            AND g.id <= h.old_ceil AND pg_visible_in_snapshot(g.xid, h.lo)
            AND NOT pg_visible_in_snapshot(g.xid, h.old_lo)
        ) s
      """;

  /** Each handler of each row of the page, and whether it must wait behind its key. */
  private static final String ITEMS =
      """
      ), items AS MATERIALIZED (
        SELECT p.*, hh.handler, hh.idx,
               (SELECT k.any FROM blocking k) AND p.key IS NOT NULL AND ((SELECT pending FROM blocking) AND EXISTS (
                 SELECT 1 FROM {deliveries} d
                 WHERE d.lane = p.lane AND d.handler = hh.handler AND d.key = p.key
                   AND d.key IS NOT NULL AND d.status = 'pending' AND d.sequence <= p.id
               ) OR EXISTS (
                 SELECT 1 FROM behind b
                 WHERE b.lane = p.lane AND b.key = p.key AND b.handler = hh.handler AND b.id < p.id
               )) AS blocked
        FROM page p JOIN locked k ON k.lane = p.lane
        CROSS JOIN LATERAL unnest(p.handlers) WITH ORDINALITY AS hh(handler, idx)
        WHERE hh.handler IS NOT NULL
      """;

  /**
   * Parks the page's blocked handlers, the rows it read past that are blocked for every handler,
   * and the tail, and finishes their log rows: nothing of it can happen unless something blocks a
   * row.
   */
  private static final String PARKING =
      """
      ), reach AS MATERIALIZED (
        -- how far each lane was read: to its last row when the page stopped in it, else (the page
        -- ended before its limit, or moved on to a later lane) to the end of its window, where
        -- only rows blocked for every handler are left; lanes the page did not reach are absent
        SELECT h.lane,
               CASE WHEN x.to_end THEN h.start_pos ELSE least(h.start_pos, m.upto) END AS a_to,
               CASE WHEN x.to_end THEN h.ceil ELSE m.upto - 1 END AS b_to
        FROM held h
        LEFT JOIN (SELECT lane, max(id) AS upto FROM page GROUP BY lane) m ON m.lane = h.lane
        CROSS JOIN page_end t
        CROSS JOIN blocking k
        CROSS JOIN LATERAL (SELECT NOT (t.total >= ? AND h.ord = t.last_ord) AS to_end) x
        WHERE (t.total < ? OR h.ord <= t.last_ord)
          AND (m.upto IS NOT NULL
            OR (k.any
              AND (EXISTS (SELECT 1 FROM {deliveries} d
                           WHERE d.lane = h.lane AND d.key IS NOT NULL AND d.status = 'pending')
                OR EXISTS (SELECT 1 FROM behind b WHERE b.lane = h.lane))))
      ), skipped AS MATERIALIZED (
        -- the rows blocked for every handler that the page read past: parked now, so a window
        -- read to its end leaves nothing of a key behind in the log for the deliveries claim to
        -- overtake (a lane with none of its rows in the page is looked at only when something of
        -- its own could block them: a pending keyed delivery of the lane, or a tail row). Plain
        -- bounds from reach, so both ranges are index ranges. Read only when anything can block
        -- a row at all: on the happy path it would read the page's rows a second time for none.
        SELECT s.* FROM held h JOIN reach r ON r.lane = h.lane CROSS JOIN LATERAL (
          {late:skipped}
          UNION ALL
          SELECT g.id, g.lane, g.event_id, g.handlers, g.key, g.created_at, g.event_tid, g.ctid AS log_tid FROM {log} g
          WHERE g.lane = h.lane AND g.id > greatest(h.pos, h.start_pos) AND g.id <= r.b_to
            AND pg_visible_in_snapshot(g.xid, h.hi) AND NOT pg_visible_in_snapshot(g.xid, h.lo)
        ) s
        WHERE (SELECT k.any FROM blocking k) AND {blocked:s}
      ), aside AS MATERIALIZED (
        SELECT id, lane, event_id, handler, key, created_at, idx FROM items WHERE blocked
        UNION ALL
        SELECT w.id, w.lane, w.event_id, hh.handler, w.key, w.created_at, hh.idx
        FROM (SELECT * FROM skipped UNION ALL SELECT * FROM tail) w
        CROSS JOIN LATERAL unnest(w.handlers) WITH ORDINALITY AS hh(handler, idx)
        WHERE hh.handler IS NOT NULL
      ), parking AS MATERIALIZED (
        -- handlers parked while the row's others go now: struck from the row (positions stay),
        -- so the row, if read again (a batch cut short), does not send them a second time; a row
        -- all of whose handlers are parked leaves the log
        SELECT lane, id, bool_and(blocked) AS last, array_agg(idx) FILTER (WHERE blocked) AS idxs
        FROM items GROUP BY lane, id HAVING bool_or(blocked)
        UNION ALL SELECT lane, id, true, NULL FROM skipped
        UNION ALL SELECT lane, id, true, NULL FROM tail
      ), {finish:parking}, parked AS (
        -- what the steps above took out of the log: rows deleted, with their handlers as deleted;
        -- rows struck, with their handlers as they were when struck (locked first, see finish)
        {park:aside}
      )
      """;

  /**
   * The items of {@link #PAGE} sent while the last page statement found nothing that can block a
   * row (no pending keyed delivery in {deliveries}, no tail row): then every row is sent, and the
   * statement has no parking to do. It is the whole statement without the steps that would find
   * nothing (`{parking}` left out), which cost a small claim most of its time: the executor sets up
   * every step of a plan, taken or not (on PostgreSQL 15, a claim of a row or two over 64 lanes:
   * 0.80 ms from bind to end against 0.49 ms). Should it find something that can block a row after
   * all ({@code blocking}), it reads no row ({@code {gate}}) and says so ({@code could_block}), and
   * the claim sends the whole statement instead. It returns a row per log row with its handlers
   * (the claim makes an item of each), not a row per handler: unnesting each row's handlers was
   * about a fifth of a page of 500 rows (a function scan set up per row, its result stored).
   */
  private static final String ITEMS_UNBLOCKED =
      """
      ), items AS MATERIALIZED (
        SELECT p.*, NULL::text AS handler, NULL::bigint AS idx, false AS blocked
        FROM page p JOIN locked k ON k.lane = p.lane
      """;

  /**
   * What this store's claims have looked at: the snapshot of the last read that opened windows and
   * committed (null before the first), or of a quiet boundary since that looked from it (see {@code
   * lookedFrom}: the same rows are news from either), and the lanes whose windows were all read to
   * their end up to the last that opened windows (null unless every lane this store has a cursor
   * for was: then a row that snapshot did not see, in any lane, is news).
   */
  record Seen(String snapshot, Short[] lanes) {}

  Seen seen() {
    lock.lock();
    try {
      // rows the last snapshot that opened windows did not see, looked for from where the
      // boundary looks (see lookedFrom): the same rows, without stepping over what went before
      return new Seen(lookedFrom, lanesReadTo(lastSnapshot));
    } finally {
      lock.unlock();
    }
  }

  /**
   * Under the lock: the lanes with a cursor, if each has read its window to {@code snapshot}; null
   * also when they are all the lanes (every row is news, no need to look at its lane).
   */
  private Short[] lanesReadTo(String snapshot) {
    if (snapshot == null || cursors.isEmpty() || cursors.size() >= Lanes.COUNT) {
      return null;
    }
    Short[] lanes = new Short[cursors.size()];
    int i = 0;
    for (Map.Entry<Integer, Cursor> entry : cursors.entrySet()) {
      Cursor cursor = entry.getValue();
      if (!cursor.exhausted || !snapshot.equals(cursor.current.hi)) {
        return null;
      }
      lanes[i++] = entry.getKey().shortValue();
    }
    return lanes;
  }

  /** The snapshot of the last page statement that opened windows and whose read committed. */
  private String lastSnapshot;

  /**
   * The snapshot a boundary looks for news from (under the lock): {@link #lastSnapshot}, or the
   * snapshot of a later quiet boundary that looked from here. A quiet boundary found no row in the
   * log of a transaction its snapshot saw committed and the one it looked from did not (the probes
   * run after its snapshot), and such a transaction adds no row any more: looking from its snapshot
   * finds the same news as looking from {@link #lastSnapshot}. Looking from there each time, every
   * idle claim stepped again over the {@code (xid)} index entries of all rows other lanes published
   * and completed since, which a held xmin horizon keeps.
   */
  private String lookedFrom;

  /**
   * The value of {@code {incarnation}} this store's windows were read under (under the lock): null
   * until its first claim establishes it ({@link #knowIncarnation}).
   */
  private Long incarnation;

  private final ReentrantLock lock = new ReentrantLock();
  private final Map<Integer, Cursor> cursors = new HashMap<>();

  private final String load;
  private final String boundary;
  private final String establishIncarnation;
  private final String incarnationTable;
  private final Replanning replanning = new Replanning();
  private final String appendAndCommit;
  private final String boundaryAndPage;
  private int busyBoundaries; // how many boundaries in a row were not quiet (under the lock)
  private final String page;
  private final String unblockedPage;
  private final String boundaryAndUnblockedPage;

  /**
   * Whether the last page statement found something that could block a row (a pending keyed
   * delivery in {deliveries}, a tail row; true until the first one says): while it does, claims
   * send the whole page statement at once.
   */
  private volatile boolean deliveriesMayBlock = true;

  /**
   * Per owner: how many lanes of its turn order its last claim read before it was full, {@link
   * Integer#MAX_VALUE} when it never was. A claim's first page statement goes to twice as many (at
   * least {@link #FIRST_PAGE_LANES}); the rest follow in a further statement only when the page had
   * room left. Each lane sent with its window's bounds costs the statement about 8 µs whether the
   * page reaches it or not, and a drain's page fills from a lane or two of the 128 a task holds.
   */
  private final Map<String, Integer> reach = new java.util.concurrent.ConcurrentHashMap<>();

  static final int FIRST_PAGE_LANES = 8;

  private volatile int firstPageLanes = FIRST_PAGE_LANES;

  /** Tests: a claim's first page statement goes to at least this many lanes instead. */
  void firstPageLanes(int lanes) {
    firstPageLanes = lanes;
  }

  /** At most one cursor row per busy lane per this many nanoseconds (0: one per claim). */
  private final long cursorIntervalNanos;

  /**
   * A lane that handed out this many deliveries since its last cursor row appends one, interval or
   * not: a new holder re-reads (and, under a held xmin horizon, steps over the dead index entries
   * of) at most about this many of the lane's rows that were completed since, and a crash leaves at
   * most about this many uncharged. A claim takes up to 500 by default: a drain appends at each
   * claim.
   */
  static final int CURSOR_ROWS = 500;

  private final String complete;
  private final String completeWithHistory;
  private final String completeWhereRead;
  private final String lockUnknown;
  private final String move;
  private final String takeOver;
  private final String sweep;

  PostgresLog(PostgresTables tables, java.time.Duration cursorInterval) {
    this.cursorIntervalNanos = cursorInterval.toNanos();
    load =
        tables.sql(
            """
            SELECT r.lane, c.epoch, c.version, c.lo::text, c.lo_x::text, c.start_pos, c.hi::text,
                   c.hi_floor, c.hi_x::text, c.ceil
            FROM unnest(?::smallint[]) AS r(lane)
            CROSS JOIN LATERAL (
              SELECT * FROM {cursors} c WHERE c.lane = r.lane
              ORDER BY c.epoch DESC, c.version DESC LIMIT 1
            ) c""");
    // One statement: open the windows asked for (hi = this statement's snapshot, ceil = the
    // sequence read after it, so every id visible in hi is at most ceil), read up to `limit` rows
    // lane by lane in turn order, park the deliveries whose key has a pending delivery in
    // {deliveries} (they go out after it, through the claim of version 1), append the cursor of
    // each lane read, and return the rows with their events. Held lanes are read, not locked, as
    // in version 1: a takeover moves the epoch, and completion checks it.
    boundary =
        tables.sql(
            """
            SELECT b.floor, b.bound::text, EXISTS (
                SELECT 1 FROM {deliveries} d
                WHERE d.lane = ANY (?::smallint[]) AND d.status = 'pending'
                  AND d.available_at <= now()), b.quiet::text,
              -- what this transaction inserts is for its own lanes: it wakes no other task; and
              -- the isolation level, which must give each statement a snapshot of its own
              CASE WHEN set_config('relaybus.claiming', 'on', true) = 'on'
                THEN current_setting('transaction_isolation') END,
              pg_relation_size('{log}'::regclass),
              -- gone, or another value, after a crash or failover that lost WAL (version 18)
              (SELECT i.value FROM {incarnation} i)
            FROM {schema}.{p}log_boundary_(?::pg_snapshot) b""");
    incarnationTable = tables.sql("{incarnation}");
    establishIncarnation =
        tables.sql(
            """
            WITH put AS (
              INSERT INTO {incarnation} (value) VALUES (?) ON CONFLICT (one) DO NOTHING
              RETURNING value)
            SELECT value FROM put UNION ALL SELECT value FROM {incarnation}
            LIMIT 1""");
    appendAndCommit =
        tables.sql(
            """
            INSERT INTO {cursors}
              (lane, epoch, version, lo, lo_x, start_pos, hi, hi_floor, hi_x, ceil, handed,
               lo2, hi2, handed2)
            SELECT lane, epoch, version, lo::pg_snapshot, lo_x::xid8, start_pos, hi::pg_snapshot,
                   hi_floor, hi_x::xid8, ceil, handed, lo2::pg_snapshot, hi2::pg_snapshot, handed2
            FROM unnest(?::smallint[], ?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::bigint[],
                        ?::text[], ?::bigint[], ?::text[], ?::bigint[], ?::bigint[], ?::text[],
                        ?::text[], ?::bigint[])
              AS c(lane, epoch, version, lo, lo_x, start_pos, hi, hi_floor, hi_x, ceil, handed,
                   lo2, hi2, handed2);
            COMMIT""");
    page = tables.sql(pageStatement("", ITEMS, PARKING, BLOCKED, "NULL::text[]"));
    // while nothing could block a row; should something (a pending keyed delivery, a tail row),
    // it reads none and says so
    unblockedPage =
        tables.sql(
            pageStatement(
                "WHERE NOT (SELECT b.any FROM blocking b) ",
                ITEMS_UNBLOCKED,
                "      )\n",
                "false",
                "i.handlers"));
    // one round trip, two statements: the page's snapshot is taken after the boundary's ends
    boundaryAndPage = boundary + ";\n" + page;
    boundaryAndUnblockedPage = boundary + ";\n" + unblockedPage;
    // The safety net of sweep(): the rows of held lanes visible in the lower snapshot of the window
    // their lane is reading and not out, so never to be read again, go to {deliveries}.
    // Through the (xid) index, only the rows the lower snapshot the last sweep looked up to did
    // not see: those of the transactions it listed as running, and those at or above its xmax up
    // to the xmax of these. Not from its xmin up: a transaction that took an xid and stays open
    // (anywhere on the server) holds the xmin, and every sweep read the index entries of every
    // row published since it began and, the xmin horizon held by it, of every row completed.
    // Two parts, not one OR: the planner reads the whole log for the OR of an open range; "+ 0":
    // (lane, id) cannot answer them, and a lane's range holds an entry for every row it completed.
    sweep =
        tables.sql(
            """
            WITH c AS (
              SELECT * FROM unnest(?::smallint[], ?::bigint[], ?::text[], ?::text[])
                AS c(lane, epoch, lo, since)
            ), running AS MATERIALIZED (
              SELECT DISTINCT x FROM c CROSS JOIN LATERAL pg_snapshot_xip(c.since::pg_snapshot) x
            ), stranded AS MATERIALIZED (
              -- in xid order with a LIMIT, so only the index can answer it without a sort of all
              SELECT * FROM (
                SELECT g.id, g.lane, g.xid, g.event_id, g.handlers, g.key, g.created_at
                FROM {log} g JOIN c ON c.lane = g.lane + 0
                WHERE g.xid = ANY (ARRAY(SELECT x FROM running))
                  AND NOT pg_visible_in_snapshot(g.xid, c.since::pg_snapshot)
                  AND pg_visible_in_snapshot(g.xid, c.lo::pg_snapshot)
                UNION ALL
                SELECT g.id, g.lane, g.xid, g.event_id, g.handlers, g.key, g.created_at
                FROM {log} g JOIN c ON c.lane = g.lane + 0
                WHERE g.xid >= ?::xid8 AND g.xid < ?::xid8
                  AND g.xid <> ALL (ARRAY(SELECT x FROM running))
                  AND NOT pg_visible_in_snapshot(g.xid, c.since::pg_snapshot)
                  AND pg_visible_in_snapshot(g.xid, c.lo::pg_snapshot)
              ) g
              WHERE g.id <> ALL (?::bigint[])
                -- windows read before the server lost WAL may count reused xids as seen: the
                -- next claim notices and reads the lanes again from their cursor rows first
                AND (SELECT i.value FROM {incarnation} i) = ?::bigint
              ORDER BY g.xid
              LIMIT ?
            ), locked AS MATERIALIZED (
              -- fenced as a claim is: a takeover that committed meanwhile keeps its lane's rows
              SELECT l.lane FROM {lanes} l
              JOIN (SELECT DISTINCT lane FROM stranded) s ON s.lane = l.lane
              JOIN c ON c.lane = l.lane AND c.epoch = l.epoch
              WHERE l.lease_owner = ?
              ORDER BY l.lane
              FOR SHARE OF l
            ), rescued AS MATERIALIZED (
              SELECT s.* FROM stranded s JOIN locked k ON k.lane = s.lane
            ), aside AS MATERIALIZED (
              SELECT r.id, r.lane, r.event_id, hh.handler, r.key, r.created_at, hh.idx
              FROM rescued r
              CROSS JOIN LATERAL unnest(r.handlers) WITH ORDINALITY AS hh(handler, idx)
              WHERE hh.handler IS NOT NULL
            ), sweeping AS MATERIALIZED (
              SELECT lane, id, true AS last, NULL::int[] AS idxs FROM rescued
            ), {finish}, parked AS (
              -- only the rows the delete above removed, with their handlers as it removed them: a
              -- completion at an older epoch that committed after this statement's snapshot
              -- finished its row, which is not left behind
              {park:aside}
            )
            SELECT r.lane, r.id, r.xid::text, r.event_id
            FROM rescued r JOIN s_removed d ON d.lane = r.lane AND d.id = r.id
            ORDER BY r.lane, r.id"""
                .replace("{finish}", finish("s", "sweeping"))
                .replace("{park:aside}", PARK.replace("{took}", "SELECT * FROM s_removed")));
    String completeBase =
        """
        WITH t AS (
          SELECT * FROM unnest(?::smallint[], ?::bigint[], ?::bigint[], ?::int[], ?::boolean[],
                               ?::bigint[], ?::boolean[], ?::text[])
            AS t(lane, epoch, id, idx, last, token, known, seen)
        ), epochs AS MATERIALIZED (
          -- each lane's row once, not once per token: a batch is a few lanes' rows, and the
          -- planner, which expects a handful of tokens, probed the lanes' key per token
          -- and none when the server is not the one the tokens' rows were read on (see complete)
          SELECT l.lane, l.epoch FROM {lanes} l
          WHERE l.lane = ANY (ARRAY(SELECT DISTINCT t.lane FROM t))
            AND (SELECT i.value FROM {incarnation} i) IS NOT DISTINCT FROM ?::bigint
        ), ok AS MATERIALIZED (
          SELECT t.* FROM t JOIN epochs l ON l.lane = t.lane AND l.epoch = t.epoch
          WHERE t.known
        ), done AS (
          -- a handler done while others of its row are out is struck from the row (its position
          -- stays, the token ids of the others depend on it), so no restart sends it again
          SELECT lane, id, bool_or(last) AS last, array_agg(idx) AS idxs,
                 (array_agg(seen))[1]::tid AS seen
          FROM ok GROUP BY lane, id
        ), {finish}, c_done AS (
          -- a token is done only if this statement finished its handler: a row a takeover
          -- charged meanwhile (its epoch read here before the takeover committed) is the
          -- takeover's, and a handler struck meanwhile was finished by another transaction (the
          -- other holder's completion, a reschedule, the parking): not on a row deleted without
          -- it, and no row is struck unless it still had every handler it strikes (row 96)
          SELECT ok.* FROM ok JOIN (
            SELECT lane, id, handlers FROM c_removed
            UNION ALL SELECT lane, id, NULL::text[] FROM c_struck
            UNION ALL SELECT lane, id, NULL::text[] FROM c_struck_late
          ) f ON f.lane = ok.lane AND f.id = ok.id
          WHERE f.handlers IS NULL OR f.handlers[ok.idx] IS NOT NULL
        ){history}
        SELECT token FROM c_done"""
            .replace("{finish}", finish("c", "done", "r.seen", false, true));
    complete = tables.sql(completeBase.replace("{history}", ""));
    // The common completion: each row's last handler done, the row where its claim read it. One
    // fetch by ctid deletes it, with no per-row step around it: the statement above spends most of
    // its time unpacking, grouping and looking up its rows (a delete by ctid is about a tenth of
    // it). The ids and the lanes are checked as hashed sets (IS TRUE keeps the planner from making
    // either a join): a ctid that now holds another row, or a row of a lane whose epoch moved, is
    // not deleted here, and its tokens go to the statement above. The tids come through a
    // subquery, so the plan does not follow how many there are (as the statement above).
    completeWhereRead =
        tables.sql(
            """
            WITH fenced AS MATERIALIZED (
              SELECT l.lane FROM {lanes} l
              JOIN unnest(?::smallint[], ?::bigint[]) AS t(lane, epoch)
                ON l.lane = t.lane AND l.epoch = t.epoch
              WHERE (SELECT i.value FROM {incarnation} i) IS NOT DISTINCT FROM ?::bigint
            )
            DELETE FROM {log} g
            WHERE g.ctid = ANY (ARRAY(SELECT unnest(?::tid[])))
              AND (g.id IN (SELECT unnest(?::bigint[]))) IS TRUE
              AND (g.lane IN (SELECT lane FROM fenced)) IS TRUE
            RETURNING g.id""");
    // The rows of tokens this store does not know as out (see completeUnknown), each found by
    // key and event and locked, in lanes still at the tokens' epochs (locked as a claim locks
    // them), with the server's incarnation. The lanes first, in lane order, then their rows, as a
    // takeover locks them (its lane, then the rows it charges): a lock of the lanes after the rows
    // (FOR SHARE on the outer query, which locks after the join has locked every row) deadlocked
    // with a takeover of the lane (40P01), whose victim could be a task's start.
    lockUnknown =
        tables.sql(
            """
            WITH t AS (
              SELECT * FROM unnest(?::smallint[], ?::bigint[], ?::bigint[], ?::text[])
                AS t(lane, epoch, id, event_id)
            ), held AS MATERIALIZED (
              SELECT l.lane, l.epoch FROM {lanes} l
              JOIN (SELECT DISTINCT lane, epoch FROM t) x ON l.lane = x.lane AND l.epoch = x.epoch
              ORDER BY l.lane
              FOR SHARE OF l
            )
            SELECT g.lane, g.id, g.handlers, (SELECT i.value FROM {incarnation} i)
            FROM t JOIN held l ON l.lane = t.lane AND l.epoch = t.epoch
            CROSS JOIN LATERAL (
              -- l.lane, not t.lane: the lookup depends on the locked lane, so no plan locks a row
              -- before its lane
              SELECT g.lane, g.id, g.handlers FROM {log} g
              WHERE g.lane = l.lane AND g.id = t.id AND g.event_id = t.event_id
              LIMIT 1 FOR UPDATE) g
            ORDER BY g.lane, g.id""");
    completeWithHistory =
        tables.sql(
            completeBase.replace(
                "{history}",
                """
                , history AS (
                  INSERT INTO {completed} (id, event_id, handler, lane, key, sequence, attempts, created_at)
                  SELECT ok.token, a.event_id, a.handlers[ok.idx], a.lane, a.key,
                         CASE WHEN a.key IS NULL THEN NULL ELSE a.id END, 0, a.created_at
                  FROM c_done ok JOIN c_at a ON a.lane = ok.lane AND a.id = ok.id
                  ON CONFLICT DO NOTHING
                )"""));
    // Reschedule, bury or release: the delivery becomes a row of {deliveries} under its token id.
    move =
        tables.sql(
            """
            WITH t AS (
              SELECT ?::smallint AS lane, ?::bigint AS epoch, ?::bigint AS id, ?::int AS idx,
                     ?::boolean AS last, ?::bigint AS token, ?::text AS event
            ), ok AS MATERIALIZED (
              SELECT t.*, g.event_id, g.handlers[t.idx] AS handler, g.key, g.created_at
              FROM t JOIN {lanes} l ON l.lane = t.lane AND l.epoch = t.epoch
              CROSS JOIN LATERAL (
                SELECT * FROM {log} g WHERE g.lane = t.lane AND g.id = t.id AND g.event_id = t.event
                LIMIT 1) g
            ), moving AS (
              SELECT lane, id, last, ARRAY[idx] AS idxs FROM ok
            ), %s, moved AS (
              -- only if the steps above took the handler out of the log: its row deleted with the
              -- handler in it, or struck on a version that had it (locked as found). One a
              -- takeover charged meanwhile (the lane's epoch read here before it committed) is the
              -- takeover's; one the new holder's completion struck meanwhile is done (row 95)
              -- (a retry's due time in fire_at too: the row's own, which a pull of its key's
              -- followers cannot move, see PostgresClaims' fail)
              INSERT INTO {deliveries}
                (id, event_id, handler, lane, key, sequence, attempts, claims, status, available_at,
                 fire_at, last_error, created_at, xid) OVERRIDING SYSTEM VALUE
              SELECT ok.token, ok.event_id, ok.handler, ok.lane, ok.key,
                     CASE WHEN ok.key IS NULL THEN NULL ELSE ok.id END, ?, 1, ?,
                     now() + ? * interval '1 millisecond',
                     CASE WHEN ?::boolean THEN now() + ? * interval '1 millisecond' END,
                     ?, ok.created_at, '1'
              FROM ok JOIN (
                SELECT lane, id, handlers FROM m_removed
                UNION ALL
                SELECT a.lane, a.id, a.handlers FROM m_at a
                WHERE NOT a.last AND (a.lane, a.id) IN (
                  SELECT lane, id FROM m_struck UNION ALL SELECT lane, id FROM m_struck_late)
              ) f ON f.lane = ok.lane AND f.id = ok.id AND f.handlers[ok.idx] = ok.handler
              ON CONFLICT DO NOTHING
              RETURNING 1
            )
            SELECT count(*) FROM moved"""
                .formatted(finish("m", "moving", null, true)));
    // At a takeover: what the previous holder had handed out of its window (ids up to its
    // cursor's handed) lost an attempt, as version 1 charges its in-flight deliveries.
    takeOver =
        tables.sql(
            """
            WITH cur AS MATERIALIZED (
              -- the previous holder's own cursor only (the lane's epoch, not yet moved): an older
              -- one names rows handed back since (relinquished) or charged by an earlier takeover
              SELECT c.* FROM unnest(?::smallint[]) AS t(lane)
              JOIN {lanes} l ON l.lane = t.lane
              CROSS JOIN LATERAL (
                SELECT * FROM {cursors} c WHERE c.lane = t.lane
                ORDER BY c.epoch DESC, c.version DESC LIMIT 1
              ) c
              WHERE c.epoch = l.epoch
            ), gone AS MATERIALIZED (
              -- handed out: in the oldest window not done up to its handed, in the windows read
              -- after it (all of them), in the newest up to its handed. None of these rows is
              -- visible in lo, so each has an id above lo's floor (start_pos) or is of a
              -- transaction lo saw running or that took its xid between lo's xmax and the bound
              -- taken with the floor: read from the floor through (lane, id), and those through
              -- (xid), never the lane's range below the floor, which holds an entry for every row the
              -- lane completed until vacuum removes it (never, while the xmin horizon is held).
              -- "+ 0": (lane, id) cannot answer the lookups by xid, which a plan made on statistics
              -- that count live rows only (a drained log looks empty) would otherwise read it for
              SELECT g.* FROM cur c CROSS JOIN LATERAL (
                SELECT g.* FROM {log} g WHERE g.lane = c.lane AND g.id > c.start_pos
                UNION ALL
                SELECT g.* FROM {log} g
                WHERE g.xid = ANY (ARRAY(SELECT pg_snapshot_xip(c.lo)))
                  AND g.lane + 0 = c.lane AND g.id + 0 <= c.start_pos
                UNION ALL
                SELECT g.* FROM {log} g
                WHERE g.xid >= pg_snapshot_xmax(c.lo) AND g.xid < c.lo_x
                  AND g.lane + 0 = c.lane AND g.id + 0 <= c.start_pos
              ) g
              WHERE (pg_visible_in_snapshot(g.xid, c.hi) AND NOT pg_visible_in_snapshot(g.xid, c.lo)
                     AND g.id <= c.handed)
                 OR (pg_visible_in_snapshot(g.xid, c.lo2) AND NOT pg_visible_in_snapshot(g.xid, c.hi))
                 OR (pg_visible_in_snapshot(g.xid, c.hi2) AND NOT pg_visible_in_snapshot(g.xid, c.lo2)
                     AND g.id <= c.handed2)
            ), taken AS (
              SELECT lane, id, true AS last, NULL::int[] AS idxs FROM gone
            ), {finish}, charged AS (
              -- only the rows the delete above removed, with their handlers as it removed them: a
              -- completion that committed after this statement's snapshot finished its row (gone,
              -- or handlers struck) and said so; charged from the snapshot, it went out again
              -- (due again at once: fire_at, its own due time, is now; see PostgresLanes' charge)
              INSERT INTO {deliveries}
                (id, event_id, handler, lane, key, sequence, attempts, claims, status, last_error,
                 created_at, xid, fire_at) OVERRIDING SYSTEM VALUE
              SELECT 4611686018427387904 + g.id * 1024 + h.idx - 1, g.event_id, h.handler, g.lane, g.key,
                     CASE WHEN g.key IS NULL THEN NULL ELSE g.id END, 1, 1,
                     CASE WHEN 1 >= ? THEN 'dead' ELSE 'pending' END,
                     format(CASE WHEN 1 >= ?
                       THEN 'attempts exhausted (%s of %s): lane %s was taken over while this delivery was in flight'
                       ELSE 'attempt %s of %s lost: lane %s was taken over while this delivery was in flight' END,
                       1, ?, g.lane),
                     g.created_at, '1', now()
              FROM x_removed r JOIN x_at g ON g.lane = r.lane AND g.id = r.id
              CROSS JOIN LATERAL unnest(r.handlers) WITH ORDINALITY AS h(handler, idx)
              WHERE h.handler IS NOT NULL
              ORDER BY g.id, h.idx
              ON CONFLICT DO NOTHING
              RETURNING lane
            )
            SELECT lane, count(*) FROM charged GROUP BY lane"""
                .replace("{finish}", finish("x", "taken")));
  }

  /**
   * {@link #PAGE} with its pieces in place: {@code gate} on the held lanes it reads, its {@code
   * items}, its {@code parking} and the test of a row {@code blocked}, and the places its rows
   * below the floor are read.
   */
  private static String pageStatement(
      String gate, String items, String parking, String blocked, String handlers) {
    return PAGE.replace("{tail}", TAIL)
        .replace("{handlers}", handlers)
        .replace("{gate}", gate)
        .replace("{items}", items)
        .replace("{parking}", parking)
        .replace("{blocked:g}", blocked)
        .replace("{blocked:l}", blocked.replace("g.", "l."))
        .replace("{blocked:s}", blocked.replace("g.", "s."))
        .replace(
            "{late:tail}",
            late("old_late", "h.old_pos", "h.old_start", "lo", "h.open AND h.old_rows"))
        .replace("{late:page}", late("late", "h.pos", "h.start_pos", "hi", "h.look AND h.any_late"))
        .replace("{late:skipped}", late("late", "h.pos", "r.a_to", "hi", "h.any_late"))
        .replace("{finish:parking}", finish("p", "parking", null, true))
        .replace(
            "{park:aside}",
            PARK.replace(
                "{took}",
                """
                SELECT lane, id, handlers FROM p_removed
                  UNION ALL
                  SELECT a.lane, a.id, a.handlers FROM p_at a
                  WHERE NOT a.last AND (a.lane, a.id) IN (
                    SELECT lane, id FROM p_struck UNION ALL SELECT lane, id FROM p_struck_late)"""));
  }

  /**
   * Common table expressions {@code <name>_at} to {@code <name>_struck_late} that finish the log
   * rows named in the CTE {@code rows} (lane, id, last, idxs): a row with {@code last} leaves the
   * log, another has the handler positions {@code idxs} struck (set to NULL: positions stay, the
   * token ids of its other handlers depend on them). {@code <name>_at} has each row's event_id,
   * handlers, key and created_at as this statement sees them.
   *
   * <p>Each row is found by key, one probe of the {@code (lane, id)} index (a LATERAL subquery with
   * LIMIT: no plan can read the log another way), and that version is deleted or updated by its
   * {@code ctid}; not by a join with the log, whose plan follows the log's statistics: they count
   * live rows only, so a drained log whose index a held xmin horizon keeps full of dead entries
   * looks empty, and such a plan read the whole index to finish one row (653 buffers after 20,000
   * completions). A row another transaction changed since this statement's snapshot is not at that
   * version: it is reached again by key (EvalPlanQual then checks the key on the newest version),
   * looked for only when the counts say some row was missed.
   */
  private static String finish(String name, String rows) {
    return finish(name, rows, null, false);
  }

  /**
   * {@link #finish(String, String)} for rows whose version as a claim read it is known ({@code
   * seen}, a tid expression over {@code r}): each row is fetched from there (no index descent) when
   * that tuple is still its version visible now, else by key as above.
   *
   * <p>With {@code lockStruck} (and no {@code seen}), each row to be struck is locked as {@code
   * <name>_at} finds it, in (lane, id) order, so its handlers there are those of the version the
   * strike changes: another transaction's strike or delete that committed after this statement's
   * snapshot is seen (the row's newest version, or no row), where an UPDATE cannot say what it
   * found. Rows that leave the log need no lock: the delete returns them as it deleted them.
   */
  private static String finish(String name, String rows, String seen, boolean lockStruck) {
    return finish(name, rows, seen, lockStruck, false);
  }

  /**
   * {@link #finish(String, String, String, boolean)}; with {@code strikeWhole}, a row is struck
   * only if the version struck still has every handler it strikes (a completion's: one struck
   * meanwhile was finished by another transaction, and the tokens of that row are left to a
   * statement that locks it, see completeUnknown). An UPDATE cannot say what it found, but its
   * condition is checked on the version it changes.
   */
  private static String finish(
      String name, String rows, String seen, boolean lockStruck, boolean strikeWhole) {
    String byKey =
        """
        SELECT g.ctid, g.event_id, g.handlers, g.key, g.created_at FROM {log} g
                    WHERE g.lane = r.lane AND g.id = r.id""";
    String find =
        lockStruck
            ? """
            SELECT * FROM ({byKey} AND NOT r.last LIMIT 1 FOR UPDATE) l
              UNION ALL
              SELECT * FROM ({byKey} AND r.last LIMIT 1) d"""
                .replace("{byKey}", byKey)
            : seen == null
                ? byKey + " LIMIT 1"
                : """
            SELECT * FROM (
                SELECT g.ctid, g.event_id, g.handlers, g.key, g.created_at FROM {log} g
                WHERE g.ctid = {seen} AND g.lane = r.lane AND g.id = r.id
                UNION ALL
                {byKey}) g
              LIMIT 1"""
                    .replace("{byKey}", byKey)
                    .replace("{seen}", seen);
    return """
        {n}_at AS MATERIALIZED (
          -- a row whose strike would leave it no handler leaves the log instead (row 105): no
          -- one may have it out any more, and a row with nothing to send stayed for good
          SELECT r.lane, r.id, r.last OR NOT {keeps:r} AS last, r.idxs, g.ctid AS version,
                 g.event_id, g.handlers, g.key, g.created_at
          FROM {from} r CROSS JOIN LATERAL (
            {find}) g
        ), {n}_gone AS (
          DELETE FROM {log} g WHERE g.ctid = ANY (ARRAY(SELECT version FROM {n}_at WHERE last))
            AND EXISTS (SELECT FROM {n}_at WHERE last)
          RETURNING g.lane, g.id, g.handlers
        ), {n}_struck AS (
          UPDATE {log} g SET handlers = (
              {strike:x} CROSS JOIN (SELECT idxs FROM {n}_at a WHERE a.lane = g.lane AND a.id = g.id) x)
          WHERE g.ctid = ANY (ARRAY(SELECT version FROM {n}_at WHERE NOT last)){whole:x}
            AND EXISTS (
              -- on the version changed: another strike since this statement's snapshot may have
              -- left only these (then the row is missed, and goes below)
              SELECT 1 FROM unnest(g.handlers) WITH ORDINALITY AS o(h, i)
              WHERE o.h IS NOT NULL AND (g.lane, g.id, o.i::int) NOT IN (
                SELECT a.lane, a.id, i.idx FROM {n}_at a CROSS JOIN unnest(a.idxs) AS i(idx)))
            AND EXISTS (SELECT FROM {n}_at WHERE NOT last)
          RETURNING g.lane, g.id
        ), {n}_missed AS MATERIALIZED (
          SELECT a.lane, a.id, a.last, a.idxs FROM {n}_at a
          WHERE (SELECT count(*) FROM {n}_gone) + (SELECT count(*) FROM {n}_struck)
                  < (SELECT count(*) FROM {n}_at)
            AND (a.lane, a.id) NOT IN (SELECT lane, id FROM {n}_gone
                                       UNION ALL SELECT lane, id FROM {n}_struck)
        ), {n}_newest AS MATERIALIZED (
          -- each missed row to be struck, locked: its handlers as the strike below finds them, so
          -- one that would leave none deletes the row instead (a condition that holds on the
          -- newest version only would not reach it: the version this statement sees fails it)
          SELECT m.lane, m.id, {keeps:m} AS keeps
          FROM (SELECT * FROM {n}_missed WHERE NOT last ORDER BY lane, id) m CROSS JOIN LATERAL (
            SELECT g.handlers FROM {log} g WHERE g.lane = m.lane AND g.id = m.id
            LIMIT 1 FOR UPDATE) g
        ), {n}_gone_late AS (
          DELETE FROM {log} g USING {n}_missed m
          WHERE g.lane = m.lane AND g.id = m.id AND EXISTS (SELECT FROM {n}_missed)
            AND (m.last OR ((m.lane, m.id) IN (SELECT lane, id FROM {n}_newest WHERE NOT keeps){whole:m}))
          RETURNING g.lane, g.id, g.handlers
        ), {n}_struck_late AS (
          UPDATE {log} g SET handlers = ({strike:m})
          FROM {n}_missed m
          WHERE NOT m.last AND g.lane = m.lane AND g.id = m.id AND EXISTS (SELECT FROM {n}_missed){whole:m}
            AND (m.lane, m.id) IN (SELECT lane, id FROM {n}_newest WHERE keeps)
          RETURNING g.lane, g.id
        ), {n}_removed AS (
          -- the rows this statement deleted, with their handlers as they were then
          SELECT lane, id, handlers FROM {n}_gone
          UNION ALL SELECT lane, id, handlers FROM {n}_gone_late
        ), {n}_finished AS (
          -- the rows this statement finished: not those another transaction deleted meanwhile
          SELECT lane, id FROM {n}_removed
          UNION ALL SELECT lane, id FROM {n}_struck
          UNION ALL SELECT lane, id FROM {n}_struck_late
        )"""
        .replace("{find}", find)
        .replace("{from}", lockStruck ? "(SELECT * FROM {rows} ORDER BY lane, id)" : "{rows}")
        .replace(
            "{whole:x}",
            strikeWhole
                ? """

                  AND NOT EXISTS (
                    -- the row's struck positions, looked up in a hash of those to strike: only a
                    -- row with a struck handler looks, and no scan of {n}_at per row
                    SELECT 1 FROM unnest(array_positions(g.handlers, NULL)) AS p(idx)
                    WHERE (g.lane, g.id, p.idx) IN (
                      SELECT a.lane, a.id, i.idx FROM {n}_at a CROSS JOIN unnest(a.idxs) AS i(idx)))"""
                : "")
        .replace(
            "{whole:m}",
            strikeWhole
                ? """

                  AND NOT EXISTS (SELECT 1 FROM unnest(m.idxs) AS i(idx) WHERE g.handlers[i.idx] IS NULL)"""
                : "")
        .replace("{strike:x}", STRIKE.replace("{idxs}", "x.idxs"))
        .replace("{strike:m}", STRIKE.replace("{idxs}", "m.idxs"))
        .replace("{keeps:r}", KEEPS.replace("{idxs}", "r.idxs"))
        .replace("{keeps:m}", KEEPS.replace("{idxs}", "m.idxs"))
        .replace("{n}", name)
        .replace("{rows}", rows);
  }

  /**
   * Whether row {@code g} has a handler not struck other than those at positions {@code idxs}:
   * whether striking those leaves it one.
   */
  private static final String KEEPS =
      """
      EXISTS (SELECT 1 FROM unnest(g.handlers) WITH ORDINALITY AS o(h, i)
                      WHERE o.h IS NOT NULL AND o.i <> ALL ({idxs}))""";

  /** The row's handlers with the positions {@code idxs} set to NULL (positions stay). */
  private static final String STRIKE =
      """
      SELECT array_agg(CASE WHEN o.i = ANY ({idxs}) THEN NULL ELSE o.h END ORDER BY o.i)
              FROM unnest(g.handlers) WITH ORDINALITY AS o(h, i)""";

  /** {@link #LATE} for one place of the page statement. */
  private static String late(String late, String from, String to, String seen, String when) {
    return LATE.replace("{late}", late)
        .replace("{from}", from)
        .replace("{to}", to)
        .replace("{seen}", seen)
        .replace("{when}", when);
  }

  /** How often a store looks for log rows its lanes' cursors moved past ({@link #sweep}). */
  static final long SWEEP_INTERVAL_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(60);

  private final java.util.concurrent.atomic.AtomicLong rescuedTotal =
      new java.util.concurrent.atomic.AtomicLong();

  /** The rows {@link #sweep} moved since this store started (each one a defect). */
  long rescuedTotal() {
    return rescuedTotal.get();
  }

  /** The most rows one sweep moves. */
  static final int SWEEP_LIMIT = 1_000;

  /** Calls between taking tokens off the outstanding lists and their statement's end. */
  private final java.util.concurrent.atomic.AtomicInteger settling =
      new java.util.concurrent.atomic.AtomicInteger();

  private long sweepInterval = SWEEP_INTERVAL_NANOS;
  private long nextSweepAt = System.nanoTime() + SWEEP_INTERVAL_NANOS;

  /** Tests: sweep this often instead. */
  void sweepEvery(java.time.Duration interval) {
    lock.lock();
    try {
      sweepInterval = interval.toNanos();
      nextSweepAt = System.nanoTime() + sweepInterval;
    } finally {
      lock.unlock();
    }
  }

  /** A completion, reschedule, burial or release of log tokens begins (see {@link #sweep}). */
  void settlingStarted() {
    settling.incrementAndGet();
  }

  void settlingEnded() {
    settling.decrementAndGet();
  }

  /** Whether {@link #sweep} is due: every {@link #SWEEP_INTERVAL_NANOS}. */
  boolean sweepDue() {
    lock.lock();
    try {
      return System.nanoTime() - nextSweepAt >= 0;
    } finally {
      lock.unlock();
    }
  }

  /** A log row {@link #sweep} found behind its lane's cursor and moved to {deliveries}. */
  record Rescued(int lane, long id, String xid, String eventId) {}

  /**
   * The safety net of the windows: finds the log rows of {@code leases}' lanes that their cursor
   * has moved past without handing them out, and makes each a pending delivery of {deliveries}, so
   * it goes out through the claim of version 1 (after its key's pending deliveries) instead of
   * waiting forever. Such a row is visible in the lower snapshot of the window its lane is reading,
   * where no row may be left: each row that snapshot sees was read by an earlier window, closed
   * before this one opened, and handed out (done, or outstanding: on this store's lists) or parked
   * (a window's tail goes when the next one opens). None should ever be found; one that is, is a
   * defect, logged as such. Skipped while a completion or the like is between taking its tokens off
   * the outstanding lists and its statement's end (its rows are still in the log); the next claim
   * tries again. That guards this store's own completions only: after a takeover the lane's lower
   * snapshot can see a row whose completion by the previous holder (at its epoch, which it reads
   * without a lock) has not committed yet, so only the rows the sweep's own delete removed are
   * moved and reported. Each sweep looks only at the rows the lower ends the last one looked up to
   * did not see, so it costs what was published since, not the log's history, also while a
   * transaction that took an xid stays open.
   */
  List<Rescued> sweep(Connection connection, String owner, List<LaneLease> leases)
      throws SQLException {
    List<Short> lanes = new ArrayList<>();
    List<Long> epochs = new ArrayList<>();
    List<String> los = new ArrayList<>();
    List<String> sinces = new ArrayList<>();
    List<Long> out = new ArrayList<>();
    Map<Integer, Cursor> swept = new HashMap<>();
    Map<Integer, String> described = new HashMap<>();
    Long known;
    lock.lock();
    try {
      known = incarnation;
      if (settling.get() > 0 || known == null) {
        return List.of(); // a claim in progress, or none since the store started or WAL was lost
      }
      for (LaneLease lease : leases) {
        Cursor cursor = cursors.get(lease.lane());
        if (cursor == null || cursor.epoch != lease.epoch()) {
          continue;
        }
        lanes.add((short) lease.lane());
        epochs.add(lease.epoch());
        los.add(cursor.current.lo);
        sinces.add(cursor.sweptFrom);
        out.addAll(cursor.where.keySet());
        swept.put(lease.lane(), cursor);
        described.put(lease.lane(), describe(cursor));
      }
    } finally {
      lock.unlock();
    }
    List<Rescued> rescued = new ArrayList<>();
    if (!lanes.isEmpty()) {
      // the xids looked at besides those the last sweeps' snapshots listed as running: from the
      // lowest xmax looked up to, up to the newest lower xmax
      long from = Long.MAX_VALUE;
      long to = 0;
      for (int i = 0; i < lanes.size(); i++) {
        from = Math.min(from, Long.parseLong(xmax(sinces.get(i))));
        to = Math.max(to, Long.parseLong(xmax(los.get(i))));
      }
      try (PreparedStatement statement = connection.prepareStatement(sweep)) {
        statement.setArray(1, connection.createArrayOf("int2", lanes.toArray()));
        statement.setArray(2, connection.createArrayOf("int8", epochs.toArray()));
        statement.setArray(3, connection.createArrayOf("text", los.toArray()));
        statement.setArray(4, connection.createArrayOf("text", sinces.toArray()));
        statement.setString(5, Long.toString(from));
        statement.setString(6, Long.toString(to));
        statement.setArray(7, connection.createArrayOf("int8", out.toArray()));
        statement.setLong(8, known);
        statement.setInt(9, SWEEP_LIMIT);
        statement.setString(10, owner);
        try (ResultSet rs = statement.executeQuery()) {
          while (rs.next()) {
            rescued.add(
                new Rescued(rs.getShort(1), rs.getLong(2), rs.getString(3), rs.getString(4)));
          }
        }
      }
    }
    lock.lock();
    try {
      nextSweepAt = System.nanoTime() + sweepInterval;
      // more than it takes at once: the rest is found by the next sweep from the same xids
      for (int i = 0; i < lanes.size() && rescued.size() < SWEEP_LIMIT; i++) {
        Cursor cursor = swept.get((int) lanes.get(i));
        if (cursors.get((int) lanes.get(i)) == cursor) {
          // a row this lower end did not see has an xid it listed as running or one at or
          // above its xmax
          cursor.sweptFrom = los.get(i);
        }
      }
    } finally {
      lock.unlock();
    }
    rescuedTotal.addAndGet(rescued.size());
    for (Rescued r : rescued) {
      LOG.warn(
          "Lane {}: log row {} (event {}, transaction {}) was behind the lane's read position and"
              + " never handed out; it is a pending delivery now and goes out with the next"
              + " claims. This is a defect of relaybus: please report this line. The lane's"
              + " windows: {}",
          r.lane(),
          r.id(),
          r.eventId(),
          r.xid(),
          described.get(r.lane()));
    }
    return rescued;
  }

  /** The xmin of a snapshot's text form ({@code xmin:xmax:xip,...}). */
  private static String xmin(String snapshot) {
    return snapshot.substring(0, snapshot.indexOf(':'));
  }

  /** The xmax of a snapshot's text form ({@code xmin:xmax:xip,...}). */
  private static String xmax(String snapshot) {
    int colon = snapshot.indexOf(':');
    return snapshot.substring(colon + 1, snapshot.indexOf(':', colon + 1));
  }

  private static String describe(Cursor cursor) {
    StringBuilder b = new StringBuilder("epoch ").append(cursor.epoch);
    for (Window w : cursor.older) {
      b.append("; read, not done: ").append(describe(w));
    }
    return b.append("; reading: ").append(describe(cursor.current)).toString();
  }

  private static String describe(Window w) {
    return "lo=%s loX=%s start=%d hi=%s hiFloor=%d hiX=%s ceil=%d pos=%d empty=%s out=%d"
        .formatted(
            w.lo,
            w.loX,
            w.start,
            w.hi,
            w.hiFloor,
            w.hiX,
            w.ceil,
            w.position,
            w.empty,
            w.outstanding.size());
  }

  /** Per lease: the covered snapshot as committed (rows of {deliveries} that wait for the log). */
  List<String> covered(List<LaneLease> leases) {
    lock.lock();
    try {
      List<String> covered = new ArrayList<>();
      for (LaneLease lease : leases) {
        Cursor cursor = cursors.get(lease.lane());
        covered.add(
            cursor == null || cursor.epoch != lease.epoch() ? NOTHING_VISIBLE : cursor.covered);
      }
      return covered;
    } finally {
      lock.unlock();
    }
  }

  /**
   * Reads up to {@code limit} deliveries from the log for {@code leases} (in that turn order).
   * Nothing changes in this object until {@link Read#commit()}. A lane that finds the window it
   * continued read to its end opens the next one in a second statement while there is room, so what
   * was published since the window opened goes out in this claim, not the next.
   */
  Read claim(
      Connection connection, String owner, List<LaneLease> leases, int limit, Boundary boundary)
      throws SQLException {
    Map<Integer, Cursor> stale = loadMissing(connection, leases);
    Read read = new Read(boundary);
    lock.lock();
    try {
      for (LaneLease lease : leases) {
        Cursor cursor = stale.get(lease.lane());
        read.plans.put(lease.lane(), new Plan(cursor != null ? cursor : cursors.get(lease.lane())));
      }
    } finally {
      lock.unlock();
    }
    // Quiet: nothing can be in a next window, so none opens; only windows not read to their end
    // are read (without a bound no window may open, so in one statement).
    List<LaneLease> round =
        limit <= 0
            ? List.of()
            : boundary.quiet()
                ? leases.stream().filter(l -> !read.plans.get(l.lane()).exhausted).toList()
                : leases;
    if (boundary.quiet()) {
      // every log row committed before the boundary's snapshot was read: what it sees is covered
      // (a keyed timer published meanwhile may go, with no window opened for it)
      read.plans.values().stream()
          .filter(plan -> plan.exhausted)
          .forEach(plan -> plan.covered = boundary.quietSnapshot());
    }
    List<LaneLease> first = firstPage(owner, round);
    readRounds(
        connection,
        owner,
        first,
        round.subList(first.size(), round.size()),
        !boundary.quiet(),
        limit,
        read);
    rememberReach(owner, leases, limit, read);
    return read;
  }

  /**
   * Page statements, the first over {@code round}, while there is room: then the lanes of the last
   * one that read the window they continued to its end and did not open one in it open the next,
   * unless the boundary was quiet ({@code mayOpen} false: no window may open without an xid bound);
   * the lanes of {@code rest} (after {@code round} in turn order) go with the second statement.
   * Ends when a statement leaves no lane to read: each lane is read at most twice after it was
   * first sent, once in its window and once in the window it opens.
   */
  private void readRounds(
      Connection connection,
      String owner,
      List<LaneLease> round,
      List<LaneLease> rest,
      boolean mayOpen,
      int limit,
      Read read)
      throws SQLException {
    while (!round.isEmpty()) {
      int room = limit - read.batch.size() - read.unreadable.size();
      if (room <= 0) {
        break;
      }
      Set<Integer> opened = readRound(connection, owner, round, room, read);
      round = followedBy(mayOpen ? stillToOpen(round, opened, read) : List.of(), rest);
      rest = List.of();
    }
  }

  private static List<LaneLease> followedBy(List<LaneLease> first, List<LaneLease> then) {
    List<LaneLease> all = new ArrayList<>(first);
    all.addAll(then);
    return all;
  }

  /** The lanes of {@code round} a claim's first page statement goes to (see {@link #reach}). */
  private List<LaneLease> firstPage(String owner, List<LaneLease> round) {
    long lanes = Math.max(firstPageLanes, 2L * reach.getOrDefault(owner, Integer.MAX_VALUE));
    return lanes >= round.size() ? round : round.subList(0, (int) lanes);
  }

  /**
   * After a claim over {@code leases} (in turn order) of up to {@code limit}: how far into them it
   * read before it was full, if it was.
   */
  private void rememberReach(String owner, List<LaneLease> leases, int limit, Read read) {
    if (limit <= 0) {
      return;
    }
    if (read.batch.size() + read.unreadable.size() < limit) {
      reach.put(owner, Integer.MAX_VALUE);
      return;
    }
    Set<Integer> taken = new HashSet<>();
    read.batch.forEach(d -> taken.add(d.token().lane()));
    read.unreadable.keySet().forEach(t -> taken.add(t.lane()));
    int last = 0;
    for (int i = 0; i < leases.size(); i++) {
      if (taken.contains(leases.get(i).lane())) {
        last = i + 1;
      }
    }
    reach.put(owner, last);
  }

  private static List<LaneLease> stillToOpen(
      List<LaneLease> round, Set<Integer> opened, Read read) {
    return round.stream()
        .filter(l -> !opened.contains(l.lane()) && read.plans.get(l.lane()).exhausted)
        .toList();
  }

  /**
   * {@link #boundary} and the claim's first page statement in one round trip, as the claim
   * transaction's first statements, the page over every lane as a claim that is not quiet reads
   * them. The page statement takes its snapshot after the boundary statement ends, as when it is
   * sent apart, and the lanes' windows get their floor and bound from the boundary's result: only
   * the wait between the two is saved. When the boundary was quiet after all, the page opened
   * windows with no bound: the read returned has only its boundary, and the caller rolls the
   * transaction back and claims with {@link #claim} under that boundary (a quiet boundary takes no
   * xid, and what it says, that nothing committed between the last read and its snapshot, holds
   * whatever transaction reads next). Null, having sent nothing, unless the last two boundaries
   * were not quiet (the log is busy, so this one very likely is not either) and every lane's cursor
   * is loaded: the caller then claims the usual way.
   */
  Read claimWithBoundary(Connection connection, String owner, List<LaneLease> leases, int limit)
      throws SQLException {
    Read read = new Read(null);
    String seen;
    lock.lock();
    try {
      if (busyBoundaries < 2) {
        return null;
      }
      for (LaneLease lease : leases) {
        Cursor cursor = cursors.get(lease.lane());
        if (cursor == null || cursor.epoch != lease.epoch()) {
          return null;
        }
        read.plans.put(lease.lane(), new Plan(cursor));
      }
      seen = seenBy(leases);
    } finally {
      lock.unlock();
    }
    List<LaneLease> firstLanes = firstPage(owner, leases);
    Round first = new Round(owner, firstLanes, limit, read, deliveriesMayBlock);
    try (PreparedStatement statement = connection.prepareStatement(first.statementWithBoundary())) {
      int p = bindBoundary(connection, statement, leases, seen);
      first.bind(connection, statement, p);
      statement.execute();
      try (ResultSet rs = statement.getResultSet()) {
        read.boundary = boundaryFrom(rs, seen);
      }
      if (read.boundary.quiet()) {
        return new Read(read.boundary);
      }
      if (!statement.getMoreResults()) {
        throw new SQLException("the claim's page statement returned no result");
      }
      try (ResultSet rs = statement.getResultSet()) {
        first.read(rs);
      }
    }
    Round taken = orWhole(connection, first);
    replanning.check(connection);
    Set<Integer> opened = taken.handOut();
    readRounds(
        connection,
        owner,
        followedBy(
            stillToOpen(firstLanes, opened, read),
            leases.subList(firstLanes.size(), leases.size())),
        List.of(),
        true,
        limit,
        read);
    rememberReach(owner, leases, limit, read);
    return read;
  }

  /**
   * The floor and the xid bound of the windows a claim opens: the log sequence read, then an xid
   * taken, in that order. A transaction that took a log id at or below the floor took its xid
   * before (a publisher takes its xid first), so below the bound; the next window finds such ids by
   * xid, even when its lower snapshot did not list the transaction (a snapshot lists running
   * transactions only below the latest one that ended). The bound is the claim transaction's own
   * xid, so this must be its first statement that could write: an xid taken earlier in it could be
   * older than the floor.
   */
  record Boundary(long floor, String bound, boolean deliveriesDue, String quietSnapshot) {
    /** No transaction committed and no log id was taken since the windows were read: no bound. */
    boolean quiet() {
      return bound == null;
    }
  }

  /**
   * The boundary for a claim over {@code leases}, taken as the claim transaction's first statement.
   * When every lane it would open a window for was read to the end of a window up to the last page
   * statement's snapshot, the function is told that snapshot: if nothing has happened since (no log
   * id taken, no transaction that was running then, none ended since), it takes no xid and the
   * claim opens no window. An idle claim then writes nothing and reads no log index at all.
   */
  Boundary boundary(Connection connection, List<LaneLease> leases) throws SQLException {
    String seen;
    lock.lock();
    try {
      seen = seenBy(leases);
    } finally {
      lock.unlock();
    }
    try (PreparedStatement statement = connection.prepareStatement(boundary)) {
      bindBoundary(connection, statement, leases, seen);
      Boundary boundary;
      try (ResultSet rs = statement.executeQuery()) {
        boundary = boundaryFrom(rs, seen);
      }
      replanning.check(connection);
      return boundary;
    }
  }

  /** Under the lock: the snapshot the boundary is told every window was read up to, or null. */
  private String seenBy(List<LaneLease> leases) {
    return lastSnapshot != null && readToTheEnd(leases, lastSnapshot) ? lookedFrom : null;
  }

  /** Sets the boundary statement's parameters; returns the index of the next one. */
  private static int bindBoundary(
      Connection connection, PreparedStatement statement, List<LaneLease> leases, String seen)
      throws SQLException {
    statement.setArray(
        1, connection.createArrayOf("int2", leases.stream().map(l -> (short) l.lane()).toArray()));
    statement.setString(2, seen);
    return 3;
  }

  /** The boundary statement's result; {@code seen}: the snapshot it was told (null: none). */
  private Boundary boundaryFrom(ResultSet rs, String seen) throws SQLException {
    rs.next();
    Boundary boundary =
        new Boundary(rs.getLong(1), rs.getString(2), rs.getBoolean(3), rs.getString(4));
    String isolation = rs.getString(5);
    if (!"read committed".equals(isolation)) {
      // Under repeatable read the page statement would read with the boundary's snapshot, taken
      // before the floor and the xid bound its windows rest on; serializable also aborts claims
      throw new IllegalStateException(
          "The claim's transaction runs at isolation level '"
              + isolation
              + "', but the store needs 'read committed' (each statement its own snapshot): the"
              + " connections of a DataSource given to the store must not default to another"
              + " level (default_transaction_isolation of the role or database, or the pool's"
              + " transactionIsolation); the store's own pool sets read committed itself");
    }
    replanning.logSize(rs.getLong(6));
    long value = rs.getLong(7);
    Long found = rs.wasNull() ? null : value;
    lock.lock();
    try {
      if (incarnation != null && !incarnation.equals(found)) {
        forgetWindows();
        throw new ServerLostWal(
            "PostgreSQL lost what it had not yet written to disk since this store's last claim (a"
                + " crash, or a failover to a standby; "
                + incarnationTable
                + (found == null ? " is empty" : " holds another value")
                + "): its transaction ids may be handed out again, so the lanes resume from their"
                + " cursor rows, and deliveries handed out since those were written may go out"
                + " again");
      }
      busyBoundaries = boundary.quiet() ? 0 : busyBoundaries + 1;
      if (boundary.quiet() && seen != null && seen.equals(lookedFrom)) {
        lookedFrom = boundary.quietSnapshot(); // nothing came between: the next looks from here
      }
    } finally {
      lock.unlock();
    }
    return boundary;
  }

  /**
   * The server lost WAL since the store's windows were read (see {@link #boundaryFrom}); the
   * windows are dropped, and a claim tried again resumes each lane from its latest cursor row.
   */
  static final class ServerLostWal extends java.sql.SQLTransientException {
    ServerLostWal(String message) {
      super(message);
    }
  }

  /**
   * Whether the server's incarnation row, read on {@code connection} (not a standby's: it cannot
   * read an unlogged table), is gone or holds another value than the one this store's windows were
   * read under: the server was promoted or recovered from a crash since. False while the store
   * knows none.
   */
  boolean incarnationChanged(Connection connection) throws SQLException {
    Long known;
    lock.lock();
    try {
      known = incarnation;
    } finally {
      lock.unlock();
    }
    if (known == null) {
      return false;
    }
    try (Statement statement = connection.createStatement();
        ResultSet rs = statement.executeQuery("SELECT value FROM " + incarnationTable)) {
      return !(rs.next() && known.equals(rs.getLong(1)));
    }
  }

  /** Whether the store knows the incarnation its windows are read under. */
  boolean knowsIncarnation() {
    lock.lock();
    try {
      return incarnation != null;
    } finally {
      lock.unlock();
    }
  }

  /**
   * Before a claim, while the store does not know it (its first claim, or its first after the
   * server lost WAL): the value of {@code {incarnation}}, put there now (a random one) if the row
   * is gone. Its own statement, committed: a claim's first writing statement must be its boundary.
   * Stores that find the row gone at once each try to put theirs; the first wins, and all read it.
   */
  void knowIncarnation(Connection connection) throws SQLException {
    Long value = null;
    // empty only when another store's insert committed while this one waited for it to end (its
    // snapshot was older): the next statement sees it
    for (int attempt = 0; value == null && attempt < 3; attempt++) {
      try (PreparedStatement statement = connection.prepareStatement(establishIncarnation)) {
        statement.setLong(1, java.util.concurrent.ThreadLocalRandom.current().nextLong());
        try (ResultSet rs = statement.executeQuery()) {
          value = rs.next() ? rs.getLong(1) : null;
        }
      }
    }
    if (!connection.getAutoCommit()) {
      connection.commit(); // a caller's pool may hand out connections in a transaction
    }
    if (value == null) {
      throw new SQLException("could not read " + incarnationTable + " after inserting its row");
    }
    lock.lock();
    try {
      if (incarnation == null) {
        incarnation = value;
      }
    } finally {
      lock.unlock();
    }
  }

  /**
   * Under the lock: the server lost WAL, so every window and snapshot in memory may rest on
   * transaction ids handed out again. Each lane is read again from its latest cursor row (one that
   * survived came with all the WAL before it, which holds the end of every transaction its
   * snapshots saw), as by a store that just started; the incarnation is learnt again before the
   * next claim.
   */
  private void forgetWindows() {
    cursors.clear();
    lastSnapshot = null;
    lookedFrom = null;
    busyBoundaries = 0;
    reach.clear();
    incarnation = null;
  }

  /** Whether every lane whose window was read to its end has {@code snapshot} as its upper end. */
  private boolean readToTheEnd(List<LaneLease> leases, String snapshot) {
    for (LaneLease lease : leases) {
      Cursor cursor = cursors.get(lease.lane());
      if (cursor == null || cursor.epoch != lease.epoch()) {
        return false;
      }
      if (cursor.exhausted && !snapshot.equals(cursor.current.hi)) {
        return false;
      }
    }
    return true;
  }

  /**
   * Commits the claim's transaction, appending in the same round trip the cursor of each lane the
   * claim took from: where the lane resumes (its oldest window not done, and how far it was handed
   * out) and its newest window (for a takeover's charge); for a lane it took from before under its
   * epoch, only once the cursor interval has passed since its last row. If this throws, whether the
   * transaction committed is unknown.
   */
  void commit(Connection connection, Read read) throws SQLException {
    List<Object[]> rows = new ArrayList<>();
    long now = System.nanoTime();
    lock.lock();
    try {
      for (Map.Entry<Integer, Plan> entry : read.plans.entrySet()) {
        Plan plan = entry.getValue();
        Cursor cursor = plan.cursor;
        // A busy lane's row at most once per interval, or per CURSOR_ROWS deliveries: between two,
        // the lane's latest row is an earlier state, which a restart resumes from (re-reading only
        // rows still in the log: completion deletes the rest) and a takeover charges from (not
        // what was handed out since).
        plan.appends =
            plan.wrote
                && (!cursor.appended
                    || now - cursor.appendedAt >= cursorIntervalNanos
                    || cursor.takenSince + plan.taken >= CURSOR_ROWS);
        if (!plan.appends) {
          continue;
        }
        plan.appendsAt = now;
        plan.version++;
        Window oldest = plan.oldest();
        Window newest = plan.current();
        rows.add(
            new Object[] {
              (short) (int) entry.getKey(),
              plan.cursor.epoch,
              plan.version,
              oldest.lo,
              oldest.loX,
              oldest.start,
              oldest.hi,
              oldest.hiFloor,
              oldest.hiX,
              oldest.ceil,
              oldest.position,
              newest.lo,
              newest.hi,
              newest.position
            });
      }
    } finally {
      lock.unlock();
    }
    if (rows.isEmpty()) {
      connection.commit();
      return;
    }
    try (PreparedStatement statement = connection.prepareStatement(appendAndCommit)) {
      String[] types = {
        "int2", "int8", "int8", "text", "text", "int8", "text", "int8", "text", "int8", "int8",
        "text", "text", "int8"
      };
      for (int c = 0; c < types.length; c++) {
        Object[] column = new Object[rows.size()];
        for (int r = 0; r < rows.size(); r++) {
          column[r] = rows.get(r)[c];
        }
        statement.setArray(c + 1, connection.createArrayOf(types[c], column));
      }
      statement.execute();
    }
    connection.commit(); // committed already: tells the pool there is nothing to roll back
  }

  /** One page statement over {@code leases}; returns the lanes it opened a window for. */
  private Set<Integer> readRound(
      Connection connection, String owner, List<LaneLease> leases, int limit, Read read)
      throws SQLException {
    Round round = new Round(owner, leases, limit, read, deliveriesMayBlock);
    readPage(connection, round);
    return orWhole(connection, round).handOut();
  }

  /**
   * {@code round} as read, or, if it was the page statement without parking and found something
   * that could block a row (so read nothing and opened nothing), the whole statement over the same
   * lanes, read now in the same transaction. The store remembers whether the last statement found
   * such a thing.
   */
  private Round orWhole(Connection connection, Round round) throws SQLException {
    deliveriesMayBlock = round.couldBlock;
    if (!round.unblocked || !round.couldBlock) {
      return round;
    }
    Round whole = round.whole();
    readPage(connection, whole);
    deliveriesMayBlock = whole.couldBlock;
    return whole;
  }

  private void readPage(Connection connection, Round round) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(round.statement())) {
      round.bind(connection, statement, 1);
      try (ResultSet rs = statement.executeQuery()) {
        round.read(rs);
      }
    }
  }

  /**
   * One page statement over {@code leases}: its parameters, taken from the lanes' plans when it is
   * made; the rows it returns ({@link #read}); the deliveries handed out of them ({@link #handOut},
   * which needs the claim's boundary). Apart, so the page can go in one round trip with the
   * boundary statement.
   */
  private final class Round {
    private final String owner;
    private final List<LaneLease> leases;
    private final int limit;
    private final Read read;
    private final int n;
    private final Short[] lanes;
    private final Long[] epochs;
    private final String[] los;
    private final String[] loXs;
    private final String[] his;
    private final Long[] starts;
    private final Long[] ceils;
    private final Long[] positions;
    private final Boolean[] opens;
    private final String[] oldLos;
    private final String[] oldLoXs;
    private final Long[] oldStarts;
    private final Long[] oldCeils;
    private final Long[] oldPositions;
    private final Boolean[] oldRows;
    private final Set<Integer> opened = new HashSet<>();
    private final String since;
    private final String sinceX;
    private final Long sinceStart;
    private final List<Integer> alone = new ArrayList<>();
    private final List<Integer> bounded = new ArrayList<>();
    // what the statement returned
    private final Set<Integer> emptyLanes = new HashSet<>();
    private String snapshot;
    private long ceil;
    private long pageRows;
    private int pageLast; // 1-based position in `leases` of the last lane the page read
    // rows per lane in turn order, each row its items
    private final Map<Integer, List<List<Item>>> rows = new LinkedHashMap<>();
    // sent as the page statement without parking; it read nothing if `couldBlock`
    private final boolean unblocked;
    private boolean couldBlock; // something could block a row: a pending keyed delivery, a tail row

    Round(String owner, List<LaneLease> leases, int limit, Read read, boolean mayBlock) {
      this.owner = owner;
      this.leases = leases;
      this.limit = limit;
      this.read = read;
      n = leases.size();
      lanes = new Short[n];
      epochs = new Long[n];
      los = new String[n];
      loXs = new String[n];
      his = new String[n];
      starts = new Long[n];
      ceils = new Long[n];
      positions = new Long[n];
      opens = new Boolean[n];
      oldLos = new String[n];
      oldLoXs = new String[n];
      oldStarts = new Long[n];
      oldCeils = new Long[n];
      oldPositions = new Long[n];
      oldRows = new Boolean[n];
      for (int i = 0; i < n; i++) {
        LaneLease lease = leases.get(i);
        Plan plan = read.plans.get(lease.lane());
        Window window = plan.current();
        boolean open = plan.exhausted;
        lanes[i] = (short) lease.lane();
        epochs[i] = lease.epoch();
        // the next window starts where this one ends: at its hi, with the floor and the xid bound
        // taken before hi
        los[i] = open ? window.hi : window.lo;
        loXs[i] = open ? window.hiX : window.loX;
        starts[i] = open ? window.hiFloor : window.start;
        his[i] = window.hi;
        ceils[i] = window.ceil;
        positions[i] = open ? 0L : window.position;
        opens[i] = open;
        // the window being closed: what is left of it was blocked when read, and is parked
        oldLos[i] = window.lo;
        oldLoXs[i] = window.loX;
        oldStarts[i] = window.start;
        oldCeils[i] = window.ceil;
        oldPositions[i] = window.position;
        // only a window that had rows can have any left for the tail (the first window's lower
        // end sees nothing, and a window the probe found empty stays empty)
        oldRows[i] = open && !window.empty && !NOTHING_VISIBLE.equals(window.hi);
        if (open) {
          opened.add(lease.lane());
        }
      }
      // the lo most opening lanes share: one probe tells which of them have rows (null: none opens)
      String since = null;
      Map<String, Integer> sharing = new HashMap<>();
      for (int i = 0; i < n; i++) {
        if (opens[i] && sharing.merge(los[i], 1, Integer::sum) > sharing.getOrDefault(since, 0)) {
          since = los[i];
        }
      }
      // Of the lanes opening from `since` with nothing to look at again, those with the most common
      // xid bound and floor (nearly always all: one claim opened their windows) are sent as their
      // lane alone, so what the statement does per lane follows the lanes with rows, not those
      // held.
      String[] bounds = new String[n]; // xid bound and floor of a lane opening from `since` afresh
      Map<String, Integer> sharingBounds = new HashMap<>();
      String shared = null;
      for (int i = 0; i < n; i++) {
        if (opens[i] && !oldRows[i] && los[i].equals(since)) {
          bounds[i] = loXs[i] + "/" + starts[i];
          if (sharingBounds.merge(bounds[i], 1, Integer::sum)
              > sharingBounds.getOrDefault(shared, 0)) {
            shared = bounds[i];
          }
        }
      }
      String sharedX = null;
      Long sharedStart = null;
      for (int i = 0; i < n; i++) {
        if (bounds[i] != null && bounds[i].equals(shared)) {
          alone.add(i);
          sharedX = loXs[i];
          sharedStart = starts[i];
        } else {
          bounded.add(i);
        }
      }
      this.since = since;
      this.sinceX = sharedX;
      this.sinceStart = sharedStart;
      this.unblocked = !mayBlock;
    }

    String statement() {
      return unblocked ? unblockedPage : page;
    }

    /** {@link #statement()} after the boundary's, in one round trip. */
    String statementWithBoundary() {
      return unblocked ? boundaryAndUnblockedPage : boundaryAndPage;
    }

    /** The same read with the whole page statement, which parks what must wait. */
    Round whole() {
      return new Round(owner, leases, limit, read, true);
    }

    /** Sets the page statement's parameters from {@code p} on; returns the next one's index. */
    int bind(Connection connection, PreparedStatement statement, int p) throws SQLException {
      Object[][] columns = {
        lanes,
        epochs,
        los,
        loXs,
        his,
        starts,
        ceils,
        positions,
        opens,
        oldLos,
        oldLoXs,
        oldStarts,
        oldCeils,
        oldPositions,
        oldRows
      };
      String[] types = {
        "int2", "int8", "text", "text", "text", "int8", "int8", "int8", "bool", "text", "text",
        "int8", "int8", "int8", "bool"
      };
      for (int c = 0; c < columns.length; c++) {
        statement.setArray(p++, connection.createArrayOf(types[c], at(columns[c], bounded)));
      }
      statement.setArray(p++, connection.createArrayOf("int8", ordinals(bounded)));
      statement.setInt(p++, limit);
      statement.setInt(p++, limit);
      statement.setString(p++, since);
      statement.setInt(p++, limit);
      statement.setString(p++, since);
      statement.setInt(p++, limit);
      statement.setString(p++, since);
      statement.setString(p++, since);
      statement.setString(p++, sinceX);
      statement.setString(p++, since);
      statement.setObject(p++, sinceStart, java.sql.Types.BIGINT);
      statement.setArray(p++, connection.createArrayOf("int2", at(lanes, alone)));
      statement.setArray(p++, connection.createArrayOf("int8", at(epochs, alone)));
      statement.setArray(p++, connection.createArrayOf("int8", ordinals(alone)));
      statement.setString(p++, owner);
      statement.setInt(p++, lateRows(limit));
      statement.setInt(p++, lateRows(limit));
      statement.setInt(p++, limit);
      statement.setInt(p++, limit);
      statement.setInt(p++, limit);
      statement.setString(p++, owner);
      if (!unblocked) { // how far the page read, for the rows it read past (parking)
        statement.setInt(p++, limit);
        statement.setInt(p++, limit);
      }
      return p;
    }

    /**
     * Takes the rows the page statement returned, in any order: they are put in the turn order of
     * their lanes, then by id and handler, here (sorting them in the statement, payloads and all,
     * was about a tenth of a page of 500).
     */
    void read(ResultSet rs) throws SQLException {
      List<Item> items = new ArrayList<>();
      while (rs.next()) {
        String snap = rs.getString(15);
        if (snap != null) {
          snapshot = snap;
          ceil = rs.getLong(16);
          pageRows = rs.getLong(17);
          pageLast = rs.getInt(18);
          couldBlock = rs.getBoolean(23);
          for (Object lane : (Object[]) rs.getArray(19).getArray()) {
            emptyLanes.add(((Number) lane).intValue());
          }
          // a lane sent alone that the probe found nothing for opened empty
          if (rs.getBoolean(21)) {
            java.sql.Array fresh = rs.getArray(20);
            Set<Integer> withRows = new HashSet<>();
            for (Object lane : fresh == null ? new Object[0] : (Object[]) fresh.getArray()) {
              withRows.add(((Number) lane).intValue());
            }
            for (int i : alone) {
              if (!withRows.contains((int) lanes[i])) {
                emptyLanes.add((int) lanes[i]);
              }
            }
          }
          continue;
        }
        int lane = rs.getShort(1);
        long id = rs.getLong(2);
        // the short form sends a row with all its handlers, the whole one a row per handler
        java.sql.Array all = rs.getArray(24);
        String[] handlers =
            all == null ? new String[] {rs.getString(4)} : (String[]) all.getArray();
        for (int h = 0; h < handlers.length; h++) {
          if (handlers[h] == null) {
            continue; // struck: done while the row's others were out
          }
          Item item =
              new Item(
                  lane,
                  id,
                  all == null ? rs.getInt(3) : h + 1,
                  handlers[h],
                  rs.getString(5),
                  rs.getString(6),
                  rs.getBoolean(7),
                  rs.getLong(8),
                  rs.getLong(9),
                  rs.getString(10),
                  rs.getBytes(11),
                  rs.getString(12),
                  rs.getString(13),
                  rs.getTimestamp(14),
                  rs.getString(22));
          items.add(item);
        }
      }
      items.sort(
          java.util.Comparator.comparingLong(Item::ord)
              .thenComparingLong(Item::id)
              .thenComparingInt(Item::index));
      long lastId = -1;
      int lastLane = -1;
      for (Item item : items) {
        List<List<Item>> laneRows = rows.computeIfAbsent(item.lane, l -> new ArrayList<>());
        if (item.lane != lastLane || item.id != lastId) {
          laneRows.add(new ArrayList<>());
          lastLane = item.lane;
          lastId = item.id;
        }
        laneRows.get(laneRows.size() - 1).add(item);
      }
    }

    /** Hands out what the page read (up to {@code limit}) and moves the lanes' plans. */
    Set<Integer> handOut() {
      long floor = read.boundary.floor();
      String bound = read.boundary.bound();
      if (!opened.isEmpty()) {
        read.opened = snapshot;
      }
      // Which lanes were read to the end of their window: all of them when the page read fewer rows
      // than it may; else every lane before the one it stopped in. Counted from the page, not from
      // the rows returned: the rows of a lane taken over meanwhile are dropped from those, and the
      // lanes after it were not read.
      int stoppedAt = pageRows >= limit ? pageLast - 1 : -1;
      // Hand out whole rows up to `limit` deliveries (at least one row); parked ones do not count.
      int handed = 0;
      for (int i = 0; i < n; i++) {
        int lane = lanes[i];
        Plan plan = read.plans.get(lane);
        if (opens[i] && bound == null) {
          // a window's upper end comes with its xid bound: the next window starts from both
          throw new IllegalStateException(
              "lane " + lane + ": a window opened under a quiet boundary (no xid bound)");
        }
        if (opens[i]) {
          Window next = new Window(los[i], loXs[i], starts[i], snapshot, floor, bound, ceil, 0);
          next.empty = emptyLanes.contains(lane);
          plan.chain.add(next);
        }
        Window window = plan.current();
        if (rows.containsKey(lane)) {
          plan.wrote = true;
        }
        boolean trimmed = false;
        for (List<Item> row : rows.getOrDefault(lane, List.of())) {
          long sendable = row.stream().filter(item -> !item.blocked).count();
          int fits = (int) Math.min(sendable, limit - handed);
          if (fits <= 0 && sendable > 0) {
            trimmed = true;
            stoppedAt = stoppedAt < 0 ? i : Math.min(stoppedAt, i);
            break;
          }
          handed += fits;
          plan.taken += fits;
          long id = row.get(0).id;
          window.position = Math.max(window.position, id);
          Map<Integer, Boolean> outstanding = new HashMap<>();
          int given = 0;
          for (Item item : row) {
            if (item.blocked) {
              continue;
            }
            DeliveryToken token =
                new DeliveryToken(
                    tokenId(id, item.index), lane, item.epoch, LOG_CLAIMS, item.eventId);
            if (given++ >= fits) {
              // the batch is full: this handler waits in {deliveries}, the row's others go now
              read.overflow.add(token);
              continue;
            }
            String problem = item.problem();
            if (problem != null) {
              read.unreadable.put(token, problem);
              // the event is bad for every handler: the row goes with its last sendable one
              Item lastSendable = row.stream().filter(x -> !x.blocked).reduce((a, b) -> b).get();
              read.unreadableLast.put(token, item == lastSendable);
              continue;
            }
            outstanding.put(item.index, true);
            read.batch.add(item.delivery(token, PostgresPublisher.headers(item.headers)));
          }
          if (!outstanding.isEmpty()) {
            window.outstanding.put(id, outstanding);
            window.readAt.put(id, new RowRead(row.get(0).logTid, row.get(0).eventId));
          }
        }
        if (trimmed) {
          plan.exhausted = false;
        }
      }
      for (int i = 0; i < n; i++) {
        Plan plan = read.plans.get((int) lanes[i]);
        boolean exhausted = stoppedAt < 0 || i < stoppedAt;
        plan.exhausted = exhausted;
        if (exhausted) {
          plan.covered = plan.current().hi;
        }
      }
      return opened;
    }
  }

  /**
   * How many rows of transactions in progress at the windows' lower ends one statement reads for
   * all lanes at once; past it each lane reads its own range (a rare very large transaction).
   */
  private static int lateRows(int limit) {
    return Math.max(1_000, 4 * limit);
  }

  /** The values of {@code column} at positions {@code at}. */
  private static Object[] at(Object[] column, List<Integer> at) {
    return at.stream().map(i -> column[i]).toArray();
  }

  /** The 1-based places in the turn order of positions {@code at}. */
  private static Object[] ordinals(List<Integer> at) {
    return at.stream().map(i -> (long) i + 1).toArray();
  }

  /** A row's delivery to one handler, as the page statement returned it. */
  private record Item(
      int lane,
      long id,
      int index,
      String handler,
      String eventId,
      String key,
      boolean blocked,
      long epoch,
      long ord,
      String type,
      byte[] payload,
      String contentType,
      String headers,
      java.sql.Timestamp createdAt,
      String logTid) {
    String problem() {
      if (type == null) {
        return "the event row is missing";
      }
      try {
        PostgresPublisher.headers(headers);
        return null;
      } catch (IllegalArgumentException e) {
        return e.getMessage();
      }
    }

    ClaimedDelivery delivery(DeliveryToken token, Map<String, String> parsedHeaders) {
      return new ClaimedDelivery(
          token,
          eventId,
          handler,
          key,
          key == null ? null : id,
          0,
          type,
          payload,
          contentType,
          parsedHeaders,
          createdAt.toInstant());
    }
  }

  /**
   * Loads the cursor of each lane of {@code leases} this store does not read under its lease's
   * epoch, from the lane's latest cursor row. Returns those of leases older than the cursor this
   * store reads the lane under (a holder that lost the lane and does not know yet): its claim reads
   * with a cursor of its own, which no commit puts in place (the lane's lock drops the lane from
   * its batch). Put in place, it replaced the current holder's, whose next claim read the lane
   * again from its last cursor row and handed out again what it had out since.
   */
  private Map<Integer, Cursor> loadMissing(Connection connection, List<LaneLease> leases)
      throws SQLException {
    List<LaneLease> missing = new ArrayList<>();
    lock.lock();
    try {
      for (LaneLease lease : leases) {
        Cursor cursor = cursors.get(lease.lane());
        if (cursor == null || cursor.epoch != lease.epoch()) {
          missing.add(lease);
        }
      }
    } finally {
      lock.unlock();
    }
    if (missing.isEmpty()) {
      return Map.of();
    }
    Map<Integer, Cursor> loaded = new HashMap<>();
    for (LaneLease lease : missing) {
      Cursor fresh = new Cursor(lease.epoch());
      fresh.current =
          new Window(NOTHING_VISIBLE, FIRST_XID, 0, NOTHING_VISIBLE, 0, FIRST_XID, 0, 0);
      fresh.exhausted = true; // the first claim opens (NOTHING_VISIBLE, now]
      loaded.put(lease.lane(), fresh);
    }
    try (PreparedStatement statement = connection.prepareStatement(load)) {
      statement.setArray(
          1,
          connection.createArrayOf("int2", missing.stream().map(l -> (short) l.lane()).toArray()));
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          Cursor cursor = loaded.get((int) rs.getShort(1));
          long epoch = rs.getLong(2);
          // the same epoch: this owner's own cursor (another store, a restart); append after it
          cursor.version = epoch == cursor.epoch ? rs.getLong(3) : 0;
          // resume in the oldest window not done: what is left of it is what is not done
          cursor.current =
              new Window(
                  rs.getString(4),
                  rs.getString(5),
                  rs.getLong(6),
                  rs.getString(7),
                  rs.getLong(8),
                  rs.getString(9),
                  rs.getLong(10),
                  0);
          cursor.exhausted = false;
          // what this store's windows move past from here on; before it is its holders' past,
          // looked at by the first sweep from the xmin of the lower end it resumes from, as
          // before (nothing at or above that xmin counted as seen)
          String xmin = xmin(cursor.current.lo);
          cursor.sweptFrom = xmin + ":" + xmin + ":";
        }
      }
    }
    Map<Integer, Cursor> stale = new HashMap<>();
    lock.lock();
    try {
      loaded.forEach(
          (lane, cursor) -> {
            Cursor held = cursors.get(lane);
            if (held != null && held.epoch > cursor.epoch) {
              stale.put(lane, cursor);
            } else {
              cursors.put(lane, cursor);
            }
          });
    } finally {
      lock.unlock();
    }
    return stale;
  }

  /**
   * Counts one handler of each token's row as finished; the row leaves the log with its last
   * handler. Returns the tokens whose lane still has their epoch.
   *
   * <p>Rows whose last handler is done and whose place the claim knows are deleted from there first
   * ({@link #completeWhereRead}); the rest, and any of those not found there, go through the whole
   * statement, which strikes handlers, finds moved rows by key and writes the history.
   */
  Set<Long> complete(Connection connection, Collection<DeliveryToken> tokens, boolean history)
      throws SQLException {
    List<DeliveryToken> all = new ArrayList<>(tokens);
    List<Finished> finished = new ArrayList<>(all.size());
    // The statements below act on the rows where this store read them only on the server it read
    // them on: its incarnation then. Another (a failover, a crash) finds no lane at the tokens'
    // epochs there, and the tokens go by key and event (completeUnknown).
    Long readOn;
    lock.lock();
    try {
      readOn = incarnation;
      for (DeliveryToken token : all) {
        Finished f = finishAt(token);
        finished.add(readOn == null && f.finish() != Finish.UNKNOWN ? Finished.UNKNOWN : f);
      }
    } finally {
      lock.unlock();
    }
    replanning.check(connection);
    // the rows whose last handler is done, where their claim read them (log id -> ctid), and the
    // epochs of their lanes
    Map<Long, String> whereRead = new LinkedHashMap<>();
    Map<Integer, Long> epochs = new LinkedHashMap<>();
    if (!history) {
      for (int i = 0; i < all.size(); i++) {
        if (finished.get(i).finish() == Finish.LAST && finished.get(i).readAt() != null) {
          whereRead.put(logId(all.get(i).deliveryId()), finished.get(i).readAt());
          epochs.put(all.get(i).lane(), all.get(i).epoch());
        }
      }
    }
    Set<Long> deleted =
        whereRead.isEmpty() ? Set.of() : deleteWhereRead(connection, whereRead, epochs, readOn);
    Set<Long> done = new HashSet<>();
    List<Integer> rest = new ArrayList<>();
    List<Integer> unknown = new ArrayList<>();
    for (int i = 0; i < all.size(); i++) {
      if (finished.get(i).finish() == Finish.UNKNOWN) {
        unknown.add(i);
      } else if (deleted.contains(logId(all.get(i).deliveryId()))) {
        done.add(all.get(i).deliveryId()); // its row is gone, with every handler of it
      } else {
        rest.add(i);
      }
    }
    if (!rest.isEmpty()) {
      done.addAll(completeTheWholeWay(connection, all, finished, rest, history, readOn));
      for (int i : rest) {
        if (!done.contains(all.get(i).deliveryId())) {
          unknown.add(i); // the lane moved on, or the server is another one: by key and event
        }
      }
    }
    if (!unknown.isEmpty()) {
      done.addAll(completeUnknown(connection, all, finished, unknown, history));
    }
    return done;
  }

  /**
   * Tokens this store does not know as out, though their lanes may still have their epochs: it read
   * those lanes again from their cursor rows since it handed them out (a completion or claim that
   * failed, the server's lost WAL), and has not reached their rows again yet. Left alone, the rows
   * stayed and went out again: second records of deliveries Kafka has, which in exactly-once mode
   * the lane offsets do not catch (the task never restarted). So they are finished by key as well,
   * in a transaction of their own: each row locked first (after its lane, as a claim locks), so
   * whether the tokens take its last handlers is read from the row as it is. A token whose row is
   * gone or whose handler is struck is not done here: finished before (a token completes once), or
   * moved to {deliveries} (released, rescheduled, charged), where the token no longer holds.
   */
  private Set<Long> completeUnknown(
      Connection connection,
      List<DeliveryToken> all,
      List<Finished> finished,
      List<Integer> at,
      boolean history)
      throws SQLException {
    boolean autoCommit = connection.getAutoCommit();
    connection.setAutoCommit(false);
    try {
      Map<String, String[]> handlers = new HashMap<>();
      Long incarnationNow = null;
      try (PreparedStatement statement = connection.prepareStatement(lockUnknown)) {
        statement.setArray(
            1,
            connection.createArrayOf(
                "int2", at.stream().map(i -> (short) all.get(i).lane()).toArray(Short[]::new)));
        statement.setArray(
            2,
            connection.createArrayOf(
                "int8", at.stream().map(i -> all.get(i).epoch()).toArray(Long[]::new)));
        statement.setArray(
            3,
            connection.createArrayOf(
                "int8", at.stream().map(i -> logId(all.get(i).deliveryId())).toArray(Long[]::new)));
        statement.setArray(
            4,
            connection.createArrayOf(
                "text", at.stream().map(i -> all.get(i).eventId()).toArray(String[]::new)));
        try (ResultSet rs = statement.executeQuery()) {
          while (rs.next()) {
            handlers.put(rs.getInt(1) + ":" + rs.getLong(2), (String[]) rs.getArray(3).getArray());
            long value = rs.getLong(4);
            incarnationNow = rs.wasNull() ? null : value;
          }
        }
      }
      // the positions each row's tokens finish; a row goes with them if no other is left
      Map<String, Set<Integer>> finishing = new HashMap<>();
      for (int i : at) {
        DeliveryToken token = all.get(i);
        finishing
            .computeIfAbsent(token.lane() + ":" + logId(token.deliveryId()), k -> new HashSet<>())
            .add(handlerIndex(token.deliveryId()));
      }
      List<Finished> decided = new ArrayList<>(finished);
      List<Integer> out = new ArrayList<>();
      for (int i : at) {
        DeliveryToken token = all.get(i);
        String row = token.lane() + ":" + logId(token.deliveryId());
        String[] left = handlers.get(row);
        int index = handlerIndex(token.deliveryId());
        if (left == null || index > left.length || left[index - 1] == null) {
          // the row gone or the handler struck: done before, or moved to {deliveries}
          // (released, rescheduled, charged), where this token no longer holds
          continue;
        }
        boolean last = true;
        for (int h = 0; h < left.length; h++) {
          if (left[h] != null && !finishing.get(row).contains(h + 1)) {
            last = false;
          }
        }
        decided.set(i, new Finished(last ? Finish.LAST : Finish.KNOWN, null));
        out.add(i);
      }
      // the rows are locked, found by key and event: on the server as it is now
      Set<Long> done =
          out.isEmpty()
              ? Set.of()
              : completeTheWholeWay(connection, all, decided, out, history, incarnationNow);
      connection.commit();
      Jdbc.restoreAutoCommit(connection, autoCommit, null);
      return done;
    } catch (SQLException | RuntimeException e) {
      Jdbc.rollbackQuietly(connection, e);
      Jdbc.restoreAutoCommit(connection, autoCommit, e);
      throw e;
    }
  }

  /**
   * Deletes the rows {@code whereRead} names where their claim read them, in lanes still at the
   * {@code epochs} given; returns the ids deleted.
   */
  private Set<Long> deleteWhereRead(
      Connection connection, Map<Long, String> whereRead, Map<Integer, Long> epochs, Long readOn)
      throws SQLException {
    Set<Long> deleted = new HashSet<>();
    try (PreparedStatement statement = connection.prepareStatement(completeWhereRead)) {
      statement.setArray(
          1,
          connection.createArrayOf(
              "int2", epochs.keySet().stream().map(Integer::shortValue).toArray(Short[]::new)));
      statement.setArray(2, connection.createArrayOf("int8", epochs.values().toArray()));
      statement.setObject(3, readOn, java.sql.Types.BIGINT);
      statement.setArray(4, connection.createArrayOf("tid", whereRead.values().toArray()));
      statement.setArray(5, connection.createArrayOf("int8", whereRead.keySet().toArray()));
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          deleted.add(rs.getLong(1));
        }
      }
    }
    return deleted;
  }

  /** The whole completion statement for the tokens at {@code at}. */
  private Set<Long> completeTheWholeWay(
      Connection connection,
      List<DeliveryToken> all,
      List<Finished> finished,
      Collection<Integer> at,
      boolean history,
      Long readOn)
      throws SQLException {
    int n = at.size();
    Short[] lanes = new Short[n];
    Long[] epochs = new Long[n];
    Long[] ids = new Long[n];
    Integer[] indexes = new Integer[n];
    Boolean[] lasts = new Boolean[n];
    Long[] tokenIds = new Long[n];
    Boolean[] known = new Boolean[n];
    String[] seen = new String[n];
    int i = 0;
    for (int k : at) {
      DeliveryToken token = all.get(k);
      lanes[i] = (short) token.lane();
      epochs[i] = token.epoch();
      ids[i] = logId(token.deliveryId());
      indexes[i] = handlerIndex(token.deliveryId());
      seen[i] = finished.get(k).readAt();
      lasts[i] = finished.get(k).finish() == Finish.LAST;
      known[i] = finished.get(k).finish() != Finish.UNKNOWN;
      tokenIds[i] = token.deliveryId();
      i++;
    }
    Set<Long> done = new HashSet<>();
    try (PreparedStatement statement =
        connection.prepareStatement(history ? completeWithHistory : complete)) {
      statement.setArray(1, connection.createArrayOf("int2", lanes));
      statement.setArray(2, connection.createArrayOf("int8", epochs));
      statement.setArray(3, connection.createArrayOf("int8", ids));
      statement.setArray(4, connection.createArrayOf("int4", indexes));
      statement.setArray(5, connection.createArrayOf("bool", lasts));
      statement.setArray(6, connection.createArrayOf("int8", tokenIds));
      statement.setArray(7, connection.createArrayOf("bool", known));
      statement.setArray(8, connection.createArrayOf("text", seen));
      statement.setObject(9, readOn, java.sql.Types.BIGINT);
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          done.add(rs.getLong(1));
        }
      }
    }
    return done;
  }

  /**
   * After a completion, reschedule, burial or release failed (or its commit's outcome is unknown):
   * this store took the tokens off its lanes' outstanding lists, but the rows may still be in the
   * log. The lanes read again from their cursor rows: the rows left are handed out again
   * (at-least-once duplicates), never stranded.
   */
  void forget(Collection<DeliveryToken> tokens) {
    lock.lock();
    try {
      tokens.stream().filter(PostgresLog::isLogToken).forEach(t -> cursors.remove(t.lane()));
    } finally {
      lock.unlock();
    }
  }

  /**
   * The owner gave these lanes up (relinquished), or its renewal found them held by another (lost
   * to a takeover): their windows go, as no claim of this store reads them again under those
   * epochs. Kept, they never counted as read up to the last snapshot ({@link #seen}), so a wait of
   * this store counted a publish on any lane as news, those lanes included. A later lease of such a
   * lane has another epoch and loads its cursor from the rows.
   */
  void relinquished(Collection<LaneLease> leases) {
    lock.lock();
    try {
      for (LaneLease lease : leases) {
        Cursor cursor = cursors.get(lease.lane());
        if (cursor != null && cursor.epoch == lease.epoch()) {
          cursors.remove(lease.lane());
        }
      }
    } finally {
      lock.unlock();
    }
  }

  /** What finishing a token meant here. */
  private enum Finish {
    /** not handed out by this store under this epoch (another store, an older epoch, done) */
    UNKNOWN,
    /** its row has other handlers still out */
    KNOWN,
    /** the last of its row: the row may go */
    LAST
  }

  /** Under the lock: the cursor of the token's lane if it is under the token's epoch, else null. */
  private Cursor cursorOf(DeliveryToken token) {
    Cursor cursor = cursors.get(token.lane());
    return cursor == null || cursor.epoch != token.epoch() ? null : cursor;
  }

  /** Where a claim read a log row (its ctid), and the row's event. */
  private record RowRead(String at, String eventId) {}

  /** What finishing a token meant here, and where this store's claim read its row (its ctid). */
  private record Finished(Finish finish, String readAt) {
    static final Finished UNKNOWN = new Finished(Finish.UNKNOWN, null);
  }

  /**
   * Takes the token's delivery off the lane's outstanding list. A token this store did not hand out
   * is never the last: its row stays, and the lane hands it out again (a duplicate).
   */
  private Finish finish(DeliveryToken token) {
    return finishAt(token).finish();
  }

  /** {@link #finish(DeliveryToken)}, with where the claim read the row (null when unknown). */
  private Finished finishAt(DeliveryToken token) {
    lock.lock();
    try {
      Cursor cursor = cursorOf(token);
      if (cursor == null) {
        return Finished.UNKNOWN;
      }
      long id = logId(token.deliveryId());
      Window window = cursor.where.get(id);
      RowRead read = window == null ? null : window.readAt.get(id);
      if (read == null || !read.eventId().equals(token.eventId())) {
        // not out, or out as another event's row: after a failover to an asynchronous standby the
        // new primary hands the log ids the old one had used to other events
        return Finished.UNKNOWN;
      }
      Map<Integer, Boolean> left = window.outstanding.get(id);
      if (left == null || left.remove(handlerIndex(token.deliveryId())) == null) {
        return Finished.UNKNOWN;
      }
      String readAt = read.at();
      if (!left.isEmpty()) {
        return new Finished(Finish.KNOWN, readAt);
      }
      window.outstanding.remove(id);
      window.readAt.remove(id);
      cursor.where.remove(id);
      // windows read before the current one leave once all they handed out is done
      while (!cursor.older.isEmpty() && cursor.older.getFirst().outstanding.isEmpty()) {
        cursor.older.removeFirst();
      }
      return new Finished(Finish.LAST, readAt);
    } finally {
      lock.unlock();
    }
  }

  /** Reschedules or buries the token's delivery: it becomes a row of {deliveries}. */
  FailOutcome fail(
      Connection connection, DeliveryToken token, String reason, boolean bury, RetryPolicy policy)
      throws SQLException {
    Finish finish = finish(token);
    if (finish == Finish.UNKNOWN) {
      return FailOutcome.LOST; // not out under this token here: finished, or another store's
    }
    boolean dead = bury || 1 >= policy.maxAttempts();
    double backoff =
        Math.min(policy.cap().toMillis(), (double) policy.base().toMillis())
            * (1 + policy.jitter() * (2 * ThreadLocalRandom.current().nextDouble() - 1));
    int moved =
        move(
            connection,
            token,
            1,
            dead ? "dead" : "pending",
            dead ? 0 : backoff,
            reason,
            finish == Finish.LAST);
    if (moved == 0) {
      return FailOutcome.LOST;
    }
    return dead ? FailOutcome.DEAD : FailOutcome.RESCHEDULED;
  }

  /**
   * Dead-letters the deliveries of {@code read} whose event cannot be sent (a row a plain-SQL
   * publisher wrote badly, an event row missing), in the claim's transaction: the stream goes on.
   * An event's handlers are all unreadable or none, so its last one takes the row out of the log.
   */
  void buryUnreadable(Connection connection, Read read) throws SQLException {
    for (DeliveryToken token : read.overflow) {
      move(connection, token, 0, "pending", 0, null, false);
    }
    for (Map.Entry<DeliveryToken, String> bad : read.unreadable.entrySet()) {
      DeliveryToken token = bad.getKey();
      move(
          connection,
          token,
          1,
          "dead",
          0,
          "unreadable event: " + bad.getValue(),
          read.unreadableLast.getOrDefault(token, false));
    }
  }

  /** Gives the tokens' deliveries back unsent, no attempt charged: pending rows of {deliveries}. */
  int release(Connection connection, Collection<DeliveryToken> tokens) throws SQLException {
    int released = 0;
    for (DeliveryToken token : tokens) {
      Finish finish = finish(token);
      if (finish != Finish.UNKNOWN) {
        released += move(connection, token, 0, "pending", 0, null, finish == Finish.LAST);
      }
    }
    return released;
  }

  private int move(
      Connection connection,
      DeliveryToken token,
      int attempts,
      String status,
      double delayMillis,
      String reason,
      boolean last)
      throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(move)) {
      statement.setShort(1, (short) token.lane());
      statement.setLong(2, token.epoch());
      statement.setLong(3, logId(token.deliveryId()));
      statement.setInt(4, handlerIndex(token.deliveryId()));
      statement.setBoolean(5, last);
      statement.setLong(6, token.deliveryId());
      statement.setString(7, token.eventId());
      statement.setInt(8, attempts);
      statement.setString(9, status);
      statement.setDouble(10, delayMillis);
      statement.setBoolean(11, attempts > 0 && status.equals("pending")); // a retry
      statement.setDouble(12, delayMillis);
      statement.setString(13, reason);
      try (ResultSet rs = statement.executeQuery()) {
        rs.next();
        return rs.getInt(1);
      }
    }
  }

  /**
   * At a takeover of {@code lanes}: charges what their previous holder had handed out and not
   * finished (see {@link #takeOver}); returns the deliveries charged per lane.
   */
  Map<Integer, Integer> chargeTakenOver(
      Connection connection, Collection<Integer> lanes, RetryPolicy policy) throws SQLException {
    Map<Integer, Integer> charged = new HashMap<>();
    if (lanes.isEmpty()) {
      return charged;
    }
    try (PreparedStatement statement = connection.prepareStatement(takeOver)) {
      statement.setArray(
          1, connection.createArrayOf("int2", lanes.stream().map(Integer::shortValue).toArray()));
      statement.setInt(2, policy.maxAttempts());
      statement.setInt(3, policy.maxAttempts());
      statement.setInt(4, policy.maxAttempts());
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          charged.put((int) rs.getShort(1), rs.getInt(2));
        }
      }
    }
    return charged;
  }
}
