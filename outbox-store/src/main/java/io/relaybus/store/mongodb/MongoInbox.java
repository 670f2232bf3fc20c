package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.ne;

import com.mongodb.client.ClientSession;
import com.mongodb.client.model.Updates;
import io.relaybus.store.InboxOutcome;
import io.relaybus.store.OutboxEvent;
import java.time.Clock;
import java.time.temporal.ChronoUnit;
import java.util.List;
import org.bson.Document;

/**
 * Records a consumer's handler in the event's {@code handlers}, in the caller's transaction.
 *
 * <p>Read, then write: in a MongoDB transaction any failed write (a duplicate key too) aborts the
 * transaction, so the record does not try an insert and catch the duplicate. Racers are settled by
 * MongoDB's write conflicts: of two transactions adding the same handler, or inserting the same new
 * event, the second to write fails at once with a {@code TransientTransactionError} (reported as a
 * transient {@link io.relaybus.store.OutboxStoreException}); its retry reads the committed handler
 * and answers {@link InboxOutcome#REDELIVERY}. {@code ClientSession.withTransaction} retries that
 * by itself.
 */
final class MongoInbox {
  private final MongoCollections c;
  private final Clock clock;

  MongoInbox(MongoCollections collections, Clock clock) {
    this.c = collections;
    this.clock = clock;
  }

  InboxOutcome record(ClientSession session, OutboxEvent received, String handler) {
    if (!session.hasActiveTransaction()) {
      throw new IllegalArgumentException(
          "transaction must be a ClientSession with an active transaction (startTransaction()):"
              + " the inbox record must commit together with the handler's work");
    }
    Document stored =
        c.events
            .find(session, eq(Fields.ID, received.id()))
            .projection(new Document(Fields.HANDLERS, 1))
            .first();
    if (stored == null) {
      c.events.insertOne(
          session,
          MongoPublisher.eventDocument(
              received, List.of(handler), clock.instant().truncatedTo(ChronoUnit.MILLIS)));
      return InboxOutcome.FIRST;
    }
    if (stored.getList(Fields.HANDLERS, String.class, List.of()).contains(handler)) {
      return InboxOutcome.REDELIVERY;
    }
    long modified =
        c.events
            .updateOne(
                session,
                and(eq(Fields.ID, received.id()), ne(Fields.HANDLERS, handler)),
                Updates.push(Fields.HANDLERS, handler))
            .getModifiedCount();
    // Inside the transaction's snapshot the document exists without the handler, so the update
    // either modifies it or fails with a write conflict; 0 cannot be FIRST.
    return modified == 1 ? InboxOutcome.FIRST : InboxOutcome.REDELIVERY;
  }
}
