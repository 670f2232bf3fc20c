package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.in;

import com.mongodb.MongoBulkWriteException;
import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.FindOneAndUpdateOptions;
import com.mongodb.client.model.InsertManyOptions;
import com.mongodb.client.model.ReturnDocument;
import com.mongodb.client.model.Updates;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.PublishResult;
import java.time.Clock;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Date;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import org.bson.Document;
import org.bson.types.Binary;

/**
 * Publishes events in the caller's session.
 *
 * <p><b>Order of the writes</b>: key sequences first, then the deliveries, then the event. In a
 * transaction the order does not matter (everything becomes visible at commit, and the key's
 * counter document, written first, makes a concurrent publisher of the same key conflict and retry
 * after this one commits: sequence order is commit order). Without a transaction (a standalone
 * server, or a session without one) the event insert is the commit point: a claim never hands out a
 * delivery whose event does not exist yet, and a keyed one blocks its key until it does. A publish
 * that dies half-way therefore leaves deliveries nobody sends; retrying it (the same event id)
 * inserts the event and they go out. Writing the event first would be worse: its {@code handlers}
 * would list routes that have no delivery, and the retry would add none.
 *
 * <p>Without a transaction, publishers of one key in different processes take sequences in the
 * order they reach the counter (there is no commit), and their deliveries go out in that order: the
 * sequences are reserved on the key's counter until their deliveries are written ({@link
 * #nextSequence}), within the reservation's minute (a replica set has no such limit).
 */
final class MongoPublisher {
  /**
   * A publish without a transaction that took this long (or whose clock stepped back, or that
   * finishes one that died half-way) gives back, once its event is written, what a claim
   * dead-lettered meanwhile for the missing event ({@link MongoClaims#MISSING_EVENT_GRACE}).
   */
  static final java.time.Duration REVIVE_AFTER = java.time.Duration.ofMinutes(1);

  /**
   * How long a reservation holds back its key's later deliveries (a publisher that died between
   * taking its sequences and writing its deliveries leaves one behind).
   */
  static final java.time.Duration RESERVATION_TTL = java.time.Duration.ofMinutes(1);

  private static final org.slf4j.Logger log =
      org.slf4j.LoggerFactory.getLogger(MongoPublisher.class);

  private final MongoCollections c;
  private final DeliveryIds ids;
  private final Clock clock;
  private final boolean strictRepublish;

  MongoPublisher(
      MongoCollections collections, DeliveryIds ids, Clock clock, boolean strictRepublish) {
    this.c = collections;
    this.ids = ids;
    this.clock = clock;
    this.strictRepublish = strictRepublish;
  }

  /**
   * @param session the caller's session, with or without a transaction, or null for none
   */
  List<PublishResult> publishAll(ClientSession session, List<OutboxEvent> events) {
    Map<String, PublishResult> results = new HashMap<>();
    List<OutboxEvent> remaining = events;
    // An id can vanish between the read and the update (purged by retention) or appear between
    // the read and the insert (a concurrent publisher): go round once more. Bounded: a purge needs
    // the event to be old, and a concurrent insert makes it exist.
    for (int round = 0; round < 3 && !remaining.isEmpty(); round++) {
      Map<String, Document> existing = findEvents(session, remaining);
      if (strictRepublish) {
        // before anything is written for these events
        for (OutboxEvent event : remaining) {
          if (existing.containsKey(event.id())) {
            new PublishResult(
                    event.id(), false, List.of(), differing(existing.get(event.id()), event))
                .checked(true);
          }
        }
      }
      List<OutboxEvent> fresh = new ArrayList<>();
      List<OutboxEvent> again = new ArrayList<>();
      for (OutboxEvent event : remaining) {
        if (!existing.containsKey(event.id())) {
          fresh.add(event);
        }
      }
      // A key's sequences are taken for the batch's events in the batch's order, new and known
      // alike: a batch that gives a key's events a new handler and publishes its next event hands
      // them out in that order (before, the new events took theirs first, the known ones after in
      // id order). The key of each event that takes one (a known event's stored key):
      Map<String, String> keyed = new java.util.LinkedHashMap<>();
      for (OutboxEvent event : remaining) {
        Document stored = existing.get(event.id());
        String key = stored == null ? event.key() : stored.getString(Fields.KEY);
        if (key != null && (stored == null || !added(event, stored).isEmpty())) {
          keyed.put(event.id(), key);
        }
      }
      String reservation = keyed.isEmpty() ? null : reservation(session);
      Set<String> keys = new HashSet<>();
      Set<String> halfDone = Set.of();
      List<OutboxEvent> known = new ArrayList<>(remaining);
      known.removeIf(e -> !existing.containsKey(e.id()));
      Map<String, Long> sequences = new HashMap<>();
      try {
        Map<String, Long> next = takeSequences(session, keyed.values(), reservation);
        keys.addAll(next.keySet());
        keyed.forEach((eventId, key) -> sequences.put(eventId, next.merge(key, 1L, Long::sum) - 1));
        if (!fresh.isEmpty()) {
          halfDone = insertDeliveries(session, fresh, sequences);
        }
        for (OutboxEvent event : known) {
          addDeliveries(session, event, existing.get(event.id()), sequences.get(event.id()));
        }
      } finally {
        release(session, keys, reservation);
      }
      Set<String> raced = fresh.isEmpty() ? Set.of() : insertEvents(session, fresh, halfDone);
      for (OutboxEvent event : fresh) {
        if (raced.contains(event.id())) {
          again.add(event);
        } else {
          results.put(event.id(), new PublishResult(event.id(), true, event.handlers()));
        }
      }
      for (OutboxEvent event : known) {
        PublishResult result = addHandlers(session, event, existing.get(event.id()));
        if (result == null) {
          again.add(event);
        } else {
          results.put(event.id(), result);
        }
      }
      remaining = again;
    }
    if (!remaining.isEmpty()) {
      throw new IllegalStateException("events kept vanishing while published: " + remaining);
    }
    return events.stream().map(e -> results.get(e.id())).toList();
  }

  private Map<String, Document> findEvents(ClientSession session, List<OutboxEvent> events) {
    List<String> eventIds = events.stream().map(OutboxEvent::id).toList();
    Map<String, Document> found = new HashMap<>();
    for (Document d :
        find(session, c.events, in(Fields.ID, eventIds))
            .projection(
                new Document(Fields.KEY, 1)
                    .append(Fields.HANDLERS, 1)
                    .append(Fields.TYPE, 1)
                    .append(Fields.PAYLOAD, 1)
                    .append(Fields.CONTENT_TYPE, 1)
                    .append(Fields.HEADERS, 1))) {
      found.put(d.getString(Fields.ID), d);
    }
    return found;
  }

  /**
   * Inserts the deliveries of new events, under the sequences taken for them; returns the ids of
   * events some of whose deliveries were there already (a publish that died half-way).
   */
  private Set<String> insertDeliveries(
      ClientSession session, List<OutboxEvent> events, Map<String, Long> sequences) {
    Instant now = now();
    int deliveryCount = events.stream().mapToInt(e -> e.handlers().size()).sum();
    long id = ids.reserve(deliveryCount);
    List<Document> deliveries = new ArrayList<>(deliveryCount);
    for (OutboxEvent event : events) {
      Long sequence = sequences.get(event.id());
      for (String handler : event.handlers()) {
        deliveries.add(delivery(id++, event.id(), handler, event.key(), sequence, now));
      }
    }
    return insertIgnoringDuplicates(session, c.deliveries, deliveries);
  }

  /**
   * Inserts new events, their deliveries written: without a transaction the commit point. Returns
   * the ids another publisher inserted first.
   */
  private Set<String> insertEvents(
      ClientSession session, List<OutboxEvent> events, Set<String> halfDone) {
    Instant now = now();
    List<Document> eventDocs = new ArrayList<>(events.size());
    for (OutboxEvent event : events) {
      eventDocs.add(eventDocument(event, event.handlers(), now));
    }
    Set<String> raced = insertIgnoringDuplicates(session, c.events, eventDocs);
    Instant after = now();
    boolean inTransaction = session != null && session.hasActiveTransaction();
    if (!inTransaction
        && (!halfDone.isEmpty()
            || after.isBefore(now)
            || !after.isBefore(now.plus(REVIVE_AFTER)))) {
      List<String> written =
          events.stream().map(OutboxEvent::id).filter(eventId -> !raced.contains(eventId)).toList();
      reviveBuriedForMissingEvent(session, written, after);
    }
    return raced;
  }

  /**
   * Deliveries of these events that a claim dead-lettered because their event was not written yet
   * go back to pending, as a requeue would; their event exists now.
   */
  private void reviveBuriedForMissingEvent(
      ClientSession session, List<String> eventIds, Instant now) {
    if (eventIds.isEmpty()) {
      return;
    }
    var filter =
        com.mongodb.client.model.Filters.and(
            in(Fields.EVENT_ID, eventIds),
            eq(Fields.STATUS, Fields.DEAD),
            eq(Fields.LAST_ERROR, MongoClaims.MISSING_EVENT));
    var update =
        Updates.combine(
            Updates.set(Fields.STATUS, Fields.PENDING),
            Updates.set(Fields.ATTEMPTS, 0),
            Updates.inc(Fields.CLAIMS, 1),
            Updates.set(Fields.PARKED, false),
            Updates.set(Fields.AVAILABLE_AT, Date.from(now)),
            Updates.set(Fields.UPDATED_AT, Date.from(now)),
            Updates.unset(Fields.LAST_ERROR));
    if (session == null) {
      c.deliveries.updateMany(filter, update);
    } else {
      c.deliveries.updateMany(session, filter, update);
    }
  }

  /**
   * Takes the next sequences of each key, one per entry of {@code keys}, keys in order; returns
   * each key's first new one.
   */
  private Map<String, Long> takeSequences(
      ClientSession session, Collection<String> keys, String reservation) {
    Map<String, Long> counts = new TreeMap<>();
    for (String key : keys) {
      counts.merge(key, 1L, Long::sum);
    }
    Map<String, Long> first = new HashMap<>();
    counts.forEach((key, n) -> first.put(key, nextSequence(session, key, n, reservation) - n + 1));
    return first;
  }

  /**
   * A reservation token for sequences taken without a transaction, or null in one (there the key's
   * counter document makes a concurrent publisher of the key wait for this one's commit).
   */
  static String reservation(ClientSession session) {
    return session != null && session.hasActiveTransaction()
        ? null
        : java.util.UUID.randomUUID().toString();
  }

  /**
   * Adds {@code n} to the key's counter and returns the last sequence taken. With a {@code
   * reservation} the same write records it on the counter: until {@link #release} (or {@link
   * #RESERVATION_TTL}) a claim holds back the key's deliveries, so none with a later sequence goes
   * out before the ones being written.
   */
  long nextSequence(ClientSession session, String key, long n, String reservation) {
    FindOneAndUpdateOptions upsert =
        new FindOneAndUpdateOptions().upsert(true).returnDocument(ReturnDocument.AFTER);
    var filter = eq(Fields.ID, key);
    Instant now = now();
    var update =
        Updates.combine(
            Updates.inc(Fields.SEQUENCE, n), Updates.set(Fields.UPDATED_AT, Date.from(now)));
    if (reservation != null) {
      update =
          Updates.combine(
              update,
              Updates.push(
                  Fields.RESERVED,
                  new Document(Fields.RESERVATION, reservation)
                      .append(Fields.RESERVATION_EXPIRES, Date.from(now.plus(RESERVATION_TTL)))));
    }
    Document counter =
        session == null
            ? c.keys.findOneAndUpdate(filter, update, upsert)
            : c.keys.findOneAndUpdate(session, filter, update, upsert);
    return ((Number) counter.get(Fields.SEQUENCE)).longValue();
  }

  /**
   * Once the deliveries are written (or failed to be): drops the reservation, and expired ones,
   * from the keys' counters. Never throws: a reservation left behind holds its keys until it
   * expires.
   */
  void release(ClientSession session, Collection<String> keys, String reservation) {
    if (reservation == null || keys.isEmpty()) {
      return;
    }
    var filter = in(Fields.ID, keys);
    // expired ones too (publishers that died): claims ignore them already
    var update =
        Updates.pullByFilter(
            new Document(
                Fields.RESERVED,
                new Document(
                    "$or",
                    List.of(
                        new Document(Fields.RESERVATION, reservation),
                        new Document(
                            Fields.RESERVATION_EXPIRES, new Document("$lte", Date.from(now())))))));
    try {
      if (session == null) {
        c.keys.updateMany(filter, update);
      } else {
        c.keys.updateMany(session, filter, update);
      }
    } catch (com.mongodb.MongoException e) {
      log.warn("Releasing a sequence reservation failed; it holds its keys until it expires.", e);
    }
  }

  /** The handlers {@code event} names that its stored version never had. */
  private static List<String> added(OutboxEvent event, Document stored) {
    List<String> listed = stored.getList(Fields.HANDLERS, String.class, List.of());
    return event.handlers().stream().filter(h -> !listed.contains(h)).toList();
  }

  /**
   * The rare path: the event exists. Writes deliveries only for handlers it never had, under the
   * key's {@code sequence} taken for it; the stored event (its key) wins.
   */
  private void addDeliveries(
      ClientSession session, OutboxEvent event, Document stored, Long sequence) {
    List<String> added = added(event, stored);
    if (added.isEmpty()) {
      return;
    }
    String key = stored.getString(Fields.KEY);
    Instant now = now();
    long id = ids.reserve(added.size());
    List<Document> deliveries = new ArrayList<>();
    for (String handler : added) {
      deliveries.add(delivery(id++, event.id(), handler, key, sequence, now));
    }
    insertIgnoringDuplicates(session, c.deliveries, deliveries);
  }

  /**
   * Adds the handlers whose deliveries {@link #addDeliveries} wrote to the stored event. Returns
   * null if the event vanished meanwhile.
   */
  private PublishResult addHandlers(ClientSession session, OutboxEvent event, Document stored) {
    List<String> added = added(event, stored);
    List<String> differing = differing(stored, event);
    if (added.isEmpty()) {
      return new PublishResult(event.id(), false, List.of(), differing);
    }
    var filter = eq(Fields.ID, event.id());
    var update = Updates.addEachToSet(Fields.HANDLERS, added);
    long matched =
        (session == null
                ? c.events.updateOne(filter, update)
                : c.events.updateOne(session, filter, update))
            .getMatchedCount();
    return matched == 0 ? null : new PublishResult(event.id(), false, added, differing);
  }

  private static List<String> differing(Document stored, OutboxEvent event) {
    Binary payload = stored.get(Fields.PAYLOAD, Binary.class);
    return PublishResult.differences(
        stored.getString(Fields.TYPE),
        stored.getString(Fields.KEY),
        payload == null ? null : payload.getData(),
        stored.getString(Fields.CONTENT_TYPE),
        headers(stored),
        event);
  }

  /**
   * Inserts documents; ids that exist already (a concurrent or earlier, interrupted publish of the
   * same event) are skipped and returned. In a transaction a duplicate aborts it instead, and the
   * caller's retry of the transaction sees the other publish.
   */
  private static Set<String> insertIgnoringDuplicates(
      ClientSession session, MongoCollection<Document> collection, List<Document> documents) {
    InsertManyOptions unordered = new InsertManyOptions().ordered(false);
    try {
      if (session == null) {
        collection.insertMany(documents, unordered);
      } else {
        collection.insertMany(session, documents, unordered);
      }
      return Set.of();
    } catch (MongoBulkWriteException e) {
      boolean inTransaction = session != null && session.hasActiveTransaction();
      if (inTransaction || !e.getWriteErrors().stream().allMatch(MongoErrors::isDuplicateKey)) {
        throw e;
      }
      Set<String> duplicates = new HashSet<>();
      e.getWriteErrors()
          .forEach(w -> duplicates.add(String.valueOf(documents.get(w.getIndex()).get(Fields.ID))));
      return duplicates;
    }
  }

  private static com.mongodb.client.FindIterable<Document> find(
      ClientSession session,
      MongoCollection<Document> collection,
      org.bson.conversions.Bson filter) {
    return session == null ? collection.find(filter) : collection.find(session, filter);
  }

  static Document delivery(
      long id, String eventId, String handler, String key, Long sequence, Instant now) {
    Date at = Date.from(now);
    Document d =
        new Document(Fields.ID, id)
            .append(Fields.EVENT_ID, eventId)
            .append(Fields.HANDLER, handler)
            .append(Fields.LANE_ID, Lanes.laneOf(key, eventId));
    if (key != null) {
      d.append(Fields.KEY, key).append(Fields.SEQUENCE, sequence);
    }
    return d.append(Fields.STATUS, Fields.PENDING)
        .append(Fields.PARKED, false)
        .append(Fields.ATTEMPTS, 0)
        .append(Fields.CLAIMS, 0)
        .append(Fields.AVAILABLE_AT, at)
        .append(Fields.CREATED_AT, at)
        .append(Fields.UPDATED_AT, at);
  }

  static Document eventDocument(OutboxEvent event, List<String> handlers, Instant now) {
    List<Document> headers = new ArrayList<>();
    event
        .headers()
        .forEach(
            (name, value) ->
                headers.add(
                    new Document(Fields.HEADER_NAME, name).append(Fields.HEADER_VALUE, value)));
    Document d = new Document(Fields.ID, event.id()).append(Fields.TYPE, event.type());
    if (event.key() != null) {
      d.append(Fields.KEY, event.key());
    }
    return d.append(Fields.PAYLOAD, new Binary(event.payload()))
        .append(Fields.CONTENT_TYPE, event.contentType())
        .append(Fields.HEADERS, headers)
        .append(Fields.HANDLERS, handlers)
        .append(Fields.CREATED_AT, Date.from(now));
  }

  static Map<String, String> headers(Document event) {
    Map<String, String> headers = new LinkedHashMap<>();
    for (Document h : event.getList(Fields.HEADERS, Document.class, List.of())) {
      headers.put(h.getString(Fields.HEADER_NAME), h.getString(Fields.HEADER_VALUE));
    }
    return headers;
  }

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MILLIS);
  }
}
