package io.relaybus.store.mongodb;

import java.time.Instant;
import java.util.ArrayList;
import java.util.Date;
import java.util.List;
import org.bson.Document;

/**
 * A lane document as read.
 *
 * <p><b>In flight.</b> {@code inFlight} lists {@code (id, claims)} entries: the deliveries the
 * holder claimed, with each one's claim counter at that moment. An entry counts only while the
 * delivery still exists, is pending and has that counter: every write that ends a claim (complete
 * deletes, reschedule, bury, release and the takeover charge bump {@code claims}) therefore takes
 * the delivery out of flight without touching the lane document, and the next claim prunes the
 * stale entries. This keeps completions and failures free of lane writes, so they never conflict
 * with each other or with the holder's claims.
 *
 * <p><b>Lost.</b> A takeover moves {@code inFlight} into {@code lost} in the same write that bumps
 * the epoch, then charges each lost entry one attempt (conditional on its counter, so charging is
 * idempotent) and empties {@code lost}. If the taker dies in between, the next acquirer of the lane
 * charges what is left.
 *
 * @param rev +1 on every write that changes epoch, owner or in-flight entries (not on renewal, so a
 *     renewal never fails a claim): the optimistic-concurrency check of acquire and claim; a
 *     takeover also checks the lease is still expired (or free, or of its group), since a renewal
 *     leaves {@code rev} as it was
 * @param lastClaim a random tag the last successful claim wrote, to tell which lane writes of a
 *     partly failed claim landed
 */
record LaneDoc(
    int lane,
    long epoch,
    String owner,
    String group,
    Instant expiresAt,
    List<Entry> inFlight,
    List<Entry> lost,
    long rev,
    String lastClaim) {

  /** One claimed delivery: its id and its claim counter when it was claimed. */
  record Entry(long id, int claims) {
    Document toDocument() {
      return new Document(Fields.ENTRY_ID, id).append(Fields.ENTRY_CLAIMS, claims);
    }
  }

  static LaneDoc of(Document d) {
    Date expires = d.getDate(Fields.LEASE_EXPIRES_AT);
    return new LaneDoc(
        ((Number) d.get(Fields.ID)).intValue(),
        number(d, Fields.EPOCH),
        d.getString(Fields.OWNER),
        d.getString(Fields.GROUP),
        expires == null ? null : expires.toInstant(),
        entries(d, Fields.IN_FLIGHT),
        entries(d, Fields.LOST),
        number(d, Fields.REV),
        d.getString(Fields.LAST_CLAIM));
  }

  boolean heldBy(String owner, long epoch) {
    return owner.equals(this.owner) && this.epoch == epoch;
  }

  static List<Document> documents(List<Entry> entries) {
    return entries.stream().map(Entry::toDocument).toList();
  }

  private static List<Entry> entries(Document d, String field) {
    List<Entry> result = new ArrayList<>();
    List<?> raw = d.get(field, List.class);
    if (raw != null) {
      for (Object o : raw) {
        Document e = (Document) o;
        result.add(
            new Entry(
                ((Number) e.get(Fields.ENTRY_ID)).longValue(),
                ((Number) e.get(Fields.ENTRY_CLAIMS)).intValue()));
      }
    }
    return result;
  }

  private static long number(Document d, String field) {
    Object value = d.get(field);
    return value == null ? 0 : ((Number) value).longValue();
  }
}
