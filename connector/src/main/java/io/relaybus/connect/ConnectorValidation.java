package io.relaybus.connect;

import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_POOL_SIZE;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_TIMEOUT;
import static io.relaybus.connect.OutboxSourceConfig.MAX_RECORD_BYTES;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SETUP;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_TABLE_PREFIX;
import static io.relaybus.connect.OutboxSourceConfig.RETRY_BACKOFF;
import static io.relaybus.connect.OutboxSourceConfig.RETRY_BACKOFF_MAX;
import static io.relaybus.connect.OutboxSourceConfig.STORE_KIND;
import static io.relaybus.connect.OutboxSourceConfig.TOPIC_MAP;
import static io.relaybus.connect.OutboxSourceConfig.TOPIC_TEMPLATE;

import io.relaybus.store.OutboxStore;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BiFunction;
import org.apache.kafka.common.config.Config;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigValue;
import org.apache.kafka.connect.errors.ConnectException;

/**
 * The connector's {@code validate()}, in two stages. First every key on its own (the validators of
 * {@link OutboxSourceConfig#CONFIG_DEF}); then, where the keys involved passed, cross-key rules and
 * a connectivity and schema check against the database, bounded by {@code connection.timeout.ms}.
 * Each finding is attached to the key the user must change and its message starts with that key,
 * because Connect's REST 400 body lists messages without keys. What is particular to a store (its
 * keys, its direct connect, how its failures read) comes from its {@link StoreBinding}.
 */
final class ConnectorValidation {
  /** Slack on top of connection.timeout.ms for the schema check's queries. */
  private static final Duration QUERY_SLACK = Duration.ofSeconds(5);

  /** Keys the database check reads, whichever the store; each store adds its own. */
  private static final List<ConfigField> COMMON_STORE_KEYS =
      List.of(
          STORE_KIND,
          CONNECTION_TIMEOUT,
          CONNECTION_POOL_SIZE,
          OUTBOX_TABLE_PREFIX,
          OUTBOX_SETUP,
          RETRY_BACKOFF,
          RETRY_BACKOFF_MAX);

  private final BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory;

  /**
   * Whether the database check first connects once directly ({@link StoreBinding#probe}); off only
   * for tests with a stand-in store.
   */
  private final boolean probe;

  ConnectorValidation(
      BiFunction<OutboxSourceConfig, String, OutboxStore> storeFactory, boolean probe) {
    this.storeFactory = storeFactory;
    this.probe = probe;
  }

  Config validate(ConfigDef def, Map<String, String> props) {
    Map<String, ConfigValue> values = withoutDatabase(def, props);
    if (clean(values, List.of(STORE_KIND))) {
      Optional<OutboxSourceConfig> config = storeSettingsPresent(def, values, props);
      if (config.isPresent()) {
        List<ConfigField> keys = new ArrayList<>(COMMON_STORE_KEYS);
        keys.addAll(config.get().store().keys());
        if (clean(values, keys)) {
          checkDatabase(values, config.get());
        }
      }
    }
    return new Config(new ArrayList<>(values.values()));
  }

  /**
   * What validate() finds without the database: each key on its own, then the rules across keys and
   * on the producer overrides and transforms.
   */
  private static Map<String, ConfigValue> withoutDatabase(
      ConfigDef def, Map<String, String> props) {
    Map<String, ConfigValue> values = def.validateAll(props);
    if (clean(values, List.of(RETRY_BACKOFF, RETRY_BACKOFF_MAX))) {
      checkBackoff(values);
    }
    if (clean(values, List.of(TOPIC_TEMPLATE, TOPIC_MAP))) {
      checkRouting(values);
    }
    if (clean(values, List.of(MAX_RECORD_BYTES))) {
      checkRecordSize(values, props);
    }
    ProducerOverrideChecks.check(props, values);
    TransformChecks.check(props, values);
    return values;
  }

  /**
   * For the connector's and the tasks' {@code start()}, after their configuration parsed: refuses
   * what {@code validate()} refuses without the database (the rules across keys, the producer
   * overrides, the transforms). Connect starts a connector, and its tasks from their stored
   * configurations, with what it stored, which {@code validate()} may never have seen: a
   * configuration stored before an upgrade added a rule.
   *
   * @throws ConnectException naming each finding's key, value and rule
   */
  static void requireValid(Map<String, String> props) {
    List<String> findings = new ArrayList<>();
    for (ConfigValue value : withoutDatabase(OutboxSourceConfig.CONFIG_DEF, props).values()) {
      findings.addAll(value.errorMessages());
    }
    if (!findings.isEmpty()) {
      throw new ConnectException(
          "Invalid relaybus connector configuration: " + String.join("; ", findings));
    }
  }

  /**
   * Cross-key: the settings the store kind requires are there. A missing one is reported against
   * itself (or, for a MongoDB database named nowhere, against {@code mongodb.database}), unless it
   * is missing for being invalid and so reported already. Returns the configuration (invalid values
   * replaced by their defaults) when nothing is missing.
   */
  private static Optional<OutboxSourceConfig> storeSettingsPresent(
      ConfigDef def, Map<String, ConfigValue> values, Map<String, String> props) {
    OutboxSourceConfig config;
    try {
      config = OutboxSourceConfig.withoutStoreCheck(def, withoutErrors(props, values));
    } catch (ConfigException e) {
      error(values, STORE_KIND.name(), e.getMessage());
      return Optional.empty();
    }
    Optional<StoreBinding.MissingSetting> missing = config.missingStoreSetting();
    if (missing.isEmpty()) {
      return Optional.of(config);
    }
    String key = missing.get().key().name();
    if (values.get(key).errorMessages().isEmpty()) {
      error(values, key, missing.get().message());
    }
    return Optional.empty();
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

  private static boolean clean(Map<String, ConfigValue> values, List<ConfigField> keys) {
    for (ConfigField key : keys) {
      ConfigValue value = values.get(key.name());
      if (value == null || !value.errorMessages().isEmpty()) {
        return false;
      }
    }
    return true;
  }

  private static void checkBackoff(Map<String, ConfigValue> values) {
    long base = (Long) values.get(RETRY_BACKOFF.name()).value();
    long cap = (Long) values.get(RETRY_BACKOFF_MAX.name()).value();
    if (cap < base) {
      error(
          values,
          RETRY_BACKOFF_MAX.name(),
          "Invalid value %d for configuration %s: must be at least %s (%d ms)"
              .formatted(cap, RETRY_BACKOFF_MAX.name(), RETRY_BACKOFF.name(), base));
    }
  }

  private static void checkRouting(Map<String, ConfigValue> values) {
    String template = (String) values.get(TOPIC_TEMPLATE.name()).value();
    List<?> map = (List<?>) values.get(TOPIC_MAP.name()).value();
    if (template.isEmpty() && (map == null || map.isEmpty())) {
      error(
          values,
          TOPIC_TEMPLATE.name(),
          "Invalid value (empty) for configuration %s: with %s empty too, no handler has a topic and"
                  .formatted(TOPIC_TEMPLATE.name(), TOPIC_MAP.name())
              + " every delivery would be dead-lettered; set a template such as ${handler}");
    }
  }

  /**
   * A record the producer or the broker refuses fails the task; max.record.bytes must stay below
   * the producer's max.request.size and the max.message.bytes of the topics the connector creates
   * (each topic.creation group's, "default" and those of topic.creation.groups).
   */
  private static void checkRecordSize(Map<String, ConfigValue> values, Map<String, String> props) {
    int maxRecord = (Integer) values.get(MAX_RECORD_BYTES.name()).value();
    checkRecordLimit(
        values,
        maxRecord,
        "producer.override.max.request.size",
        props.get("producer.override.max.request.size"),
        "the producer fails the task on a record the connector let through");
    List<String> groups = new ArrayList<>(List.of("default"));
    String listed = props.get("topic.creation.groups");
    if (listed != null) {
      for (String group : listed.split(",")) {
        if (!group.isBlank() && !groups.contains(group.strip())) {
          groups.add(group.strip());
        }
      }
    }
    for (String group : groups) {
      String key = "topic.creation." + group + ".max.message.bytes";
      checkRecordLimit(
          values,
          maxRecord,
          key,
          props.get(key),
          "the broker refuses a record the connector let through on a topic the connector created,"
              + " which fails the task");
    }
  }

  private static void checkRecordLimit(
      Map<String, ConfigValue> values,
      int maxRecord,
      String key,
      String limit,
      String consequence) {
    if (limit == null) {
      return;
    }
    try {
      long max = Long.parseLong(limit.strip());
      if (maxRecord > max) {
        error(
            values,
            MAX_RECORD_BYTES.name(),
            "Invalid value %d for configuration %s: must not exceed %s (%d), or %s"
                .formatted(maxRecord, MAX_RECORD_BYTES.name(), key, max, consequence));
      }
    } catch (NumberFormatException e) {
      // Not ours to report: Connect validates producer overrides and topic creation itself.
    }
  }

  private void checkDatabase(Map<String, ConfigValue> values, OutboxSourceConfig config) {
    StoreBinding store = config.store();
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
              // A direct connect fails at once where the pool would retry until the timeout.
              if (probe) {
                store.probe(config, applicationName);
              }
              try (OutboxStore opened = storeFactory.apply(config, applicationName)) {
                opened.verifySchema();
              }
              return null;
            });
    String key = store.connectionKey().name();
    try {
      check.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
    } catch (TimeoutException e) {
      check.cancel(true);
      error(
          values,
          key,
          "%s: no answer from the database at %s within %d ms (%s plus %d s for the schema check);"
                  .formatted(
                      key,
                      store.address(config),
                      timeout.toMillis(),
                      CONNECTION_TIMEOUT.name(),
                      QUERY_SLACK.toSeconds())
              + " check the host, the port and that the worker can reach it");
    } catch (ExecutionException e) {
      store.report(values, config, e.getCause());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      error(values, key, key + ": validation was interrupted");
    } finally {
      executor.shutdownNow();
    }
  }

  static void error(Map<String, ConfigValue> values, String key, String message) {
    values.get(key).addErrorMessage(message);
  }

  /** Whether {@code e} or one of its causes is a {@code type}. */
  static boolean causedBy(Throwable e, Class<? extends Throwable> type) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (type.isInstance(t)) {
        return true;
      }
    }
    return false;
  }
}
