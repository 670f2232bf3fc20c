package io.relaybus.store.postgres;

import io.relaybus.store.Validation;

/**
 * The qualified names of the store's tables for one schema and table prefix. Both are validated as
 * SQL identifiers ({@code [a-z_][a-z0-9_]*}) before they get here, so substituting them into SQL
 * text is safe; nothing else is ever substituted (values are bound parameters).
 */
record Tables(String schema, String prefix) {
  Tables {
    Validation.sqlIdentifier("schema", schema, Validation.MAX_SCHEMA_LENGTH, false);
    Validation.sqlIdentifier("table prefix", prefix, Validation.MAX_TABLE_PREFIX_LENGTH, true);
  }

  /**
   * Expands the placeholders {@code {schema}}, {@code {events}}, {@code {deliveries}}, {@code
   * {lanes}}, {@code {keys}}, {@code {completed}}, {@code {version}}, {@code {lane_fn}} and {@code
   * {p}} (the bare prefix, for index names).
   */
  String sql(String template) {
    return template
        .replace("{schema}", schema)
        .replace("{events}", qualified("events"))
        .replace("{deliveries}", qualified("deliveries"))
        .replace("{lanes}", qualified("lanes"))
        .replace("{keys}", qualified("key_sequences"))
        .replace("{completed}", qualified("completed_deliveries"))
        .replace("{version}", qualified("schema_version"))
        .replace("{lane_fn}", qualified("lane"))
        .replace("{p}", prefix);
  }

  private String qualified(String table) {
    return schema + "." + prefix + table;
  }

  /** A stable advisory-lock key for this schema and prefix, so setups of other outboxes run on. */
  long advisoryLockKey() {
    long hash = 0xcbf29ce484222325L;
    for (byte b :
        ("relaybus:" + schema + "." + prefix).getBytes(java.nio.charset.StandardCharsets.UTF_8)) {
      hash ^= b & 0xff;
      hash *= 0x100000001b3L;
    }
    return hash;
  }
}
