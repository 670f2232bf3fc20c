package io.relaybus.store.memory;

import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.PublishResult;
import io.relaybus.store.RepublishConflictException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Publish and inbox records on the tables: idempotent by event id, one delivery per handler the
 * event never had. Callers hold the store's lock.
 *
 * <p>Unlike the other stores (PostgresInbox, MongoInbox) the inbox record lives here, not in a
 * class of its own: a transaction buffers both kinds of write in one list ({@link Buffered}) and
 * both answer from the handlers an event already has, committed or buffered.
 */
final class MemoryPublisher {

  /**
   * A write a transaction buffers until commit: a publish of {@code event}, or, when {@code
   * inboxHandler} is set, an inbox record of that handler with the outcome told to the caller.
   */
  record Buffered(OutboxEvent event, String inboxHandler, InboxOutcome told) {
    static Buffered publish(OutboxEvent event) {
      return new Buffered(event, null, null);
    }

    static Buffered inbox(OutboxEvent received, String handler, InboxOutcome told) {
      return new Buffered(received, handler, told);
    }

    boolean isInboxRecord() {
      return inboxHandler != null;
    }

    /** The handlers this write lists for its event. */
    List<String> handlers() {
      return isInboxRecord() ? List.of(inboxHandler) : event.handlers();
    }
  }

  private final MemoryTables tables;
  private final boolean strictRepublish;

  MemoryPublisher(MemoryTables tables, boolean strictRepublish) {
    this.tables = tables;
    this.strictRepublish = strictRepublish;
  }

  /**
   * Inserts the event if its id is new, and a delivery for each handler it never had. Type, key and
   * payload stay those of the first publish. The deliveries of one publish of a keyed event share
   * the key's next sequence; a publish that adds nothing takes none.
   */
  PublishResult apply(OutboxEvent event, Instant now) {
    StoredEvent stored = tables.events.get(event.id());
    boolean newEvent = stored == null;
    List<String> differing = differing(List.of(), event);
    if (newEvent) {
      stored =
          new StoredEvent(
              event.id(),
              event.type(),
              event.key(),
              event.payload(),
              event.contentType(),
              event.headers(),
              now);
      tables.events.put(stored.id, stored);
    }
    List<String> added = missingHandlers(event, new HashSet<>(stored.handlers));
    Long sequence =
        added.isEmpty() || stored.key == null ? null : tables.nextSequence(stored.key, now);
    for (String handler : added) {
      stored.handlers.add(handler);
      tables.insertDelivery(stored, handler, sequence, now);
    }
    return new PublishResult(event.id(), newEvent, added, differing);
  }

  /**
   * Applies an inbox record: inserts the event (with no handler and no delivery) if its id is new,
   * and lists {@code handler}. Returns whether the handler was new.
   */
  boolean record(OutboxEvent received, String handler, Instant now) {
    StoredEvent stored =
        tables.events.computeIfAbsent(
            received.id(),
            id ->
                new StoredEvent(
                    id,
                    received.type(),
                    received.key(),
                    received.payload(),
                    received.contentType(),
                    received.headers(),
                    now));
    if (stored.handlers.contains(handler)) {
      return false;
    }
    stored.handlers.add(handler);
    return true;
  }

  /**
   * What {@link #apply} will do for {@code event} at commit, given what is committed now and the
   * writes buffered before it in the same transaction.
   */
  PublishResult preview(List<Buffered> buffered, OutboxEvent event) {
    Set<String> known = knownHandlers(buffered, event.id());
    boolean exists = known != null;
    return new PublishResult(
            event.id(),
            !exists,
            missingHandlers(event, exists ? known : Set.of()),
            differing(buffered.stream().map(Buffered::event).toList(), event))
        .checked(strictRepublish);
  }

  /**
   * In strict mode, the first publish among {@code events} (applied in order after {@code earlier})
   * whose id exists with another type, key, payload, content type or headers, as the exception to
   * throw before anything is applied; otherwise null.
   */
  RepublishConflictException conflict(List<OutboxEvent> earlier, List<OutboxEvent> events) {
    if (!strictRepublish) {
      return null;
    }
    List<OutboxEvent> before = new ArrayList<>(earlier);
    for (OutboxEvent event : events) {
      List<String> differing = differing(before, event);
      if (!differing.isEmpty()) {
        return new RepublishConflictException(event.id(), differing);
      }
      before.add(event);
    }
    return null;
  }

  /**
   * Where the event as it stands (committed, else the first of {@code earlier} with its id: a
   * publish or an inbox record) differs from {@code event}.
   */
  private List<String> differing(List<OutboxEvent> earlier, OutboxEvent event) {
    StoredEvent stored = tables.events.get(event.id());
    if (stored != null) {
      return PublishResult.differences(
          stored.type, stored.key, stored.payload(), stored.contentType, stored.headers, event);
    }
    for (OutboxEvent first : earlier) {
      if (first.id().equals(event.id())) {
        return PublishResult.differences(
            first.type(),
            first.key(),
            first.payload(),
            first.contentType(),
            first.headers(),
            event);
      }
    }
    return List.of();
  }

  /** What {@link #record} will find at commit, as far as can be told now. */
  InboxOutcome previewRecord(List<Buffered> buffered, OutboxEvent received, String handler) {
    Set<String> known = knownHandlers(buffered, received.id());
    return known != null && known.contains(handler) ? InboxOutcome.REDELIVERY : InboxOutcome.FIRST;
  }

  /**
   * An inbox record of the buffer that was told {@link InboxOutcome#FIRST} but whose handler
   * another transaction committed since: the commit must fail, or two transactions would both have
   * run the work. Null when there is none.
   */
  Buffered lostRace(List<Buffered> buffered) {
    for (Buffered write : buffered) {
      if (write.isInboxRecord() && write.told() == InboxOutcome.FIRST) {
        StoredEvent stored = tables.events.get(write.event().id());
        if (stored != null && stored.handlers.contains(write.inboxHandler())) {
          return write;
        }
      }
    }
    return null;
  }

  /** The handlers committed and buffered for {@code eventId}, or null when the event is unknown. */
  private Set<String> knownHandlers(List<Buffered> buffered, String eventId) {
    StoredEvent stored = tables.events.get(eventId);
    Set<String> known = stored == null ? null : new HashSet<>(stored.handlers);
    for (Buffered earlier : buffered) {
      if (earlier.event().id().equals(eventId)) {
        if (known == null) {
          known = new HashSet<>();
        }
        known.addAll(earlier.handlers());
      }
    }
    return known;
  }

  private static List<String> missingHandlers(OutboxEvent event, Set<String> known) {
    return event.handlers().stream().filter(handler -> !known.contains(handler)).toList();
  }
}
