package io.relaybus.admin;

import com.mongodb.ConnectionString;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.mongodb.MongoOutboxStore;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.IOException;
import java.io.Reader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import picocli.CommandLine.Option;

/**
 * Where the outbox is and how to log in. Each setting comes from its flag, else its environment
 * variable, else the properties file of {@code --config}. The password is never printed: not in
 * errors, not in the console.
 */
final class StoreConnection {
  static final String URL_ENV = "RELAYBUS_URL";
  static final String USER_ENV = "RELAYBUS_USER";
  static final String PASSWORD_ENV = "RELAYBUS_PASSWORD";
  static final String CONFIG_ENV = "RELAYBUS_ADMIN_CONFIG";

  @Option(
      names = "--url",
      paramLabel = "URL",
      description =
          "jdbc:postgresql://host:port/db or mongodb://host:port/db "
              + "(env "
              + URL_ENV
              + ", properties key url)")
  String url;

  @Option(
      names = "--user",
      paramLabel = "USER",
      description = "database user (env " + USER_ENV + ", key user)")
  String user;

  @Option(
      names = "--password",
      arity = "0..1",
      interactive = true,
      paramLabel = "PASSWORD",
      description =
          "database password; --password alone asks for it without echo (env "
              + PASSWORD_ENV
              + ", key password)")
  char[] password;

  @Option(
      names = "--config",
      paramLabel = "FILE",
      description =
          "properties file with url, user, password, schema, prefix, database (env "
              + CONFIG_ENV
              + ")")
  Path config;

  @Option(
      names = "--schema",
      paramLabel = "SCHEMA",
      description = "PostgreSQL schema of the outbox tables (key schema; default public)")
  String schema;

  @Option(
      names = "--prefix",
      paramLabel = "PREFIX",
      description =
          "table (PostgreSQL) or collection (MongoDB) prefix (key prefix; default relaybus_)")
  String prefix;

  @Option(
      names = "--database",
      paramLabel = "DB",
      description = "MongoDB database, if not in the URL (key database)")
  String database;

  /** Test seam: the environment to read. */
  Map<String, String> environment = System.getenv();

  private Properties properties;

  /** The settings, resolved; the store opened from them. */
  Opened open() {
    String resolvedUrl = setting(url, URL_ENV, "url");
    if (resolvedUrl == null) {
      throw new IllegalArgumentException(
          "no database given: pass --url, set " + URL_ENV + ", or give url in --config");
    }
    String resolvedUser = setting(user, USER_ENV, "user");
    String resolvedPassword =
        setting(password == null ? null : new String(password), PASSWORD_ENV, "password");
    String resolvedPrefix = setting(prefix, null, "prefix");
    if (resolvedUrl.startsWith("jdbc:postgresql:")) {
      PostgresOutboxStore.Builder b =
          PostgresOutboxStore.builder()
              .jdbcUrl(resolvedUrl)
              .poolSize(2)
              .connectTimeout(Duration.ofSeconds(10))
              .applicationName("relaybus-admin");
      if (resolvedUser != null) {
        b.user(resolvedUser);
      }
      if (resolvedPassword != null) {
        b.password(resolvedPassword);
      }
      String resolvedSchema = setting(schema, null, "schema");
      if (resolvedSchema != null) {
        b.schema(resolvedSchema);
      }
      if (resolvedPrefix != null) {
        b.tablePrefix(resolvedPrefix);
      }
      PostgresOutboxStore store = b.build();
      return new Opened(store, Optional.of(new PostgresHealth(store)), "PostgreSQL");
    }
    if (resolvedUrl.startsWith("mongodb://") || resolvedUrl.startsWith("mongodb+srv://")) {
      ConnectionString parsed = new ConnectionString(resolvedUrl);
      String db = setting(database, null, "database");
      if (db == null) {
        db = parsed.getDatabase();
      }
      if (db == null) {
        throw new IllegalArgumentException(
            "no MongoDB database given: put it in the URL (mongodb://host/db) or pass --database");
      }
      if (resolvedUser != null || resolvedPassword != null) {
        throw new IllegalArgumentException(
            "for MongoDB put the credentials in the URL (mongodb://user:password@host/db) or its"
                + " environment variable, not in --user/--password");
      }
      MongoOutboxStore.Builder b =
          MongoOutboxStore.builder()
              .connectionString(resolvedUrl)
              .database(db)
              .applicationName("relaybus-admin");
      if (resolvedPrefix != null) {
        b.collectionPrefix(resolvedPrefix);
      }
      return new Opened(b.build(), Optional.empty(), "MongoDB");
    }
    throw new IllegalArgumentException(
        "url must start with jdbc:postgresql: or mongodb://, but was " + redact(resolvedUrl));
  }

  /** The URL without anything that may be a secret (user info, query parameters). */
  static String redact(String url) {
    String result = url.replaceAll("//[^/@]*@", "//***@");
    int query = result.indexOf('?');
    return query < 0 ? result : result.substring(0, query) + "?***";
  }

  private String setting(String flag, String env, String key) {
    if (flag != null) {
      return flag;
    }
    if (env != null && environment.get(env) != null && !environment.get(env).isEmpty()) {
      return environment.get(env);
    }
    return properties().getProperty(key);
  }

  private Properties properties() {
    if (properties == null) {
      properties = new Properties();
      Path file = config;
      if (file == null && environment.get(CONFIG_ENV) != null) {
        file = Path.of(environment.get(CONFIG_ENV));
      }
      if (file != null) {
        try (Reader reader = Files.newBufferedReader(file)) {
          properties.load(reader);
        } catch (IOException e) {
          throw new IllegalArgumentException(
              "cannot read --config " + file + ": " + e.getMessage(), e);
        }
      }
    }
    return properties;
  }

  /** An opened store, and its database health where the database has one to show. */
  record Opened(OutboxStore store, Optional<PostgresHealth> health, String kind)
      implements AutoCloseable {
    @Override
    public void close() {
      store.close();
    }
  }
}
