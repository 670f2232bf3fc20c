package io.relaybus.connect;

import java.util.List;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.types.Password;

/**
 * Renders {@link OutboxSourceConfig#CONFIG_DEF} as the Markdown table of
 * docs/connector-configuration.md, so the documentation is generated from the one list of keys
 * (ConfigDocsTest fails when the file is stale and says how to regenerate it).
 */
final class ConfigDocs {
  private ConfigDocs() {}

  static String markdown() {
    StringBuilder out = new StringBuilder();
    out.append("# Connector configuration\n\n")
        .append(
            "Generated from `OutboxSourceConfig.CONFIG_DEF` by `ConfigDocs`; do not edit by hand.\n")
        .append(
            "Connect's own keys (`name`, `connector.class`, `tasks.max`, converters, `errors.*`,\n")
        .append(
            "`exactly.once.support`, `topic.creation.*`) work as usual. `tasks.max` splits the 256\n")
        .append(
            "lanes of the outbox into contiguous ranges, one per task, so at most 256 tasks are useful.\n");
    String group = null;
    List<ConfigDef.ConfigKey> keys =
        OutboxSourceConfig.CONFIG_DEF.configKeys().values().stream().toList();
    for (ConfigDef.ConfigKey key : keys) {
      if (!key.group.equals(group)) {
        group = key.group;
        out.append("\n## ")
            .append(group)
            .append("\n\n")
            .append("| key | type | default | valid values | importance | description |\n")
            .append("|---|---|---|---|---|---|\n");
      }
      out.append("| `")
          .append(key.name)
          .append("` | ")
          .append(key.type.name().toLowerCase(java.util.Locale.ROOT))
          .append(" | ")
          .append(defaultValue(key))
          .append(" | ")
          .append(key.validator == null ? "" : cell(key.validator.toString()))
          .append(" | ")
          .append(key.importance.name().toLowerCase(java.util.Locale.ROOT))
          .append(" | ")
          .append(cell(key.documentation))
          .append(" |\n");
    }
    return out.toString();
  }

  private static String defaultValue(ConfigDef.ConfigKey key) {
    if (!key.hasDefault()) {
      return "(required)";
    }
    Object value = key.defaultValue;
    if (value == null || value instanceof Password) {
      return "";
    }
    if (value instanceof List<?> list) {
      value = String.join(",", list.stream().map(String::valueOf).toList());
    }
    String text = String.valueOf(value);
    return text.isEmpty() ? "\"\"" : "`" + text + "`";
  }

  private static String cell(String text) {
    return text.replace("|", "\\|").replace("\n", " ");
  }
}
