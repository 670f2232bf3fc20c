package io.relaybus.store.mongodb;

/**
 * Field names and values of the store's documents, in one place for every class that reads or
 * writes them. The document shapes:
 *
 * <pre>
 * events      { _id: eventId, type, key?, payload: binary, contentType,
 *               headers: [{name, value}], handlers: [handler], createdAt }
 * deliveries  { _id: long, eventId, handler, laneId, key?, seq?, status: "pending"|"dead",
 *               parked: bool, holdsParked?: true, attempts, claims, availableAt, lastError?,
 *               chargedEpoch?, createdAt, updatedAt,
 *               timer?, timerId?, fireAt?, timerRev?, firingClaims? }   (named timers)
 * lanes       { _id: lane, epoch, owner, group, leaseExpiresAt, inFlight: [{id, claims}],
 *               lost: [{id, claims}], rev, lastClaim }
 * keys        { _id: key, seq, updatedAt }
 * completed_deliveries { _id: deliveryId, eventId, handler, laneId, key?, seq?, attempts,
 *               createdAt, completedAt }
 * meta        { _id: "schema", version } and { _id: "deliveryIds", next }
 * </pre>
 *
 * Headers are a list of pairs, not a sub-document: a header name may contain dots or start with a
 * dollar sign, and the list keeps their order.
 */
final class Fields {
  static final String ID = "_id";

  static final String EVENT_ID = "eventId";
  static final String HANDLER = "handler";
  static final String LANE_ID = "laneId";
  static final String KEY = "key";
  static final String SEQUENCE = "seq";
  static final String STATUS = "status";
  static final String PARKED = "parked";
  static final String HOLDS_PARKED = "holdsParked";
  static final String ATTEMPTS = "attempts";
  static final String CLAIMS = "claims";
  static final String AVAILABLE_AT = "availableAt";
  static final String LAST_ERROR = "lastError";

  /**
   * The lane epoch of the takeover that last charged the delivery an attempt: tells a charge which
   * of its conditional writes landed.
   */
  static final String CHARGED_EPOCH = "chargedEpoch";

  static final String CREATED_AT = "createdAt";
  static final String UPDATED_AT = "updatedAt";
  static final String COMPLETED_AT = "completedAt";

  /** A named timer: {@code handler/timerId}, unique (sparse index) while the timer is pending. */
  static final String TIMER = "timer";

  static final String TIMER_ID = "timerId";
  static final String FIRE_AT = "fireAt";

  /** +1 on every write to a timer's deadline and on every claim that takes it: its version. */
  static final String TIMER_REV = "timerRev";

  /** The claim counter under which a claim took the timer to fire it (firing while it matches). */
  static final String FIRING_CLAIMS = "firingClaims";

  static final String PENDING = "pending";
  static final String DEAD = "dead";

  static final String TYPE = "type";
  static final String PAYLOAD = "payload";
  static final String CONTENT_TYPE = "contentType";
  static final String HEADERS = "headers";
  static final String HEADER_NAME = "name";
  static final String HEADER_VALUE = "value";
  static final String HANDLERS = "handlers";

  static final String EPOCH = "epoch";
  static final String OWNER = "owner";
  static final String GROUP = "group";
  static final String LEASE_EXPIRES_AT = "leaseExpiresAt";
  static final String IN_FLIGHT = "inFlight";
  static final String LOST = "lost";
  static final String REV = "rev";
  static final String LAST_CLAIM = "lastClaim";
  static final String ENTRY_ID = "id";
  static final String ENTRY_CLAIMS = "claims";

  static final String VERSION = "version";
  static final String NEXT = "next";
  static final String SCHEMA_DOC = "schema";
  static final String DELIVERY_IDS_DOC = "deliveryIds";

  // key_sequences: sequences taken without a transaction whose deliveries are not written yet
  static final String RESERVED = "reserved";
  static final String RESERVATION = "t";
  static final String RESERVATION_EXPIRES = "exp";

  private Fields() {}
}
