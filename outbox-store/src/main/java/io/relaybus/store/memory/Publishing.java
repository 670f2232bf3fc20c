package io.relaybus.store.memory;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.PublishResult;
import java.time.Instant;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Publish on the tables: idempotent by event id, one delivery per handler the event never had.
 * Callers hold the store's lock.
 */
final class Publishing {
  private final MemoryTables tables;

  Publishing(MemoryTables tables) {
    this.tables = tables;
  }

  /**
   * Inserts the event if its id is new, and a delivery for each handler it never had. Type, key and
   * payload stay those of the first publish. The deliveries of one publish of a keyed event share
   * the key's next sequence; a publish that adds nothing takes none.
   */
  PublishResult apply(OutboxEvent event, Instant now) {
    StoredEvent stored = tables.events.get(event.id());
    boolean newEvent = stored == null;
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
    return new PublishResult(event.id(), newEvent, added);
  }

  /**
   * What {@link #apply} will do for {@code event} at commit, given what is committed now and the
   * events buffered before it in the same transaction.
   */
  PublishResult preview(List<OutboxEvent> buffered, OutboxEvent event) {
    StoredEvent stored = tables.events.get(event.id());
    boolean exists = stored != null;
    Set<String> known = exists ? new HashSet<>(stored.handlers) : new HashSet<>();
    for (OutboxEvent earlier : buffered) {
      if (earlier.id().equals(event.id())) {
        exists = true;
        known.addAll(earlier.handlers());
      }
    }
    return new PublishResult(event.id(), !exists, missingHandlers(event, known));
  }

  private static List<String> missingHandlers(OutboxEvent event, Set<String> known) {
    return event.handlers().stream().filter(handler -> !known.contains(handler)).toList();
  }
}
