package io.relaybus.store.testing;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

/** Tests: what a query returns in its first column, as text, on a connection of the caller's. */
public final class FirstColumn {
  private FirstColumn() {}

  /** Each row's first column of {@code sql}, run on {@code connection} (in its transaction). */
  public static List<String> of(Connection connection, String sql) throws SQLException {
    List<String> values = new ArrayList<>();
    try (Statement s = connection.createStatement();
        ResultSet rs = s.executeQuery(sql)) {
      while (rs.next()) {
        values.add(rs.getString(1));
      }
    }
    return values;
  }
}
