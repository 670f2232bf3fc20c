package io.relaybus.store.postgres;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.PublishResult;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Publishes events in the caller's transaction.
 *
 * <p>The common case, events never seen before, is one statement for the whole batch: insert the
 * events, take the next sequence of each key, insert the deliveries. Ids that exist already take
 * the rare path: lock the event, add deliveries only for handlers it never had.
 */
final class PostgresPublisher {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String insertNew;
  private final String insertOne;
  private final String lockExisting;
  private final String addHandlers;
  private final String nextSequence;
  private final String insertDeliveries;
  private final boolean strictRepublish;

  PostgresPublisher(Tables tables, boolean strictRepublish) {
    this.strictRepublish = strictRepublish;
    // The key rows are locked in key order (no deadlock between batches) and held until the
    // caller commits: a second publisher of the same key waits, so sequence order = commit order.
    insertNew =
        tables.sql(
            """
            WITH input AS (
              SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::bytea[], ?::text[], ?::text[], ?::text[], ?::smallint[])
                WITH ORDINALITY AS i(id, type, key, payload, content_type, headers, handlers, lane, ord)
            ), ev AS (
              INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
              SELECT id, type, key, payload, content_type, headers::json,
                     ARRAY(SELECT jsonb_array_elements_text(i.handlers::jsonb))
              FROM input i ORDER BY id
              ON CONFLICT (id) DO NOTHING
              RETURNING id
            ), fresh AS (
              SELECT i.* FROM input i JOIN ev USING (id)
            ), counted AS (
              SELECT key, count(*) AS n FROM fresh WHERE key IS NOT NULL GROUP BY key
            ), seq AS (
              INSERT INTO {keys} AS k (key, sequence)
              SELECT key, n FROM counted ORDER BY key
              ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + excluded.sequence, updated_at = now()
              RETURNING key, sequence
            ), numbered AS (
              SELECT f.id, f.key, f.lane, f.handlers,
                     s.sequence - count(*) OVER (PARTITION BY f.key)
                       + row_number() OVER (PARTITION BY f.key ORDER BY f.ord) AS seq
              FROM fresh f LEFT JOIN seq s ON s.key = f.key
            ), inserted AS (
              INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
              SELECT n.id, h.handler, n.lane, n.key, CASE WHEN n.key IS NULL THEN NULL ELSE n.seq END
              FROM numbered n CROSS JOIN LATERAL jsonb_array_elements_text(n.handlers::jsonb) AS h(handler)
              RETURNING 1
            )
            SELECT id FROM ev""");
    // The same for the single event a typical transaction publishes, without arrays, JSON
    // unpacking or window functions: the cheapest plan for the most common call.
    insertOne =
        tables.sql(
            """
            WITH ev AS (
              INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
              VALUES (?, ?, ?, ?, ?, ?::json, ?::text[])
              ON CONFLICT (id) DO NOTHING
              RETURNING id
            ), seq AS (
              INSERT INTO {keys} AS k (key, sequence)
              SELECT ?::text, 1 FROM ev WHERE ?::text IS NOT NULL
              ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + 1, updated_at = now()
              RETURNING sequence
            ), inserted AS (
              INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
              SELECT ev.id, h, ?, ?, (SELECT sequence FROM seq)
              FROM ev CROSS JOIN unnest(?::text[]) AS h
              RETURNING 1
            )
            SELECT id FROM ev""");
    // Compared here, not in Java: a republish does not read the stored payload back. The row lock
    // is what makes a purge that races this republish keep the event (see PostgresAdmin.purge).
    lockExisting =
        tables.sql(
            """
            SELECT key, handlers, type IS DISTINCT FROM ?, key IS DISTINCT FROM ?,
                   payload IS DISTINCT FROM ?, content_type IS DISTINCT FROM ?,
                   headers::jsonb IS DISTINCT FROM ?::jsonb
            FROM {events} WHERE id = ? FOR UPDATE""");
    addHandlers = tables.sql("UPDATE {events} SET handlers = handlers || ?::text[] WHERE id = ?");
    nextSequence =
        tables.sql(
            """
            INSERT INTO {keys} AS k (key, sequence) VALUES (?, 1)
            ON CONFLICT (key) DO UPDATE SET sequence = k.sequence + 1, updated_at = now()
            RETURNING sequence""");
    insertDeliveries =
        tables.sql(
            """
            INSERT INTO {deliveries} (event_id, handler, lane, key, sequence)
            SELECT ?, h, ?, ?, ? FROM unnest(?::text[]) AS h
            ON CONFLICT (event_id, handler) DO NOTHING""");
  }

  List<PublishResult> publishAll(Connection connection, List<OutboxEvent> events)
      throws SQLException {
    if (connection.getAutoCommit()) {
      throw new IllegalArgumentException(
          "transaction must be a connection in a transaction (autoCommit=false): the outbox is"
              + " written in the caller's transaction and never commits for it");
    }
    Map<String, PublishResult> results = new HashMap<>();
    List<OutboxEvent> remaining = events;
    // An id can vanish between the insert (conflict) and the lock (purged by retention): it is
    // then new again, so go round once more. Bounded: a purge needs the event to be old.
    for (int round = 0; round < 3 && !remaining.isEmpty(); round++) {
      Set<String> inserted = insertNew(connection, remaining);
      List<OutboxEvent> vanished = new ArrayList<>();
      for (OutboxEvent event : remaining) {
        if (inserted.contains(event.id())) {
          results.put(event.id(), new PublishResult(event.id(), true, event.handlers()));
        }
      }
      // Existing events: lock them all (id order) and check them before writing any, then take
      // their keys' sequences in key order, as the insert does.
      List<Existing> existing = new ArrayList<>();
      for (OutboxEvent event : sortedById(remaining)) {
        if (!inserted.contains(event.id())) {
          Existing found = lockExisting(connection, event);
          if (found == null) {
            vanished.add(event);
          } else {
            existing.add(found);
          }
        }
      }
      if (strictRepublish) {
        existing.forEach(found -> found.result(List.of()).checked(true));
      }
      existing.sort(
          Comparator.comparing(
                  (Existing found) -> found.key, Comparator.nullsFirst(Comparator.naturalOrder()))
              .thenComparing(found -> found.event.id()));
      for (Existing found : existing) {
        results.put(found.event.id(), addDeliveries(connection, found));
      }
      remaining = vanished;
    }
    if (!remaining.isEmpty()) {
      throw new IllegalStateException("events kept vanishing while published: " + remaining);
    }
    return events.stream().map(e -> results.get(e.id())).toList();
  }

  private Set<String> insertNew(Connection connection, List<OutboxEvent> events)
      throws SQLException {
    if (events.size() == 1) {
      return insertOne(connection, events.get(0));
    }
    int n = events.size();
    String[] ids = new String[n];
    String[] types = new String[n];
    String[] keys = new String[n];
    byte[][] payloads = new byte[n][];
    String[] contentTypes = new String[n];
    String[] headers = new String[n];
    String[] handlers = new String[n];
    Short[] lanes = new Short[n];
    for (int i = 0; i < n; i++) {
      OutboxEvent event = events.get(i);
      ids[i] = event.id();
      types[i] = event.type();
      keys[i] = event.key();
      payloads[i] = event.payload();
      contentTypes[i] = event.contentType();
      headers[i] = json(event.headers());
      handlers[i] = json(event.handlers());
      lanes[i] = (short) event.lane();
    }
    Set<String> inserted = new HashSet<>();
    try (PreparedStatement statement = connection.prepareStatement(insertNew)) {
      statement.setArray(1, connection.createArrayOf("text", ids));
      statement.setArray(2, connection.createArrayOf("text", types));
      statement.setArray(3, connection.createArrayOf("text", keys));
      statement.setArray(4, connection.createArrayOf("bytea", payloads));
      statement.setArray(5, connection.createArrayOf("text", contentTypes));
      statement.setArray(6, connection.createArrayOf("text", headers));
      statement.setArray(7, connection.createArrayOf("text", handlers));
      statement.setArray(8, connection.createArrayOf("int2", lanes));
      try (ResultSet rs = statement.executeQuery()) {
        while (rs.next()) {
          inserted.add(rs.getString(1));
        }
      }
    }
    return inserted;
  }

  private Set<String> insertOne(Connection connection, OutboxEvent event) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(insertOne)) {
      java.sql.Array handlers = connection.createArrayOf("text", event.handlers().toArray());
      statement.setString(1, event.id());
      statement.setString(2, event.type());
      statement.setString(3, event.key());
      statement.setBytes(4, event.payload());
      statement.setString(5, event.contentType());
      statement.setString(6, json(event.headers()));
      statement.setArray(7, handlers);
      statement.setString(8, event.key());
      statement.setString(9, event.key());
      statement.setShort(10, (short) event.lane());
      statement.setString(11, event.key());
      statement.setArray(12, handlers);
      try (ResultSet rs = statement.executeQuery()) {
        return rs.next() ? Set.of(rs.getString(1)) : Set.of();
      }
    }
  }

  /** An event that exists: what is stored of it, locked until the caller commits. */
  private record Existing(
      OutboxEvent event, String key, List<String> known, List<String> differingFields) {
    PublishResult result(List<String> added) {
      return new PublishResult(event.id(), false, added, differingFields);
    }
  }

  /** The rare path: locks the stored event; null if it no longer exists. */
  private Existing lockExisting(Connection connection, OutboxEvent event) throws SQLException {
    try (PreparedStatement lock = connection.prepareStatement(lockExisting)) {
      lock.setString(1, event.type());
      lock.setString(2, event.key());
      lock.setBytes(3, event.payload());
      lock.setString(4, event.contentType());
      lock.setString(5, json(event.headers()));
      lock.setString(6, event.id());
      try (ResultSet rs = lock.executeQuery()) {
        if (!rs.next()) {
          return null;
        }
        List<String> differing = new ArrayList<>();
        for (int i = 0; i < PublishResult.FIELDS.size(); i++) {
          if (rs.getBoolean(3 + i)) {
            differing.add(PublishResult.FIELDS.get(i));
          }
        }
        return new Existing(
            event, rs.getString(1), Arrays.asList((String[]) rs.getArray(2).getArray()), differing);
      }
    }
  }

  /** Adds deliveries for the handlers the locked event never had. */
  private PublishResult addDeliveries(Connection connection, Existing found) throws SQLException {
    OutboxEvent event = found.event;
    String key = found.key;
    List<String> added = event.handlers().stream().filter(h -> !found.known.contains(h)).toList();
    if (added.isEmpty()) {
      return found.result(List.of());
    }
    Array addedArray = connection.createArrayOf("text", added.toArray(String[]::new));
    try (PreparedStatement update = connection.prepareStatement(addHandlers)) {
      update.setArray(1, addedArray);
      update.setString(2, event.id());
      update.executeUpdate();
    }
    Long sequence = null;
    if (key != null) {
      try (PreparedStatement next = connection.prepareStatement(nextSequence)) {
        next.setString(1, key);
        try (ResultSet rs = next.executeQuery()) {
          rs.next();
          sequence = rs.getLong(1);
        }
      }
    }
    // The stored event wins: a republish adds routes, it does not rewrite what happened.
    try (PreparedStatement insert = connection.prepareStatement(insertDeliveries)) {
      insert.setString(1, event.id());
      insert.setShort(2, (short) Lanes.laneOf(key, event.id()));
      insert.setString(3, key);
      if (sequence == null) {
        insert.setNull(4, java.sql.Types.BIGINT);
      } else {
        insert.setLong(4, sequence);
      }
      insert.setArray(5, addedArray);
      insert.executeUpdate();
    }
    return found.result(added);
  }

  /** Existing events are locked in id order, like the insert, so batches do not deadlock. */
  private static List<OutboxEvent> sortedById(List<OutboxEvent> events) {
    List<OutboxEvent> sorted = new ArrayList<>(events);
    sorted.sort((a, b) -> a.id().compareTo(b.id()));
    return sorted;
  }

  static String json(Object value) {
    try {
      return JSON.writeValueAsString(value);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot happen: strings always serialize", e);
    }
  }

  /**
   * Reads the headers column. The store writes a JSON object of strings; a plain-SQL publisher may
   * write anything, so anything else is an {@link IllegalArgumentException} naming the problem.
   */
  static Map<String, String> headers(String json) {
    com.fasterxml.jackson.databind.JsonNode tree;
    try {
      tree = JSON.readTree(json);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("headers are not valid JSON: " + e.getOriginalMessage());
    }
    if (tree == null || !tree.isObject()) {
      throw new IllegalArgumentException(
          "headers must be a JSON object of string values, but were a JSON "
              + (tree == null
                  ? "nothing"
                  : tree.getNodeType().name().toLowerCase(java.util.Locale.ROOT)));
    }
    Map<String, String> headers = new LinkedHashMap<>();
    for (var field :
        (Iterable<Map.Entry<String, com.fasterxml.jackson.databind.JsonNode>>) tree::fields) {
      if (!field.getValue().isTextual()) {
        throw new IllegalArgumentException(
            "headers must be a JSON object of string values, but header '%s' is %s"
                .formatted(field.getKey(), field.getValue()));
      }
      headers.put(field.getKey(), field.getValue().asText());
    }
    return headers;
  }
}
