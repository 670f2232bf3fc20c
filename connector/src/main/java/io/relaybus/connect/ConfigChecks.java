package io.relaybus.connect;

import com.mongodb.ConnectionString;
import io.relaybus.store.RecordHeaders;
import io.relaybus.store.Validation;
import java.util.List;
import java.util.function.Consumer;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.types.Password;

/**
 * Single-key validators of {@link OutboxSourceConfig}. Each failure is a {@link ConfigException}
 * whose message reads "Invalid value V for configuration K: rule", so the key survives Connect's
 * REST 400 body, which drops key names.
 */
final class ConfigChecks {
  private ConfigChecks() {}

  /**
   * A validator running {@code check} on the string value; an {@link IllegalArgumentException} from
   * it becomes a {@link ConfigException} naming the key. {@code description} is what the generated
   * configuration table shows as the valid values.
   */
  static ConfigDef.Validator checking(String description, Consumer<String> check) {
    return new ConfigDef.Validator() {
      @Override
      public void ensureValid(String name, Object value) {
        try {
          check.accept((String) value);
        } catch (IllegalArgumentException e) {
          throw new ConfigException(name, value, e.getMessage());
        }
      }

      @Override
      public String toString() {
        return description;
      }
    };
  }

  static final ConfigDef.Validator JDBC_URL =
      checking(
          "jdbc:postgresql://host[:port]/database[?parameters]; empty with store.kind=mongodb",
          url -> {
            if (url != null && !url.isEmpty() && !url.startsWith("jdbc:postgresql:")) {
              throw new IllegalArgumentException(
                  "must be a PostgreSQL JDBC URL starting with 'jdbc:postgresql:', e.g."
                      + " jdbc:postgresql://db.example.com:5432/app");
            }
          });

  /** For the PASSWORD-typed {@code mongodb.uri}: parsed by the driver, its message kept. */
  static final ConfigDef.Validator MONGODB_URI =
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

  static final ConfigDef.Validator MONGODB_DATABASE =
      checking(
          "[A-Za-z0-9_-], at most 63 characters; empty: the database of mongodb.uri",
          database -> {
            if (database != null && !database.matches("[A-Za-z0-9_-]{0,63}")) {
              throw new IllegalArgumentException(
                  "must be 1 to 63 characters of [A-Za-z0-9_-] (a MongoDB database name)");
            }
          });

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

  static final ConfigDef.Validator SCHEMA_NAME =
      checking(
          "[a-z_][a-z0-9_]*, at most " + Validation.MAX_SCHEMA_LENGTH + " characters",
          schema -> sqlIdentifier(schema, Validation.MAX_SCHEMA_LENGTH, false));

  static final ConfigDef.Validator TABLE_PREFIX =
      checking(
          "[a-z_][a-z0-9_]* or empty, at most "
              + Validation.MAX_TABLE_PREFIX_LENGTH
              + " characters",
          prefix -> sqlIdentifier(prefix, Validation.MAX_TABLE_PREFIX_LENGTH, true));

  static final ConfigDef.Validator TOPIC_TEMPLATE =
      checking(
          "literal topic characters and ${handler}, ${type}; empty: only topic.map routes",
          TopicRouter::parseTemplate);

  /** For the LIST-typed {@code topic.map}: the value arrives as a list of entries. */
  static final ConfigDef.Validator TOPIC_MAP =
      new ConfigDef.Validator() {
        @Override
        public void ensureValid(String name, Object value) {
          try {
            @SuppressWarnings("unchecked")
            List<String> entries = (List<String>) value;
            TopicRouter.parseMap(entries);
          } catch (IllegalArgumentException e) {
            throw new ConfigException(name, value, e.getMessage());
          }
        }

        @Override
        public String toString() {
          return "comma-separated handler:topic pairs";
        }
      };

  static final ConfigDef.Validator HEADER_PREFIX =
      checking(
          "1 to " + RecordHeaders.MAX_PREFIX_LENGTH + " characters of [A-Za-z0-9._-]",
          RecordHeaders::validatePrefix);

  private static void sqlIdentifier(String value, int maxLength, boolean emptyAllowed) {
    if (value == null || (!emptyAllowed && value.isEmpty())) {
      throw new IllegalArgumentException("must not be empty");
    }
    try {
      Validation.sqlIdentifier("it", value, maxLength, emptyAllowed);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "must match [a-z_][a-z0-9_]* and be at most %d characters: it is used unquoted in SQL"
                  .formatted(maxLength)
              + " and must name what the outbox schema setup created");
    }
  }
}
