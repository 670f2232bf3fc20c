package io.relaybus.connect;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigValue;

/**
 * What the connector must know of Connect's transform chain ({@code transforms} and each alias's
 * {@code transforms.<alias>.type}): which transforms may drop a record.
 *
 * <p>A record a transform drops never reaches Kafka, and Connect tells the task only after it
 * committed the offsets of the records sent with it. relaybus then retries the delivery and
 * dead-letters it once its attempts are spent, so a filter never filters: {@code validate()}
 * refuses Kafka's {@code Filter}. Under {@code exactly.once.support=required} the offset a lane's
 * last record of a {@code poll()} carries names the dropped delivery as sent, so a task started
 * before the lane commits another offset would delete it unsent; with a transform that may drop a
 * record in the chain the task does not trust its offsets ({@link
 * OutboxSourceTaskConfig#resumeFromOffsets()}): after a restart, what was in flight goes again.
 * Kafka's own transforms other than {@code Filter} keep every record; any other class may drop one.
 * Kafka's transforms are recognized also by the aliases Connect resolves ({@link KafkaPlugins}).
 */
final class TransformChecks {
  static final String TRANSFORMS = "transforms";
  static final String KAFKA_TRANSFORMS = "org.apache.kafka.connect.transforms.";
  static final String FILTER = KAFKA_TRANSFORMS + "Filter";

  private TransformChecks() {}

  /** The transforms of the chain that may drop a record, each as {@code alias (class)}. */
  static List<String> mayDrop(Map<String, ?> props) {
    List<String> dropping = new ArrayList<>();
    for (String alias : aliases(props)) {
      String type = type(props, alias);
      String className = KafkaPlugins.className(type); // Connect's alias "Filter" too
      if (type != null && (className.equals(FILTER) || !className.startsWith(KAFKA_TRANSFORMS))) {
        dropping.add(alias + " (" + type + ")");
      }
    }
    return dropping;
  }

  /**
   * Refuses Kafka's {@code Filter}, named by its class or by Connect's alias {@code Filter}, on the
   * alias's {@code type} key.
   */
  static void check(Map<String, String> props, Map<String, ConfigValue> values) {
    for (String alias : aliases(props)) {
      String type = type(props, alias);
      if (FILTER.equals(KafkaPlugins.className(type))) {
        ProducerOverrideChecks.error(
            values,
            typeKey(alias),
            type,
            "relaybus does not count a record a transform dropped as delivered: it retries the"
                + " delivery and dead-letters it once retry.max.attempts are spent, so nothing is"
                + " filtered; route handlers with topic.map, or do not publish to them");
      }
    }
  }

  private static List<String> aliases(Map<String, ?> props) {
    Object chain = props.get(TRANSFORMS);
    List<String> aliases = new ArrayList<>();
    if (chain != null) {
      for (String alias : chain.toString().split(",")) {
        if (!alias.isBlank()) {
          aliases.add(alias.strip());
        }
      }
    }
    return aliases;
  }

  private static String type(Map<String, ?> props, String alias) {
    Object type = props.get(typeKey(alias));
    return type == null ? null : type.toString().strip();
  }

  private static String typeKey(String alias) {
    return TRANSFORMS + "." + alias + ".type";
  }
}
