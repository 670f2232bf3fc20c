package io.relaybus.it.benchmark;

import io.relaybus.it.harness.DebeziumOutboxSetup;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.UUID;
import java.util.regex.Pattern;
import javax.sql.DataSource;

/**
 * Where the benchmark's application writes its events, in its own transaction: relaybus's outbox
 * (one statement per publish call) or the outbox table Debezium's EventRouter reads, written as its
 * users do (insert the row and delete it again in the same transaction: the WAL keeps the insert,
 * the table stays empty).
 */
interface BenchOutbox {
  /** One event of the workload; {@code seq} counts per key in the order its publisher wrote it. */
  record Event(String id, String key, long seq) {
    byte[] payload() {
      return ("{\"key\":\"%s\",\"seq\":%d,\"pad\":\"%s\"}".formatted(key, seq, PAD))
          .getBytes(StandardCharsets.UTF_8);
    }

    String payloadText() {
      return new String(payload(), StandardCharsets.UTF_8);
    }
  }

  /** About 200 bytes of payload, like a small business event. */
  String PAD = "x".repeat(150);

  Pattern NAME = Pattern.compile("[a-z][a-z0-9_]*");

  String describe();

  /** Writes {@code events} in the caller's transaction. */
  void write(Connection transaction, List<Event> events) throws SQLException;

  /** Rows still in the outbox (pending or dead deliveries; for Debezium's table, rows). */
  long rowsLeft(DataSource admin) throws SQLException;

  /** relaybus: every event to one handler, whose name is the topic. */
  static BenchOutbox relaybus(PostgresOutboxStore store, String handler) {
    return new BenchOutbox() {
      @Override
      public String describe() {
        return "relaybus publishAll";
      }

      @Override
      public void write(Connection transaction, List<Event> events) {
        store.publishAll(
            transaction,
            events.stream()
                .map(
                    e ->
                        OutboxEvent.builder("order.placed")
                            .id(e.id())
                            .key(e.key())
                            .payload(e.payload(), "application/json")
                            .handlers(handler)
                            .build())
                .toList());
      }

      @Override
      public long rowsLeft(DataSource admin) throws SQLException {
        try (Connection c = admin.getConnection();
            Statement s = c.createStatement();
            // what is not done: log rows, and deliveries off the happy path
            var rs =
                s.executeQuery(
                    "SELECT (SELECT count(*) FROM "
                        + store.tableName("log")
                        + ") + (SELECT count(*) FROM "
                        + store.tableName("deliveries")
                        + ")")) {
          rs.next();
          return rs.getLong(1);
        }
      }
    };
  }

  /**
   * Debezium's outbox table ({@code id uuid, aggregatetype, aggregateid, type, payload jsonb}, as
   * its documentation gives it), created with a publication of its inserts for the connector.
   */
  static BenchOutbox debezium(DataSource admin, String table, String aggregateType)
      throws SQLException {
    if (!NAME.matcher(table).matches()) {
      throw new IllegalArgumentException("table name " + table + " must match " + NAME);
    }
    DebeziumOutboxSetup.createTable(admin, table);
    String insert =
        "INSERT INTO "
            + table
            + " (id, aggregatetype, aggregateid, type, payload) VALUES (?::uuid, ?, ?, ?, ?::jsonb)";
    String delete = "DELETE FROM " + table + " WHERE id = ?::uuid";
    return new BenchOutbox() {
      @Override
      public String describe() {
        return "Debezium outbox table, insert + delete";
      }

      @Override
      public void write(Connection transaction, List<Event> events) throws SQLException {
        try (PreparedStatement ins = transaction.prepareStatement(insert);
            PreparedStatement del = transaction.prepareStatement(delete)) {
          for (Event e : events) {
            ins.setString(1, e.id());
            ins.setString(2, aggregateType);
            ins.setString(3, e.key());
            ins.setString(4, "order.placed");
            ins.setString(5, e.payloadText());
            ins.addBatch();
            del.setString(1, e.id());
            del.addBatch();
          }
          ins.executeBatch();
          del.executeBatch();
        }
      }

      @Override
      public long rowsLeft(DataSource admin) throws SQLException {
        try (Connection c = admin.getConnection();
            Statement s = c.createStatement();
            var rs = s.executeQuery("SELECT count(*) FROM " + table)) {
          rs.next();
          return rs.getLong(1);
        }
      }
    };
  }

  /**
   * The ids both sides publish: relaybus's default ({@link OutboxEvent#newId()}, a time-ordered
   * UUID). Debezium's table is emptied in the same transaction, so the order of its ids does not
   * matter to it; {@code -Drelaybus.bench.ids=random} gives both random UUIDs (version 4).
   */
  static String newId() {
    return RANDOM_IDS ? UUID.randomUUID().toString() : OutboxEvent.newId();
  }

  boolean RANDOM_IDS = "random".equals(System.getProperty("relaybus.bench.ids"));
}
