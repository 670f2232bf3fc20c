package io.relaybus.connect;

import io.relaybus.store.RecordHeaders;
import io.relaybus.store.RetryPolicy;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Range;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigDef.Width;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;

/**
 * The connector's settings: the one list of keys (the README's configuration table is generated
 * from {@link #CONFIG_DEF}), and typed accessors so no caller reads a key by name.
 */
public class OutboxSourceConfig extends AbstractConfig {

  private static final String GROUP_DATABASE = "Database";
  private static final String GROUP_OUTBOX = "Outbox";
  private static final String GROUP_DELIVERY = "Delivery";
  private static final String GROUP_RETRIES = "Retries";
  private static final String GROUP_RECORDS = "Records";

  public static final String STORE_KIND_CONFIG = "store.kind";
  static final String STORE_KIND_DOC =
      "Which outbox store to read: postgres (connection.url, connection.user,"
          + " connection.password, outbox.schema) or mongodb (mongodb.uri, mongodb.database).";
  static final String STORE_KIND_DEFAULT = "postgres";
  static final String STORE_KIND_DISPLAY = "Store kind";

  public static final String CONNECTION_URL_CONFIG = "connection.url";
  static final String CONNECTION_URL_DOC =
      "JDBC URL of the database holding the outbox, e.g."
          + " jdbc:postgresql://db.example.com:5432/app. Put credentials in connection.user and"
          + " connection.password, not in the URL. Required with store.kind=postgres.";
  static final String CONNECTION_URL_DEFAULT = "";
  static final String CONNECTION_URL_DISPLAY = "JDBC URL";

  public static final String CONNECTION_USER_CONFIG = "connection.user";
  static final String CONNECTION_USER_DOC = "Database user; empty uses the driver's default.";
  static final String CONNECTION_USER_DEFAULT = "";
  static final String CONNECTION_USER_DISPLAY = "User";

  public static final String CONNECTION_PASSWORD_CONFIG = "connection.password";
  static final String CONNECTION_PASSWORD_DOC =
      "Database password. A PASSWORD setting: the REST API shows it as [hidden]; use a config"
          + " provider (e.g. ${file:/secrets/db.properties:password}) to keep it out of the"
          + " connector config topic.";
  static final String CONNECTION_PASSWORD_DISPLAY = "Password";

  public static final String MONGODB_URI_CONFIG = "mongodb.uri";
  static final String MONGODB_URI_DOC =
      "MongoDB connection string of the outbox, e.g."
          + " mongodb://user:secret@db-0:27017,db-1:27017/app?replicaSet=rs0. Required with"
          + " store.kind=mongodb. A PASSWORD setting, as it usually carries credentials: the REST"
          + " API shows it as [hidden]; use a config provider to keep it out of the connector"
          + " config topic.";
  static final String MONGODB_URI_DISPLAY = "MongoDB connection string";

  public static final String MONGODB_DATABASE_CONFIG = "mongodb.database";
  static final String MONGODB_DATABASE_DOC =
      "Database of the outbox collections; empty: the database named in mongodb.uri.";
  static final String MONGODB_DATABASE_DEFAULT = "";
  static final String MONGODB_DATABASE_DISPLAY = "MongoDB database";

  public static final String CONNECTION_TIMEOUT_CONFIG = "connection.timeout.ms";
  static final String CONNECTION_TIMEOUT_DOC =
      "How long to wait for a database connection, in validation and at run time.";
  static final long CONNECTION_TIMEOUT_DEFAULT = 10_000;
  static final String CONNECTION_TIMEOUT_DISPLAY = "Connection timeout (ms)";

  public static final String CONNECTION_POOL_SIZE_CONFIG = "connection.pool.size";
  static final String CONNECTION_POOL_SIZE_DOC =
      "Database connections per task: one for polling, one for lease renewal, one spare. With"
          + " outbox.notify (PostgreSQL) each task holds one more, outside the pool, to listen.";
  static final int CONNECTION_POOL_SIZE_DEFAULT = 3;
  static final String CONNECTION_POOL_SIZE_DISPLAY = "Connections per task";

  public static final String OUTBOX_SCHEMA_CONFIG = "outbox.schema";
  static final String OUTBOX_SCHEMA_DOC = "Database schema of the outbox tables.";
  static final String OUTBOX_SCHEMA_DEFAULT = "public";
  static final String OUTBOX_SCHEMA_DISPLAY = "Schema";

  public static final String OUTBOX_TABLE_PREFIX_CONFIG = "outbox.table.prefix";
  static final String OUTBOX_TABLE_PREFIX_DOC =
      "Prefix of the outbox table (PostgreSQL) or collection (MongoDB) names, as the"
          + " application's store was set up with.";
  static final String OUTBOX_TABLE_PREFIX_DEFAULT = "relaybus_";
  static final String OUTBOX_TABLE_PREFIX_DISPLAY = "Table prefix";

  public static final String OUTBOX_SETUP_CONFIG = "outbox.setup";
  static final String OUTBOX_SETUP_DOC =
      "Create or upgrade the outbox schema when the connector starts (idempotent, safe when several"
          + " processes do it at once). Off: the application or a migration tool sets it up, and the"
          + " connector only checks it.";
  static final boolean OUTBOX_SETUP_DEFAULT = false;
  static final String OUTBOX_SETUP_DISPLAY = "Set up the schema";

  public static final String OUTBOX_NOTIFY_CONFIG = "outbox.notify";
  static final String OUTBOX_NOTIFY_DOC =
      "PostgreSQL: wake a task as soon as events are published, instead of at its next poll. Each"
          + " task LISTENs on the channel <schema>.<prefix>outbox_work on one connection of its own"
          + " (besides connection.pool.size), which statement triggers on the log and deliveries"
          + " tables notify when a publishing transaction commits while a task waits. PostgreSQL"
          + " serializes the commits of notifying transactions database-wide, so publishers notify"
          + " only while a task waits (docs/benchmarks.md). false: tasks do not listen, and with outbox.setup=true the"
          + " trigger is disabled; a new event then waits up to poll.interval.ms. MongoDB: no"
          + " effect (tasks poll).";
  static final boolean OUTBOX_NOTIFY_DEFAULT = true;
  static final String OUTBOX_NOTIFY_DISPLAY = "Wake tasks on publish";

  public static final String BATCH_SIZE_CONFIG = "batch.size";
  static final String BATCH_SIZE_DOC =
      "Most deliveries one poll claims and returns. Each task keeps at most four batches"
          + " unacknowledged.";
  static final int BATCH_SIZE_DEFAULT = 500;
  static final String BATCH_SIZE_DISPLAY = "Batch size";

  public static final String POLL_INTERVAL_CONFIG = "poll.interval.ms";
  static final String POLL_INTERVAL_DOC =
      "How long to wait after a claim found nothing before claiming again, unless a publish wakes"
          + " the task first (outbox.notify). It bounds how late a task finds what becomes due"
          + " without a publish (a timer's deadline, a retry's backoff, a requeue) and, where nothing"
          + " wakes it (outbox.notify=false, MongoDB), a new event: lower it there for latency (200"
          + " was the default before wake-ups), at the cost of more empty claims. poll() still"
          + " returns to Connect at least once a second.";
  static final long POLL_INTERVAL_DEFAULT = 1000;
  static final String POLL_INTERVAL_DISPLAY = "Poll interval (ms)";

  public static final String LEASE_DURATION_CONFIG = "lease.duration.ms";
  static final String LEASE_DURATION_DOC =
      "How long a task's lease on its lanes lasts; renewed every third of it. A restarted task or"
          + " a task of a newer configuration takes its lanes over at once; anyone else waits for"
          + " the lease to expire.";
  static final long LEASE_DURATION_DEFAULT = 30_000;
  static final String LEASE_DURATION_DISPLAY = "Lease duration (ms)";

  public static final String COMPLETION_FLUSH_SIZE_CONFIG = "completion.flush.size";
  static final String COMPLETION_FLUSH_SIZE_DOC =
      "Delete acknowledged deliveries once this many have accumulated (one fenced DELETE).";
  static final int COMPLETION_FLUSH_SIZE_DEFAULT = 500;
  static final String COMPLETION_FLUSH_SIZE_DISPLAY = "Completion flush size";

  public static final String COMPLETION_FLUSH_INTERVAL_CONFIG = "completion.flush.interval.ms";
  static final String COMPLETION_FLUSH_INTERVAL_DOC =
      "Delete acknowledged deliveries at least this often, however few have accumulated.";
  static final long COMPLETION_FLUSH_INTERVAL_DEFAULT = 500;
  static final String COMPLETION_FLUSH_INTERVAL_DISPLAY = "Completion flush interval (ms)";

  public static final String RETRY_BACKOFF_CONFIG = "retry.backoff.ms";
  static final String RETRY_BACKOFF_DOC =
      "First backoff after a record Kafka did not acknowledge (dropped under errors.tolerance=all"
          + " or filtered by a transform); doubles after each failure, 20% jitter.";
  static final long RETRY_BACKOFF_DEFAULT = 1_000;
  static final String RETRY_BACKOFF_DISPLAY = "Retry backoff (ms)";

  public static final String RETRY_BACKOFF_MAX_CONFIG = "retry.backoff.max.ms";
  static final String RETRY_BACKOFF_MAX_DOC = "Longest backoff; at least retry.backoff.ms.";
  static final long RETRY_BACKOFF_MAX_DEFAULT = 300_000;
  static final String RETRY_BACKOFF_MAX_DISPLAY = "Longest retry backoff (ms)";

  public static final String RETRY_MAX_ATTEMPTS_CONFIG = "retry.max.attempts";
  static final String RETRY_MAX_ATTEMPTS_DOC =
      "Attempts before a delivery is dead-lettered. A task crash or takeover charges one attempt to"
          + " each delivery it had in flight, so a record that keeps crashing its task ends here.";
  static final int RETRY_MAX_ATTEMPTS_DEFAULT = 10;
  static final String RETRY_MAX_ATTEMPTS_DISPLAY = "Max attempts";

  public static final String TOPIC_TEMPLATE_CONFIG = "topic.template";
  static final String TOPIC_TEMPLATE_DOC =
      "Topic of a handler not listed in topic.map: ${handler} and ${type} are replaced by the"
          + " delivery's handler and event type. Empty: a handler missing from topic.map has no"
          + " topic and its deliveries are dead-lettered. Per-key order holds within a topic"
          + " partition only, so ${type} splits a key's events across topics.";
  static final String TOPIC_TEMPLATE_DEFAULT = "${handler}";
  static final String TOPIC_TEMPLATE_DISPLAY = "Topic template";

  public static final String TOPIC_MAP_CONFIG = "topic.map";
  static final String TOPIC_MAP_DOC =
      "Explicit topics of handlers, as handler:topic pairs, e.g."
          + " billing:billing.events,shipping:shipping.events. Wins over topic.template.";
  static final String TOPIC_MAP_DEFAULT = "";
  static final String TOPIC_MAP_DISPLAY = "Topic map";

  public static final String KEY_FORMAT_CONFIG = "key.format";
  static final String KEY_FORMAT_DOC =
      "Record key: the ordering key as an optional string or as its UTF-8 bytes. Events without a"
          + " key get a null key.";
  static final String KEY_FORMAT_DEFAULT = "string";
  static final String KEY_FORMAT_DISPLAY = "Key format";

  public static final String VALUE_FORMAT_CONFIG = "value.format";
  static final String VALUE_FORMAT_DOC =
      "Record value: the payload as bytes, as a UTF-8 string, or parsed as JSON with an inferred"
          + " schema (objects become structs). A payload invalid for the format is dead-lettered.";
  static final String VALUE_FORMAT_DEFAULT = "bytes";
  static final String VALUE_FORMAT_DISPLAY = "Value format";

  public static final String HEADER_PREFIX_CONFIG = "header.prefix";
  static final String HEADER_PREFIX_DOC =
      "Prefix of the headers the connector adds: <prefix>event-id, <prefix>event-type,"
          + " <prefix>content-type, <prefix>handler, <prefix>sequence, <prefix>attempt. The event's own headers are"
          + " added as they are, before these. Consumers using the relaybus inbox must use the"
          + " same prefix.";
  static final String HEADER_PREFIX_DEFAULT = RecordHeaders.DEFAULT_PREFIX;
  static final String HEADER_PREFIX_DISPLAY = "Header prefix";

  public static final String MAX_RECORD_BYTES_CONFIG = "max.record.bytes";
  static final String MAX_RECORD_BYTES_DOC =
      "Largest record (key, value and headers) the connector hands to the producer; a bigger one"
          + " is dead-lettered instead of failing the task. Key and value are measured as the"
          + " connector's key.converter/value.converter write them when those are converters Kafka"
          + " ships (e.g. JsonConverter), and estimated before conversion otherwise (worker"
          + " defaults, other converters). Keep it below the producer's max.request.size (default"
          + " 1048576, override with producer.override.max.request.size) and the topic's"
          + " max.message.bytes.";
  static final int MAX_RECORD_BYTES_DEFAULT = 1_000_000;
  static final String MAX_RECORD_BYTES_DISPLAY = "Max record bytes";

  public static final String RECORD_FORMAT_CONFIG = "record.format";
  static final String RECORD_FORMAT_DOC =
      "Which records to write. relaybus: key per key.format, value per value.format, the event's"
          + " headers and the <header.prefix>* headers, timestamp = event time. debezium_outbox:"
          + " the records Debezium's outbox EventRouter writes with its defaults, for consumers"
          + " written against it (docs/migrating-from-debezium.md): key = the event key as a string"
          + " (aggregateid), value = the payload as a string named io.debezium.data.Json (a jsonb"
          + " payload column), headers = Debezium's context headers, id = the event id, then the"
          + " event's own headers; key.format, value.format and header.prefix do not apply. Route"
          + " as the router does with topic.template=outbox.event.${handler}, the handler taking"
          + " the place of aggregatetype.";
  static final String RECORD_FORMAT_DEFAULT = "relaybus";
  static final String RECORD_FORMAT_DISPLAY = "Record format";

  public static final String DEBEZIUM_LOGICAL_NAME_CONFIG = "debezium.logical.name";
  static final String DEBEZIUM_LOGICAL_NAME_DOC =
      "With record.format=debezium_outbox: the value of the __debezium.context.connectorLogicalName"
          + " header, the topic.prefix of the Debezium connector being replaced. Empty: the"
          + " connector's name.";
  static final String DEBEZIUM_LOGICAL_NAME_DEFAULT = "";
  static final String DEBEZIUM_LOGICAL_NAME_DISPLAY = "Debezium logical name";

  public static final String DEBEZIUM_CONTEXT_HEADERS_CONFIG = "debezium.context.headers";
  static final String DEBEZIUM_CONTEXT_HEADERS_DOC =
      "With record.format=debezium_outbox: write Debezium's context headers"
          + " __debezium.context.connectorLogicalName, __debezium.context.taskId (the task's"
          + " number), __debezium.context.connectorName (postgresql or mongodb) and"
          + " __debezium.context.runId (an id of the task's run, new at each start), as Debezium does by"
          + " default (extended.headers.enabled=true). Turn off where the replaced connector had"
          + " extended.headers.enabled=false.";
  static final boolean DEBEZIUM_CONTEXT_HEADERS_DEFAULT = true;
  static final String DEBEZIUM_CONTEXT_HEADERS_DISPLAY = "Debezium context headers";

  public static final ConfigDef CONFIG_DEF = configDef();

  private static ConfigDef configDef() {
    ConfigDef def = new ConfigDef();
    int order = 0;
    def.define(
            STORE_KIND_CONFIG,
            Type.STRING,
            STORE_KIND_DEFAULT,
            EnumValidator.of(StoreKind.class),
            Importance.HIGH,
            STORE_KIND_DOC,
            GROUP_DATABASE,
            ++order,
            Width.SHORT,
            STORE_KIND_DISPLAY)
        .define(
            CONNECTION_URL_CONFIG,
            Type.STRING,
            CONNECTION_URL_DEFAULT,
            ConfigChecks.JDBC_URL,
            Importance.HIGH,
            CONNECTION_URL_DOC,
            GROUP_DATABASE,
            ++order,
            Width.LONG,
            CONNECTION_URL_DISPLAY)
        .define(
            CONNECTION_USER_CONFIG,
            Type.STRING,
            CONNECTION_USER_DEFAULT,
            Importance.HIGH,
            CONNECTION_USER_DOC,
            GROUP_DATABASE,
            ++order,
            Width.MEDIUM,
            CONNECTION_USER_DISPLAY)
        .define(
            CONNECTION_PASSWORD_CONFIG,
            Type.PASSWORD,
            null,
            Importance.HIGH,
            CONNECTION_PASSWORD_DOC,
            GROUP_DATABASE,
            ++order,
            Width.MEDIUM,
            CONNECTION_PASSWORD_DISPLAY)
        .define(
            MONGODB_URI_CONFIG,
            Type.PASSWORD,
            null,
            ConfigChecks.MONGODB_URI,
            Importance.HIGH,
            MONGODB_URI_DOC,
            GROUP_DATABASE,
            ++order,
            Width.LONG,
            MONGODB_URI_DISPLAY)
        .define(
            MONGODB_DATABASE_CONFIG,
            Type.STRING,
            MONGODB_DATABASE_DEFAULT,
            ConfigChecks.MONGODB_DATABASE,
            Importance.HIGH,
            MONGODB_DATABASE_DOC,
            GROUP_DATABASE,
            ++order,
            Width.MEDIUM,
            MONGODB_DATABASE_DISPLAY)
        .define(
            CONNECTION_TIMEOUT_CONFIG,
            Type.LONG,
            CONNECTION_TIMEOUT_DEFAULT,
            Range.between(250, 300_000),
            Importance.LOW,
            CONNECTION_TIMEOUT_DOC,
            GROUP_DATABASE,
            ++order,
            Width.SHORT,
            CONNECTION_TIMEOUT_DISPLAY)
        .define(
            CONNECTION_POOL_SIZE_CONFIG,
            Type.INT,
            CONNECTION_POOL_SIZE_DEFAULT,
            Range.between(2, 50),
            Importance.LOW,
            CONNECTION_POOL_SIZE_DOC,
            GROUP_DATABASE,
            ++order,
            Width.SHORT,
            CONNECTION_POOL_SIZE_DISPLAY);
    order = 0;
    def.define(
            OUTBOX_SCHEMA_CONFIG,
            Type.STRING,
            OUTBOX_SCHEMA_DEFAULT,
            ConfigChecks.SCHEMA_NAME,
            Importance.MEDIUM,
            OUTBOX_SCHEMA_DOC,
            GROUP_OUTBOX,
            ++order,
            Width.MEDIUM,
            OUTBOX_SCHEMA_DISPLAY)
        .define(
            OUTBOX_TABLE_PREFIX_CONFIG,
            Type.STRING,
            OUTBOX_TABLE_PREFIX_DEFAULT,
            ConfigChecks.TABLE_PREFIX,
            Importance.MEDIUM,
            OUTBOX_TABLE_PREFIX_DOC,
            GROUP_OUTBOX,
            ++order,
            Width.MEDIUM,
            OUTBOX_TABLE_PREFIX_DISPLAY)
        .define(
            OUTBOX_SETUP_CONFIG,
            Type.BOOLEAN,
            OUTBOX_SETUP_DEFAULT,
            Importance.MEDIUM,
            OUTBOX_SETUP_DOC,
            GROUP_OUTBOX,
            ++order,
            Width.SHORT,
            OUTBOX_SETUP_DISPLAY)
        .define(
            OUTBOX_NOTIFY_CONFIG,
            Type.BOOLEAN,
            OUTBOX_NOTIFY_DEFAULT,
            Importance.MEDIUM,
            OUTBOX_NOTIFY_DOC,
            GROUP_OUTBOX,
            ++order,
            Width.SHORT,
            OUTBOX_NOTIFY_DISPLAY);
    order = 0;
    def.define(
            BATCH_SIZE_CONFIG,
            Type.INT,
            BATCH_SIZE_DEFAULT,
            Range.between(1, 10_000),
            Importance.MEDIUM,
            BATCH_SIZE_DOC,
            GROUP_DELIVERY,
            ++order,
            Width.SHORT,
            BATCH_SIZE_DISPLAY)
        .define(
            POLL_INTERVAL_CONFIG,
            Type.LONG,
            POLL_INTERVAL_DEFAULT,
            Range.between(1, 60_000),
            Importance.MEDIUM,
            POLL_INTERVAL_DOC,
            GROUP_DELIVERY,
            ++order,
            Width.SHORT,
            POLL_INTERVAL_DISPLAY)
        .define(
            LEASE_DURATION_CONFIG,
            Type.LONG,
            LEASE_DURATION_DEFAULT,
            Range.between(3_000, 3_600_000),
            Importance.MEDIUM,
            LEASE_DURATION_DOC,
            GROUP_DELIVERY,
            ++order,
            Width.SHORT,
            LEASE_DURATION_DISPLAY)
        .define(
            COMPLETION_FLUSH_SIZE_CONFIG,
            Type.INT,
            COMPLETION_FLUSH_SIZE_DEFAULT,
            Range.between(1, 10_000),
            Importance.LOW,
            COMPLETION_FLUSH_SIZE_DOC,
            GROUP_DELIVERY,
            ++order,
            Width.SHORT,
            COMPLETION_FLUSH_SIZE_DISPLAY)
        .define(
            COMPLETION_FLUSH_INTERVAL_CONFIG,
            Type.LONG,
            COMPLETION_FLUSH_INTERVAL_DEFAULT,
            Range.between(0, 60_000),
            Importance.LOW,
            COMPLETION_FLUSH_INTERVAL_DOC,
            GROUP_DELIVERY,
            ++order,
            Width.SHORT,
            COMPLETION_FLUSH_INTERVAL_DISPLAY);
    order = 0;
    def.define(
            RETRY_BACKOFF_CONFIG,
            Type.LONG,
            RETRY_BACKOFF_DEFAULT,
            Range.between(0, 86_400_000),
            Importance.LOW,
            RETRY_BACKOFF_DOC,
            GROUP_RETRIES,
            ++order,
            Width.SHORT,
            RETRY_BACKOFF_DISPLAY)
        .define(
            RETRY_BACKOFF_MAX_CONFIG,
            Type.LONG,
            RETRY_BACKOFF_MAX_DEFAULT,
            Range.between(0, 86_400_000),
            Importance.LOW,
            RETRY_BACKOFF_MAX_DOC,
            GROUP_RETRIES,
            ++order,
            Width.SHORT,
            RETRY_BACKOFF_MAX_DISPLAY)
        .define(
            RETRY_MAX_ATTEMPTS_CONFIG,
            Type.INT,
            RETRY_MAX_ATTEMPTS_DEFAULT,
            Range.between(1, 1_000),
            Importance.LOW,
            RETRY_MAX_ATTEMPTS_DOC,
            GROUP_RETRIES,
            ++order,
            Width.SHORT,
            RETRY_MAX_ATTEMPTS_DISPLAY);
    order = 0;
    def.define(
            TOPIC_TEMPLATE_CONFIG,
            Type.STRING,
            TOPIC_TEMPLATE_DEFAULT,
            ConfigChecks.TOPIC_TEMPLATE,
            Importance.HIGH,
            TOPIC_TEMPLATE_DOC,
            GROUP_RECORDS,
            ++order,
            Width.MEDIUM,
            TOPIC_TEMPLATE_DISPLAY)
        .define(
            TOPIC_MAP_CONFIG,
            Type.LIST,
            TOPIC_MAP_DEFAULT,
            ConfigChecks.TOPIC_MAP,
            Importance.HIGH,
            TOPIC_MAP_DOC,
            GROUP_RECORDS,
            ++order,
            Width.LONG,
            TOPIC_MAP_DISPLAY)
        .define(
            KEY_FORMAT_CONFIG,
            Type.STRING,
            KEY_FORMAT_DEFAULT,
            EnumValidator.of(KeyFormat.class),
            Importance.MEDIUM,
            KEY_FORMAT_DOC,
            GROUP_RECORDS,
            ++order,
            Width.SHORT,
            KEY_FORMAT_DISPLAY)
        .define(
            VALUE_FORMAT_CONFIG,
            Type.STRING,
            VALUE_FORMAT_DEFAULT,
            EnumValidator.of(ValueFormat.class),
            Importance.MEDIUM,
            VALUE_FORMAT_DOC,
            GROUP_RECORDS,
            ++order,
            Width.SHORT,
            VALUE_FORMAT_DISPLAY)
        .define(
            HEADER_PREFIX_CONFIG,
            Type.STRING,
            HEADER_PREFIX_DEFAULT,
            ConfigChecks.HEADER_PREFIX,
            Importance.LOW,
            HEADER_PREFIX_DOC,
            GROUP_RECORDS,
            ++order,
            Width.SHORT,
            HEADER_PREFIX_DISPLAY)
        .define(
            MAX_RECORD_BYTES_CONFIG,
            Type.INT,
            MAX_RECORD_BYTES_DEFAULT,
            Range.between(1_024, Integer.MAX_VALUE),
            Importance.LOW,
            MAX_RECORD_BYTES_DOC,
            GROUP_RECORDS,
            ++order,
            Width.SHORT,
            MAX_RECORD_BYTES_DISPLAY)
        .define(
            RECORD_FORMAT_CONFIG,
            Type.STRING,
            RECORD_FORMAT_DEFAULT,
            EnumValidator.of(RecordFormat.class),
            Importance.MEDIUM,
            RECORD_FORMAT_DOC,
            GROUP_RECORDS,
            ++order,
            Width.SHORT,
            RECORD_FORMAT_DISPLAY)
        .define(
            DEBEZIUM_LOGICAL_NAME_CONFIG,
            Type.STRING,
            DEBEZIUM_LOGICAL_NAME_DEFAULT,
            Importance.LOW,
            DEBEZIUM_LOGICAL_NAME_DOC,
            GROUP_RECORDS,
            ++order,
            Width.MEDIUM,
            DEBEZIUM_LOGICAL_NAME_DISPLAY)
        .define(
            DEBEZIUM_CONTEXT_HEADERS_CONFIG,
            Type.BOOLEAN,
            DEBEZIUM_CONTEXT_HEADERS_DEFAULT,
            Importance.LOW,
            DEBEZIUM_CONTEXT_HEADERS_DOC,
            GROUP_RECORDS,
            ++order,
            Width.SHORT,
            DEBEZIUM_CONTEXT_HEADERS_DISPLAY);
    return def;
  }

  public OutboxSourceConfig(Map<String, String> props) {
    this(CONFIG_DEF, props);
  }

  protected OutboxSourceConfig(ConfigDef def, Map<String, String> props) {
    super(def, props, false);
    String missing = missingStoreSetting();
    if (missing != null) {
      throw new ConfigException(missing);
    }
  }

  /**
   * The message for a setting the store kind requires and that is missing, naming it, or {@code
   * null}: {@code connection.url} for postgres, {@code mongodb.uri} (and a database, there or in
   * {@code mongodb.database}) for mongodb.
   */
  String missingStoreSetting() {
    return switch (storeKind()) {
      case POSTGRES ->
          connectionUrl().isEmpty()
              ? "Missing required configuration \"%s\": store.kind=postgres reads the outbox through"
                      .formatted(CONNECTION_URL_CONFIG)
                  + " a JDBC URL, e.g. jdbc:postgresql://db.example.com:5432/app"
              : null;
      case MONGODB -> {
        if (mongodbUri() == null) {
          yield "Missing required configuration \"%s\": store.kind=mongodb reads the outbox"
                  .formatted(MONGODB_URI_CONFIG)
              + " through a connection string, e.g. mongodb://db-0:27017/app?replicaSet=rs0";
        }
        yield mongodbDatabase() == null
            ? "Missing required configuration \"%s\": mongodb.uri names no database; set %s or add"
                    .formatted(MONGODB_DATABASE_CONFIG, MONGODB_DATABASE_CONFIG)
                + " it to the connection string (mongodb://host/<database>)"
            : null;
      }
    };
  }

  /** The connector's name (Connect's {@code name}), the lease group of its tasks. */
  public String connectorName() {
    Object name = originals().get("name");
    return name == null ? "relaybus-outbox" : name.toString();
  }

  public StoreKind storeKind() {
    return EnumValidator.parse(StoreKind.class, STORE_KIND_CONFIG, getString(STORE_KIND_CONFIG));
  }

  public String connectionUrl() {
    return getString(CONNECTION_URL_CONFIG);
  }

  /** The user, or {@code null} when empty (the driver's default). */
  public String connectionUser() {
    String user = getString(CONNECTION_USER_CONFIG);
    return user == null || user.isEmpty() ? null : user;
  }

  /** The password, or {@code null} when none is set. */
  public String connectionPassword() {
    Password password = getPassword(CONNECTION_PASSWORD_CONFIG);
    return password == null ? null : password.value();
  }

  /** The MongoDB connection string, or {@code null} when none is set. */
  public String mongodbUri() {
    Password uri = getPassword(MONGODB_URI_CONFIG);
    return uri == null || uri.value().isBlank() ? null : uri.value().strip();
  }

  /** The MongoDB database: {@code mongodb.database}, else the one the URI names, else null. */
  public String mongodbDatabase() {
    String database = getString(MONGODB_DATABASE_CONFIG);
    if (database != null && !database.isEmpty()) {
      return database;
    }
    String uri = mongodbUri();
    return uri == null ? null : ConfigChecks.databaseOf(uri);
  }

  public Duration connectionTimeout() {
    return Duration.ofMillis(getLong(CONNECTION_TIMEOUT_CONFIG));
  }

  public int connectionPoolSize() {
    return getInt(CONNECTION_POOL_SIZE_CONFIG);
  }

  public String outboxSchema() {
    return getString(OUTBOX_SCHEMA_CONFIG);
  }

  public String outboxTablePrefix() {
    return getString(OUTBOX_TABLE_PREFIX_CONFIG);
  }

  public boolean outboxSetup() {
    return getBoolean(OUTBOX_SETUP_CONFIG);
  }

  /**
   * PostgreSQL: whether publishes wake the tasks (LISTEN/NOTIFY); see {@link #OUTBOX_NOTIFY_DOC}.
   */
  public boolean outboxNotify() {
    return getBoolean(OUTBOX_NOTIFY_CONFIG);
  }

  public int batchSize() {
    return getInt(BATCH_SIZE_CONFIG);
  }

  public Duration pollInterval() {
    return Duration.ofMillis(getLong(POLL_INTERVAL_CONFIG));
  }

  public Duration leaseDuration() {
    return Duration.ofMillis(getLong(LEASE_DURATION_CONFIG));
  }

  public int completionFlushSize() {
    return getInt(COMPLETION_FLUSH_SIZE_CONFIG);
  }

  public Duration completionFlushInterval() {
    return Duration.ofMillis(getLong(COMPLETION_FLUSH_INTERVAL_CONFIG));
  }

  public Duration retryBackoff() {
    return Duration.ofMillis(getLong(RETRY_BACKOFF_CONFIG));
  }

  public Duration retryBackoffMax() {
    return Duration.ofMillis(getLong(RETRY_BACKOFF_MAX_CONFIG));
  }

  public int retryMaxAttempts() {
    return getInt(RETRY_MAX_ATTEMPTS_CONFIG);
  }

  /**
   * The store's retry policy. Throws {@link IllegalArgumentException} when the backoff cap is below
   * the base; {@code validate()} reports that against {@code retry.backoff.max.ms} first.
   */
  public RetryPolicy retryPolicy() {
    return new RetryPolicy(retryMaxAttempts(), retryBackoff(), retryBackoffMax(), 0.2);
  }

  public String topicTemplate() {
    return getString(TOPIC_TEMPLATE_CONFIG);
  }

  /** The explicit handler to topic map, in the order given. */
  public Map<String, String> topicMap() {
    return TopicRouter.parseMap(getList(TOPIC_MAP_CONFIG));
  }

  public TopicRouter topicRouter() {
    return new TopicRouter(topicTemplate(), topicMap());
  }

  public KeyFormat keyFormat() {
    return EnumValidator.parse(KeyFormat.class, KEY_FORMAT_CONFIG, getString(KEY_FORMAT_CONFIG));
  }

  public ValueFormat valueFormat() {
    return EnumValidator.parse(
        ValueFormat.class, VALUE_FORMAT_CONFIG, getString(VALUE_FORMAT_CONFIG));
  }

  public RecordHeaders headerNames() {
    return new RecordHeaders(getString(HEADER_PREFIX_CONFIG));
  }

  public int maxRecordBytes() {
    return getInt(MAX_RECORD_BYTES_CONFIG);
  }

  public RecordFormat recordFormat() {
    return EnumValidator.parse(
        RecordFormat.class, RECORD_FORMAT_CONFIG, getString(RECORD_FORMAT_CONFIG));
  }

  /** The configured logical name, empty when unset (then the connector's name applies). */
  public String debeziumLogicalName() {
    return getString(DEBEZIUM_LOGICAL_NAME_CONFIG).strip();
  }

  public boolean debeziumContextHeaders() {
    return getBoolean(DEBEZIUM_CONTEXT_HEADERS_CONFIG);
  }

  /** Keys of this connector, for {@code validate()} to find the ones it knows. */
  static List<String> keys() {
    return List.copyOf(CONFIG_DEF.names());
  }
}
