package io.relaybus.connect;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.kafka.common.config.ConfigValue;

/**
 * Rejects {@code producer.override.*} settings that undo what Connect sets for a source task's
 * producer (Worker#baseProducerConfigs in Kafka 4.3: {@code acks=all}, {@code
 * max.in.flight.requests.per.connection=1}, {@code delivery.timeout.ms=2147483647}, and the
 * producer's own {@code retries=2147483647}), where the change could lose an acknowledged record or
 * let a later batch of a key land before an earlier one that is retried or dropped:
 *
 * <ul>
 *   <li>{@code acks} other than {@code all}/{@code -1}: an acknowledged record (whose delivery is
 *       then deleted) can be lost with a broker;
 *   <li>{@code max.in.flight.requests.per.connection} above 1 without idempotence ({@code
 *       enable.idempotence=true}, or exactly-once, where Connect forces it), or above 5: a retried
 *       batch lands after a later one;
 *   <li>{@code retries} or {@code delivery.timeout.ms} below 2147483647: a batch can fail for good
 *       while later batches of the same key succeed.
 * </ul>
 *
 * Each finding is reported against the override's own key, naming the key, the value and the rule
 * (Connect counts errors on keys the connector does not define). Values that are not numbers are
 * left to Connect's own validation of the overrides. Worker-level {@code producer.*} settings are
 * not visible to a connector and are not checked.
 */
final class ProducerOverrideChecks {
  static final String PREFIX = "producer.override.";
  static final String ACKS = PREFIX + "acks";
  static final String MAX_IN_FLIGHT = PREFIX + "max.in.flight.requests.per.connection";
  static final String IDEMPOTENCE = PREFIX + "enable.idempotence";
  static final String RETRIES = PREFIX + "retries";
  static final String DELIVERY_TIMEOUT = PREFIX + "delivery.timeout.ms";

  /** What Connect sets for {@code retries} (the producer's default) and delivery.timeout.ms. */
  static final long UNBOUNDED = Integer.MAX_VALUE;

  /** Kafka's limit on in-flight requests for an idempotent producer. */
  static final int MAX_IDEMPOTENT_IN_FLIGHT = 5;

  private ProducerOverrideChecks() {}

  static void check(Map<String, String> props, Map<String, ConfigValue> values) {
    String acks = value(props, ACKS);
    if (acks != null && !acks.equalsIgnoreCase("all") && !acks.equals("-1")) {
      error(
          values,
          ACKS,
          acks,
          "must be all (or -1), as Connect sets it for source tasks: with fewer acknowledgements a"
              + " record Kafka acknowledged, whose delivery is then deleted, can be lost with a"
              + " broker");
    }
    Long inFlight = number(props, MAX_IN_FLIGHT);
    if (inFlight != null && inFlight > 1) {
      boolean idempotent =
          "true".equalsIgnoreCase(value(props, IDEMPOTENCE))
              || "required"
                  .equals(
                      String.valueOf(props.get(OutboxSourceTaskConfig.EXACTLY_ONCE_SUPPORT_CONFIG))
                          .strip()
                          .toLowerCase(Locale.ROOT));
      if (!idempotent) {
        error(
            values,
            MAX_IN_FLIGHT,
            inFlight.toString(),
            "must be 1 unless "
                + IDEMPOTENCE
                + "=true or exactly.once.support=required: with several requests in flight and no"
                + " idempotence, a retried batch lands after a later batch of the same key");
      } else if (inFlight > MAX_IDEMPOTENT_IN_FLIGHT) {
        error(
            values,
            MAX_IN_FLIGHT,
            inFlight.toString(),
            "must be at most "
                + MAX_IDEMPOTENT_IN_FLIGHT
                + " for an idempotent producer, which keeps the order of at most that many");
      }
    }
    unbounded(props, values, RETRIES);
    unbounded(props, values, DELIVERY_TIMEOUT);
  }

  private static void unbounded(
      Map<String, String> props, Map<String, ConfigValue> values, String key) {
    Long value = number(props, key);
    if (value != null && value < UNBOUNDED) {
      error(
          values,
          key,
          value.toString(),
          "must be "
              + UNBOUNDED
              + " (Connect's setting for source tasks) or unset: a batch that runs out of it fails"
              + " for good while later batches of the same key succeed, breaking per-key order");
    }
  }

  private static String value(Map<String, String> props, String key) {
    String value = props.get(key);
    return value == null ? null : value.strip();
  }

  private static Long number(Map<String, String> props, String key) {
    String value = value(props, key);
    if (value == null) {
      return null;
    }
    try {
      return Long.parseLong(value);
    } catch (NumberFormatException e) {
      return null; // not ours to report: Connect validates producer overrides itself
    }
  }

  /** An error on {@code key}, which the connector's own definition may not have. */
  static void error(Map<String, ConfigValue> values, String key, String value, String rule) {
    values
        .computeIfAbsent(key, k -> new ConfigValue(k, value, List.of(), new ArrayList<>()))
        .addErrorMessage("Invalid value %s for configuration %s: %s".formatted(value, key, rule));
  }
}
