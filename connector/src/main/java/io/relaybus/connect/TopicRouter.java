package io.relaybus.connect;

import io.relaybus.store.Validation;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Maps a delivery's handler (and event type) to its Kafka topic: an explicit {@code topic.map}
 * entry first, else {@code topic.template} with {@code ${handler}} and {@code ${type}} replaced.
 *
 * <p>Worked example: template {@code outbox.${handler}}, map {@code billing:billing-v2}: handler
 * {@code shipping} goes to {@code outbox.shipping}, handler {@code billing} to {@code billing-v2}.
 * With template {@code ${type}} and type {@code order placed} the result is not a legal topic name,
 * so {@link #topicFor} reports it and the delivery is dead-lettered.
 */
final class TopicRouter {
  /** Kafka's own rule for topic names (org.apache.kafka.common.internals.Topic). */
  private static final Pattern TOPIC = Pattern.compile("[a-zA-Z0-9._-]+");

  private static final int MAX_TOPIC_LENGTH = 249;
  private static final Pattern PLACEHOLDER = Pattern.compile("\\$\\{([^}]*)}");
  private static final List<String> PLACEHOLDERS = List.of("handler", "type");

  private final String template;
  private final Map<String, String> explicit;

  TopicRouter(String template, Map<String, String> explicit) {
    literalText(template);
    this.template = template;
    this.explicit = Collections.unmodifiableMap(new LinkedHashMap<>(explicit));
  }

  /**
   * The topic of a delivery.
   *
   * @throws UndeliverableException when the handler has no topic or the result is no legal topic
   */
  String topicFor(String handler, String type) throws UndeliverableException {
    String topic = explicit.get(handler);
    if (topic != null) {
      return topic;
    }
    if (template.isEmpty()) {
      throw new UndeliverableException(
          "no topic for handler '%s': it is not in topic.map and topic.template is empty"
              .formatted(handler));
    }
    topic = template.replace("${handler}", handler).replace("${type}", type);
    try {
      return checkTopic(topic);
    } catch (IllegalArgumentException e) {
      throw new UndeliverableException(
          "topic.template '%s' gives no legal topic for handler '%s', type '%s': %s"
              .formatted(template, handler, type, e.getMessage()));
    }
  }

  /**
   * Checks a template: only {@code ${handler}} and {@code ${type}} placeholders, literal parts of
   * topic characters, and some handler and type give a legal topic: not {@code .} or {@code ..},
   * and its shortest topic (each placeholder one character) at most 249 characters. Empty is
   * allowed (only {@code topic.map} routes).
   */
  static void parseTemplate(String template) {
    String text = literalText(template);
    int placeholders = PLACEHOLDER.matcher(template).results().mapToInt(m -> 1).sum();
    if (placeholders == 0 && (text.equals(".") || text.equals(".."))) {
      throw new IllegalArgumentException(
          "Kafka refuses the topic names '.' and '..', so every delivery routed by it would be"
              + " dead-lettered");
    }
    int shortest = text.length() + placeholders;
    if (shortest > MAX_TOPIC_LENGTH) {
      throw new IllegalArgumentException(
          ("its shortest topic (each placeholder one character) is %d characters, more than Kafka's"
                  + " %d, so every delivery routed by it would be dead-lettered")
              .formatted(shortest, MAX_TOPIC_LENGTH));
    }
  }

  /** The template's text outside its placeholders, after checking placeholders and characters. */
  private static String literalText(String template) {
    if (template == null) {
      throw new IllegalArgumentException(
          "must not be null; use an empty value to route by topic.map only");
    }
    Matcher m = PLACEHOLDER.matcher(template);
    StringBuilder literal = new StringBuilder();
    int end = 0;
    while (m.find()) {
      if (!PLACEHOLDERS.contains(m.group(1))) {
        throw new IllegalArgumentException(
            "unknown placeholder ${%s}; the allowed ones are ${handler} and ${type}"
                .formatted(m.group(1)));
      }
      literal.append(template, end, m.start());
      end = m.end();
    }
    literal.append(template.substring(end));
    String text = literal.toString();
    if (!text.isEmpty() && !TOPIC.matcher(text).matches()) {
      throw new IllegalArgumentException(
          "outside its placeholders a topic template may hold only [a-zA-Z0-9._-], but holds '%s'"
              .formatted(text));
    }
    return text;
  }

  /** Parses {@code handler:topic} entries; handlers distinct, both sides legal names. */
  static Map<String, String> parseMap(List<String> entries) {
    Map<String, String> map = new LinkedHashMap<>();
    for (String raw : entries == null ? List.<String>of() : entries) {
      String entry = raw.strip();
      if (entry.isEmpty()) {
        continue;
      }
      int colon = entry.indexOf(':');
      if (colon <= 0 || colon == entry.length() - 1) {
        throw new IllegalArgumentException(
            "entry '%s' must look like handler:topic".formatted(entry));
      }
      String handler = entry.substring(0, colon).strip();
      String topic = entry.substring(colon + 1).strip();
      try {
        Validation.handler(handler);
        checkTopic(topic);
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("entry '%s': %s".formatted(entry, e.getMessage()));
      }
      if (map.put(handler, topic) != null) {
        throw new IllegalArgumentException(
            "handler '%s' is listed twice; give each handler one topic".formatted(handler));
      }
    }
    return map;
  }

  private static String checkTopic(String topic) {
    if (topic.isEmpty() || topic.equals(".") || topic.equals("..")) {
      throw new IllegalArgumentException("topic '" + topic + "' is not a legal topic name");
    }
    if (topic.length() > MAX_TOPIC_LENGTH) {
      throw new IllegalArgumentException(
          "topic '%s...' is %d characters long, more than Kafka's %d"
              .formatted(topic.substring(0, 40), topic.length(), MAX_TOPIC_LENGTH));
    }
    if (!TOPIC.matcher(topic).matches()) {
      throw new IllegalArgumentException("topic '" + topic + "' may hold only [a-zA-Z0-9._-]");
    }
    return topic;
  }
}
