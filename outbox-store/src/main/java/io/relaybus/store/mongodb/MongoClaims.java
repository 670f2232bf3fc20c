package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.and;
import static com.mongodb.client.model.Filters.eq;
import static com.mongodb.client.model.Filters.exists;
import static com.mongodb.client.model.Filters.gt;
import static com.mongodb.client.model.Filters.gte;
import static com.mongodb.client.model.Filters.in;
import static com.mongodb.client.model.Filters.lt;
import static com.mongodb.client.model.Filters.lte;
import static com.mongodb.client.model.Filters.nin;

import com.mongodb.MongoException;
import com.mongodb.bulk.BulkWriteResult;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.Projections;
import com.mongodb.client.model.Sorts;
import com.mongodb.client.model.UpdateOneModel;
import com.mongodb.client.model.Updates;
import com.mongodb.client.model.WriteModel;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import java.time.Clock;
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
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import org.bson.Document;
import org.bson.conversions.Bson;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The claim: read, decide, then record the batch with one conditional {@code bulkWrite} on the lane
 * documents. No delivery document is written on the happy path, and no transaction is used: a lane
 * write lands only if the lane still has the epoch, owner and {@code rev} the claim read, so a lane
 * taken over, relinquished or claimed concurrently in between records nothing and hands nothing
 * out.
 *
 * <ol>
 *   <li>Read the held lanes and which of their in-flight entries still count ({@link InFlight}).
 *   <li>Read up to {@code limit} due, pending, unparked deliveries of those lanes that are not in
 *       flight, lane by lane from a start lane that moves every claim (as PostgreSQL does), each
 *       lane oldest due first, and their events. A delivery whose event does not exist yet (a
 *       publish without a transaction still under way) is not handed out, and holds back its key.
 *   <li>Per-key rule, per (lane, handler, key) among the candidates: the first pending delivery of
 *       the key below the last candidate that is neither in flight nor a candidate blocks every
 *       candidate after it (one index probe per key, stopping at the first hit, however deep the
 *       key's backlog). In flight is checked on the document the probe reads (its entry's claim
 *       counter), not on the lists as read at the start: one that failed or was requeued since
 *       blocks. Dead deliveries are not pending, so they block nothing.
 *   <li>If keys were held back and the batch has room: park their followers ({@link MongoParking},
 *       best effort: they leave the claim index) and select again, past them (at most {@link
 *       #MAX_ROUNDS} selections, or {@link #MAX_EMPTY_ROUNDS} while none picked anything and each
 *       found other keys held back), so a blocked key never delays another key. A blocker that goes
 *       out with parked followers takes its run along, read in sequence order.
 *   <li>Dead-letter picks whose documents cannot be read, before anything is recorded.
 *   <li>Record: each lane's in-flight list becomes its live entries plus the picks.
 *   <li>Park the followers of keys still held back.
 * </ol>
 *
 * <p>Every parking (and the sweep before the first selection) reads the lanes again when it parked
 * anything, and unparks what it parked in a lane taken over meanwhile; the claim parks nothing more
 * in such a lane ({@link MongoParking}, "A parker that lost its lane").
 */
final class MongoClaims {
  /** Selections per claim at most: the first, and again after parking what held it back. */
  static final int MAX_ROUNDS = 3;

  /**
   * Selections per claim at most while none picked anything: each parks the followers of other keys
   * held back, so the claim goes on until it reaches a key's head (nothing in flight and every head
   * due: the claim returns something).
   */
  static final int MAX_EMPTY_ROUNDS = 32;

  private static final Logger log = LoggerFactory.getLogger(MongoClaims.class);

  /** Unanswered claims remembered per owner (consecutive failures), the oldest dropped first. */
  private static final int MAX_UNANSWERED = 16;

  /**
   * How old a delivery without its event must be before a claim dead-letters it. Without a
   * transaction the publisher writes the deliveries before the event, so a missing event may be a
   * publish still under way: until then the delivery only holds back its key. A publisher slower
   * than {@link MongoPublisher#REVIVE_AFTER} gives back what a claim buried meanwhile.
   */
  static final java.time.Duration MISSING_EVENT_GRACE = java.time.Duration.ofMinutes(10);

  /** The reason a delivery whose event document is missing is dead-lettered with. */
  static final String MISSING_EVENT = "unreadable event: the event document is missing";

  /** A claim whose lane write threw (it may have landed anyway): its tag and picks per lane. */
  private record Unanswered(String tag, Map<Integer, List<LaneDoc.Entry>> picks) {}

  /** Per owner, its claims whose lane write threw since its last claim that recorded. */
  private final Map<String, List<Unanswered>> unanswered = new ConcurrentHashMap<>();

  private final MongoCollections c;
  private final MongoLanes lanes;
  private final MongoParking parking;
  private final Clock clock;

  MongoClaims(MongoCollections collections, MongoLanes lanes, MongoParking parking, Clock clock) {
    this.c = collections;
    this.lanes = lanes;
    this.parking = parking;
    this.clock = clock;
  }

  /** A candidate with what the per-key rule needs. */
  private record Candidate(Document delivery, Document event) {
    long id() {
      return ((Number) delivery.get(Fields.ID)).longValue();
    }

    int lane() {
      return delivery.getInteger(Fields.LANE_ID);
    }

    String key() {
      return delivery.getString(Fields.KEY);
    }

    long sequence() {
      return ((Number) delivery.get(Fields.SEQUENCE)).longValue();
    }

    Group group() {
      return new Group(lane(), delivery.getString(Fields.HANDLER), key());
    }
  }

  /** One ordered queue: the deliveries of a key for one handler (a key lives in one lane). */
  record Group(int lane, String handler, String key) {
    Bson filter() {
      return and(eq(Fields.LANE_ID, lane), eq(Fields.HANDLER, handler), eq(Fields.KEY, key));
    }
  }

  /**
   * @param startLane the held lane to visit first; the others follow in lane order, wrapping around
   *     (the store moves the start by one lease every claim, so no lane starves)
   */
  List<ClaimedDelivery> claim(
      String owner, Collection<LaneLease> leases, int limit, int startLane) {
    Map<Integer, LaneDoc> read = lanes.read(leases.stream().map(LaneLease::lane).toList());
    Map<Integer, LaneLease> held = new LinkedHashMap<>();
    List<LaneDoc> heldDocs = new ArrayList<>();
    for (LaneLease lease : leases) {
      LaneDoc lane = read.get(lease.lane());
      if (lane != null && lane.heldBy(owner, lease.epoch())) {
        held.put(lease.lane(), lease);
        heldDocs.add(lane);
      }
    }
    if (held.isEmpty()) {
      return List.of();
    }
    List<Unanswered> givenBack = unanswered.getOrDefault(owner, List.of());
    InFlight inFlight = InFlight.resolve(c.deliveries, withoutUnanswered(heldDocs, givenBack));
    // lanes a parking found taken over meanwhile: nothing more is parked there
    Set<Integer> lost = new HashSet<>(parking.sweepIfDue(owner, held, inFlight));
    Map<Group, Document> blockers = new HashMap<>();
    // Deliveries whose event is not written yet: left out of the next selections.
    Set<Long> excluded = new HashSet<>(inFlight.excluded());
    int waiting = excluded.size();
    List<Candidate> picked = select(held.keySet(), startLane, inFlight, excluded, limit, blockers);
    // What each selection found holding keys back: a selection that finds only what an earlier
    // one did (its parking unparked nothing more) ends the rounds.
    Set<HeldBack> seen = new HashSet<>(holdingBack(blockers));
    boolean progress = true;
    for (int round = 1;
        (round < MAX_ROUNDS || (picked.isEmpty() && progress && round < MAX_EMPTY_ROUNDS))
            && (!blockers.isEmpty() || excluded.size() > waiting)
            && picked.size() < limit;
        round++) {
      // Keys held back filled part of the candidates: park their followers now and look again,
      // past them, so a blocked key never delays another key (not even for one claim). While
      // nothing is picked the rounds go on past MAX_ROUNDS: more keys of the lanes may have
      // followers older than their due heads than three selections reach (until 2026-12-07 the
      // claim then returned nothing, with every head due: reliability row 153).
      blockers.keySet().removeIf(group -> lost.contains(group.lane()));
      lost.addAll(parking.park(blockers, owner, held));
      blockers.clear();
      waiting = excluded.size();
      picked = select(held.keySet(), startLane, inFlight, excluded, limit, blockers);
      progress = seen.addAll(holdingBack(blockers)) | excluded.size() > waiting;
    }
    List<Document> holding = holdingParked(picked);
    if (!holding.isEmpty()) {
      // A blocker with parked followers goes out: bring its followers back into the claim index
      // and add its run, read in sequence order, to this very batch. (Selecting again by due time
      // would not do: followers older than their blocker would fill the candidates again.)
      parking.unparkFollowers(holding);
      picked = withRuns(picked, holding, inFlight, limit);
      // a run may take along a blocker an earlier round of this claim parked followers behind
      List<Document> alsoHolding = new ArrayList<>(holdingParked(picked));
      alsoHolding.removeIf(
          d -> holding.stream().anyMatch(h -> h.get(Fields.ID).equals(d.get(Fields.ID))));
      if (!alsoHolding.isEmpty()) {
        parking.unparkFollowers(alsoHolding);
      }
    }
    picked = deadLetterUnreadable(picked);
    picked = takeTimers(picked);
    Set<Integer> recorded = record(owner, heldDocs, inFlight, picked);
    unanswered.computeIfPresent(owner, (o, list) -> list == givenBack ? null : list);
    for (Candidate p : picked) {
      if (!recorded.contains(p.lane()) && p.delivery().get(Fields.FIRE_AT) != null) {
        untake(p);
      }
    }
    picked.removeIf(p -> !recorded.contains(p.lane()));
    // A blocker this batch hands out (in a blocker's run) is in flight: it counts as sent, and its
    // completion deletes it without unparking anything, so it must hold nothing parked.
    Set<Long> handedOut = new HashSet<>();
    picked.forEach(p -> handedOut.add(p.id()));
    blockers.values().removeIf(b -> handedOut.contains(((Number) b.get(Fields.ID)).longValue()));
    blockers.keySet().removeIf(group -> lost.contains(group.lane()));
    parking.park(blockers, owner, held);
    List<ClaimedDelivery> batch = new ArrayList<>();
    for (Candidate p : picked) {
      batch.add(toClaimed(p, held.get(p.lane()).epoch())); // cannot throw: read before recording
    }
    return ClaimedDelivery.inKeyOrder(batch);
  }

  /**
   * The lanes as if the picks of this owner's unanswered claims were not in flight: where such a
   * claim's write landed (the lane carries its tag) its batch is given back, as PostgreSQL gives
   * back a claim whose commit outcome is unknown. The caller never got it, and in flight it would
   * count as sent, letting the key's next delivery overtake it. Dropped in this claim's lane write.
   */
  private static List<LaneDoc> withoutUnanswered(List<LaneDoc> held, List<Unanswered> claims) {
    if (claims.isEmpty()) {
      return held;
    }
    List<LaneDoc> result = new ArrayList<>();
    for (LaneDoc lane : held) {
      List<LaneDoc.Entry> inFlight = new ArrayList<>(lane.inFlight());
      for (Unanswered u : claims) {
        if (u.tag().equals(lane.lastClaim())) {
          inFlight.removeAll(u.picks().getOrDefault(lane.lane(), List.of()));
        }
      }
      result.add(
          new LaneDoc(
              lane.lane(),
              lane.epoch(),
              lane.owner(),
              lane.group(),
              lane.expiresAt(),
              inFlight,
              lane.lost(),
              lane.rev(),
              lane.lastClaim()));
    }
    return result;
  }

  /** A key held back: its group, the delivery holding it back and whether that one is parked. */
  private record HeldBack(Group group, Object blocker, boolean parked) {}

  private static List<HeldBack> holdingBack(Map<Group, Document> blockers) {
    List<HeldBack> found = new ArrayList<>();
    blockers.forEach(
        (group, blocker) ->
            found.add(
                new HeldBack(
                    group,
                    blocker.get(Fields.ID),
                    Boolean.TRUE.equals(blocker.getBoolean(Fields.PARKED)))));
    return found;
  }

  /**
   * Adds to the picks the run behind each blocker that goes out: its key's next pending deliveries
   * in sequence order, while due and with their event, up to the limit. The run is read after the
   * selection's check of the keys' reservations, so it is checked again as the selection is: a key
   * with a sequence still being written sends no run (its blocker goes, taken before that
   * sequence), and a run stops before a delivery of its key written since its read.
   */
  private List<Candidate> withRuns(
      List<Candidate> picked, List<Document> blockers, InFlight inFlight, int limit) {
    List<Candidate> batch = new ArrayList<>(picked);
    Set<Long> taken = new HashSet<>(inFlight.excluded());
    picked.forEach(p -> taken.add(p.id()));
    Date now = Date.from(clock.instant().truncatedTo(ChronoUnit.MILLIS));
    Map<Group, List<Candidate>> runs = new LinkedHashMap<>();
    Map<Group, Long> runFrom = new HashMap<>();
    int size = batch.size();
    for (Document blocker : blockers) {
      int room = limit - size;
      if (room <= 0) {
        break;
      }
      Group group =
          new Group(
              blocker.getInteger(Fields.LANE_ID),
              blocker.getString(Fields.HANDLER),
              blocker.getString(Fields.KEY));
      List<Document> next =
          c.deliveries
              .find(
                  and(
                      group.filter(),
                      eq(Fields.STATUS, Fields.PENDING),
                      gt(Fields.SEQUENCE, ((Number) blocker.get(Fields.SEQUENCE)).longValue())))
              .sort(Sorts.ascending(Fields.SEQUENCE))
              .limit(room + taken.size())
              .into(new ArrayList<>());
      List<Document> run = new ArrayList<>();
      for (Document d : next) {
        long id = ((Number) d.get(Fields.ID)).longValue();
        if (inFlight.inFlightIds().contains(id) && !inFlight.stillInFlight(d)) {
          break; // in flight when the claim began, pending again since: it holds back its key
        }
        if (taken.contains(id)) {
          if (inFlight.excluded().contains(id) && !inFlight.inFlightIds().contains(id)) {
            break; // lost and not charged yet: it holds back its key
          }
          continue; // in flight, or picked already
        }
        if (run.size() >= room || d.getDate(Fields.AVAILABLE_AT).after(now)) {
          break;
        }
        run.add(d);
      }
      Map<String, Document> events = new HashMap<>();
      if (!run.isEmpty()) {
        Set<String> eventIds = new HashSet<>();
        run.forEach(d -> eventIds.add(d.getString(Fields.EVENT_ID)));
        for (Document e : c.events.find(in(Fields.ID, eventIds))) {
          events.put(e.getString(Fields.ID), e);
        }
      }
      List<Candidate> candidates = new ArrayList<>();
      for (Document d : run) {
        Document event = events.get(d.getString(Fields.EVENT_ID));
        if (event == null) {
          break; // its publish is still under way: it holds back the rest
        }
        Candidate candidate = new Candidate(d, event);
        candidates.add(candidate);
        taken.add(candidate.id());
      }
      if (!candidates.isEmpty()) {
        runs.put(group, candidates);
        runFrom.put(group, ((Number) blocker.get(Fields.SEQUENCE)).longValue());
        size += candidates.size();
      }
    }
    if (runs.isEmpty()) {
      return batch;
    }
    Set<String> keys = new HashSet<>();
    runs.keySet().forEach(g -> keys.add(g.key()));
    Set<String> reserved = reservedKeys(keys);
    Set<Long> out = new HashSet<>();
    batch.forEach(p -> out.add(p.id()));
    runs.values().forEach(run -> run.forEach(p -> out.add(p.id())));
    for (Map.Entry<Group, List<Candidate>> entry : runs.entrySet()) {
      Group group = entry.getKey();
      if (reserved.contains(group.key())) {
        continue; // a publisher is still writing a sequence of the key: the run waits for it
      }
      List<Candidate> run = entry.getValue();
      // Anything of the key inside the run's range that is not out and not in the run was written
      // since the run was read (a sequence being written when the reservations were read above,
      // whose publisher released it since): the run stops before it.
      // (A delivery in flight when the claim began and pending again since counts too.)
      Document newer =
          firstNotInFlight(
              and(
                  group.filter(),
                  eq(Fields.STATUS, Fields.PENDING),
                  gt(Fields.SEQUENCE, runFrom.get(group)),
                  lt(Fields.SEQUENCE, run.get(run.size() - 1).sequence()),
                  nin(Fields.ID, out)),
              inFlight);
      long until =
          newer == null ? Long.MAX_VALUE : ((Number) newer.get(Fields.SEQUENCE)).longValue();
      run.stream().filter(p -> p.sequence() < until).forEach(batch::add);
    }
    return batch;
  }

  /**
   * Candidates, per-key rule, picks; fills {@code blockers} with the keys held back, and adds to
   * {@code excluded} the candidates whose event is missing and not yet overdue.
   */
  private List<Candidate> select(
      Set<Integer> lanes,
      int startLane,
      InFlight inFlight,
      Set<Long> excluded,
      int limit,
      Map<Group, Document> blockers) {
    List<Candidate> candidates =
        holdReserved(candidates(lanes, startLane, excluded, limit), excluded);
    Map<Group, Long> blockedFrom = new HashMap<>();
    applyPerKeyRule(candidates, inFlight, blockedFrom, blockers);
    List<Candidate> picked = new ArrayList<>();
    for (Candidate candidate : candidates) {
      if (awaitsEvent(candidate)) {
        excluded.add(candidate.id());
        continue;
      }
      Long from = candidate.key() == null ? null : blockedFrom.get(candidate.group());
      if (from == null || candidate.sequence() < from) {
        picked.add(candidate); // an overdue one without its event is dead-lettered
      }
    }
    return picked;
  }

  /**
   * Leaves out (adding them to {@code excluded}) the candidates of keys a publisher without a
   * transaction has taken sequences of and not yet written the deliveries of ({@link
   * MongoPublisher#nextSequence}): one of those may come before them. One read of the candidates'
   * key counters; expired reservations (a publisher that died) are ignored.
   */
  private List<Candidate> holdReserved(List<Candidate> candidates, Set<Long> excluded) {
    Set<String> keys = new HashSet<>();
    candidates.forEach(
        cand -> {
          if (cand.key() != null) {
            keys.add(cand.key());
          }
        });
    if (keys.isEmpty()) {
      return candidates;
    }
    Set<String> reserved = reservedKeys(keys);
    if (reserved.isEmpty()) {
      return candidates;
    }
    List<Candidate> kept = new ArrayList<>();
    for (Candidate cand : candidates) {
      if (cand.key() != null && reserved.contains(cand.key())) {
        excluded.add(cand.id());
      } else {
        kept.add(cand);
      }
    }
    return kept;
  }

  /** The keys of {@code keys} with an unexpired reservation: one read of their counters. */
  private Set<String> reservedKeys(Set<String> keys) {
    Date now = Date.from(clock.instant());
    Set<String> reserved = new HashSet<>();
    for (Document counter :
        c.keys
            .find(and(in(Fields.ID, keys), exists(Fields.RESERVED + ".0")))
            .projection(new Document(Fields.RESERVED, 1))) {
      for (Document r : counter.getList(Fields.RESERVED, Document.class, List.of())) {
        Date expires = r.getDate(Fields.RESERVATION_EXPIRES);
        if (expires != null && expires.after(now)) {
          reserved.add(counter.getString(Fields.ID));
        }
      }
    }
    return reserved;
  }

  /**
   * Whether the candidate's event is missing and the publish may still be under way: it is not
   * handed out and holds back its key. Once older than {@link #MISSING_EVENT_GRACE} it is
   * dead-lettered instead ({@link #deadLetterUnreadable}).
   */
  private boolean awaitsEvent(Candidate candidate) {
    if (candidate.event() != null) {
      return false;
    }
    Date created = candidate.delivery().getDate(Fields.CREATED_AT);
    return created == null
        || clock.instant().isBefore(created.toInstant().plus(MISSING_EVENT_GRACE));
  }

  /**
   * Named timers among the picks ({@link MongoTimers}): a due one whose deadline was extended
   * meanwhile is re-armed ({@code availableAt = fireAt}) and not handed out; the others are taken
   * for firing before they are recorded. Both writes are conditional on the timer's revision, so an
   * extend that wrote first wins and the timer stays. A timer left out takes the later picks of its
   * key with it (they must wait for it).
   */
  private List<Candidate> takeTimers(List<Candidate> picked) {
    Date now = Date.from(clock.instant().truncatedTo(ChronoUnit.MILLIS));
    Set<Long> dropped = new HashSet<>();
    Map<Group, Long> droppedFrom = new HashMap<>();
    // A key's picks in sequence order, and none taken behind one left out: a timer taken and then
    // left out with the rest of its key was marked firing (firingClaims) and never in flight, and
    // answered ALREADY_FIRING to a cancel or extend until its key's re-armed timer ahead of it
    // went out (until 2026-12-07).
    List<Candidate> inOrder = new ArrayList<>(picked);
    inOrder.sort(
        java.util.Comparator.comparingLong(p -> p.key() == null ? Long.MIN_VALUE : p.sequence()));
    for (Candidate p : inOrder) {
      Document d = p.delivery();
      Date fireAt = d.getDate(Fields.FIRE_AT);
      if (fireAt == null) {
        continue;
      }
      Long behind = p.key() == null ? null : droppedFrom.get(p.group());
      if (behind != null && p.sequence() > behind) {
        continue; // left out below with the rest of its key: not taken
      }
      boolean due = !fireAt.after(now);
      Bson update =
          due
              ? Updates.combine(
                  Updates.set(Fields.FIRING_CLAIMS, d.getInteger(Fields.CLAIMS)),
                  Updates.inc(Fields.TIMER_REV, 1L))
              : Updates.combine(
                  Updates.set(Fields.AVAILABLE_AT, fireAt), Updates.inc(Fields.TIMER_REV, 1L));
      boolean landed =
          c.deliveries
                  .updateOne(
                      and(
                          eq(Fields.ID, p.id()),
                          eq(Fields.TIMER_REV, d.get(Fields.TIMER_REV)),
                          eq(Fields.STATUS, Fields.PENDING)),
                      update)
                  .getMatchedCount()
              == 1;
      if (!due || !landed) {
        dropped.add(p.id());
        if (p.key() != null) {
          droppedFrom.merge(p.group(), p.sequence(), Math::min);
        }
      }
    }
    if (dropped.isEmpty()) {
      return picked;
    }
    List<Candidate> kept = new ArrayList<>();
    for (Candidate p : picked) {
      Long from = p.key() == null ? null : droppedFrom.get(p.group());
      if (!dropped.contains(p.id()) && (from == null || p.sequence() < from)) {
        kept.add(p);
      }
    }
    return kept;
  }

  /**
   * A document a hand-written publisher wrote badly (a payload that is not binary, say) cannot be
   * sent: it is dead-lettered with the reason before anything is recorded, so if that fails the
   * claim throws with nothing in flight. Dead, it blocks nothing: the rest of its key goes on. When
   * the conditional write does not land (the delivery changed meanwhile), the key's later picks
   * wait for the next claim.
   */
  private List<Candidate> deadLetterUnreadable(List<Candidate> picked) {
    List<Candidate> kept = new ArrayList<>();
    Map<Group, Long> heldFrom = new HashMap<>();
    for (Candidate p : picked) {
      Long from = p.key() == null ? null : heldFrom.get(p.group());
      if (from != null && p.sequence() > from) {
        continue;
      }
      String unreadable = unreadable(p);
      if (unreadable == null) {
        kept.add(p);
        continue;
      }
      Document d = p.delivery();
      String reason = p.event() == null ? MISSING_EVENT : "unreadable event: " + unreadable;
      boolean buried =
          c.deliveries
                  .updateOne(
                      and(
                          eq(Fields.ID, p.id()),
                          eq(Fields.CLAIMS, d.getInteger(Fields.CLAIMS)),
                          eq(Fields.STATUS, Fields.PENDING)),
                      Updates.combine(
                          Updates.set(Fields.ATTEMPTS, d.getInteger(Fields.ATTEMPTS) + 1),
                          Updates.set(Fields.CLAIMS, d.getInteger(Fields.CLAIMS) + 1),
                          Updates.set(Fields.STATUS, Fields.DEAD),
                          Updates.set(Fields.PARKED, false),
                          Updates.set(Fields.LAST_ERROR, reason),
                          Updates.set(Fields.UPDATED_AT, Date.from(clock.instant())),
                          Updates.unset(Fields.TIMER)))
                  .getModifiedCount()
              == 1;
      if (!buried && p.key() != null) {
        heldFrom.merge(p.group(), p.sequence(), Math::min);
      }
    }
    return kept;
  }

  /** Why the candidate's documents cannot be turned into a delivery, or null when they can. */
  private static String unreadable(Candidate p) {
    if (p.event() == null) {
      return MISSING_EVENT;
    }
    try {
      toClaimed(p, 0);
      return null;
    } catch (RuntimeException e) {
      // The message names types, never values: no payload in the reason.
      return e.getClass().getSimpleName() + ": " + e.getMessage();
    }
  }

  /**
   * Best effort: a taken timer whose lane did not record it is not firing after all. Never throws:
   * the claim's batch is recorded by now, and a claim that threw would leave it handed to nobody.
   * Left taken, the timer answers "already firing" to a cancel or extend until a claim takes it
   * again (it is due, so the next claim of its lane does).
   */
  private void untake(Candidate p) {
    try {
      c.deliveries.updateOne(
          and(
              eq(Fields.ID, p.id()),
              eq(Fields.FIRING_CLAIMS, p.delivery().getInteger(Fields.CLAIMS))),
          Updates.combine(Updates.unset(Fields.FIRING_CLAIMS), Updates.inc(Fields.TIMER_REV, 1L)));
    } catch (MongoException e) {
      log.warn("Giving back a timer that a claim took and did not record failed.", e);
    }
  }

  private static List<Document> holdingParked(List<Candidate> picked) {
    return picked.stream()
        .map(Candidate::delivery)
        .filter(d -> Boolean.TRUE.equals(d.getBoolean(Fields.HOLDS_PARKED)))
        .toList();
  }

  /**
   * Due deliveries lane by lane, from {@code startLane} to the last held lane and then from the
   * first, each lane oldest due first: at most two index scans in (lane, due, id) order.
   */
  private List<Candidate> candidates(
      Set<Integer> lanes, int startLane, Set<Long> excluded, int limit) {
    Bson due =
        and(
            in(Fields.LANE_ID, lanes),
            eq(Fields.STATUS, Fields.PENDING),
            eq(Fields.PARKED, false),
            lte(Fields.AVAILABLE_AT, Date.from(clock.instant().truncatedTo(ChronoUnit.MILLIS))));
    if (!excluded.isEmpty()) {
      due = and(due, nin(Fields.ID, excluded));
    }
    Bson laneOrder = Sorts.ascending(Fields.LANE_ID, Fields.AVAILABLE_AT, Fields.ID);
    List<Document> deliveries =
        c.deliveries
            .find(and(due, gte(Fields.LANE_ID, startLane)))
            .sort(laneOrder)
            .limit(limit)
            .into(new ArrayList<>());
    if (deliveries.size() < limit && startLane > 0) {
      c.deliveries
          .find(and(due, lt(Fields.LANE_ID, startLane)))
          .sort(laneOrder)
          .limit(limit - deliveries.size())
          .into(deliveries);
    }
    Map<String, Document> events = new HashMap<>();
    if (!deliveries.isEmpty()) {
      Set<String> eventIds = new HashSet<>();
      deliveries.forEach(d -> eventIds.add(d.getString(Fields.EVENT_ID)));
      for (Document e : c.events.find(in(Fields.ID, eventIds))) {
        events.put(e.getString(Fields.ID), e);
      }
    }
    return deliveries.stream()
        .map(d -> new Candidate(d, events.get(d.getString(Fields.EVENT_ID))))
        .toList();
  }

  /**
   * Fills {@code blockedFrom}: per group, the sequence from which its candidates must wait; and
   * {@code blockers}: per group held back, the delivery that holds it back (an earlier pending
   * delivery, or a candidate whose event is not written yet).
   */
  private void applyPerKeyRule(
      List<Candidate> candidates,
      InFlight inFlight,
      Map<Group, Long> blockedFrom,
      Map<Group, Document> blockers) {
    Map<Group, List<Candidate>> groups = new LinkedHashMap<>();
    for (Candidate candidate : candidates) {
      if (candidate.key() != null) {
        groups.computeIfAbsent(candidate.group(), g -> new ArrayList<>()).add(candidate);
      }
    }
    // In flight counts as emitted; a lost delivery not charged yet does not (it blocks its key).
    Set<Long> skip = new HashSet<>();
    candidates.forEach(cand -> skip.add(cand.id()));
    for (Map.Entry<Group, List<Candidate>> entry : groups.entrySet()) {
      Group group = entry.getKey();
      long last = entry.getValue().stream().mapToLong(Candidate::sequence).max().orElseThrow();
      Bson earlier =
          and(group.filter(), eq(Fields.STATUS, Fields.PENDING), lt(Fields.SEQUENCE, last));
      Document first = firstNotInFlight(and(earlier, nin(Fields.ID, skip)), inFlight);
      long from = Long.MAX_VALUE;
      if (first != null) {
        from = ((Number) first.get(Fields.SEQUENCE)).longValue();
        blockers.put(group, first);
      }
      for (Candidate candidate : entry.getValue()) {
        if (awaitsEvent(candidate) && candidate.sequence() < from) {
          // its key waits for the event: a blocker, so its followers are parked behind it
          from = candidate.sequence();
          blockers.put(group, candidate.delivery());
        }
      }
      if (from != Long.MAX_VALUE) {
        blockedFrom.put(group, from);
      }
    }
  }

  /**
   * The first delivery matching {@code filter} in sequence order that is not in flight as read now
   * ({@link InFlight#stillInFlight}): the in-flight list was read before the candidates, and a
   * delivery in it that failed, was buried and requeued, or was released since is pending again
   * ahead of its key's later deliveries, which must not take it for sent (until 2026-12-07 the
   * probes excluded the in-flight ids as read, and a dead letter requeued during a claim was
   * overtaken by its key's event published after the requeue: reliability row 139). Reads past the
   * key's deliveries in flight, no more: the first that is not ends it. Only what the parking of a
   * blocker needs is read (a batch may bring a few more small documents of the key, when some of
   * its deliveries are in flight and others wait behind the first that is not).
   */
  private Document firstNotInFlight(Bson filter, InFlight inFlight) {
    int reach = inFlight.inFlightIds().size() + 1;
    for (Document d :
        c.deliveries
            .find(filter)
            .projection(
                Projections.include(
                    Fields.LANE_ID,
                    Fields.HANDLER,
                    Fields.KEY,
                    Fields.SEQUENCE,
                    Fields.STATUS,
                    Fields.CLAIMS,
                    Fields.PARKED,
                    Fields.HOLDS_PARKED))
            .sort(Sorts.ascending(Fields.SEQUENCE))
            .limit(reach)
            .batchSize(Math.min(reach, 101))) {
      if (!inFlight.stillInFlight(d)) {
        return d;
      }
    }
    return null;
  }

  /** Records the picks in their lanes' in-flight lists; returns the lanes where that landed. */
  private Set<Integer> record(
      String owner, List<LaneDoc> held, InFlight inFlight, List<Candidate> picked) {
    Map<Integer, List<LaneDoc.Entry>> picksByLane = new HashMap<>();
    for (Candidate p : picked) {
      picksByLane
          .computeIfAbsent(p.lane(), l -> new ArrayList<>())
          .add(new LaneDoc.Entry(p.id(), p.delivery().getInteger(Fields.CLAIMS)));
    }
    String tag = UUID.randomUUID().toString();
    List<WriteModel<Document>> writes = new ArrayList<>();
    for (LaneDoc lane : held) {
      List<LaneDoc.Entry> picks = picksByLane.getOrDefault(lane.lane(), List.of());
      List<LaneDoc.Entry> live = inFlight.live(lane.lane());
      if (picks.isEmpty() && live.size() == lane.inFlight().size()) {
        continue; // nothing to add, nothing to prune
      }
      List<LaneDoc.Entry> entries = new ArrayList<>(live);
      entries.addAll(picks);
      writes.add(
          new UpdateOneModel<>(
              and(
                  eq(Fields.ID, lane.lane()),
                  eq(Fields.EPOCH, lane.epoch()),
                  eq(Fields.OWNER, owner),
                  eq(Fields.REV, lane.rev())),
              Updates.combine(
                  Updates.set(Fields.IN_FLIGHT, LaneDoc.documents(entries)),
                  Updates.set(Fields.LAST_CLAIM, tag),
                  Updates.inc(Fields.REV, 1L))));
    }
    Set<Integer> recorded = new HashSet<>(picksByLane.keySet());
    if (writes.isEmpty()) {
      return recorded;
    }
    try {
      BulkWriteResult result = c.lanes.bulkWrite(writes, new BulkWriteOptions().ordered(false));
      if (result.getMatchedCount() < writes.size()) {
        // Some lane changed since we read it: only lanes carrying our tag recorded our picks.
        Map<Integer, LaneDoc> now = lanes.read(picksByLane.keySet());
        recorded.removeIf(lane -> now.get(lane) == null || !tag.equals(now.get(lane).lastClaim()));
      }
      return recorded;
    } catch (RuntimeException e) {
      // Landed or not, the caller gets no batch: the owner's next claim gives back what did land.
      // The same when the write answered and the read of what landed failed.
      unanswered.compute(
          owner,
          (o, list) -> {
            List<Unanswered> next = new ArrayList<>(list == null ? List.of() : list);
            next.add(new Unanswered(tag, picksByLane));
            return next.size() > MAX_UNANSWERED ? next.subList(1, next.size()) : next;
          });
      throw e;
    }
  }

  private static ClaimedDelivery toClaimed(Candidate p, long epoch) {
    Document d = p.delivery();
    Document e = p.event();
    Object sequence = d.get(Fields.SEQUENCE);
    return new ClaimedDelivery(
        new DeliveryToken(
            p.id(), p.lane(), epoch, d.getInteger(Fields.CLAIMS), d.getString(Fields.EVENT_ID)),
        d.getString(Fields.EVENT_ID),
        d.getString(Fields.HANDLER),
        d.getString(Fields.KEY),
        sequence == null ? null : ((Number) sequence).longValue(),
        d.getInteger(Fields.ATTEMPTS),
        e.getString(Fields.TYPE),
        e.get(Fields.PAYLOAD, org.bson.types.Binary.class).getData(),
        e.getString(Fields.CONTENT_TYPE),
        MongoPublisher.headers(e),
        e.getDate(Fields.CREATED_AT).toInstant());
  }
}
