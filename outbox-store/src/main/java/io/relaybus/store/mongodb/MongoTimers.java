package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;

import com.mongodb.MongoException;
import com.mongodb.client.ClientSession;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.Updates;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerExistsException;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import java.time.Clock;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import org.bson.Document;
import org.bson.conversions.Bson;

/**
 * Timers on MongoDB: arm, extend, replace, keep, cancel, with or without the caller's session.
 *
 * <p>A named timer is a delivery with {@code timer} ({@code handler/timerId}, unique through a
 * sparse index), {@code fireAt} (its deadline, in no index) and {@code timerRev}. An extend to a
 * later deadline sets {@code fireAt} only; the claim re-arms a due timer whose {@code fireAt} is
 * later ({@code availableAt = fireAt}), as on PostgreSQL.
 *
 * <p><b>Racing the claim</b> without a transaction: every write to a timer, the claim's included,
 * is conditional on {@code timerRev} and bumps it. The claim first takes a due timer (sets {@code
 * firingClaims} to the delivery's claim counter) and only then records it in flight; a call finds
 * the timer firing when the lane lists it in flight or when it was taken under its current claim
 * counter. So of a claim and an extend, the first conditional write wins and the other sees it: the
 * extend answers {@link TimerOutcome#ALREADY_FIRING}, or the claim leaves the timer alone.
 */
final class MongoTimers {
  private static final int ROUNDS = 5;

  private final MongoCollections c;
  private final MongoPublisher publisher;
  private final DeliveryIds ids;
  private final Clock clock;

  MongoTimers(
      MongoCollections collections, MongoPublisher publisher, DeliveryIds ids, Clock clock) {
    this.c = collections;
    this.publisher = publisher;
    this.ids = ids;
    this.clock = clock;
  }

  static String timerKey(String handler, String timerId) {
    return handler + "/" + timerId; // handlers never contain '/'
  }

  TimerResult schedule(ClientSession session, OutboxEvent event, Timer timer) {
    Instant deadline = timer.deadline(now()).truncatedTo(ChronoUnit.MILLIS);
    if (find(session, c.events, eq(Fields.ID, event.id())) != null) {
      throw new IllegalArgumentException(
          ("event id '%s' exists already: a timer arms a new event, so give it a new id (the"
                  + " builder's default, a new time-ordered UUID)")
              .formatted(event.id()));
    }
    if (timer.id() == null) {
      arm(session, event, null, deadline);
      return new TimerResult(TimerOutcome.ARMED, event.id());
    }
    String handler = event.handlers().get(0);
    String key = timerKey(handler, timer.id());
    for (int round = 0; round < ROUNDS; round++) {
      Document pending = pending(session, key);
      if (pending == null) {
        if (arm(session, event, timer.id(), deadline)) {
          return new TimerResult(TimerOutcome.ARMED, event.id());
        }
        continue; // armed concurrently: decide again against that one
      }
      String eventId = pending.getString(Fields.EVENT_ID);
      if (isFiring(session, pending)) {
        return new TimerResult(TimerOutcome.ALREADY_FIRING, eventId);
      }
      switch (timer.onConflict()) {
        case KEEP -> {
          return new TimerResult(TimerOutcome.KEPT, eventId);
        }
        case FAIL -> throw new TimerExistsException(handler, timer.id(), eventId);
        case EXTEND -> {
          List<Bson> set = new ArrayList<>();
          set.add(Updates.set(Fields.FIRE_AT, Date.from(deadline)));
          set.add(Updates.inc(Fields.TIMER_REV, 1L));
          if (deadline.isBefore(pending.getDate(Fields.AVAILABLE_AT).toInstant())) {
            set.add(Updates.set(Fields.AVAILABLE_AT, Date.from(deadline)));
          }
          if (update(session, unchanged(pending), Updates.combine(set))) {
            return new TimerResult(TimerOutcome.EXTENDED, eventId);
          }
        }
        case REPLACE -> {
          // armed only if no other call armed the id since the removal: else decide again
          if (remove(session, pending) && arm(session, event, timer.id(), deadline)) {
            return new TimerResult(TimerOutcome.REPLACED, event.id());
          }
        }
      }
      // the timer changed under us (a claim took it, or another call): decide again
    }
    throw new OutboxStoreException(
        "timer '%s' of handler '%s' kept changing while scheduled; try again"
            .formatted(timer.id(), handler),
        true,
        null);
  }

  TimerResult cancel(ClientSession session, String handler, String timerId) {
    String key = timerKey(handler, timerId);
    for (int round = 0; round < ROUNDS; round++) {
      Document pending = pending(session, key);
      if (pending == null) {
        return new TimerResult(TimerOutcome.NOT_FOUND, null);
      }
      String eventId = pending.getString(Fields.EVENT_ID);
      if (isFiring(session, pending)) {
        return new TimerResult(TimerOutcome.ALREADY_FIRING, eventId);
      }
      if (remove(session, pending)) {
        return new TimerResult(TimerOutcome.CANCELLED, eventId);
      }
    }
    throw new OutboxStoreException(
        "timer '%s' of handler '%s' kept changing while cancelled; try again"
            .formatted(timerId, handler),
        true,
        null);
  }

  private Document pending(ClientSession session, String key) {
    return find(
        session, c.deliveries, and(eq(Fields.TIMER, key), eq(Fields.STATUS, Fields.PENDING)));
  }

  /**
   * In flight on its lane under its claim counter, or taken by a claim that has not recorded it.
   */
  private boolean isFiring(ClientSession session, Document delivery) {
    int claims = delivery.getInteger(Fields.CLAIMS);
    Object firing = delivery.get(Fields.FIRING_CLAIMS);
    if (firing != null && ((Number) firing).intValue() == claims) {
      return true;
    }
    Document lane = find(session, c.lanes, eq(Fields.ID, delivery.getInteger(Fields.LANE_ID)));
    if (lane == null) {
      return false;
    }
    long id = ((Number) delivery.get(Fields.ID)).longValue();
    return LaneDoc.of(lane).inFlight().stream().anyMatch(e -> e.id() == id && e.claims() == claims);
  }

  private static Bson unchanged(Document pending) {
    return and(
        eq(Fields.ID, pending.get(Fields.ID)),
        eq(Fields.TIMER_REV, pending.get(Fields.TIMER_REV)),
        eq(Fields.STATUS, Fields.PENDING));
  }

  /**
   * Deletes the timer if unchanged; its event too when the timer was its only route; and unparks
   * the followers it held back.
   */
  private boolean remove(ClientSession session, Document pending) {
    Bson filter = unchanged(pending);
    Document removed =
        session == null
            ? c.deliveries.findOneAndDelete(filter)
            : c.deliveries.findOneAndDelete(session, filter);
    if (removed == null) {
      return false;
    }
    // The mark as removed, not as read: a claim may mark the timer as its key's blocker and park
    // the followers between the read and the delete (parking leaves the revision alone).
    if (Boolean.TRUE.equals(removed.getBoolean(Fields.HOLDS_PARKED))) {
      // It held back its key's followers (parked, see MongoParking): they must not wait for a
      // sweep. A claim that parks them after this unpark finds the timer gone and unparks them.
      Bson parkedFollowers =
          and(
              eq(Fields.LANE_ID, removed.getInteger(Fields.LANE_ID)),
              eq(Fields.HANDLER, removed.getString(Fields.HANDLER)),
              eq(Fields.KEY, removed.getString(Fields.KEY)),
              eq(Fields.PARKED, true));
      Bson unpark = Updates.set(Fields.PARKED, false);
      if (session == null) {
        c.deliveries.updateMany(parkedFollowers, unpark);
      } else {
        c.deliveries.updateMany(session, parkedFollowers, unpark);
      }
    }
    Bson onlyRoute =
        and(
            eq(Fields.ID, pending.getString(Fields.EVENT_ID)),
            eq(Fields.HANDLERS, List.of(pending.getString(Fields.HANDLER))));
    if (session == null) {
      c.events.deleteOne(onlyRoute);
    } else {
      c.events.deleteOne(session, onlyRoute);
    }
    return true;
  }

  /**
   * Inserts the deliveries (due at the deadline), then the event, as a publish does (without a
   * transaction the event is the commit point). False when a pending timer with the id exists.
   */
  private boolean arm(ClientSession session, OutboxEvent event, String timerId, Instant deadline) {
    Instant now = now();
    String reservation = event.key() == null ? null : MongoPublisher.reservation(session);
    Long sequence =
        event.key() == null ? null : publisher.nextSequence(session, event.key(), 1, reservation);
    long id = ids.reserve(event.handlers().size());
    List<Document> deliveries = new ArrayList<>();
    for (String handler : event.handlers()) {
      Document d =
          MongoPublisher.delivery(id++, event.id(), handler, event.key(), sequence, now)
              .append(Fields.AVAILABLE_AT, Date.from(deadline));
      if (timerId != null) {
        d.append(Fields.TIMER, timerKey(handler, timerId))
            .append(Fields.TIMER_ID, timerId)
            .append(Fields.FIRE_AT, Date.from(deadline))
            .append(Fields.TIMER_REV, 0L);
      }
      deliveries.add(d);
    }
    try {
      if (session == null) {
        c.deliveries.insertMany(deliveries);
      } else {
        c.deliveries.insertMany(session, deliveries);
      }
    } catch (MongoException e) {
      boolean inTransaction = session != null && session.hasActiveTransaction();
      if (timerId != null && !inTransaction && MongoErrors.isDuplicateKey(e)) {
        return false;
      }
      throw e;
    } finally {
      if (event.key() != null) {
        publisher.release(session, List.of(event.key()), reservation);
      }
    }
    Document eventDoc = MongoPublisher.eventDocument(event, event.handlers(), now);
    if (session == null) {
      c.events.insertOne(eventDoc);
    } else {
      c.events.insertOne(session, eventDoc);
    }
    return true;
  }

  private boolean update(ClientSession session, Bson filter, Bson update) {
    return (session == null
                ? c.deliveries.updateOne(filter, update)
                : c.deliveries.updateOne(session, filter, update))
            .getMatchedCount()
        == 1;
  }

  private static Document find(
      ClientSession session, MongoCollection<Document> collection, Bson filter) {
    return (session == null ? collection.find(filter) : collection.find(session, filter)).first();
  }

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MILLIS);
  }
}
