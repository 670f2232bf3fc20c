package io.relaybus.store.postgres;

import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

/**
 * Records a consumer's handler in the event's {@code handlers}, in the caller's transaction: one
 * statement, race-free without an explicit lock.
 *
 * <p>A row comes back iff this statement inserted the event or added the handler. A concurrent
 * transaction recording the same (event, handler) waits on the row (the uncommitted insert, or the
 * row lock of the update) and then, in {@code READ COMMITTED}, re-checks the {@code WHERE} against
 * the committed row: it finds the handler listed and gets no row. If the first rolls back, the
 * racer inserts or updates as if it were first, which it then is.
 */
final class PostgresInbox {
  private final String record;

  PostgresInbox(PostgresTables tables) {
    record =
        tables.sql(
            """
            INSERT INTO {events} AS e (id, type, key, payload, content_type, headers, handlers)
            VALUES (?, ?, ?, ?, ?, ?::json, ARRAY[?::text])
            ON CONFLICT (id) DO UPDATE SET handlers = e.handlers || EXCLUDED.handlers
              WHERE NOT (e.handlers @> EXCLUDED.handlers)
            RETURNING 1""");
  }

  InboxOutcome record(Connection connection, OutboxEvent received, String handler)
      throws SQLException {
    if (connection.getAutoCommit()) {
      throw new IllegalArgumentException(
          "transaction must be a connection in a transaction (autoCommit=false): the inbox record"
              + " must commit together with the handler's work");
    }
    try (PreparedStatement statement = connection.prepareStatement(record)) {
      statement.setString(1, received.id());
      statement.setString(2, received.type());
      statement.setString(3, received.key());
      statement.setBytes(4, received.payload());
      statement.setString(5, received.contentType());
      statement.setString(6, PostgresPublisher.json(received.headers()));
      statement.setString(7, handler);
      try (ResultSet rs = statement.executeQuery()) {
        return rs.next() ? InboxOutcome.FIRST : InboxOutcome.REDELIVERY;
      }
    }
  }
}
