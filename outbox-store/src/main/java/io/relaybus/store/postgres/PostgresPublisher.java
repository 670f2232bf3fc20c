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
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Publishes events in the caller's transaction.
 *
 * <p>The common case, events never seen before, is one statement for the whole batch: lock the
 * keys, insert the events, append them to the log. Ids that exist already take the rare path: lock
 * the event, record the handlers it never had, and append the batch's log rows in one more
 * statement, in the batch's order (new events and added handlers alike), so that a key's log ids
 * follow the order of the batch.
 */
final class PostgresPublisher {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String insertNew;
  private final String insertOne;
  private final String lockExisting;
  private final String addHandlers;
  private final String appendToLog;
  private final boolean strictRepublish;

  PostgresPublisher(PostgresTables tables, boolean strictRepublish) {
    this.strictRepublish = strictRepublish;
    // Storage v2: the event row (idempotency, the handlers record, the payload) and one log row,
    // whose id is taken after the keys' locks (PostgresMigrations.LOG_STORAGE): a second publisher
    // of a key waits until the first commits, so log order is commit order per key. The xid is
    // taken before the id, which the claim's snapshot windows rely on (PostgresLog). The log row
    // carries where the event row was written (its ctid, version 10): the claim fetches the event
    // from there, and by its id when that tuple is no longer this event (see PostgresLog.PAGE).
    // An event's handlers travel as one string, separated by spaces, which no handler name holds
    // (Validation.handler): cheaper per row than unpacking a JSON array.
    insertNew =
        tables.sql(
            """
            WITH input AS (
              SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::bytea[], ?::text[], ?::text[], ?::text[], ?::smallint[])
                WITH ORDINALITY AS i(id, type, key, payload, content_type, headers, handlers, lane, ord)
            ), locked AS MATERIALIZED (
              SELECT {lock_keys}(array_agg(lane), array_agg(key)) AS l, pg_current_xact_id() AS xid
              FROM input
            ), ev AS (
              INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
              SELECT id, type, key, payload, content_type, headers::json,
                     string_to_array(i.handlers, ' ')
              FROM input i CROSS JOIN locked ORDER BY id
              ON CONFLICT (id) DO NOTHING
              RETURNING id, handlers, ctid
            ), logged AS (
              INSERT INTO {log} (id, xid, lane, event_id, handlers, key, event_tid)
              SELECT nextval('{log_seq}'), x.xid, x.lane, x.id, x.handlers, x.key, x.ctid
              FROM (SELECT i.lane, i.id, i.key, ev.handlers, ev.ctid, l.xid
                    FROM input i JOIN ev ON ev.id = i.id CROSS JOIN locked l
                    WHERE (SELECT count(*) FROM ev) = (SELECT count(*) FROM input)
                    ORDER BY i.ord OFFSET 0) x
            )
            SELECT id, ctid::text FROM ev""");
    // The same for the single event a typical transaction publishes, without arrays or JSON
    // unpacking: the cheapest plan for the most common call. Its locks are {lock_keys}'s for one
    // key (version 11 on: the lane shared, then the key; none for an unkeyed event), taken here
    // without the function call, a quarter of this statement's server time: the key's lock is taken
    // in the projection of a row of lane_locked, so always after the lane's.
    insertOne =
        tables.sql(
            """
            WITH lane_locked AS MATERIALIZED (
              SELECT p.key, CASE WHEN p.key IS NOT NULL
                                 THEN pg_advisory_xact_lock_shared({lane_lock_class}, p.lane) END AS l
              FROM (SELECT ?::smallint AS lane, ?::text AS key) p
            ), locked AS MATERIALIZED (
              SELECT CASE WHEN key IS NOT NULL
                          THEN pg_advisory_xact_lock({key_lock_class}, hashtext(key)) END AS l,
                     pg_current_xact_id() AS xid
              FROM lane_locked
            ), ev AS (
              INSERT INTO {events} (id, type, key, payload, content_type, headers, handlers)
              SELECT ?, ?, ?, ?, ?, ?::json, ?::text[] FROM locked
              ON CONFLICT (id) DO NOTHING
              RETURNING id, handlers, ctid
            ), logged AS (
              INSERT INTO {log} (id, xid, lane, event_id, handlers, key, event_tid)
              SELECT nextval('{log_seq}'), locked.xid, ?, ev.id, ev.handlers, ?, ev.ctid
              FROM ev CROSS JOIN locked
            )
            SELECT id FROM ev""");
    // A batch that met existing ids appends its log rows here once it knows what the existing
    // events get, in the batch's order (the log id is the sequence the consumer sees): the new
    // events' rows (their keys are locked since the insert) and the rows of handlers added to
    // existing events, whose stored keys it locks first, in key order.
    appendToLog =
        tables.sql(
            """
            WITH input AS (
              SELECT * FROM unnest(?::smallint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::boolean[])
                WITH ORDINALITY AS i(lane, id, handlers, key, tid, lock, ord)
            ), locked AS MATERIALIZED (
              SELECT count({lock_keys}(ARRAY[s.lane], ARRAY[s.key])::text) AS l
              FROM (SELECT DISTINCT lane, key FROM input WHERE lock AND key IS NOT NULL ORDER BY key) s
            )
            INSERT INTO {log} (id, xid, lane, event_id, handlers, key, event_tid)
            SELECT nextval('{log_seq}'), pg_current_xact_id(), x.lane, x.id,
                   string_to_array(x.handlers, ' '), x.key, x.tid::tid
            FROM (SELECT i.* FROM input i CROSS JOIN locked ORDER BY i.ord OFFSET 0) x""");
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
      Inserted inserted = insertNew(connection, remaining);
      List<OutboxEvent> vanished = new ArrayList<>();
      for (OutboxEvent event : remaining) {
        if (inserted.tids().containsKey(event.id())) {
          results.put(event.id(), new PublishResult(event.id(), true, event.handlers()));
        }
      }
      // Existing events: lock them all (id order) and check them before writing any, then add
      // their new handlers and append the log rows in the batch's order.
      Map<String, Existing> existing = new HashMap<>();
      for (OutboxEvent event : sortedById(remaining)) {
        if (!inserted.tids().containsKey(event.id())) {
          Existing found = lockExisting(connection, event);
          if (found == null) {
            vanished.add(event);
          } else {
            existing.put(event.id(), found);
          }
        }
      }
      if (strictRepublish) {
        existing.values().forEach(found -> found.result(List.of()).checked(true));
      }
      Map<String, List<String>> added = new HashMap<>();
      for (Existing found : existing.values()) {
        PublishResult result = addHandlers(connection, found);
        results.put(found.event.id(), result);
        if (!result.addedHandlers().isEmpty()) {
          added.put(found.event.id(), result.addedHandlers());
        }
      }
      appendToLog(connection, remaining, inserted, existing, added);
      remaining = vanished;
    }
    if (!remaining.isEmpty()) {
      throw new IllegalStateException("events kept vanishing while published: " + remaining);
    }
    return events.stream().map(e -> results.get(e.id())).toList();
  }

  /**
   * What an insert wrote: the new events' ids, each with where its row is (its ctid, as text), and
   * whether their log rows are written too. The batch statement writes them only when every event
   * was new; otherwise {@link #appendToLog} does, in the batch's order with the existing events'.
   */
  private record Inserted(Map<String, String> tids, boolean logged) {}

  private Inserted insertNew(Connection connection, List<OutboxEvent> events) throws SQLException {
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
      handlers[i] = String.join(" ", event.handlers());
      lanes[i] = (short) event.lane();
    }
    Map<String, String> inserted = new HashMap<>();
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
          inserted.put(rs.getString(1), rs.getString(2));
        }
      }
    }
    return new Inserted(inserted, inserted.size() == n);
  }

  /** The one event: its log row is written with it. */
  private Inserted insertOne(Connection connection, OutboxEvent event) throws SQLException {
    try (PreparedStatement statement = connection.prepareStatement(insertOne)) {
      java.sql.Array handlers = connection.createArrayOf("text", event.handlers().toArray());
      short lane = (short) event.lane();
      statement.setShort(1, lane);
      statement.setString(2, event.key());
      statement.setString(3, event.id());
      statement.setString(4, event.type());
      statement.setString(5, event.key());
      statement.setBytes(6, event.payload());
      statement.setString(7, event.contentType());
      statement.setString(8, json(event.headers()));
      statement.setArray(9, handlers);
      statement.setShort(10, lane);
      statement.setString(11, event.key());
      try (ResultSet rs = statement.executeQuery()) {
        Map<String, String> inserted = new HashMap<>();
        if (rs.next()) {
          inserted.put(rs.getString(1), null);
        }
        return new Inserted(inserted, true);
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

  /** Records the handlers the locked event never had in its row; the log rows come after. */
  private PublishResult addHandlers(Connection connection, Existing found) throws SQLException {
    OutboxEvent event = found.event;
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
    return found.result(added);
  }

  /**
   * Appends, in the order of {@code events}, the log rows not written yet: those of the new events
   * (unless the insert wrote them) and those of the handlers added to existing events, under the
   * stored key's lock, on its lane. The stored event wins: a republish adds routes, it does not
   * rewrite what happened.
   */
  private void appendToLog(
      Connection connection,
      List<OutboxEvent> events,
      Inserted inserted,
      Map<String, Existing> existing,
      Map<String, List<String>> added)
      throws SQLException {
    List<Short> lanes = new ArrayList<>();
    List<String> ids = new ArrayList<>();
    List<String> handlers = new ArrayList<>();
    List<String> keys = new ArrayList<>();
    List<String> tids = new ArrayList<>();
    List<Boolean> lock = new ArrayList<>();
    for (OutboxEvent event : events) {
      if (!inserted.logged() && inserted.tids().containsKey(event.id())) {
        lanes.add((short) event.lane());
        ids.add(event.id());
        handlers.add(String.join(" ", event.handlers()));
        keys.add(event.key());
        tids.add(inserted.tids().get(event.id()));
        lock.add(false); // locked by the insert
      } else if (added.containsKey(event.id())) {
        String key = existing.get(event.id()).key;
        lanes.add((short) Lanes.laneOf(key, event.id()));
        ids.add(event.id());
        handlers.add(String.join(" ", added.get(event.id())));
        keys.add(key);
        tids.add(null);
        lock.add(true);
      }
    }
    if (ids.isEmpty()) {
      return;
    }
    try (PreparedStatement insert = connection.prepareStatement(appendToLog)) {
      insert.setArray(1, connection.createArrayOf("int2", lanes.toArray(Short[]::new)));
      insert.setArray(2, connection.createArrayOf("text", ids.toArray(String[]::new)));
      insert.setArray(3, connection.createArrayOf("text", handlers.toArray(String[]::new)));
      insert.setArray(4, connection.createArrayOf("text", keys.toArray(String[]::new)));
      insert.setArray(5, connection.createArrayOf("text", tids.toArray(String[]::new)));
      insert.setArray(6, connection.createArrayOf("bool", lock.toArray(Boolean[]::new)));
      insert.executeUpdate();
    }
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
    for (var field : tree.properties()) {
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
