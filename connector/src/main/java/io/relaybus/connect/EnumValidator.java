package io.relaybus.connect;

import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;

/**
 * The one validator of every enum setting: accepts the enum's names in any case and, on anything
 * else, lists the allowed values. Its {@link #toString()} is what the generated configuration table
 * shows as the valid values.
 */
final class EnumValidator<E extends Enum<E>> implements ConfigDef.Validator {
  private final Class<E> type;

  private EnumValidator(Class<E> type) {
    this.type = type;
  }

  static <E extends Enum<E>> EnumValidator<E> of(Class<E> type) {
    return new EnumValidator<>(type);
  }

  /** The constant named by {@code value}, case-insensitively; used by the typed accessors. */
  static <E extends Enum<E>> E parse(Class<E> type, String key, String value) {
    String name = value == null ? "" : value.strip().toUpperCase(Locale.ROOT);
    for (E constant : type.getEnumConstants()) {
      if (constant.name().equals(name)) {
        return constant;
      }
    }
    throw new ConfigException(key, value, "must be one of " + allowed(type));
  }

  @Override
  public void ensureValid(String name, Object value) {
    parse(type, name, (String) value);
  }

  static <E extends Enum<E>> List<String> names(Class<E> type) {
    return Arrays.stream(type.getEnumConstants())
        .map(e -> e.name().toLowerCase(Locale.ROOT))
        .toList();
  }

  private static <E extends Enum<E>> String allowed(Class<E> type) {
    return String.join(", ", names(type));
  }

  @Override
  public String toString() {
    return names(type).stream().collect(Collectors.joining(", ", "[", "]"));
  }
}
