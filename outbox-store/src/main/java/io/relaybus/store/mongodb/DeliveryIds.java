package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.eq;

import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.FindOneAndUpdateOptions;
import com.mongodb.client.model.ReturnDocument;
import com.mongodb.client.model.Updates;
import org.bson.Document;

/**
 * Hands out delivery ids: numbers, like PostgreSQL's identity column, so tokens, listings and
 * keyset pages look the same in every store. A store instance reserves a block of ids with one
 * counter update outside any transaction (so publishers never conflict on the counter, and a
 * rolled-back publish only leaves a gap) and uses it up before it asks again.
 *
 * <p>Ids are unique and increase within one store instance; instances that publish at the same time
 * interleave their blocks, so id order is not publication order across processes (neither is
 * PostgreSQL's under concurrent transactions). Nothing relies on it: key order is the sequence.
 */
final class DeliveryIds {
  static final int BLOCK = 100;

  private final MongoCollection<Document> meta;
  private long next;
  private long end;

  DeliveryIds(MongoCollection<Document> meta) {
    this.meta = meta;
  }

  /** Reserves {@code count} consecutive ids and returns the first. */
  synchronized long reserve(int count) {
    if (end - next < count) {
      long size = Math.max(count, BLOCK);
      Document counter =
          meta.findOneAndUpdate(
              eq(Fields.ID, Fields.DELIVERY_IDS_DOC),
              Updates.inc(Fields.NEXT, size),
              new FindOneAndUpdateOptions().upsert(true).returnDocument(ReturnDocument.AFTER));
      long last = ((Number) counter.get(Fields.NEXT)).longValue();
      next = last - size + 1;
      end = last + 1;
    }
    long first = next;
    next += count;
    return first;
  }
}
