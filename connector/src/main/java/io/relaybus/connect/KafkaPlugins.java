package io.relaybus.connect;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Connect's aliases of the plugins Kafka ships. A worker resolves a plugin's simple class name, and
 * for a converter that name without "Converter", to the class (DelegatingClassLoader, when no other
 * installed plugin has that name): {@code "transforms.f.type": "Filter"} is Kafka's {@code
 * org.apache.kafka.connect.transforms.Filter}, {@code "value.converter": "Json"} its {@code
 * JsonConverter}. The checks that recognize Kafka's transforms and converters by class name ({@link
 * TransformChecks}, {@link ConvertedSize}) see them through {@link #className}. An alias two
 * installed plugins share is none: Connect refuses it, so reading it as Kafka's plugin is harmless.
 * Kafka's nested transforms ({@code InsertField$Value}) have no alias: their simple names ({@code
 * Key}, {@code Value}) are shared.
 */
final class KafkaPlugins {
  private KafkaPlugins() {}

  private static final Map<String, String> ALIASES = new HashMap<>();

  static {
    for (String transform :
        List.of(
            "DropHeaders",
            "Filter",
            "InsertHeader",
            "RegexRouter",
            "TimestampRouter",
            "ValueToKey")) {
      ALIASES.put(transform, "org.apache.kafka.connect.transforms." + transform);
    }
    for (String number :
        List.of("ByteArray", "Boolean", "Double", "Float", "Integer", "Long", "Short")) {
      converter(number, "org.apache.kafka.connect.converters." + number + "Converter");
    }
    converter("String", "org.apache.kafka.connect.storage.StringConverter");
    converter("Json", "org.apache.kafka.connect.json.JsonConverter");
  }

  private static void converter(String pruned, String className) {
    ALIASES.put(pruned, className);
    ALIASES.put(pruned + "Converter", className);
  }

  /**
   * The class a plugin setting names: the class of Kafka's that {@code type} is Connect's alias of,
   * else {@code type} itself, stripped; null for null.
   */
  static String className(Object type) {
    if (type == null) {
      return null;
    }
    String name = type.toString().strip();
    return ALIASES.getOrDefault(name, name);
  }
}
