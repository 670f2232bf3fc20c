package io.relaybus.connect;

import static io.relaybus.connect.ConnectorValidation.causedBy;
import static io.relaybus.connect.ConnectorValidation.error;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_TIMEOUT;
import static io.relaybus.connect.OutboxSourceConfig.MONGODB_DATABASE;
import static io.relaybus.connect.OutboxSourceConfig.MONGODB_URI;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SETUP;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_TABLE_PREFIX;

import com.mongodb.ConnectionString;
import com.mongodb.MongoSecurityException;
import com.mongodb.MongoSocketException;
import com.mongodb.MongoTimeoutException;
import com.mongodb.ServerAddress;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.mongodb.MongoOutboxStore;
import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnknownHostException;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigValue;
import org.apache.kafka.common.config.types.Password;

/**
 * The MongoDB store ({@code store.kind=mongodb}): {@code mongodb.uri} and {@code mongodb.database}.
 * {@code mongodb.uri} is a secret: messages name its hosts and database, never the connection
 * string itself.
 */
final class MongoBinding implements StoreBinding {

  /** For the PASSWORD-typed {@code mongodb.uri}: parsed by the driver, its message kept. */
  static final ConfigDef.Validator URI =
      new ConfigDef.Validator() {
        @Override
        public void ensureValid(String name, Object value) {
          String uri = value == null ? null : ((Password) value).value();
          if (uri == null || uri.isBlank()) {
            return; // required only with store.kind=mongodb: checked across keys
          }
          try {
            new ConnectionString(uri.strip());
          } catch (IllegalArgumentException e) {
            // The value is a secret: the message names the key and the rule, never the value.
            throw new ConfigException(
                "Invalid value [hidden] for configuration %s: must be a mongodb:// or"
                        .formatted(name)
                    + " mongodb+srv:// connection string, e.g."
                    + " mongodb://db-0:27017/app?replicaSet=rs0 ("
                    + redactedReason(e.getMessage(), uri)
                    + ")");
          }
        }

        @Override
        public String toString() {
          return "mongodb://[user:password@]host[:port][,host...]/[database][?options]";
        }
      };

  static final ConfigDef.Validator DATABASE =
      ConfigChecks.checking(
          "[A-Za-z0-9_-], at most 63 characters; empty: the database of mongodb.uri",
          database -> {
            if (database != null && !database.matches("[A-Za-z0-9_-]{0,63}")) {
              throw new IllegalArgumentException(
                  "must be 1 to 63 characters of [A-Za-z0-9_-] (a MongoDB database name)");
            }
          });

  @Override
  public OutboxStore open(OutboxSourceConfig config, String applicationName, int poolSize) {
    return MongoOutboxStore.builder()
        .connectionString(config.mongodbUri())
        .database(config.mongodbDatabase())
        .collectionPrefix(config.outboxTablePrefix())
        .retryPolicy(config.retryPolicy())
        .maxPoolSize(poolSize)
        .connectTimeout(config.connectionTimeout())
        .applicationName(applicationName)
        .build();
  }

  /** {@code mongodb.uri}, else a database, there or in {@code mongodb.database}. */
  @Override
  public Optional<MissingSetting> missingSetting(OutboxSourceConfig config) {
    if (config.mongodbUri() == null) {
      return Optional.of(
          new MissingSetting(
              MONGODB_URI,
              "Missing required configuration \"%s\": store.kind=mongodb reads the outbox"
                      .formatted(MONGODB_URI.name())
                  + " through a connection string, e.g. mongodb://db-0:27017/app?replicaSet=rs0"));
    }
    if (config.mongodbDatabase() == null) {
      return Optional.of(
          new MissingSetting(
              MONGODB_DATABASE,
              "Missing required configuration \"%s\": mongodb.uri names no database; set %s or add"
                      .formatted(MONGODB_DATABASE.name(), MONGODB_DATABASE.name())
                  + " it to the connection string (mongodb://host/<database>)"));
    }
    return Optional.empty();
  }

  @Override
  public List<ConfigField> keys() {
    return List.of(MONGODB_URI, MONGODB_DATABASE);
  }

  @Override
  public ConfigField connectionKey() {
    return MONGODB_URI;
  }

  /** The hosts and database of {@code mongodb.uri}, without user or password. */
  @Override
  public String address(OutboxSourceConfig config) {
    ConnectionString uri = new ConnectionString(config.mongodbUri());
    return "mongodb://" + String.join(",", uri.getHosts()) + "/" + config.mongodbDatabase();
  }

  @Override
  public String namespace(OutboxSourceConfig config) {
    return "database " + config.mongodbDatabase();
  }

  @Override
  public String debeziumConnectorName() {
    return "mongodb";
  }

  /**
   * Opens a TCP connection to each host of {@code mongodb.uri} and closes it: the driver's server
   * selection would retry a refused host until its timeout. Returns at the first host that accepts;
   * throws the last host's failure when none does. A {@code mongodb+srv} URI names no host to try:
   * the driver's selection timeout decides.
   */
  @Override
  public void probe(OutboxSourceConfig config, String applicationName) throws IOException {
    ConnectionString uri = new ConnectionString(config.mongodbUri());
    if (uri.isSrvProtocol()) {
      return;
    }
    int timeout = (int) Math.max(1, config.connectionTimeout().toMillis());
    IOException last = null;
    for (String host : uri.getHosts()) {
      ServerAddress address = new ServerAddress(host);
      try (Socket socket = new Socket()) {
        socket.connect(new InetSocketAddress(address.getHost(), address.getPort()), timeout);
        return;
      } catch (ConnectException | UnknownHostException e) {
        last = e;
      } catch (IOException e) {
        return; // a timeout or an unusual failure: the driver's own selection reports it
      }
    }
    if (last != null) {
      throw last;
    }
  }

  @Override
  public void report(Map<String, ConfigValue> values, OutboxSourceConfig config, Throwable e) {
    String address = address(config);
    String cause = String.valueOf(e.getMessage());
    if (e instanceof ConnectException || e instanceof UnknownHostException) {
      error(
          values,
          MONGODB_URI.name(),
          "%s: cannot reach a MongoDB server at %s: %s (%s); check the hosts, the ports and that"
                  .formatted(
                      MONGODB_URI.name(),
                      address,
                      e instanceof ConnectException
                          ? "every host refused the connection, nothing listens on its port"
                          : "the host name is unknown",
                      cause)
              + " MongoDB runs");
    } else if (causedBy(e, MongoSecurityException.class)) {
      error(
          values,
          MONGODB_URI.name(),
          "%s: the MongoDB at %s refused the login: %s; check the user, the password and"
                  .formatted(MONGODB_URI.name(), address, cause)
              + " authSource in the connection string");
    } else if (causedBy(e, MongoTimeoutException.class)
        || causedBy(e, MongoSocketException.class)) {
      error(
          values,
          MONGODB_URI.name(),
          "%s: cannot reach a MongoDB server at %s within %s=%d ms: %s; check the hosts, the ports,"
                  .formatted(
                      MONGODB_URI.name(),
                      address,
                      CONNECTION_TIMEOUT.name(),
                      config.connectionTimeout().toMillis(),
                      cause)
              + " the replica set name and that the worker can reach them");
    } else if (e instanceof OutboxStoreException && !((OutboxStoreException) e).isTransient()) {
      if (config.outboxSetup()) {
        return; // outbox.setup=true: the connector creates the collections when it starts
      }
      String message =
          "no usable relaybus outbox in database '%s' with collection prefix '%s' at %s: %s;"
                  .formatted(config.mongodbDatabase(), config.outboxTablePrefix(), address, cause)
              + " set %s and %s to what the application's store was set up with, or set %s=true"
                  .formatted(
                      MONGODB_DATABASE.name(), OUTBOX_TABLE_PREFIX.name(), OUTBOX_SETUP.name());
      error(values, MONGODB_DATABASE.name(), MONGODB_DATABASE.name() + ": " + message);
      error(values, OUTBOX_TABLE_PREFIX.name(), OUTBOX_TABLE_PREFIX.name() + ": " + message);
    } else {
      error(
          values,
          MONGODB_URI.name(),
          "%s: the database check against %s failed: %s"
              .formatted(MONGODB_URI.name(), address, cause));
    }
  }

  /** The database a connection string names, or null; null for one that does not parse. */
  static String databaseOf(String uri) {
    try {
      return new ConnectionString(uri).getDatabase();
    } catch (IllegalArgumentException e) {
      return null;
    }
  }

  private static String redactedReason(String reason, String uri) {
    if (reason == null) {
      return "unparsable";
    }
    return reason.replace(uri, "[hidden]").replace(uri.strip(), "[hidden]");
  }
}
