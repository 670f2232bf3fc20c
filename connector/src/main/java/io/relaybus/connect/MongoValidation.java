package io.relaybus.connect;

import static io.relaybus.connect.ConnectorValidation.error;
import static io.relaybus.connect.OutboxSourceConfig.CONNECTION_TIMEOUT_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.MONGODB_DATABASE_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.MONGODB_URI_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_SETUP_CONFIG;
import static io.relaybus.connect.OutboxSourceConfig.OUTBOX_TABLE_PREFIX_CONFIG;

import com.mongodb.ConnectionString;
import com.mongodb.MongoSecurityException;
import com.mongodb.MongoSocketException;
import com.mongodb.MongoTimeoutException;
import com.mongodb.ServerAddress;
import io.relaybus.store.OutboxStoreException;
import java.io.IOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnknownHostException;
import java.util.Map;
import org.apache.kafka.common.config.ConfigValue;

/**
 * What the database check of {@code validate()} found on a MongoDB outbox, attached to the key the
 * user must change. {@code mongodb.uri} is a secret: messages name its hosts and database, never
 * the connection string itself.
 */
final class MongoValidation {
  private MongoValidation() {}

  /** The hosts and database of {@code mongodb.uri}, without user or password. */
  static String address(OutboxSourceConfig config) {
    ConnectionString uri = new ConnectionString(config.mongodbUri());
    return "mongodb://" + String.join(",", uri.getHosts()) + "/" + config.mongodbDatabase();
  }

  /**
   * Opens a TCP connection to each host of {@code mongodb.uri} and closes it. The driver's server
   * selection keeps retrying a refused host until its timeout (connection.timeout.ms), so without
   * this a closed port or an unknown host would be reported only after the full timeout. Returns at
   * the first host that accepts; throws the last host's failure when none does. A {@code
   * mongodb+srv} URI names no host to try: the driver's selection timeout decides.
   */
  static void probe(OutboxSourceConfig config) throws IOException {
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

  static void report(Map<String, ConfigValue> values, OutboxSourceConfig config, Throwable e) {
    String address = address(config);
    String cause = String.valueOf(e.getMessage());
    if (e instanceof ConnectException || e instanceof UnknownHostException) {
      error(
          values,
          MONGODB_URI_CONFIG,
          "%s: cannot reach a MongoDB server at %s: %s (%s); check the hosts, the ports and that"
                  .formatted(
                      MONGODB_URI_CONFIG,
                      address,
                      e instanceof ConnectException
                          ? "every host refused the connection, nothing listens on its port"
                          : "the host name is unknown",
                      cause)
              + " MongoDB runs");
    } else if (find(e, MongoSecurityException.class)) {
      error(
          values,
          MONGODB_URI_CONFIG,
          "%s: the MongoDB at %s refused the login: %s; check the user, the password and"
                  .formatted(MONGODB_URI_CONFIG, address, cause)
              + " authSource in the connection string");
    } else if (find(e, MongoTimeoutException.class) || find(e, MongoSocketException.class)) {
      error(
          values,
          MONGODB_URI_CONFIG,
          "%s: cannot reach a MongoDB server at %s within %s=%d ms: %s; check the hosts, the ports,"
                  .formatted(
                      MONGODB_URI_CONFIG,
                      address,
                      CONNECTION_TIMEOUT_CONFIG,
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
                      MONGODB_DATABASE_CONFIG, OUTBOX_TABLE_PREFIX_CONFIG, OUTBOX_SETUP_CONFIG);
      error(values, MONGODB_DATABASE_CONFIG, MONGODB_DATABASE_CONFIG + ": " + message);
      error(values, OUTBOX_TABLE_PREFIX_CONFIG, OUTBOX_TABLE_PREFIX_CONFIG + ": " + message);
    } else {
      error(
          values,
          MONGODB_URI_CONFIG,
          "%s: the database check against %s failed: %s"
              .formatted(MONGODB_URI_CONFIG, address, cause));
    }
  }

  private static boolean find(Throwable e, Class<? extends Throwable> type) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (type.isInstance(t)) {
        return true;
      }
    }
    return false;
  }
}
