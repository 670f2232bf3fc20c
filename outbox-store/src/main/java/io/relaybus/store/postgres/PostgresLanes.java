package io.relaybus.store.postgres;

import io.relaybus.store.LaneLease;
import io.relaybus.store.RetryPolicy;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Lane leases: acquire (with takeover), renew, relinquish. Every update of a lane row is HOT: the
 * lanes table has no secondary index and pages half empty.
 */
final class PostgresLanes {
  private final String lockCandidates;
  private final String charge;
  private final String grant;
  private final String renew;
  private final String relinquish;

  private final PostgresLog log;

  PostgresLanes(PostgresTables tables, PostgresLog log) {
    this.log = log;
    // SKIP LOCKED: two workers acquiring at once never wait on each other, and never both get a
    // lane.
    lockCandidates =
        tables.sql(
            """
            SELECT lane, epoch, lease_owner, lease_group, lease_expires_at <= now() AS expired, in_flight
            FROM {lanes} WHERE lane = ANY(?::smallint[]) ORDER BY lane FOR UPDATE SKIP LOCKED""");
    // A takeover is a crash of the previous holder: each delivery it had in flight has lost an
    // attempt. Without this charge a record that crashes its task would loop forever.
    charge =
        tables.sql(
            """
            WITH charged AS (
              UPDATE {deliveries} SET
                attempts = attempts + 1,
                claims = claims + 1,
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
            """
            UPDATE {lanes} AS l SET
              epoch = t.epoch, lease_owner = ?, lease_group = ?,
              lease_expires_at = now() + ? * interval '1 millisecond',
              in_flight = CASE WHEN t.keep THEN l.in_flight ELSE '{}' END
            FROM unnest(?::smallint[], ?::bigint[], ?::boolean[]) AS t(lane, epoch, keep)
            WHERE l.lane = t.lane
            RETURNING l.lane, l.epoch, l.lease_expires_at""");
    renew =
        tables.sql(
            """
            UPDATE {lanes} AS l SET lease_expires_at = now() + ? * interval '1 millisecond'
            FROM unnest(?::smallint[], ?::bigint[]) AS t(lane, epoch)
            WHERE l.lane = t.lane AND l.epoch = t.epoch AND l.lease_owner = ?
            RETURNING l.lane, l.epoch, l.lease_expires_at""");
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

  private record Grant(int lane, long epoch, boolean keep, boolean takenOver, long[] inFlight) {}

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
            grants.add(new Grant(lane, epoch, true, false, new long[0]));
          } else if (holder == null || expired || (takeOver && group.equals(holderGroup))) {
            grants.add(new Grant(lane, epoch + 1, false, holder != null, inFlight));
          }
        }
      }
    }
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
      update.setString(2, group);
      update.setLong(3, duration.toMillis());
      update.setArray(
          4,
          connection.createArrayOf("int2", grants.stream().map(g -> (short) g.lane()).toArray()));
      update.setArray(
          5, connection.createArrayOf("int8", grants.stream().map(Grant::epoch).toArray()));
      update.setArray(
          6, connection.createArrayOf("bool", grants.stream().map(Grant::keep).toArray()));
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
    leases.sort((a, b) -> Integer.compare(a.lane(), b.lane()));
    return leases;
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
    List<LaneLease> renewed = new ArrayList<>();
    try (PreparedStatement update = connection.prepareStatement(renew)) {
      update.setLong(1, duration.toMillis());
      bindLeases(connection, update, 2, inLaneOrder(leases));
      update.setString(4, owner);
      try (ResultSet rs = update.executeQuery()) {
        while (rs.next()) {
          renewed.add(
              new LaneLease(
                  rs.getShort(1), rs.getLong(2), rs.getTimestamp(3).toInstant(), false, 0));
        }
      }
    }
    renewed.sort((a, b) -> Integer.compare(a.lane(), b.lane()));
    return renewed;
  }

  int relinquish(Connection connection, String owner, Collection<LaneLease> leases)
      throws SQLException {
    try (PreparedStatement update = connection.prepareStatement(relinquish)) {
      bindLeases(connection, update, 1, inLaneOrder(leases));
      update.setString(3, owner);
      return update.executeUpdate();
    }
  }

  /**
   * Lane rows are locked in lane order by every statement that locks several (acquire, renew,
   * relinquish, the claim's lock of the lanes it takes from), so a task's renewal thread and its
   * claim never deadlock.
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
