package io.relaybus.connect;

import static io.relaybus.connect.ConnectorValidation.causedBy;
import static io.relaybus.connect.ConnectorValidation.error;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_PASSWORD;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_STARTUP_OPTIONS;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_TIMEOUT;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_URL;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_USER;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SCHEMA;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SETUP;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_TABLE_PREFIX;

import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Pattern;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigValue;

/**
 * The PostgreSQL store ({@code store.kind=postgres}): {@code connection.url}, {@code
 * connection.user}, {@code connection.password} and {@code outbox.schema}. The URL may carry a
 * password parameter: messages show it as {@code ****}.
 */
final class PostgresBinding implements StoreBinding {

  private static final Pattern PASSWORD_IN_URL = Pattern.compile("(?i)(password=)[^&\\s]*");

  /** The refusal shows the URL as every other message does: its password parameter as ****. */
  static final ConfigDef.Validator JDBC_URL =
      ConfigChecks.checking(
          "jdbc:postgresql://host[:port]/database[?parameters]; empty with store.kind=mongodb",
          url -> {
            if (url != null && !url.isEmpty() && !url.startsWith("jdbc:postgresql:")) {
              throw new IllegalArgumentException(
                  "must be a PostgreSQL JDBC URL starting with 'jdbc:postgresql:', e.g."
                      + " jdbc:postgresql://db.example.com:5432/app");
            }
          },
          PostgresBinding::redact);

  @Override
  public OutboxStore open(OutboxSourceConfig config, String applicationName, int poolSize) {
    return connection(config, applicationName)
        .schema(config.outboxSchema())
        .tablePrefix(config.outboxTablePrefix())
        .retryPolicy(config.retryPolicy())
        .poolSize(poolSize)
        .notifyOnPublish(config.outboxNotify())
        .build();
  }

  /** The store's builder with what a connection of it needs: the probe's connection is the same. */
  private static PostgresOutboxStore.Builder connection(
      OutboxSourceConfig config, String applicationName) {
    PostgresOutboxStore.Builder builder =
        PostgresOutboxStore.builder()
            .jdbcUrl(config.connectionUrl())
            .connectTimeout(config.connectionTimeout())
            .applicationName(applicationName)
            .startupOptions(config.connectionStartupOptions());
    if (config.connectionUser() != null) {
      builder.user(config.connectionUser());
    }
    if (config.connectionPassword() != null) {
      builder.password(config.connectionPassword());
    }
    return builder;
  }

  @Override
  public Optional<MissingSetting> missingSetting(OutboxSourceConfig config) {
    if (!config.connectionUrl().isEmpty()) {
      return Optional.empty();
    }
    return Optional.of(
        new MissingSetting(
            CONNECTION_URL,
            "Missing required configuration \"%s\": store.kind=postgres reads the outbox through"
                    .formatted(CONNECTION_URL.name())
                + " a JDBC URL, e.g. jdbc:postgresql://db.example.com:5432/app"));
  }

  @Override
  public List<ConfigField> keys() {
    return List.of(
        CONNECTION_URL,
        CONNECTION_USER,
        CONNECTION_PASSWORD,
        CONNECTION_STARTUP_OPTIONS,
        OUTBOX_SCHEMA);
  }

  @Override
  public ConfigField connectionKey() {
    return CONNECTION_URL;
  }

  @Override
  public String address(OutboxSourceConfig config) {
    return redact(config.connectionUrl());
  }

  @Override
  public String namespace(OutboxSourceConfig config) {
    return "schema " + config.outboxSchema();
  }

  @Override
  public String debeziumConnectorName() {
    return "postgresql";
  }

  /**
   * One pgjdbc connection with the settings the tasks' connections get ({@link
   * PostgresOutboxStore.Builder#connectOnce()}): the server refuses the login (SQLSTATE 28xxx), the
   * host refuses the TCP connection, the name does not resolve, or a pooler refuses the startup
   * options. A server that does not answer takes the connection timeout, and the driver's login
   * thread ends then too.
   *
   * @throws SQLException as pgjdbc reports the failure (with its SQLSTATE and cause)
   */
  @Override
  public void probe(OutboxSourceConfig config, String applicationName) throws SQLException {
    connection(config, applicationName).connectOnce();
  }

  /** The user for messages: "(default)" without connection.user (the driver's default user). */
  private static String userName(OutboxSourceConfig config) {
    return config.connectionUser() == null ? "(default)" : config.connectionUser();
  }

  @Override
  public void report(Map<String, ConfigValue> values, OutboxSourceConfig config, Throwable e) {
    String cause = redact(String.valueOf(e.getMessage()));
    String url = redact(config.connectionUrl());
    String sqlState = sqlState(e);
    if (PostgresOutboxStore.refusesStartupOptions(e)) {
      error(
          values,
          CONNECTION_STARTUP_OPTIONS.name(),
          "%s: the server at %s, or a connection pooler in front of it (PgBouncer), refuses the"
                  .formatted(CONNECTION_STARTUP_OPTIONS.name(), url)
              + " startup parameter 'options' the tasks send their session settings in (%s); set"
                  .formatted(cause)
              + " %s=false and give the role the settings: ALTER ROLE <user> SET jit = off, and"
                  .formatted(CONNECTION_STARTUP_OPTIONS.name())
              + " statement_timeout and idle_in_transaction_session_timeout (docs/deploying.md)");
    } else if (sqlState != null && sqlState.startsWith("28")) {
      String message =
          "the database at %s refused the login of user '%s' (SQLSTATE %s): %s; check %s and %s"
              .formatted(
                  url,
                  userName(config),
                  sqlState,
                  cause,
                  CONNECTION_USER.name(),
                  CONNECTION_PASSWORD.name());
      error(values, CONNECTION_USER.name(), CONNECTION_USER.name() + ": " + message);
      error(values, CONNECTION_PASSWORD.name(), CONNECTION_PASSWORD.name() + ": " + message);
    } else if ("42501".equals(sqlState)) {
      error(
          values,
          CONNECTION_USER.name(),
          "%s: user '%s' may not read the outbox tables (SQLSTATE 42501): %s; grant it access"
              .formatted(CONNECTION_USER.name(), userName(config), cause));
    } else if ("3D000".equals(sqlState)) {
      error(
          values,
          CONNECTION_URL.name(),
          "%s: the server at %s has no database of that name (SQLSTATE 3D000): %s; check the"
                  .formatted(CONNECTION_URL.name(), url, cause)
              + " database name in the URL");
    } else if (causedBy(e, ConnectException.class)) {
      // Known at once (see probe), so no "within connection.timeout.ms" here.
      error(
          values,
          CONNECTION_URL.name(),
          "%s: cannot connect to the database at %s: the host refused the connection, nothing"
                  .formatted(CONNECTION_URL.name(), url)
              + " listens on that port (%s); check the host, the port and that PostgreSQL runs"
                  .formatted(cause));
    } else if (causedBy(e, UnknownHostException.class)) {
      error(
          values,
          CONNECTION_URL.name(),
          "%s: cannot connect to the database at %s: the host name is unknown (%s); check the host"
              .formatted(CONNECTION_URL.name(), url, cause));
    } else if (unreachable(e, sqlState)) {
      error(
          values,
          CONNECTION_URL.name(),
          "%s: cannot connect to the database at %s within %s=%d ms: %s; check the host, the port,"
                  .formatted(
                      CONNECTION_URL.name(),
                      url,
                      CONNECTION_TIMEOUT.name(),
                      config.connectionTimeout().toMillis(),
                      cause)
              + " the database name and that the worker can reach it");
    } else if ("25006".equals(sqlState)) {
      // a standby or a read-only default: outbox.setup cannot help, whatever it says
      error(
          values,
          CONNECTION_URL.name(),
          "%s: %s (checked at %s)".formatted(CONNECTION_URL.name(), cause, url));
    } else if (e instanceof OutboxStoreException
        || "42P01".equals(sqlState)
        || "3F000".equals(sqlState)) {
      if (config.outboxSetup()) {
        return; // outbox.setup=true: the connector creates or upgrades the schema when it starts
      }
      String message =
          "no usable relaybus outbox in schema '%s' with table prefix '%s' at %s: %s; set %s and %s to"
                  .formatted(
                      config.outboxSchema(),
                      config.outboxTablePrefix(),
                      url,
                      cause,
                      OUTBOX_SCHEMA.name(),
                      OUTBOX_TABLE_PREFIX.name())
              + " what the application's store was set up with, or set %s=true"
                  .formatted(OUTBOX_SETUP.name());
      error(values, OUTBOX_SCHEMA.name(), OUTBOX_SCHEMA.name() + ": " + message);
      error(values, OUTBOX_TABLE_PREFIX.name(), OUTBOX_TABLE_PREFIX.name() + ": " + message);
    } else {
      error(
          values,
          CONNECTION_URL.name(),
          "%s: the database check against %s failed: %s"
              .formatted(CONNECTION_URL.name(), url, cause));
    }
  }

  /** A JDBC URL or message without a password parameter's value. */
  static String redact(String text) {
    return text == null ? null : PASSWORD_IN_URL.matcher(text).replaceAll("$1****");
  }

  private static String sqlState(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof SQLException sql && sql.getSQLState() != null) {
        return sql.getSQLState();
      }
    }
    return null;
  }

  private static boolean unreachable(Throwable e, String sqlState) {
    if (sqlState != null && (sqlState.startsWith("08") || sqlState.equals("3D000"))) {
      return true;
    }
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof ConnectException
          || t instanceof UnknownHostException
          || t instanceof NoRouteToHostException
          || t instanceof SocketTimeoutException
          || t instanceof SQLTransientConnectionException) {
        return true;
      }
    }
    return false;
  }
}
