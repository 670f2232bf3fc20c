package io.relaybus.store.testing;

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/**
 * The WAL written between two positions, by relation and kind of record ({@code pg_walinspect},
 * PostgreSQL 15 and later): each record counted against the relation of its first block, records
 * without one (commits, sequences of other databases, ...) as {@code other}. Shared by the delivery
 * benchmark's idle windows and the store-level steady-state WAL benchmark.
 */
public final class WalByKind {
  /**
   * WAL of one kind: {@code "relation: resource manager/record type"}, or {@code "other: resource
   * manager"}; its bytes (full-page images included), records and full-page image bytes.
   */
  public record Kind(String name, long bytes, long records, long fullPageImageBytes) {}

  private WalByKind() {}

  /**
   * Every kind between byte positions {@code from} and {@code to} ({@code pg_wal_lsn_diff(lsn,
   * '0/0')}), largest first. Installs {@code pg_walinspect} when it is missing.
   */
  public static List<Kind> between(Connection connection, long from, long to) throws SQLException {
    try (Statement s = connection.createStatement()) {
      s.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect");
    }
    List<Kind> kinds = new ArrayList<>();
    try (PreparedStatement s =
        connection.prepareStatement(
            """
            WITH r AS (
              SELECT resource_manager, record_type, record_length, fpi_length,
                     (regexp_match(block_ref, 'rel \\d+/\\d+/(\\d+)'))[1]::oid AS node
              FROM pg_get_wal_records_info('0/0'::pg_lsn + ?, '0/0'::pg_lsn + ?)
            )
            SELECT coalesce(cl.relname, 'other')
                     || ': ' || CASE WHEN cl.relname IS NULL THEN r.resource_manager
                                     ELSE r.resource_manager || '/' || r.record_type END,
                   sum(r.record_length), count(*), sum(r.fpi_length)
            FROM r LEFT JOIN pg_class cl ON cl.relfilenode = r.node AND r.node <> 0
            GROUP BY 1 ORDER BY 2 DESC""")) {
      s.setBigDecimal(1, BigDecimal.valueOf(from));
      s.setBigDecimal(2, BigDecimal.valueOf(to));
      try (ResultSet rs = s.executeQuery()) {
        while (rs.next()) {
          kinds.add(new Kind(rs.getString(1), rs.getLong(2), rs.getLong(3), rs.getLong(4)));
        }
      }
    }
    return kinds;
  }
}
