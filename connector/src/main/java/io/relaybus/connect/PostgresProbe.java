package io.relaybus.connect;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.Properties;
import org.postgresql.Driver;

/**
 * One direct pgjdbc connection, made by {@code validate()} before it opens the store's pool. The
 * pool retries a failed connect until {@code connection.timeout.ms} (a database that is down may
 * come back), so through it a refused login or a closed port would be reported only after the full
 * timeout and as transient. A single connect answers those at once: the server refuses the login
 * (SQLSTATE 28xxx), the host refuses the TCP connection, or the name does not resolve. A server
 * that does not answer still takes the timeout (pgjdbc's {@code connectTimeout} and {@code
 * loginTimeout}).
 */
final class PostgresProbe {
  private PostgresProbe() {}

  /**
   * Connects once and disconnects.
   *
   * @throws SQLException as pgjdbc reports the failure (with its SQLSTATE and cause)
   */
  static void connect(OutboxSourceConfig config, String applicationName) throws SQLException {
    Properties properties = new Properties();
    if (config.connectionUser() != null) {
      properties.setProperty("user", config.connectionUser());
    }
    if (config.connectionPassword() != null) {
      properties.setProperty("password", config.connectionPassword());
    }
    String seconds = String.valueOf(Math.max(1, config.connectionTimeout().toSeconds()));
    properties.setProperty("connectTimeout", seconds);
    properties.setProperty("loginTimeout", seconds);
    properties.setProperty("ApplicationName", applicationName);
    // The driver directly, not DriverManager: under Connect's plugin isolation DriverManager may
    // not see the plugin's pgjdbc.
    try (Connection connection = new Driver().connect(config.connectionUrl(), properties)) {
      if (connection == null) {
        throw new SQLException("pgjdbc does not accept the URL", "08001");
      }
    }
  }
}
