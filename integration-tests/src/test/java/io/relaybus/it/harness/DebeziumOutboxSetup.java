package io.relaybus.it.harness;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.LinkedHashMap;
import java.util.Map;
import javax.sql.DataSource;

/**
 * Debezium's documented outbox setup, as {@link
 * io.relaybus.it.connector.DebeziumOutboxCompatibilityIT} and {@link DeliveryBenchmark} (through
 * {@link io.relaybus.it.benchmark.BenchOutbox#debezium}) use it: the outbox table with a
 * publication of its inserts, and the PostgreSQL connector (pgoutput, the EventRouter, no snapshot)
 * reading it.
 */
public final class DebeziumOutboxSetup {
  private DebeziumOutboxSetup() {}

  /**
   * Debezium's outbox table ({@code id uuid, aggregatetype, aggregateid, type, payload jsonb}, as
   * its documentation gives it) and the publication {@code <table>_pub} of its inserts only.
   */
  public static void createTable(DataSource admin, String table) throws SQLException {
    try (Connection c = admin.getConnection();
        Statement s = c.createStatement()) {
      s.execute(
          "CREATE TABLE "
              + table
              + " (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,"
              + " aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)");
      // Only inserts are events; deletes (a benchmark's that keep the table empty) are not.
      s.execute(
          "CREATE PUBLICATION " + table + "_pub FOR TABLE " + table + " WITH (publish = 'insert')");
    }
  }

  /**
   * The connector's settings for {@code table} on the local server at {@code port}: one task, slot
   * {@code slot} (dropped on stop), the table's publication, the EventRouter at its defaults;
   * callers add converters, polling and routing.
   */
  public static Map<String, String> connectorConfig(
      int port, String user, String table, String slot, String topicPrefix) {
    Map<String, String> config = new LinkedHashMap<>();
    config.put("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
    config.put("tasks.max", "1");
    config.put("plugin.name", "pgoutput");
    config.put("database.hostname", "localhost");
    config.put("database.port", String.valueOf(port));
    config.put("database.user", user);
    config.put("database.dbname", "postgres");
    config.put("topic.prefix", topicPrefix);
    config.put("table.include.list", "public." + table);
    config.put("slot.name", slot);
    config.put("slot.drop.on.stop", "true");
    config.put("publication.name", table + "_pub");
    config.put("publication.autocreate.mode", "disabled");
    config.put("snapshot.mode", "no_data");
    config.put("transforms", "outbox");
    config.put("transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter");
    return config;
  }
}
