package io.relaybus.connect;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigDef.Importance;
import org.apache.kafka.common.config.ConfigDef.Type;
import org.apache.kafka.common.config.ConfigDef.Width;

/**
 * One configuration key with everything about it, declared in one expression (as Debezium's {@code
 * Field} does): callers read its value through the config's typed accessors and name it with {@link
 * #name()}, and {@link #configDef} builds the {@link ConfigDef} entries from them. The order of a
 * key within its group is not declared here but taken from the one list of keys ({@link
 * OutboxSourceConfig#FIELDS}), so a new key is placed by where it is listed, without renumbering.
 *
 * @param defaultValue {@link ConfigDef#NO_DEFAULT_VALUE} for a required key; {@code null} for an
 *     optional key without a value
 * @param validator {@code null} for none
 * @param group {@code null} for a key users never set (then it is left out of the groups)
 */
record ConfigField(
    String name,
    Type type,
    Object defaultValue,
    ConfigDef.Validator validator,
    Importance importance,
    String documentation,
    String group,
    Width width,
    String displayName) {

  ConfigField {
    Objects.requireNonNull(name, "name");
    Objects.requireNonNull(type, name);
    Objects.requireNonNull(importance, name);
    Objects.requireNonNull(width, name);
  }

  /** A required key of {@code type}, of medium importance, in no group, displayed as its name. */
  static ConfigField of(String name, Type type) {
    return new ConfigField(
        name,
        type,
        ConfigDef.NO_DEFAULT_VALUE,
        null,
        Importance.MEDIUM,
        "",
        null,
        Width.NONE,
        name);
  }

  ConfigField withDefault(Object value) {
    return new ConfigField(
        name, type, value, validator, importance, documentation, group, width, displayName);
  }

  ConfigField withValidator(ConfigDef.Validator value) {
    return new ConfigField(
        name, type, defaultValue, value, importance, documentation, group, width, displayName);
  }

  ConfigField withImportance(Importance value) {
    return new ConfigField(
        name, type, defaultValue, validator, value, documentation, group, width, displayName);
  }

  ConfigField withDoc(String value) {
    return new ConfigField(
        name, type, defaultValue, validator, importance, value, group, width, displayName);
  }

  /** Shown in {@code group} under {@code displayName}, in an input of {@code width}. */
  ConfigField withDisplay(String group, String displayName, Width width) {
    return new ConfigField(
        name, type, defaultValue, validator, importance, documentation, group, width, displayName);
  }

  /** Adds this key to {@code def}: Kafka's twelve-argument define, in one place. */
  private void define(ConfigDef def, int orderInGroup) {
    def.define(
        name,
        type,
        defaultValue,
        validator,
        importance,
        documentation,
        group,
        orderInGroup,
        width,
        displayName,
        List.of(),
        null);
  }

  /**
   * A {@link ConfigDef} (or {@code base} extended) with {@code fields} in the order given, each
   * numbered within its group in that order.
   */
  static ConfigDef configDef(ConfigDef base, List<ConfigField> fields) {
    ConfigDef def = base == null ? new ConfigDef() : new ConfigDef(base);
    Map<String, Integer> orders = new HashMap<>();
    for (ConfigField field : fields) {
      int order = field.group == null ? -1 : orders.merge(field.group, 1, Integer::sum);
      field.define(def, order);
    }
    return def;
  }

  @Override
  public String toString() {
    return name;
  }
}
