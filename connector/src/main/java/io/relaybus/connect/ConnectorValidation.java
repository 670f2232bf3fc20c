package io.relaybus.connect;

import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_PASSWORD_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_POOL_SIZE_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_TIMEOUT_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_URL_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_USER_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.MAX_RECORD_BYTES_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.MONGODB_DATABASE_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.MONGODB_URI_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SCHEMA_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SETUP_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_TABLE_PREFIX_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.RETRY_BACKOFF_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.RETRY_BACKOFF_MAX_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.STORE_KIND_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.TOPIC_MAP_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.TOPIC_TEMPLATE_CONFIG;

import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.SocketTimeoutException;
import java.net.UnknownHostException;
import java.sql.SQLException;
import java.sql.SQLTransientConnectionException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BiFunction;
import java.util.regex.Pattern;
import org.apache.kafka.common.config.Config;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigValue;

/**
 * The connector's {@code validate()}, in two stages. First every key on its own (the validators of
 * {@link OutboxSourceConfig#CONFIG_DEF}); then, where the keys involved passed, cross-key rules and
 * a connectivity and schema check against the database, bounded by {@code connection.timeout.ms}.
 * Each finding is attached to the key the user must change and its message starts with that key,
 * because Connect's REST 400 body lists messages without keys.
 */
final class ConnectorValidation {
  /** Slack on top of connection.timeout.ms for the schema check's queries. */
  private static final Duration QUERY_SLACK = Duration.ofSeconds(5);

  private static final Pattern PASSWORD_IN_URL = Pattern.compile("(?i)(password=)[^&\\s]*");

  /** Keys the database check reads, whichever the store. */
  private static final List<String> COMMON_STORE_KEYS =
      List.of(
          STORE_KIND_CONFIG,
          CONNECTION_TIMEOUT_CONFIG,
          CONNECTION_POOL_SIZE_CONFIG,
          OUTBOX_TABLE_PREFIX_CONFIG,
          OUTBOX_SETUP_CONFIG,
          RETRY_BACKOFF_CONFIG,
          RETRY_BACKOFF_MAX_CONFIG);

  private static final List<String> POSTGRES_KEYS =
      List.of(
          CONNECTION_URL_CONFIG,
          CONNECTION_USER_CONFIG,
          CONNECTION_PASSWORD_CONFIG,
          OUTBOX_SCHEMA_CONFIG);

  private static final List<String> MONGODB_KEYS =
      List.of(MONGODB_URI_CONFIG, MONGODB_DATABASE_CONFIG);

  private final BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory;

  /**
   * Whether the database check first connects once directly ({@link PostgresProbe}, {@link
   * MongoValidation#probe}); off only for tests with a stand-in store.
   */
  private final boolean probe;

  ConnectorValidation(
      BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory, boolean probe) {
    this.storeFactory = storeFactory;
    this.probe = probe;
  }

  Config validate(ConfigDef def, Map<String, String> props) {
    Map<String, ConfigValue> values = def.validateAll(props);
    if (clean(values, RETRY_BACKOFF_CONFIG, RETRY_BACKOFF_MAX_CONFIG)) {
      checkBackoff(values);
    }
    if (clean(values, TOPIC_TEMPLATE_CONFIG, TOPIC_MAP_CONFIG)) {
      checkRouting(values);
    }
    if (clean(values, MAX_RECORD_BYTES_CONFIG)) {
      checkRecordSize(values, props);
    }
    ProducerOverrideChecks.check(props, values);
    if (clean(values, STORE_KIND_CONFIG) && storeSettingsPresent(values, props)) {
      StoreKind kind =
          EnumValidator.parse(
              StoreKind.class, STORE_KIND_CONFIG, (String) values.get(STORE_KIND_CONFIG).value());
      List<String> keys = new ArrayList<>(COMMON_STORE_KEYS);
      keys.addAll(kind == StoreKind.MONGODB ? MONGODB_KEYS : POSTGRES_KEYS);
      if (clean(values, keys.toArray(String[]::new))) {
        checkDatabase(values, new OutboxSourceConfig(def, withoutErrors(props, values)));
      }
    }
    return new Config(new ArrayList<>(values.values()));
  }

  /**
   * Cross-key: the settings the store kind requires are there. A missing one is reported against
   * itself (or, for a MongoDB database named nowhere, against {@code mongodb.database}).
   */
  private static boolean storeSettingsPresent(
      Map<String, ConfigValue> values, Map<String, String> props) {
    String missing;
    try {
      new OutboxSourceConfig(OutboxSourceConfig.CONFIG_DEF, withoutErrors(props, values));
      return true;
    } catch (ConfigException e) {
      missing = e.getMessage(); // OutboxSourceConfig#missingStoreSetting
    }
    for (String key : List.of(CONNECTION_URL_CONFIG, MONGODB_URI_CONFIG, MONGODB_DATABASE_CONFIG)) {
      if (missing.contains("\"" + key + "\"")) {
        if (values.get(key).errorMessages().isEmpty()) { // else it is missing for being invalid
          error(values, key, missing);
        }
        return false;
      }
    }
    error(values, STORE_KIND_CONFIG, missing);
    return false;
  }

  /**
   * {@code props} without the keys that failed (they fall back to their defaults), so the database
   * check can build a configuration although, say, {@code value.format} is wrong.
   */
  private static Map<String, String> withoutErrors(
      Map<String, String> props, Map<String, ConfigValue> values) {
    Map<String, String> usable = new HashMap<>(props);
    values.forEach(
        (key, value) -> {
          if (!value.errorMessages().isEmpty()) {
            usable.remove(key);
          }
        });
    return usable;
  }

  private static boolean clean(Map<String, ConfigValue> values, String... keys) {
    for (String key : keys) {
      ConfigValue value = values.get(key);
      if (value == null || !value.errorMessages().isEmpty()) {
        return false;
      }
    }
    return true;
  }

  private static void checkBackoff(Map<String, ConfigValue> values) {
    long base = (Long) values.get(RETRY_BACKOFF_CONFIG).value();
    long cap = (Long) values.get(RETRY_BACKOFF_MAX_CONFIG).value();
    if (cap < base) {
      error(
          values,
          RETRY_BACKOFF_MAX_CONFIG,
          "Invalid value %d for configuration %s: must be at least %s (%d ms)"
              .formatted(cap, RETRY_BACKOFF_MAX_CONFIG, RETRY_BACKOFF_CONFIG, base));
    }
  }

  private static void checkRouting(Map<String, ConfigValue> values) {
    String template = (String) values.get(TOPIC_TEMPLATE_CONFIG).value();
    List<?> map = (List<?>) values.get(TOPIC_MAP_CONFIG).value();
    if (template.isEmpty() && (map == null || map.isEmpty())) {
      error(
          values,
          TOPIC_TEMPLATE_CONFIG,
          "Invalid value (empty) for configuration %s: with %s empty too, no handler has a topic and"
                  .formatted(TOPIC_TEMPLATE_CONFIG, TOPIC_MAP_CONFIG)
              + " every delivery would be dead-lettered; set a template such as ${handler}");
    }
  }

  /** A record the producer refuses fails the task; max.record.bytes must stay below its limit. */
  private static void checkRecordSize(Map<String, ConfigValue> values, Map<String, String> props) {
    String override = props.get("producer.override.max.request.size");
    if (override == null) {
      return;
    }
    int maxRecord = (Integer) values.get(MAX_RECORD_BYTES_CONFIG).value();
    try {
      long maxRequest = Long.parseLong(override.strip());
      if (maxRecord > maxRequest) {
        error(
            values,
            MAX_RECORD_BYTES_CONFIG,
            "Invalid value %d for configuration %s: must not exceed producer.override.max.request.size (%d),"
                    .formatted(maxRecord, MAX_RECORD_BYTES_CONFIG, maxRequest)
                + " or the producer fails the task on a record the connector let through");
      }
    } catch (NumberFormatException e) {
      // Not ours to report: Connect validates producer overrides itself.
    }
  }

  private void checkDatabase(Map<String, ConfigValue> values, OutboxSourceConfig config) {
    Duration timeout = config.connectionTimeout().plus(QUERY_SLACK);
    ExecutorService executor =
        Executors.newSingleThreadExecutor(
            runnable -> {
              Thread thread = new Thread(runnable, "relaybus-validate-" + config.connectorName());
              thread.setDaemon(true);
              return thread;
            });
    Future<?> check =
        executor.submit(
            () -> {
              String applicationName = "relaybus-connect validate " + config.connectorName();
              // Direct connects fail at once where the pools would retry until the timeout.
              if (probe && config.storeKind() == StoreKind.POSTGRES) {
                PostgresProbe.connect(config, applicationName);
              } else if (probe) {
                MongoValidation.probe(config);
              }
              try (OutboxStore store = storeFactory.apply(config, applicationName)) {
                store.verifySchema();
              }
              return null;
            });
    try {
      check.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
    } catch (TimeoutException e) {
      check.cancel(true);
      String key = connectionKey(config);
      error(
          values,
          key,
          "%s: no answer from the database at %s within %d ms (%s plus %d s for the schema check);"
                  .formatted(
                      key,
                      address(config),
                      timeout.toMillis(),
                      CONNECTION_TIMEOUT_CONFIG,
                      QUERY_SLACK.toSeconds())
              + " check the host, the port and that the worker can reach it");
    } catch (ExecutionException e) {
      if (config.storeKind() == StoreKind.MONGODB) {
        MongoValidation.report(values, config, e.getCause());
      } else {
        report(values, config, e.getCause());
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      error(values, connectionKey(config), connectionKey(config) + ": validation was interrupted");
    } finally {
      executor.shutdownNow();
    }
  }

  /** The key a connectivity finding belongs to. */
  private static String connectionKey(OutboxSourceConfig config) {
    return config.storeKind() == StoreKind.MONGODB ? MONGODB_URI_CONFIG : CONNECTION_URL_CONFIG;
  }

  /** Where the database is, without credentials. */
  private static String address(OutboxSourceConfig config) {
    return config.storeKind() == StoreKind.MONGODB
        ? MongoValidation.address(config)
        : redact(config.connectionUrl());
  }

  private static void report(
      Map<String, ConfigValue> values, OutboxSourceConfig config, Throwable e) {
    String cause = redact(String.valueOf(e.getMessage()));
    String url = redact(config.connectionUrl());
    String sqlState = sqlState(e);
    if (sqlState != null && sqlState.startsWith("28")) {
      String message =
          "the database at %s refused the login of user '%s' (SQLSTATE %s): %s; check %s and %s"
              .formatted(
                  url,
                  config.connectionUser() == null ? "(default)" : config.connectionUser(),
                  sqlState,
                  cause,
                  CONNECTION_USER_CONFIG,
                  CONNECTION_PASSWORD_CONFIG);
      error(values, CONNECTION_USER_CONFIG, CONNECTION_USER_CONFIG + ": " + message);
      error(values, CONNECTION_PASSWORD_CONFIG, CONNECTION_PASSWORD_CONFIG + ": " + message);
    } else if ("42501".equals(sqlState)) {
      error(
          values,
          CONNECTION_USER_CONFIG,
          "%s: user '%s' may not read the outbox tables (SQLSTATE 42501): %s; grant it access"
              .formatted(CONNECTION_USER_CONFIG, config.connectionUser(), cause));
    } else if ("3D000".equals(sqlState)) {
      error(
          values,
          CONNECTION_URL_CONFIG,
          "%s: the server at %s has no database of that name (SQLSTATE 3D000): %s; check the"
                  .formatted(CONNECTION_URL_CONFIG, url, cause)
              + " database name in the URL");
    } else if (find(e, ConnectException.class)) {
      // Known at once (see PostgresProbe), so no "within connection.timeout.ms" here.
      error(
          values,
          CONNECTION_URL_CONFIG,
          "%s: cannot connect to the database at %s: the host refused the connection, nothing"
                  .formatted(CONNECTION_URL_CONFIG, url)
              + " listens on that port (%s); check the host, the port and that PostgreSQL runs"
                  .formatted(cause));
    } else if (find(e, UnknownHostException.class)) {
      error(
          values,
          CONNECTION_URL_CONFIG,
          "%s: cannot connect to the database at %s: the host name is unknown (%s); check the host"
              .formatted(CONNECTION_URL_CONFIG, url, cause));
    } else if (unreachable(e, sqlState)) {
      error(
          values,
          CONNECTION_URL_CONFIG,
          "%s: cannot connect to the database at %s within %s=%d ms: %s; check the host, the port,"
                  .formatted(
                      CONNECTION_URL_CONFIG,
                      url,
                      CONNECTION_TIMEOUT_CONFIG,
                      config.connectionTimeout().toMillis(),
                      cause)
              + " the database name and that the worker can reach it");
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
                      OUTBOX_SCHEMA_CONFIG,
                      OUTBOX_TABLE_PREFIX_CONFIG)
              + " what the application's store was set up with, or set %s=true"
                  .formatted(OUTBOX_SETUP_CONFIG);
      error(values, OUTBOX_SCHEMA_CONFIG, OUTBOX_SCHEMA_CONFIG + ": " + message);
      error(values, OUTBOX_TABLE_PREFIX_CONFIG, OUTBOX_TABLE_PREFIX_CONFIG + ": " + message);
    } else {
      error(
          values,
          CONNECTION_URL_CONFIG,
          "%s: the database check against %s failed: %s"
              .formatted(CONNECTION_URL_CONFIG, url, cause));
    }
  }

  private static String sqlState(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof SQLException sql && sql.getSQLState() != null) {
        return sql.getSQLState();
      }
    }
    return null;
  }

  private static boolean find(Throwable e, Class<? extends Throwable> type) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (type.isInstance(t)) {
        return true;
      }
    }
    return false;
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

  static void error(Map<String, ConfigValue> values, String key, String message) {
    values.get(key).addErrorMessage(message);
  }

  /** A JDBC URL or message without a password parameter's value. */
  static String redact(String text) {
    return text == null ? null : PASSWORD_IN_URL.matcher(text).replaceAll("$1****");
  }
}
