package io.relaybus.connect;

import io.relaybus.store.RecordHeaders;
import io.relaybus.store.RetryPolicy;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Range;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigDef.Width;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;

/**
 * The connector's settings: each key declared once, as a {@link ConfigField} holding its name,
 * type, default, validator, importance, group, display name and documentation; the one list of keys
 * ({@link #FIELDS}, from which {@link #CONFIG_DEF} and the generated
 * docs/connector-configuration.md come); and typed accessors so no caller reads a key by name.
 */
public class OutboxSourceConfig extends AbstractConfig {

  private static final String GROUP_DATABASE = "Database";
  private static final String GROUP_OUTBOX = "Outbox";
  private static final String GROUP_DELIVERY = "Delivery";
  private static final String GROUP_RETRIES = "Retries";
  private static final String GROUP_RECORDS = "Records";

  static final ConfigField STORE_KIND =
      ConfigField.of("store.kind", Type.STRING)
          .withDefault("postgres")
          .withValidator(EnumValidator.of(StoreKind.class))
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_DATABASE, "Store kind", Width.SHORT)
          .withDoc(
              "Which outbox store to read: postgres (connection.url, connection.user,"
                  + " connection.password, connection.startup.options, outbox.schema) or mongodb"
                  + " (mongodb.uri, mongodb.database).");

  static final ConfigField CONNECTION_URL =
      ConfigField.of("connection.url", Type.STRING)
          .withDefault("")
          .withValidator(PostgresBinding.JDBC_URL)
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_DATABASE, "JDBC URL", Width.LONG)
          .withDoc(
              "JDBC URL of the database holding the outbox, e.g."
                  + " jdbc:postgresql://db.example.com:5432/app. Put credentials in connection.user and"
                  + " connection.password, not in the URL. Required with store.kind=postgres. The"
                  + " tasks' pooled connections get the driver's socketTimeout of the statement"
                  + " timeout plus 5 s (65 s), so a statement whose server stopped answering fails"
                  + " (transient) instead of blocking poll() for good, unless the URL sets"
                  + " socketTimeout (seconds, 0 for none).");

  static final ConfigField CONNECTION_USER =
      ConfigField.of("connection.user", Type.STRING)
          .withDefault("")
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_DATABASE, "User", Width.MEDIUM)
          .withDoc("Database user; empty uses the driver's default.");

  static final ConfigField CONNECTION_PASSWORD =
      ConfigField.of("connection.password", Type.PASSWORD)
          .withDefault(null)
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_DATABASE, "Password", Width.MEDIUM)
          .withDoc(
              "Database password. A PASSWORD setting: the REST API shows it as [hidden]; use a config"
                  + " provider (e.g. ${file:/secrets/db.properties:password}) to keep it out of the"
                  + " connector config topic.");

  static final ConfigField MONGODB_URI =
      ConfigField.of("mongodb.uri", Type.PASSWORD)
          .withDefault(null)
          .withValidator(MongoBinding.URI)
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_DATABASE, "MongoDB connection string", Width.LONG)
          .withDoc(
              "MongoDB connection string of the outbox, e.g."
                  + " mongodb://user:secret@db-0:27017,db-1:27017/app?replicaSet=rs0. Required with"
                  + " store.kind=mongodb. A PASSWORD setting, as it usually carries credentials: the REST"
                  + " API shows it as [hidden]; use a config provider to keep it out of the connector"
                  + " config topic.");

  static final ConfigField MONGODB_DATABASE =
      ConfigField.of("mongodb.database", Type.STRING)
          .withDefault("")
          .withValidator(MongoBinding.DATABASE)
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_DATABASE, "MongoDB database", Width.MEDIUM)
          .withDoc("Database of the outbox collections; empty: the database named in mongodb.uri.");

  static final ConfigField CONNECTION_TIMEOUT =
      ConfigField.of("connection.timeout.ms", Type.LONG)
          .withDefault(10_000L)
          .withValidator(Range.between(250, 300_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_DATABASE, "Connection timeout (ms)", Width.SHORT)
          .withDoc("How long to wait for a database connection, in validation and at run time.");

  static final ConfigField CONNECTION_STARTUP_OPTIONS =
      ConfigField.of("connection.startup.options", Type.BOOLEAN)
          .withDefault(true)
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_DATABASE, "Send session settings at connect", Width.SHORT)
          .withDoc(
              "PostgreSQL: whether the tasks' connections send their session settings"
                  + " (statement_timeout, idle_in_transaction_session_timeout, jit=off) in the startup"
                  + " parameter 'options'. false behind a connection pooler that refuses it (PgBouncer:"
                  + " 'unsupported startup parameter: options'); then give the role the settings"
                  + " (ALTER ROLE ... SET jit = off, and the two timeouts) and add prepareThreshold=0 to"
                  + " connection.url for PgBouncer before 1.21 in transaction pooling"
                  + " (docs/deploying.md).");

  static final ConfigField CONNECTION_POOL_SIZE =
      ConfigField.of("connection.pool.size", Type.INT)
          .withDefault(3)
          .withValidator(Range.between(2, 50))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_DATABASE, "Connections per task", Width.SHORT)
          .withDoc(
              "Database connections per task: one for polling, one for lease renewal, one spare. With"
                  + " outbox.notify (PostgreSQL) each task holds one more, outside the pool, to listen.");

  static final ConfigField OUTBOX_SCHEMA =
      ConfigField.of("outbox.schema", Type.STRING)
          .withDefault("public")
          .withValidator(ConfigChecks.SCHEMA_NAME)
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_OUTBOX, "Schema", Width.MEDIUM)
          .withDoc("Database schema of the outbox tables.");

  static final ConfigField OUTBOX_TABLE_PREFIX =
      ConfigField.of("outbox.table.prefix", Type.STRING)
          .withDefault("relaybus_")
          .withValidator(ConfigChecks.TABLE_PREFIX)
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_OUTBOX, "Table prefix", Width.MEDIUM)
          .withDoc(
              "Prefix of the outbox table (PostgreSQL) or collection (MongoDB) names, as the"
                  + " application's store was set up with.");

  static final ConfigField OUTBOX_SETUP =
      ConfigField.of("outbox.setup", Type.BOOLEAN)
          .withDefault(false)
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_OUTBOX, "Set up the schema", Width.SHORT)
          .withDoc(
              "Create or upgrade the outbox schema when the connector starts (idempotent, safe when several"
                  + " processes do it at once). Off: the application or a migration tool sets it up, and the"
                  + " connector only checks it.");

  static final ConfigField OUTBOX_NOTIFY =
      ConfigField.of("outbox.notify", Type.BOOLEAN)
          .withDefault(true)
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_OUTBOX, "Wake tasks on publish", Width.SHORT)
          .withDoc(
              "PostgreSQL: wake a task as soon as events are published, instead of at its next poll. Each"
                  + " task LISTENs on the channel <schema>.<prefix>outbox_work on one connection of its own"
                  + " (besides connection.pool.size), which statement triggers on the log and deliveries"
                  + " tables notify when a publishing transaction commits while a task waits. PostgreSQL"
                  + " serializes the commits of notifying transactions database-wide, so publishers notify"
                  + " only while a task waits (docs/benchmarks.md). false: tasks do not listen, and with outbox.setup=true the"
                  + " trigger is disabled; a new event then waits up to poll.interval.ms. MongoDB: no"
                  + " effect (tasks poll).");

  static final ConfigField BATCH_SIZE =
      ConfigField.of("batch.size", Type.INT)
          .withDefault(500)
          .withValidator(Range.between(1, 10_000))
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_DELIVERY, "Batch size", Width.SHORT)
          .withDoc(
              "Most deliveries one poll claims and returns. Each task keeps at most four batches"
                  + " unacknowledged.");

  static final ConfigField POLL_INTERVAL =
      ConfigField.of("poll.interval.ms", Type.LONG)
          .withDefault(1000L)
          .withValidator(Range.between(1, 60_000))
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_DELIVERY, "Poll interval (ms)", Width.SHORT)
          .withDoc(
              "How long to wait after a claim found nothing before claiming again, unless a publish wakes"
                  + " the task first (outbox.notify). It bounds how late a task finds what becomes due"
                  + " without a publish (a timer's deadline, a retry's backoff, a requeue) and, where nothing"
                  + " wakes it (outbox.notify=false, MongoDB), a new event: lower it there for latency (200"
                  + " was the default before wake-ups), at the cost of more empty claims. While records"
                  + " the task sent are not acknowledged by Kafka yet, a claim that found nothing is"
                  + " followed by the next once they are, or after 10 ms if that comes first, the wait"
                  + " doubling to 1 s while claims keep finding nothing. poll() still returns to Connect"
                  + " at least once a second. After a poll that failed (the database unreachable, a"
                  + " failover) the next one touches the database 100 ms later, the pause doubling up"
                  + " to this interval while polls keep failing.");

  static final ConfigField POLL_LINGER =
      ConfigField.of("poll.linger.ms", Type.LONG)
          .withDefault(10L)
          .withValidator(Range.between(0, 10_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_DELIVERY, "Poll linger (ms)", Width.SHORT)
          .withDoc(
              "After a claim that returned fewer deliveries than it could take (no backlog), claim again"
                  + " no sooner than this long after that claim began, even when a publish wakes the task:"
                  + " fewer, fuller claims. Each claim costs the database about the same whatever it"
                  + " returns, so at moderate rates this trades up to this much latency per event for"
                  + " less database CPU per delivery: at 1,000 events/s with four tasks, 10 ms took"
                  + " PostgreSQL's CPU per delivery down by 45% and p99 from 32-45 to 28-32 ms, p50 up"
                  + " from 9 to 12 ms (docs/benchmarks.md, \"Poll linger\"). A claim that returned all it"
                  + " could take is followed by the next at once, so a backlog drains as fast as without"
                  + " it. 0: claim again as soon as the last batch is handed to Connect (the behaviour"
                  + " before this setting).");

  static final ConfigField LEASE_DURATION =
      ConfigField.of("lease.duration.ms", Type.LONG)
          .withDefault(30_000L)
          .withValidator(Range.between(3_000, 3_600_000))
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_DELIVERY, "Lease duration (ms)", Width.SHORT)
          .withDoc(
              "How long a task's lease on its lanes lasts; renewed every third of it. A restarted task or"
                  + " a task of a newer configuration takes its lanes over at once; anyone else waits for"
                  + " the lease to expire. PostgreSQL: a renewal updates one row per task (its row in"
                  + " lease_holders), whatever the lanes it holds; a crashed worker's lanes wait up to"
                  + " one lease to be taken over.");

  static final ConfigField COMPLETION_FLUSH_SIZE =
      ConfigField.of("completion.flush.size", Type.INT)
          .withDefault(500)
          .withValidator(Range.between(1, 10_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_DELIVERY, "Completion flush size", Width.SHORT)
          .withDoc(
              "Delete acknowledged deliveries once this many have accumulated (one fenced DELETE).");

  static final ConfigField COMPLETION_FLUSH_INTERVAL =
      ConfigField.of("completion.flush.interval.ms", Type.LONG)
          .withDefault(500L)
          .withValidator(Range.between(0, 60_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_DELIVERY, "Completion flush interval (ms)", Width.SHORT)
          .withDoc(
              "Delete acknowledged deliveries at least this often, however few have accumulated.");

  static final ConfigField RETRY_BACKOFF =
      ConfigField.of("retry.backoff.ms", Type.LONG)
          .withDefault(1_000L)
          .withValidator(Range.between(0, 86_400_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RETRIES, "Retry backoff (ms)", Width.SHORT)
          .withDoc(
              "First backoff after a record Kafka did not acknowledge (dropped under errors.tolerance=all"
                  + " or filtered by a transform); doubles after each failure, 20% jitter.");

  static final ConfigField RETRY_BACKOFF_MAX =
      ConfigField.of("retry.backoff.max.ms", Type.LONG)
          .withDefault(300_000L)
          .withValidator(Range.between(0, 86_400_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RETRIES, "Longest retry backoff (ms)", Width.SHORT)
          .withDoc("Longest backoff; at least retry.backoff.ms.");

  static final ConfigField RETRY_MAX_ATTEMPTS =
      ConfigField.of("retry.max.attempts", Type.INT)
          .withDefault(10)
          .withValidator(Range.between(1, 1_000))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RETRIES, "Max attempts", Width.SHORT)
          .withDoc(
              "Attempts before a delivery is dead-lettered. A task crash or takeover charges one attempt to"
                  + " each delivery it had in flight (PostgreSQL: each its lane's latest cursor row names, at"
                  + " most a second or 500 deliveries behind; the others go out again uncharged), so a record"
                  + " that keeps crashing its task ends here.");

  static final ConfigField TOPIC_TEMPLATE =
      ConfigField.of("topic.template", Type.STRING)
          .withDefault("${handler}")
          .withValidator(ConfigChecks.TOPIC_TEMPLATE)
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_RECORDS, "Topic template", Width.MEDIUM)
          .withDoc(
              "Topic of a handler not listed in topic.map: ${handler} and ${type} are replaced by the"
                  + " delivery's handler and event type. Empty: a handler missing from topic.map has no"
                  + " topic and its deliveries are dead-lettered. Per-key order holds within a topic"
                  + " partition only, so ${type} splits a key's events across topics. A template that"
                  + " can give no legal topic (. or .., or over 249 characters with each placeholder"
                  + " one character) is refused.");

  static final ConfigField TOPIC_MAP =
      ConfigField.of("topic.map", Type.LIST)
          .withDefault("")
          .withValidator(ConfigChecks.TOPIC_MAP)
          .withImportance(Importance.HIGH)
          .withDisplay(GROUP_RECORDS, "Topic map", Width.LONG)
          .withDoc(
              "Explicit topics of handlers, as handler:topic pairs, e.g."
                  + " billing:billing.events,shipping:shipping.events. Wins over topic.template.");

  static final ConfigField KEY_FORMAT =
      ConfigField.of("key.format", Type.STRING)
          .withDefault("string")
          .withValidator(EnumValidator.of(KeyFormat.class))
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_RECORDS, "Key format", Width.SHORT)
          .withDoc(
              "Record key: the ordering key as an optional string or as its UTF-8 bytes. Events without a"
                  + " key get a null key.");

  static final ConfigField VALUE_FORMAT =
      ConfigField.of("value.format", Type.STRING)
          .withDefault("bytes")
          .withValidator(EnumValidator.of(ValueFormat.class))
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_RECORDS, "Value format", Width.SHORT)
          .withDoc(
              "Record value: the payload as bytes, as a UTF-8 string, or parsed as JSON with an inferred"
                  + " schema (objects become structs). A payload invalid for the format is dead-lettered;"
                  + " with json also one holding an integer beyond 64 bits or a number beyond float64's"
                  + " range (e.g. 1e400), which would otherwise be sent as Infinity.");

  static final ConfigField HEADER_PREFIX =
      ConfigField.of("header.prefix", Type.STRING)
          .withDefault(RecordHeaders.DEFAULT_PREFIX)
          .withValidator(ConfigChecks.HEADER_PREFIX)
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RECORDS, "Header prefix", Width.SHORT)
          .withDoc(
              "Prefix of the headers the connector adds: <prefix>event-id, <prefix>event-type,"
                  + " <prefix>content-type, <prefix>handler, <prefix>sequence, <prefix>attempt. The event's own headers are"
                  + " added as they are, before these. Consumers using the relaybus inbox must use the"
                  + " same prefix.");

  static final ConfigField MAX_RECORD_BYTES =
      ConfigField.of("max.record.bytes", Type.INT)
          .withDefault(1_000_000)
          .withValidator(Range.between(1_024, Integer.MAX_VALUE))
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RECORDS, "Max record bytes", Width.SHORT)
          .withDoc(
              "Largest record (key, value and headers) the connector hands to the producer; a bigger one"
                  + " is dead-lettered instead of failing the task. Key and value are measured as the"
                  + " connector's key.converter/value.converter write them when those are converters Kafka"
                  + " ships (e.g. JsonConverter), and estimated before conversion otherwise (worker"
                  + " defaults, other converters). Headers (those record.format writes, e.g. Debezium's"
                  + " context headers) count as Kafka's record format writes them"
                  + " (lengths, name, value as the worker's default SimpleHeaderConverter writes it), plus"
                  + " Kafka's batch and record overhead (82 bytes), as the producer measures a record."
                  + " Keep it below the producer's max.request.size (default"
                  + " 1048576, override with producer.override.max.request.size) and the topic's"
                  + " max.message.bytes; validation refuses it above producer.override.max.request.size"
                  + " or the topic.creation.<group>.max.message.bytes of topics the connector creates.");

  static final ConfigField RECORD_FORMAT =
      ConfigField.of("record.format", Type.STRING)
          .withDefault("relaybus")
          .withValidator(EnumValidator.of(RecordFormat.class))
          .withImportance(Importance.MEDIUM)
          .withDisplay(GROUP_RECORDS, "Record format", Width.SHORT)
          .withDoc(
              "Which records to write. relaybus: key per key.format, value per value.format, the event's"
                  + " headers and the <header.prefix>* headers, timestamp = event time. debezium_outbox:"
                  + " the records Debezium's outbox EventRouter writes with its defaults, for consumers"
                  + " written against it (docs/migrating-from-debezium.md): key = the event key as a string"
                  + " (aggregateid), value = the payload as a string named io.debezium.data.Json (a jsonb"
                  + " payload column), headers = Debezium's context headers, id = the event id, then the"
                  + " event's own headers; key.format, value.format and header.prefix do not apply. Route"
                  + " as the router does with topic.template=outbox.event.${handler}, the handler taking"
                  + " the place of aggregatetype.");

  static final ConfigField DEBEZIUM_LOGICAL_NAME =
      ConfigField.of("debezium.logical.name", Type.STRING)
          .withDefault("")
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RECORDS, "Debezium logical name", Width.MEDIUM)
          .withDoc(
              "With record.format=debezium_outbox: the value of the __debezium.context.connectorLogicalName"
                  + " header, the topic.prefix of the Debezium connector being replaced. Empty: the"
                  + " connector's name.");

  static final ConfigField DEBEZIUM_CONTEXT_HEADERS =
      ConfigField.of("debezium.context.headers", Type.BOOLEAN)
          .withDefault(true)
          .withImportance(Importance.LOW)
          .withDisplay(GROUP_RECORDS, "Debezium context headers", Width.SHORT)
          .withDoc(
              "With record.format=debezium_outbox: write Debezium's context headers"
                  + " __debezium.context.connectorLogicalName, __debezium.context.taskId (the task's"
                  + " number), __debezium.context.connectorName (postgresql or mongodb) and"
                  + " __debezium.context.runId (an id of the task's run, new at each start), as Debezium does by"
                  + " default (extended.headers.enabled=true). Turn off where the replaced connector had"
                  + " extended.headers.enabled=false.");

  /**
   * Every key, in the order of the generated documentation; a key's position within its group is
   * its order there.
   */
  static final List<ConfigField> FIELDS =
      List.of(
          STORE_KIND,
          CONNECTION_URL,
          CONNECTION_USER,
          CONNECTION_PASSWORD,
          MONGODB_URI,
          MONGODB_DATABASE,
          CONNECTION_TIMEOUT,
          CONNECTION_STARTUP_OPTIONS,
          CONNECTION_POOL_SIZE,
          OUTBOX_SCHEMA,
          OUTBOX_TABLE_PREFIX,
          OUTBOX_SETUP,
          OUTBOX_NOTIFY,
          BATCH_SIZE,
          POLL_INTERVAL,
          POLL_LINGER,
          LEASE_DURATION,
          COMPLETION_FLUSH_SIZE,
          COMPLETION_FLUSH_INTERVAL,
          RETRY_BACKOFF,
          RETRY_BACKOFF_MAX,
          RETRY_MAX_ATTEMPTS,
          TOPIC_TEMPLATE,
          TOPIC_MAP,
          KEY_FORMAT,
          VALUE_FORMAT,
          HEADER_PREFIX,
          MAX_RECORD_BYTES,
          RECORD_FORMAT,
          DEBEZIUM_LOGICAL_NAME,
          DEBEZIUM_CONTEXT_HEADERS);

  public static final ConfigDef CONFIG_DEF = ConfigField.configDef(null, FIELDS);

  public OutboxSourceConfig(Map<String, String> props) {
    this(CONFIG_DEF, props);
  }

  /**
   * @throws ConfigException when a value is invalid or a setting the store kind requires is missing
   */
  protected OutboxSourceConfig(ConfigDef def, Map<String, String> props) {
    this(def, props, true);
  }

  private OutboxSourceConfig(
      ConfigDef def, Map<String, String> props, boolean requireStoreSettings) {
    super(def, props, false);
    if (requireStoreSettings) {
      missingStoreSetting()
          .ifPresent(
              missing -> {
                throw new ConfigException(missing.message());
              });
    }
  }

  /**
   * The settings {@code props} give, without requiring the settings of the store kind: for {@code
   * validate()}, which reports a missing one against its key ({@link #missingStoreSetting()}).
   */
  static OutboxSourceConfig withoutStoreCheck(ConfigDef def, Map<String, String> props) {
    return new OutboxSourceConfig(def, props, false);
  }

  /** The first setting the store kind requires and that is missing, if any. */
  Optional<StoreBinding.MissingSetting> missingStoreSetting() {
    return store().missingSetting(this);
  }

  /** The connector's name (Connect's {@code name}), the lease group of its tasks. */
  public String connectorName() {
    Object name = originals().get("name");
    return name == null ? "relaybus-outbox" : name.toString();
  }

  public StoreKind storeKind() {
    return EnumValidator.parse(StoreKind.class, STORE_KIND.name(), getString(STORE_KIND.name()));
  }

  /** What the connector knows of the configured store: how to open, check and describe it. */
  StoreBinding store() {
    return storeKind().binding();
  }

  /**
   * The JDBC URL, empty when unset, also when given as null (a JSON null in a REST request reaches
   * {@code validate()}, which then reports it missing rather than throwing).
   */
  public String connectionUrl() {
    String url = getString(CONNECTION_URL.name());
    return url == null ? "" : url;
  }

  /** The user, or {@code null} when empty (the driver's default). */
  public String connectionUser() {
    String user = getString(CONNECTION_USER.name());
    return user == null || user.isEmpty() ? null : user;
  }

  /** The password, or {@code null} when none is set. */
  public String connectionPassword() {
    Password password = getPassword(CONNECTION_PASSWORD.name());
    return password == null ? null : password.value();
  }

  /** The MongoDB connection string, or {@code null} when none is set. */
  public String mongodbUri() {
    Password uri = getPassword(MONGODB_URI.name());
    return uri == null || uri.value().isBlank() ? null : uri.value().strip();
  }

  /** The MongoDB database: {@code mongodb.database}, else the one the URI names, else null. */
  public String mongodbDatabase() {
    String database = getString(MONGODB_DATABASE.name());
    if (database != null && !database.isEmpty()) {
      return database;
    }
    String uri = mongodbUri();
    return uri == null ? null : MongoBinding.databaseOf(uri);
  }

  public Duration connectionTimeout() {
    return Duration.ofMillis(getLong(CONNECTION_TIMEOUT.name()));
  }

  public int connectionPoolSize() {
    return getInt(CONNECTION_POOL_SIZE.name());
  }

  public String outboxSchema() {
    return getString(OUTBOX_SCHEMA.name());
  }

  public String outboxTablePrefix() {
    return getString(OUTBOX_TABLE_PREFIX.name());
  }

  public boolean outboxSetup() {
    return getBoolean(OUTBOX_SETUP.name());
  }

  /** PostgreSQL: whether connections send the session settings at connect. */
  public boolean connectionStartupOptions() {
    return getBoolean(CONNECTION_STARTUP_OPTIONS.name());
  }

  /** PostgreSQL: whether publishes wake the tasks (LISTEN/NOTIFY); see {@link #OUTBOX_NOTIFY}. */
  public boolean outboxNotify() {
    return getBoolean(OUTBOX_NOTIFY.name());
  }

  public int batchSize() {
    return getInt(BATCH_SIZE.name());
  }

  public Duration pollInterval() {
    return Duration.ofMillis(getLong(POLL_INTERVAL.name()));
  }

  /** See {@link #POLL_LINGER}. */
  public Duration pollLinger() {
    return Duration.ofMillis(getLong(POLL_LINGER.name()));
  }

  public Duration leaseDuration() {
    return Duration.ofMillis(getLong(LEASE_DURATION.name()));
  }

  public int completionFlushSize() {
    return getInt(COMPLETION_FLUSH_SIZE.name());
  }

  public Duration completionFlushInterval() {
    return Duration.ofMillis(getLong(COMPLETION_FLUSH_INTERVAL.name()));
  }

  public Duration retryBackoff() {
    return Duration.ofMillis(getLong(RETRY_BACKOFF.name()));
  }

  public Duration retryBackoffMax() {
    return Duration.ofMillis(getLong(RETRY_BACKOFF_MAX.name()));
  }

  public int retryMaxAttempts() {
    return getInt(RETRY_MAX_ATTEMPTS.name());
  }

  /**
   * The store's retry policy. Throws {@link IllegalArgumentException} when the backoff cap is below
   * the base; {@code validate()} reports that against {@code retry.backoff.max.ms} first.
   */
  public RetryPolicy retryPolicy() {
    return new RetryPolicy(retryMaxAttempts(), retryBackoff(), retryBackoffMax(), 0.2);
  }

  public String topicTemplate() {
    return getString(TOPIC_TEMPLATE.name());
  }

  /** The explicit handler to topic map, in the order given. */
  public Map<String, String> topicMap() {
    return TopicRouter.parseMap(getList(TOPIC_MAP.name()));
  }

  public TopicRouter topicRouter() {
    return new TopicRouter(topicTemplate(), topicMap());
  }

  public KeyFormat keyFormat() {
    return EnumValidator.parse(KeyFormat.class, KEY_FORMAT.name(), getString(KEY_FORMAT.name()));
  }

  public ValueFormat valueFormat() {
    return EnumValidator.parse(
        ValueFormat.class, VALUE_FORMAT.name(), getString(VALUE_FORMAT.name()));
  }

  public RecordHeaders headerNames() {
    return new RecordHeaders(getString(HEADER_PREFIX.name()));
  }

  public int maxRecordBytes() {
    return getInt(MAX_RECORD_BYTES.name());
  }

  public RecordFormat recordFormat() {
    return EnumValidator.parse(
        RecordFormat.class, RECORD_FORMAT.name(), getString(RECORD_FORMAT.name()));
  }

  /** The configured logical name, empty when unset (then the connector's name applies). */
  public String debeziumLogicalName() {
    return getString(DEBEZIUM_LOGICAL_NAME.name()).strip();
  }

  public boolean debeziumContextHeaders() {
    return getBoolean(DEBEZIUM_CONTEXT_HEADERS.name());
  }
}
