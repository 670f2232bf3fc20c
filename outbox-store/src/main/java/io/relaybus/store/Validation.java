package io.relaybus.store;

import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * Argument checks shared by every store, so they reject the same input with the same message, and
 * by the connector and the inbox where they take the same names (handlers, SQL identifiers).
 *
 * <p>Each failure is an {@link IllegalArgumentException} in one style: {@code "<argument> must
 * <rule>, but was <value>"}, the value quoted when it is text; the {@code ", but was"} part is left
 * out when the rule already says what the value was ({@code "must not be null"}).
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

  /**
   * PostgreSQL's reserved key words (pg_get_keywords() categories R and T, PostgreSQL 13 to 18):
   * unquoted, none can name a schema ({@code user.relaybus_events} is a syntax error).
   */
  private static final Set<String> RESERVED_WORDS =
      Set.of(
          "all",
          "analyse",
          "analyze",
          "and",
          "any",
          "array",
          "as",
          "asc",
          "asymmetric",
          "authorization",
          "binary",
          "both",
          "case",
          "cast",
          "check",
          "collate",
          "collation",
          "column",
          "concurrently",
          "constraint",
          "create",
          "cross",
          "current_catalog",
          "current_date",
          "current_role",
          "current_schema",
          "current_time",
          "current_timestamp",
          "current_user",
          "default",
          "deferrable",
          "desc",
          "distinct",
          "do",
          "else",
          "end",
          "except",
          "false",
          "fetch",
          "for",
          "foreign",
          "freeze",
          "from",
          "full",
          "grant",
          "group",
          "having",
          "ilike",
          "in",
          "initially",
          "inner",
          "intersect",
          "into",
          "is",
          "isnull",
          "join",
          "lateral",
          "leading",
          "left",
          "like",
          "limit",
          "localtime",
          "localtimestamp",
          "natural",
          "not",
          "notnull",
          "null",
          "offset",
          "on",
          "only",
          "or",
          "order",
          "outer",
          "overlaps",
          "placing",
          "primary",
          "references",
          "returning",
          "right",
          "select",
          "session_user",
          "similar",
          "some",
          "symmetric",
          "system_user",
          "table",
          "tablesample",
          "then",
          "to",
          "trailing",
          "true",
          "union",
          "unique",
          "user",
          "using",
          "variadic",
          "verbose",
          "when",
          "where",
          "window",
          "with");

  public static final int MAX_TABLE_PREFIX_LENGTH = 32;
  public static final int MAX_SCHEMA_LENGTH = 63;

  private Validation() {}

  public static <T> T notNull(String argument, T value) {
    if (value == null) {
      throw new IllegalArgumentException(argument + " must not be null");
    }
    return value;
  }

  public static String notBlank(String argument, String value) {
    return notBlank(argument, value, Integer.MAX_VALUE);
  }

  static String notBlank(String argument, String value, int maxLength) {
    if (value == null || value.isBlank()) {
      throw new IllegalArgumentException(argument + " must not be blank, but was " + quote(value));
    }
    if (value.length() > maxLength) {
      throw new IllegalArgumentException(
          "%s must be at most %d characters, but was %d characters"
              .formatted(argument, maxLength, value.length()));
    }
    return value;
  }

  /**
   * The longest age a retention or filter counts (1,000 years); a longer one means the same: older
   * than anything stored. Longer ages would overflow the stores' time arithmetic (PostgreSQL's
   * timestamps end at 4713 BC, Java's milliseconds at 292 million years).
   */
  public static final Duration MAX_AGE = Duration.ofDays(365_250);

  /** {@code age}, or {@link #MAX_AGE} when longer; {@code null} stays {@code null}. */
  static Duration capped(Duration age) {
    return age == null || age.compareTo(MAX_AGE) <= 0 ? age : MAX_AGE;
  }

  /**
   * No PostgreSQL text can hold U+0000: an event with one in a text column would fail at every try,
   * and one in a header (JSON, which escapes it, but jsonb and text cannot hold it) would be stored
   * and then fail every republish of the event (22P05).
   */
  static String noNul(String argument, String value) {
    int at = value.indexOf('\u0000');
    if (at >= 0) {
      throw new IllegalArgumentException(
          "%s must not contain the character U+0000 (NUL), but did at index %d"
              .formatted(argument, at));
    }
    return value;
  }

  /**
   * A Java string may hold a surrogate without its pair, which no UTF-8 text can: PostgreSQL's
   * driver sends it as '?', so ids that differ only there became one event (the others silently
   * dropped as republishes), and MongoDB refuses it.
   */
  static String wellFormed(String argument, String value) {
    for (int i = 0; i < value.length(); i++) {
      char c = value.charAt(i);
      if (Character.isHighSurrogate(c)
          && i + 1 < value.length()
          && Character.isLowSurrogate(value.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        throw new IllegalArgumentException(
            "%s must be well-formed UTF-16, but had the unpaired surrogate U+%04X at index %d"
                .formatted(argument, (int) c, i));
      }
    }
    return value;
  }

  /**
   * Text every store can hold as it was given: no U+0000 ({@link #noNul}) and no unpaired surrogate
   * ({@link #wellFormed}).
   */
  static String storable(String argument, String value) {
    return wellFormed(argument, noNul(argument, value));
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
    storable("header name", name);
    if (value == null) {
      throw new IllegalArgumentException("header '" + name + "' must have a value, but was null");
    }
    if (value.length() > MAX_HEADER_VALUE_LENGTH) {
      throw new IllegalArgumentException(
          "header '%s' must be at most %d characters, but was %d characters"
              .formatted(name, MAX_HEADER_VALUE_LENGTH, value.length()));
    }
    storable("header '" + name + "'", value);
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

  /** A name used unquoted on its own in SQL (a schema): not a reserved key word. */
  public static String notReservedWord(String argument, String value) {
    if (RESERVED_WORDS.contains(value)) {
      throw new IllegalArgumentException(
          "%s must not be an SQL reserved word (it is used unquoted), but was %s"
              .formatted(argument, quote(value)));
    }
    return value;
  }

  public static int positive(String argument, int value) {
    if (value <= 0) {
      throw new IllegalArgumentException(argument + " must be positive, but was " + value);
    }
    return value;
  }

  public static Duration positive(String argument, Duration value) {
    if (value == null || value.isZero() || value.isNegative()) {
      throw new IllegalArgumentException(argument + " must be positive, but was " + value);
    }
    return value;
  }

  public static Duration notNegative(String argument, Duration value) {
    if (value == null || value.isNegative()) {
      throw new IllegalArgumentException(argument + " must be zero or more, but was " + value);
    }
    return value;
  }

  public static <T extends Collection<?>> T notEmpty(String argument, T values) {
    if (values == null || values.isEmpty()) {
      throw new IllegalArgumentException(argument + " must not be empty");
    }
    return values;
  }

  /** The elements, none null; {@code argument} names the collection in the message. */
  public static <T, C extends Collection<T>> C elements(String argument, C values) {
    notNull(argument, values);
    for (T value : values) {
      if (value == null) {
        throw new IllegalArgumentException(argument + " must not contain null");
      }
    }
    return values;
  }

  // Arguments of the OutboxStore methods.

  /** Lane numbers, distinct and in lane order. */
  public static SortedSet<Integer> lanes(Collection<Integer> lanes) {
    SortedSet<Integer> sorted = new TreeSet<>();
    for (Integer lane : elements("lanes", lanes)) {
      sorted.add(lane(lane));
    }
    return sorted;
  }

  public static <C extends Collection<LaneLease>> C leases(C leases) {
    for (LaneLease lease : elements("leases", leases)) {
      lane(lease.lane());
    }
    return leases;
  }

  public static int lane(int lane) {
    if (lane < 0 || lane >= Lanes.COUNT) {
      throw new IllegalArgumentException(
          "lanes must be between 0 and %d, but was %d".formatted(Lanes.COUNT - 1, lane));
    }
    return lane;
  }

  /** Rejects a batch that names one event twice: which of the two would win is undefined. */
  public static List<OutboxEvent> events(List<OutboxEvent> events) {
    Set<String> ids = new HashSet<>();
    for (OutboxEvent event : elements("events", events)) {
      if (!ids.add(event.id())) {
        throw new IllegalArgumentException(
            "events must have distinct ids, but event id "
                + quote(event.id())
                + " is listed twice");
      }
    }
    return events;
  }

  /** A page size: 1 to {@link DeliveryQuery#MAX_LIMIT}. */
  public static int pageLimit(int limit) {
    if (limit < 1 || limit > DeliveryQuery.MAX_LIMIT) {
      throw new IllegalArgumentException(
          "limit must be between 1 and %d, but was %d".formatted(DeliveryQuery.MAX_LIMIT, limit));
    }
    return limit;
  }

  static String quote(String value) {
    return value == null ? "null" : "'" + value + "'";
  }
}
