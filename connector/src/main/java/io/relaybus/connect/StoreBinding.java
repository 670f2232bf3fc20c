package io.relaybus.connect;

import io.relaybus.store.OutboxStore;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.config.ConfigValue;

/**
 * Everything the connector knows of one outbox store, in one place: how it opens, which of its keys
 * it requires and reads, which key a connection finding belongs to and how the database is named in
 * messages without credentials, how {@code validate()} checks the connection and reports what it
 * found. One implementation per {@link StoreKind} ({@link PostgresBinding}, {@link MongoBinding});
 * the rest of the connector asks {@link OutboxSourceConfig#store()} and never tests the kind.
 *
 * <p>Adding a store: declare its keys in {@link OutboxSourceConfig} (a {@link ConfigField} each,
 * listed in {@code FIELDS}, with typed accessors), implement this interface, and add a {@link
 * StoreKind} constant holding the implementation.
 *
 * <p>Implementations are created while {@link StoreKind} initializes, so they must not read {@link
 * OutboxSourceConfig}'s fields in a static or instance initializer: its {@code ConfigDef} validates
 * the default of {@code store.kind} against {@link StoreKind} while it initializes itself.
 */
interface StoreBinding {

  /** A setting the store kind requires that is missing, and the message naming it. */
  record MissingSetting(ConfigField key, String message) {}

  /** Opens the store with a pool of {@code poolSize} connections; the caller closes it. */
  OutboxStore open(OutboxSourceConfig config, String applicationName, int poolSize);

  /** The first setting this store requires that {@code config} lacks, if any. */
  Optional<MissingSetting> missingSetting(OutboxSourceConfig config);

  /**
   * The keys of this store the database check reads: {@code validate()} runs the check only when
   * each of them passed its own validation.
   */
  List<ConfigField> keys();

  /** The key a finding about reaching the database belongs to (no answer, interrupted). */
  ConfigField connectionKey();

  /** Where the database is, without credentials, for messages. */
  String address(OutboxSourceConfig config);

  /** Where in the database the outbox lives, for the start log, e.g. {@code schema public}. */
  String namespace(OutboxSourceConfig config);

  /** The Debezium connector of this database, as {@code __debezium.context.connectorName}. */
  String debeziumConnectorName();

  /**
   * Connects once directly and disconnects. The store's pool retries a failed connect until {@code
   * connection.timeout.ms} (a database that is down may come back), so through it a refused login,
   * a closed port or an unknown host would be reported only after the full timeout; a direct
   * connect answers those at once.
   *
   * @throws Exception the failure as the driver reports it, for {@link #report}
   */
  void probe(OutboxSourceConfig config, String applicationName) throws Exception;

  /**
   * Attaches what the database check found ({@code e}, thrown by {@link #probe}, {@link #open} or
   * {@code verifySchema()}) to the keys the user must change, each message starting with its key.
   * Reports nothing for a missing outbox when {@code outbox.setup=true}: the connector creates it
   * when it starts.
   */
  void report(Map<String, ConfigValue> values, OutboxSourceConfig config, Throwable e);
}
