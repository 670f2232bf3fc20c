package io.relaybus.store.postgres;

import io.relaybus.store.Validation;

/**
 * The qualified names of the store's tables for one schema and table prefix. Both are validated as
 * SQL identifiers ({@code [a-z_][a-z0-9_]*}) before they get here, so substituting them into SQL
 * text is safe; nothing else is ever substituted (values are bound parameters).
 */
record PostgresTables(String schema, String prefix) {
  PostgresTables {
    Validation.sqlIdentifier("schema", schema, Validation.MAX_SCHEMA_LENGTH, false);
    Validation.notReservedWord("schema", schema);
    Validation.sqlIdentifier("table prefix", prefix, Validation.MAX_TABLE_PREFIX_LENGTH, true);
  }

  /** Longest channel name PostgreSQL keeps (NAMEDATALEN - 1 bytes); pg_notify refuses longer. */
  static final int MAX_CHANNEL_LENGTH = 63;

  /**
   * Expands the placeholders {@code {schema}}, {@code {events}}, {@code {deliveries}}, {@code
   * {lanes}}, {@code {holders}}, {@code {keys}}, {@code {completed}}, {@code {version}}, {@code
   * {lane_fn}}, {@code {log}}, {@code {log_seq}}, {@code {log_last_id}} (the last log id taken, 0
   * before the first), {@code {cursors}}, {@code {incarnation}}, {@code {lock_keys}}, the two
   * advisory lock classes, {@code {notify_channel}} (the bare channel name, for a string literal)
   * and {@code {p}} (the bare prefix, for index names).
   */
  String sql(String template) {
    return template
        .replace("{notify_channel}", notifyChannel())
        .replace("{schema}", schema)
        .replace("{events}", qualified("events"))
        .replace("{deliveries}", qualified("deliveries"))
        .replace("{lanes}", qualified("lanes"))
        .replace("{holders}", qualified("lease_holders"))
        .replace("{keys}", qualified("key_sequences"))
        .replace("{completed}", qualified("completed_deliveries"))
        .replace("{version}", qualified("schema_version"))
        .replace("{lane_fn}", qualified("lane"))
        // Read under the sequence page's lock: a SELECT from the sequence can see, mid-nextval,
        // the value logged 32 fetches ahead (PostgresMigrations, version 9).
        .replace(
            "{log_last_id}",
            "coalesce(pg_sequence_last_value('" + qualified("log_id_seq") + "'::regclass), 0)")
        .replace("{log_seq}", qualified("log_id_seq"))
        .replace("{log}", qualified("log"))
        .replace("{cursors}", qualified("lane_cursors"))
        .replace("{incarnation}", qualified("incarnation"))
        .replace("{lock_keys}", qualified("lock_keys"))
        .replace("{key_lock_class}", String.valueOf(keyLockClass()))
        .replace("{lane_lock_class}", String.valueOf(laneLockClass()))
        .replace("{p}", prefix);
  }

  private String qualified(String table) {
    return schema + "." + prefix + table;
  }

  /**
   * The LISTEN/NOTIFY channel that says "deliveries were inserted" for this schema and prefix:
   * {@code <schema>.<prefix>outbox_work}, e.g. {@code public.relaybus_outbox_work}. Channels are
   * identifiers of at most 63 bytes (a longer LISTEN name is cut, pg_notify refuses it), so a
   * longer name keeps its first 46 characters and appends {@code _} and 16 hex digits of {@link
   * #advisoryLockKey()}. Schema and prefix are {@code [a-z0-9_]}, so the name needs no escaping in
   * a string literal, and is quoted as an identifier in LISTEN (its dot and any case kept as is).
   */
  String notifyChannel() {
    String full = schema + "." + prefix + "outbox_work";
    if (full.length() <= MAX_CHANNEL_LENGTH) {
      return full;
    }
    String hash = String.format("%016x", advisoryLockKey());
    return full.substring(0, MAX_CHANNEL_LENGTH - hash.length() - 1) + "_" + hash;
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

  /**
   * The advisory-lock class (first int4 key) of the per-key publish locks of this outbox; the two
   * classes differ, and the two-int4 lock space is apart from setup()'s bigint lock.
   */
  int keyLockClass() {
    return (int) advisoryLockKey();
  }

  /** The advisory-lock class of the per-lane publish locks (see {@code {lock_keys}}). */
  int laneLockClass() {
    int lane = (int) (advisoryLockKey() >>> 32);
    return lane == keyLockClass() ? lane ^ 1 : lane;
  }
}
