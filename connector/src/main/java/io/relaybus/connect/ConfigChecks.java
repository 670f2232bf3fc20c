package io.relaybus.connect;

import io.relaybus.store.RecordHeaders;
import io.relaybus.store.Validation;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.UnaryOperator;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;

/**
 * Single-key validators of {@link OutboxSourceConfig} (a store's own keys have theirs in its {@link
 * StoreBinding}). Each failure is a {@link ConfigException} whose message reads "Invalid value V
 * for configuration K: rule", so the key survives Connect's REST 400 body, which drops key names.
 */
final class ConfigChecks {
  private ConfigChecks() {}

  /**
   * A validator running {@code check} on the string value; an {@link IllegalArgumentException} from
   * it becomes a {@link ConfigException} naming the key. {@code description} is what the generated
   * configuration table shows as the valid values.
   */
  static ConfigDef.Validator checking(String description, Consumer<String> check) {
    return checking(description, check, UnaryOperator.identity());
  }

  /**
   * {@link #checking(String, Consumer)} whose refusal shows the value as {@code shown} writes it (a
   * URL without its password).
   */
  static ConfigDef.Validator checking(
      String description, Consumer<String> check, UnaryOperator<String> shown) {
    return new ConfigDef.Validator() {
      @Override
      public void ensureValid(String name, Object value) {
        try {
          check.accept((String) value);
        } catch (IllegalArgumentException e) {
          throw new ConfigException(
              name, value == null ? null : shown.apply((String) value), e.getMessage());
        }
      }

      @Override
      public String toString() {
        return description;
      }
    };
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
          "literal topic characters and ${handler}, ${type}, giving a legal topic (not . or .., at"
              + " most 249 characters with each placeholder one); empty: only topic.map routes",
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
