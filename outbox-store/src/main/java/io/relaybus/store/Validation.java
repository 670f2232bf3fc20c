package io.relaybus.store;

import java.util.Collection;
import java.util.regex.Pattern;

/**
 * Argument checks shared by every store. Each failure is an {@link IllegalArgumentException} that
 * names the argument, the value and the rule.
 */
public final class Validation {
  public static final int MAX_EVENT_ID_LENGTH = 200;
  public static final int MAX_HANDLER_LENGTH = 200;

  /** Handlers of one event: a delivery's id has room for this many per event (PostgreSQL). */
  public static final int MAX_HANDLERS = 1000;

  public static final int MAX_TYPE_LENGTH = 200;
  public static final int MAX_KEY_LENGTH = 1000;
  public static final int MAX_HEADER_NAME_LENGTH = 200;
  public static final int MAX_HEADER_VALUE_LENGTH = 8192;

  /** Handlers become Kafka topic names through a template: keep them to what a topic allows. */
  private static final Pattern HANDLER = Pattern.compile("[A-Za-z0-9._-]+");

  /**
   * SQL identifiers we create: lower case so they never need quoting, and short enough that the
   * longest derived name ({@code <prefix>deliveries_dead_idx}) fits PostgreSQL's 63 bytes.
   */
  private static final Pattern SQL_IDENTIFIER = Pattern.compile("[a-z_][a-z0-9_]*");

  public static final int MAX_TABLE_PREFIX_LENGTH = 32;
  public static final int MAX_SCHEMA_LENGTH = 63;

  private Validation() {}

  static void notBlank(String argument, String value, int maxLength) {
    if (value == null || value.isBlank()) {
      throw new IllegalArgumentException(argument + " must not be blank, but was " + quote(value));
    }
    if (value.length() > maxLength) {
      throw new IllegalArgumentException(
          "%s must be at most %d characters, but was %d characters"
              .formatted(argument, maxLength, value.length()));
    }
  }

  static void identifierLike(String argument, String value, int maxLength) {
    notBlank(argument, value, maxLength);
    if (!value.strip().equals(value)) {
      throw new IllegalArgumentException(
          argument + " must not start or end with white space, but was " + quote(value));
    }
  }

  /** A handler name: 1 to 200 characters of {@code [A-Za-z0-9._-]}. */
  public static String handler(String handler) {
    notBlank("handler", handler, MAX_HANDLER_LENGTH);
    if (!HANDLER.matcher(handler).matches()) {
      throw new IllegalArgumentException(
          "handler must match [A-Za-z0-9._-]+ (it becomes part of a topic name), but was "
              + quote(handler));
    }
    return handler;
  }

  static void header(String name, String value) {
    notBlank("header name", name, MAX_HEADER_NAME_LENGTH);
    if (value == null) {
      throw new IllegalArgumentException("header '" + name + "' must have a value, but was null");
    }
    if (value.length() > MAX_HEADER_VALUE_LENGTH) {
      throw new IllegalArgumentException(
          "header '%s' must be at most %d characters, but was %d characters"
              .formatted(name, MAX_HEADER_VALUE_LENGTH, value.length()));
    }
  }

  /**
   * A name that reaches SQL as an identifier (a schema name, a table prefix): it is checked here,
   * never quoted or escaped, so nothing but {@code [a-z_][a-z0-9_]*} can get through.
   */
  public static String sqlIdentifier(String argument, String value, int maxLength, boolean empty) {
    if (value == null) {
      throw new IllegalArgumentException(argument + " must not be null");
    }
    if (empty && value.isEmpty()) {
      return value;
    }
    if (value.length() > maxLength || !SQL_IDENTIFIER.matcher(value).matches()) {
      throw new IllegalArgumentException(
          "%s must match [a-z_][a-z0-9_]* and be at most %d characters, but was %s"
              .formatted(argument, maxLength, quote(value)));
    }
    return value;
  }

  public static int positive(String argument, int value) {
    if (value <= 0) {
      throw new IllegalArgumentException(argument + " must be positive, but was " + value);
    }
    return value;
  }

  public static <T extends Collection<?>> T notEmpty(String argument, T values) {
    if (values == null || values.isEmpty()) {
      throw new IllegalArgumentException(argument + " must not be empty");
    }
    return values;
  }

  static String quote(String value) {
    return value == null ? "null" : "'" + value + "'";
  }
}
