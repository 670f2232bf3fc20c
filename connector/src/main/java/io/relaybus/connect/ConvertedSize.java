package io.relaybus.connect;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.storage.Converter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The bytes a record's key and value become once the worker converts them, where the task can know
 * it: the connector's own {@code key.converter} / {@code value.converter}, when it is a converter
 * Kafka ships ({@code org.apache.kafka.connect.*}: JSON, String, ByteArray, numbers), configured
 * here with the same {@code key.converter.*} / {@code value.converter.*} settings. Such a converter
 * has no side effects, so converting once more to measure is safe. Named by Connect's alias ({@code
 * JsonConverter}, {@code Json}: {@link KafkaPlugins}) it is the same converter. {@code
 * JsonConverter} is the case that matters: it writes bytes as base64 and, with {@code
 * schemas.enable=true} (its default), wraps the value in a schema envelope, so its record is a
 * third larger than the payload and more.
 *
 * <p>Not known, so estimated from the unconverted data: converters the worker sets as its default
 * (not in the connector config; the task cannot read worker settings), and other converters (e.g. a
 * schema registry's, whose conversion registers schemas). A record the producer or broker then
 * rejects fails its task and is dead-lettered after {@code retry.max.attempts} failures ({@link
 * OutboxSourceTask}).
 */
final class ConvertedSize {
  private static final Logger log = LoggerFactory.getLogger(ConvertedSize.class);

  static final String KEY_CONVERTER_CONFIG = "key.converter";
  static final String VALUE_CONVERTER_CONFIG = "value.converter";
  private static final String KAFKA_CONVERTERS = "org.apache.kafka.connect.";

  private final Converter key; // null: not known
  private final Converter value; // null: not known

  // visible for testing
  ConvertedSize(Converter key, Converter value) {
    this.key = key;
    this.value = value;
  }

  /** From the connector's configuration (all its keys, as Connect passes them to the task). */
  static ConvertedSize from(Map<String, ?> connectorConfig) {
    return new ConvertedSize(
        converter(connectorConfig, KEY_CONVERTER_CONFIG, true),
        converter(connectorConfig, VALUE_CONVERTER_CONFIG, false));
  }

  static ConvertedSize unknown() {
    return new ConvertedSize(null, null);
  }

  private static Converter converter(Map<String, ?> config, String name, boolean isKey) {
    // by its class name or by Connect's alias of it ("JsonConverter", "Json")
    String className = KafkaPlugins.className(config.get(name));
    if (className == null || !className.startsWith(KAFKA_CONVERTERS)) {
      return null;
    }
    String prefix = name + ".";
    Map<String, Object> settings = new HashMap<>();
    config.forEach(
        (k, v) -> {
          if (k.startsWith(prefix)) {
            settings.put(k.substring(prefix.length()), v);
          }
        });
    try {
      Class<?> type = Class.forName(className, true, ConvertedSize.class.getClassLoader());
      Converter converter = (Converter) type.getDeclaredConstructor().newInstance();
      converter.configure(settings, isKey);
      return converter;
    } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
      log.info(
          "{}={} cannot be loaded by the connector to measure records; their size is estimated"
              + " before conversion",
          name,
          className,
          e);
      return null;
    }
  }

  /** The converted key's length, or {@code estimate} when the key converter is not known. */
  long keyBytes(String topic, Schema schema, Object data, long estimate) {
    return measure(key, topic, schema, data, estimate);
  }

  /** The converted value's length, or {@code estimate} when the value converter is not known. */
  long valueBytes(String topic, Schema schema, Object data, long estimate) {
    return measure(value, topic, schema, data, estimate);
  }

  boolean known() {
    return key != null || value != null;
  }

  private static long measure(
      Converter converter, String topic, Schema schema, Object data, long estimate) {
    if (converter == null) {
      return estimate;
    }
    byte[] bytes = converter.fromConnectData(topic, schema, data);
    return bytes == null ? 0 : bytes.length;
  }
}
