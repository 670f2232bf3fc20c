package io.relaybus.store.postgres;

import io.relaybus.store.LaneLease;
import io.relaybus.store.RetryPolicy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;

/**
 * Lane leases: acquire (with takeover), renew, relinquish. Every update of a lane row is HOT: the
 * lanes table has no secondary index and pages half empty.
 *
 * <p>A lease lasts until the later of the lane row's {@code lease_expires_at}, set when the lane
 * was granted, and its owner's row in {@code {holders}} (schema version 14), which a renewal
 * extends: one row written per renewal, whatever the lanes held. Fencing stays on the lane row
 * (epoch and owner, checked by every claim and completion), so renewing the owner's row never
 * renews a lane that changed hands. An instance of a version before 14 reads only the lane's expiry
 * and renews lane rows; its leases are honoured here, and it sees a lease of this version lapse one
 * lease after its grant.
 *
 * <p>A renewal and a takeover of an expired lease are ordered by the holder's row: the takeover
 * locks it (after its lanes) and takes the lane only if the row, as locked, still says expired; the
 * renewal updates the row (waiting for such a takeover to commit) and only then, in a statement of
 * its own, reads which lanes it still holds. So either the takeover sees the renewal and leaves the
 * lane, or the renewal sees the takeover and is answered without the lane, never both.
 */
final class PostgresLanes {
  private final String lockCandidates;
  private final String lockHolders;
  private final String charge;
  private final String grant;
  private final String setHolder;
  private final String renew;
  private final String relinquish;
  private final String forgetHolders;

  /** When a lane's lease lapses: the later of the lane's grant and its holder's renewal. */
  static final String EXPIRES = "greatest(l.lease_expires_at, h.expires_at)";

  /**
   * Sets the owner's lease expiry (parameters: owner, duration in ms) and yields it, one row, as
   * {@code holder}: an UPDATE, and an upsert only when the row is missing (deleted once its owner
   * held no lane), since an upsert of a row that exists logs a row lock before its update. ({@code
   * inserted} scans {@code updated}, so the UPDATE has run when it looks.)
   */
  private static final String SET_HOLDER =
      """
      WITH p AS (
        SELECT ?::text AS owner, now() + ?::bigint * interval '1 millisecond' AS expires_at
      ), updated AS (
        UPDATE {holders} h SET expires_at = p.expires_at FROM p WHERE h.owner = p.owner
        RETURNING h.expires_at
      ), inserted AS (
        INSERT INTO {holders} (owner, expires_at)
        SELECT owner, expires_at FROM p WHERE NOT EXISTS (SELECT FROM updated)
        ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
        RETURNING expires_at
      ), holder AS (
        SELECT expires_at FROM updated UNION ALL SELECT expires_at FROM inserted
      )""";

  private final PostgresLog log;

  PostgresLanes(PostgresTables tables, PostgresLog log) {
    this.log = log;
    // SKIP LOCKED: two workers acquiring at once never wait on each other, and never both get a
    // lane.
    lockCandidates =
        tables.sql(
            """
            SELECT l.lane, l.epoch, l.lease_owner, l.lease_group, EXPIRES <= now() AS expired, l.in_flight
            FROM {lanes} l LEFT JOIN {holders} h ON h.owner = l.lease_owner
            WHERE l.lane = ANY(?::smallint[]) ORDER BY l.lane FOR UPDATE OF l SKIP LOCKED"""
                .replace("EXPIRES", EXPIRES));
    // The rows of the holders whose leases a takeover found expired, and the taker's own, locked in
    // owner order (the only order in which any statement locks several) and read again: a holder
    // that renewed since the read (its update committed first, or it waited for this lock and
    // committed meanwhile, READ COMMITTED reading the newest version) keeps its lanes. The lane
    // rows are locked already, so their own expiry has not moved. A holder with no row (an
    // instance before version 14, which renews its lane rows) returns none: its lane row decides.
    lockHolders =
        tables.sql(
            """
            SELECT h.owner, h.expires_at > now() FROM {holders} h
            WHERE h.owner = ANY(?::text[]) ORDER BY h.owner FOR UPDATE""");
    // A takeover is a crash of the previous holder: each delivery it had in flight has lost an
    // attempt. Without this charge a record that crashes its task would loop forever. It is due
    // again at once: fire_at, the row's own due time, is kept (a timer's deadline, a retry's end of
    // backoff) or set to its due time (available_at, unchanged), so held behind its key's retry it
    // counts as due, not as a retry (reliability row 134).
    charge =
        tables.sql(
            """
            WITH charged AS (
              UPDATE {deliveries} SET
                attempts = attempts + 1,
                claims = claims + 1,
                fire_at = coalesce(fire_at, available_at),
                status = CASE WHEN attempts + 1 >= ? THEN 'dead' ELSE status END,
                last_error = format(
                  CASE WHEN attempts + 1 >= ?
                    THEN 'attempts exhausted (%s of %s): lane %s was taken over while this delivery was in flight'
                    ELSE 'attempt %s of %s lost: lane %s was taken over while this delivery was in flight' END,
                  attempts + 1, ?, lane),
                updated_at = now()
              WHERE id = ANY(?::bigint[]) AND status = 'pending'
              RETURNING lane)
            SELECT lane, count(*) FROM charged GROUP BY lane""");
    grant =
        tables.sql(
            SET_HOLDER
                + """

            UPDATE {lanes} AS l SET
              epoch = t.epoch, lease_owner = ?, lease_group = ?,
              lease_expires_at = holder.expires_at,
              in_flight = CASE WHEN t.keep THEN l.in_flight ELSE '{}' END
            FROM unnest(?::smallint[], ?::bigint[], ?::boolean[]) AS t(lane, epoch, keep), holder
            WHERE l.lane = t.lane
            RETURNING l.lane, l.epoch, l.lease_expires_at""");
    // A renewal writes the owner's row only: no lane row is written, none is locked. It reads the
    // lanes it still holds afterwards, in a statement of its own: a takeover holding the row's
    // lock has committed by then and is in that statement's snapshot (one statement would read the
    // lanes in the snapshot it took before waiting). A lane that changed hands (another owner, a
    // new epoch) is not returned, so the task learns it lost it.
    setHolder = tables.sql(SET_HOLDER + "\nSELECT expires_at FROM holder");
    renew =
        tables.sql(
            """
            SELECT l.lane, l.epoch
            FROM unnest(?::smallint[], ?::bigint[]) AS t(lane, epoch)
            JOIN {lanes} l ON l.lane = t.lane AND l.epoch = t.epoch
            WHERE l.lease_owner = ?""");
    // Rows of holders left with no lane (a task that stopped, one that crashed and whose lanes
    // were taken over): the expiry is checked again on the row's newest version, so a holder
    // that renews or acquires meanwhile keeps its row; rows locked by another transaction are
    // skipped, so two acquisitions never wait for each other here.
    forgetHolders =
        tables.sql(
            """
            DELETE FROM {holders} WHERE owner IN (
              SELECT h.owner FROM {holders} h
              WHERE (h.owner = ? OR h.expires_at < now())
                AND NOT EXISTS (SELECT 1 FROM {lanes} l WHERE l.lease_owner = h.owner)
              FOR UPDATE SKIP LOCKED)""");
    // Relinquishing changes hands (to nobody): the epoch moves so the old tokens die, and the
    // in-flight deliveries are simply pending again, with no attempt charged.
    relinquish =
        tables.sql(
            """
            UPDATE {lanes} AS l SET
              epoch = l.epoch + 1, lease_owner = NULL, lease_group = NULL, lease_expires_at = NULL,
              in_flight = '{}'
            FROM unnest(?::smallint[], ?::bigint[]) AS t(lane, epoch)
            WHERE l.lane = t.lane AND l.epoch = t.epoch AND l.lease_owner = ?""");
  }

  /**
   * A lane to grant; {@code expiredHolder} is the previous holder when only its lease's expiry let
   * the lane be taken (checked again on its locked row), null otherwise.
   */
  private record Grant(
      int lane,
      long epoch,
      boolean keep,
      boolean takenOver,
      long[] inFlight,
      String expiredHolder) {}

  List<LaneLease> acquire(
      Connection connection,
      String owner,
      String group,
      Collection<Integer> lanes,
      Duration duration,
      boolean takeOver,
      RetryPolicy policy)
      throws SQLException {
    List<Grant> grants = new ArrayList<>();
    try (PreparedStatement select = connection.prepareStatement(lockCandidates)) {
      select.setArray(1, connection.createArrayOf("int2", shorts(lanes)));
      try (ResultSet rs = select.executeQuery()) {
        while (rs.next()) {
          int lane = rs.getShort(1);
          long epoch = rs.getLong(2);
          String holder = rs.getString(3);
          String holderGroup = rs.getString(4);
          boolean expired = rs.getBoolean(5);
          long[] inFlight = longs((Long[]) rs.getArray(6).getArray());
          if (owner.equals(holder)) {
            grants.add(new Grant(lane, epoch, true, false, new long[0], null));
          } else if (holder == null || (takeOver && group.equals(holderGroup))) {
            grants.add(new Grant(lane, epoch + 1, false, holder != null, inFlight, null));
          } else if (expired) {
            grants.add(new Grant(lane, epoch + 1, false, true, inFlight, holder));
          }
        }
      }
    }
    grants = withoutRenewedSinceRead(connection, owner, grants);
    if (grants.isEmpty()) {
      return List.of();
    }
    Map<Integer, Integer> charged = chargeInFlight(connection, grants, policy);
    log.chargeTakenOver(
            connection, grants.stream().filter(Grant::takenOver).map(Grant::lane).toList(), policy)
        .forEach((lane, count) -> charged.merge(lane, count, Integer::sum));
    Map<Integer, Grant> byLane = new HashMap<>();
    grants.forEach(g -> byLane.put(g.lane(), g));
    List<LaneLease> leases = new ArrayList<>();
    try (PreparedStatement update = connection.prepareStatement(grant)) {
      update.setString(1, owner);
      update.setLong(2, duration.toMillis());
      update.setString(3, owner);
      update.setString(4, group);
      update.setArray(
          5,
          connection.createArrayOf("int2", grants.stream().map(g -> (short) g.lane()).toArray()));
      update.setArray(
          6, connection.createArrayOf("int8", grants.stream().map(Grant::epoch).toArray()));
      update.setArray(
          7, connection.createArrayOf("bool", grants.stream().map(Grant::keep).toArray()));
      try (ResultSet rs = update.executeQuery()) {
        while (rs.next()) {
          int lane = rs.getShort(1);
          Grant g = byLane.get(lane);
          leases.add(
              new LaneLease(
                  lane,
                  rs.getLong(2),
                  rs.getTimestamp(3).toInstant(),
                  g.takenOver(),
                  charged.getOrDefault(lane, 0)));
        }
      }
    }
    forgetHolders(connection, null); // rare: an acquisition that was granted lanes
    leases.sort((a, b) -> Integer.compare(a.lane(), b.lane()));
    return leases;
  }

  /**
   * {@code grants} without the lanes whose holder renewed its lease since the candidates were read:
   * the holders' rows (and {@code owner}'s, so that it is locked in the same order) are locked in
   * owner order first. Nothing is locked when no lane is taken for an expired lease alone.
   */
  private List<Grant> withoutRenewedSinceRead(
      Connection connection, String owner, List<Grant> grants) throws SQLException {
    TreeSet<String> holders = new TreeSet<>();
    grants.stream().map(Grant::expiredHolder).filter(Objects::nonNull).forEach(holders::add);
    if (holders.isEmpty()) {
      return grants;
    }
    holders.add(owner);
    Set<String> renewed = new HashSet<>();
    try (PreparedStatement lock = connection.prepareStatement(lockHolders)) {
      lock.setArray(1, connection.createArrayOf("text", holders.toArray()));
      try (ResultSet rs = lock.executeQuery()) {
        while (rs.next()) {
          if (rs.getBoolean(2)) {
            renewed.add(rs.getString(1));
          }
        }
      }
    }
    if (renewed.isEmpty()) {
      return grants;
    }
    return grants.stream()
        .filter(g -> g.expiredHolder() == null || !renewed.contains(g.expiredHolder()))
        .toList();
  }

  /** Deletes the rows of holders left with no lane: {@code owner}'s, and any that expired. */
  private void forgetHolders(Connection connection, String owner) throws SQLException {
    try (PreparedStatement delete = connection.prepareStatement(forgetHolders)) {
      delete.setString(1, owner);
      delete.executeUpdate();
    }
  }

  private Map<Integer, Integer> chargeInFlight(
      Connection connection, List<Grant> grants, RetryPolicy policy) throws SQLException {
    List<Long> ids = new ArrayList<>();
    for (Grant g : grants) {
      for (long id : g.inFlight()) {
        ids.add(id);
      }
    }
    Map<Integer, Integer> charged = new HashMap<>();
    if (ids.isEmpty()) {
      return charged;
    }
    try (PreparedStatement statement = connection.prepareStatement(charge)) {
      statement.setInt(1, policy.maxAttempts());
      statement.setInt(2, policy.maxAttempts());
      statement.setInt(3, policy.maxAttempts());
      statement.setArray(4, connection.createArrayOf("int8", ids.toArray()));
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          charged.put((int) rs.getShort(1), rs.getInt(2));
        }
      }
    }
    return charged;
  }

  List<LaneLease> renew(
      Connection connection, String owner, Collection<LaneLease> leases, Duration duration)
      throws SQLException {
    // Two statements, each committed on its own: the update, which waits for a takeover that
    // locked the row, then the read of the lanes. A transaction around them would add a round trip
    // and order nothing more: a takeover that locks the row after the update committed reads the
    // renewed expiry and leaves the lanes.
    Instant expiresAt;
    try (PreparedStatement update = connection.prepareStatement(setHolder)) {
      update.setString(1, owner);
      update.setLong(2, duration.toMillis());
      try (ResultSet rs = update.executeQuery()) {
        rs.next();
        expiresAt = rs.getTimestamp(1).toInstant();
      }
    }
    List<LaneLease> renewed = new ArrayList<>();
    try (PreparedStatement select = connection.prepareStatement(renew)) {
      bindLeases(connection, select, 1, inLaneOrder(leases));
      select.setString(3, owner);
      try (ResultSet rs = select.executeQuery()) {
        while (rs.next()) {
          renewed.add(new LaneLease(rs.getShort(1), rs.getLong(2), expiresAt, false, 0));
        }
      }
    }
    renewed.sort((a, b) -> Integer.compare(a.lane(), b.lane()));
    return renewed;
  }

  int relinquish(Connection connection, String owner, Collection<LaneLease> leases)
      throws SQLException {
    int relinquished;
    try (PreparedStatement update = connection.prepareStatement(relinquish)) {
      bindLeases(connection, update, 1, inLaneOrder(leases));
      update.setString(3, owner);
      relinquished = update.executeUpdate();
    }
    forgetHolders(connection, owner);
    return relinquished;
  }

  /**
   * Lane rows are locked in lane order by every statement that locks several (acquire, relinquish,
   * the claim's lock of the lanes it takes from; a renewal locks none, only its holder's row), so a
   * task's renewal thread and its claim never deadlock. Holder rows are locked after the lanes:
   * several only by a takeover of expired leases, in owner order with the taker's own among them
   * (its grant updates that row later); otherwise one, the caller's own (a renewal, which holds
   * nothing else; a grant). No statement waits for a lane row while it holds a holder row.
   */
  private static List<LaneLease> inLaneOrder(Collection<LaneLease> leases) {
    return leases.stream().sorted((a, b) -> Integer.compare(a.lane(), b.lane())).toList();
  }

  /** Binds lanes and epochs of {@code leases} as two arrays at {@code index} and the next. */
  static void bindLeases(
      Connection connection, PreparedStatement statement, int index, Collection<LaneLease> leases)
      throws SQLException {

    statement.setArray(
        index,
        connection.createArrayOf("int2", leases.stream().map(l -> (short) l.lane()).toArray()));
    statement.setArray(
        index + 1,
        connection.createArrayOf("int8", leases.stream().map(LaneLease::epoch).toArray()));
  }

  private static Short[] shorts(Collection<Integer> lanes) {
    return lanes.stream().map(Integer::shortValue).toArray(Short[]::new);
  }

  private static long[] longs(Long[] values) {
    long[] result = new long[values.length];
    for (int i = 0; i < values.length; i++) {
      result[i] = values[i];
    }
    return result;
  }
}
