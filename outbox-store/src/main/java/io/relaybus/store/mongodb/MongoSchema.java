package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.exists;
import static com.mongodb.client.model.Filters.gte;
import static com.mongodb.client.model.Filters.lt;

import com.mongodb.MongoBulkWriteException;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.IndexOptions;
import com.mongodb.client.model.Indexes;
import com.mongodb.client.model.UpdateOneModel;
import com.mongodb.client.model.UpdateOptions;
import com.mongodb.client.model.Updates;
import com.mongodb.client.model.WriteModel;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxStoreException;
import java.util.ArrayList;
import java.util.List;
import org.bson.Document;
import org.bson.conversions.Bson;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Creates and checks the collections, indexes and the 256 lane documents. Every step is idempotent
 * (an index that exists with the same definition, a lane that exists), so processes that start
 * together may all run it.
 *
 * <p>Indexes of deliveries cover only fields that no happy-path write changes (publish inserts,
 * claim writes only lane documents, completion deletes): the claim index, the per-key index, the
 * dead-letter index and the parked index change only on the rare paths (retry, burial, parking).
 * Lanes have no secondary index.
 */
final class MongoSchema {
  static final int CURRENT_VERSION = 1;
  private static final Logger log = LoggerFactory.getLogger(MongoSchema.class);

  private record IndexSpec(MongoCollection<Document> collection, Bson keys, IndexOptions options) {}

  private final MongoCollections c;

  MongoSchema(MongoCollections collections) {
    this.c = collections;
  }

  private List<IndexSpec> indexes() {
    Bson pending = eq(Fields.STATUS, Fields.PENDING);
    return List.of(
        // Idempotent publish and the inbox: one delivery per (event, handler).
        new IndexSpec(
            c.deliveries,
            Indexes.ascending(Fields.EVENT_ID, Fields.HANDLER),
            new IndexOptions().name("event_handler_unique").unique(true)),
        // The claim: due deliveries of the held lanes, oldest first. Parked deliveries (blocked
        // behind an earlier delivery of their key) are out of it, so a deep backlog of one key
        // costs a claim nothing.
        new IndexSpec(
            c.deliveries,
            Indexes.ascending(Fields.LANE_ID, Fields.AVAILABLE_AT, Fields.ID),
            new IndexOptions()
                .name("lane_due")
                .partialFilterExpression(and(pending, eq(Fields.PARKED, false)))),
        // The per-key rule: earlier pending deliveries of a (lane, handler, key).
        new IndexSpec(
            c.deliveries,
            Indexes.ascending(Fields.LANE_ID, Fields.HANDLER, Fields.KEY, Fields.SEQUENCE),
            new IndexOptions()
                .name("key_sequence")
                .partialFilterExpression(and(pending, exists(Fields.KEY)))),
        // Parked deliveries only: found again when their key moves on (a small index).
        new IndexSpec(
            c.deliveries,
            Indexes.ascending(
                Fields.LANE_ID, Fields.PARKED, Fields.HANDLER, Fields.KEY, Fields.SEQUENCE),
            new IndexOptions().name("parked").partialFilterExpression(eq(Fields.PARKED, true))),
        // Named timers: one pending timer per (handler, timer id). Sparse, not partial, so that
        // mongo-java-server enforces it too; the field is unset when a timer dies and deleted
        // with the delivery when it fires.
        new IndexSpec(
            c.deliveries,
            Indexes.ascending(Fields.TIMER),
            new IndexOptions().name("timer_unique").unique(true).sparse(true)),
        // The dead-letter purge.
        new IndexSpec(
            c.deliveries,
            Indexes.ascending(Fields.UPDATED_AT, Fields.ID),
            new IndexOptions()
                .name("dead_updated")
                .partialFilterExpression(eq(Fields.STATUS, Fields.DEAD))),
        // Event retention.
        new IndexSpec(
            c.events, Indexes.ascending(Fields.CREATED_AT), new IndexOptions().name("created")),
        new IndexSpec(
            c.completed,
            Indexes.ascending(Fields.COMPLETED_AT),
            new IndexOptions().name("completed_at")));
  }

  void setup() {
    Integer version = installedVersion();
    if (version != null && version > CURRENT_VERSION) {
      throw new OutboxStoreException(
          "the outbox in %s has schema version %d, newer than this relaybus (%d): upgrade relaybus"
              .formatted(c.where(), version, CURRENT_VERSION),
          false,
          null);
    }
    for (IndexSpec index : indexes()) {
      index.collection().createIndex(index.keys(), index.options());
    }
    seedLanes();
    c.meta.updateOne(
        eq(Fields.ID, Fields.SCHEMA_DOC),
        Updates.max(Fields.VERSION, CURRENT_VERSION),
        new UpdateOptions().upsert(true));
    if (version == null || version < CURRENT_VERSION) {
      log.info("Outbox in {} set up at schema version {}.", c.where(), CURRENT_VERSION);
    }
  }

  /** Inserts missing lanes only; a lane that exists keeps its epoch, lease and in-flight list. */
  private void seedLanes() {
    List<WriteModel<Document>> upserts = new ArrayList<>();
    for (int lane = 0; lane < Lanes.COUNT; lane++) {
      upserts.add(
          new UpdateOneModel<>(
              eq(Fields.ID, lane),
              Updates.combine(
                  Updates.setOnInsert(Fields.EPOCH, 0L),
                  Updates.setOnInsert(Fields.OWNER, null),
                  Updates.setOnInsert(Fields.GROUP, null),
                  Updates.setOnInsert(Fields.LEASE_EXPIRES_AT, null),
                  Updates.setOnInsert(Fields.IN_FLIGHT, List.of()),
                  Updates.setOnInsert(Fields.LOST, List.of()),
                  Updates.setOnInsert(Fields.REV, 0L)),
              new UpdateOptions().upsert(true)));
    }
    try {
      c.lanes.bulkWrite(upserts, new BulkWriteOptions().ordered(false));
    } catch (MongoBulkWriteException e) {
      // Two setups upserting the same lane at once: one insert loses with a duplicate key, and
      // the lane exists, which is all we wanted.
      if (!e.getWriteErrors().stream().allMatch(MongoErrors::isDuplicateKey)) {
        throw e;
      }
    }
  }

  /** Checks version and lanes; throws naming what is wrong and how to fix it. */
  void verify() {
    Integer version = installedVersion();
    if (version == null) {
      throw new OutboxStoreException(
          "the outbox is not set up in "
              + c.where()
              + ": run setup() (the connector does it when outbox.setup is true)",
          false,
          null);
    }
    if (version != CURRENT_VERSION) {
      throw new OutboxStoreException(
          "the outbox in %s has schema version %d, this relaybus needs %d: run setup() to upgrade"
              .formatted(c.where(), version, CURRENT_VERSION),
          false,
          null);
    }
    long lanes = c.lanes.countDocuments(and(gte(Fields.ID, 0), lt(Fields.ID, Lanes.COUNT)));
    if (lanes != Lanes.COUNT) {
      throw new OutboxStoreException(
          "the lanes collection of %s has %d of the %d lanes (lanes 0-255 must all exist): run setup() to restore them"
              .formatted(c.where(), lanes, Lanes.COUNT),
          false,
          null);
    }
  }

  private Integer installedVersion() {
    Document schema = c.meta.find(eq(Fields.ID, Fields.SCHEMA_DOC)).first();
    return schema == null ? null : ((Number) schema.get(Fields.VERSION)).intValue();
  }
}
