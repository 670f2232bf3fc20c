package io.relaybus.store.randomized;

import io.relaybus.store.DeliveryToken;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.randomized.Journal.Grant;
import io.relaybus.store.randomized.Journal.Handout;
import io.relaybus.store.randomized.Journal.Instance;
import io.relaybus.store.randomized.Journal.Kind;
import io.relaybus.store.randomized.Journal.Relinquish;
import io.relaybus.store.randomized.Journal.Removal;
import io.relaybus.store.randomized.Journal.Requeue;
import io.relaybus.store.randomized.Journal.Settlement;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Checks the journal of a finished run (chaos, then the drain) against the store's guarantees. It
 * uses only what the journal proves: an effect took place inside its call's window, so one call is
 * known to precede another only when it ended before the other started. Each finding names the
 * invariant and the ids involved; the caller prefixes the seed.
 *
 * <ol>
 *   <li><b>Nothing lost</b>: per (event, handler), every delivery a publish created (its {@code
 *       addedHandlers}) was completed, removed by a timer call (cancel, replace), purged as a dead
 *       letter, or is still in the store; and no more than that (a cancelled timer that is also
 *       completed, a delivery completed twice). A delivery that vanished is a legitimate purge only
 *       if it could have been dead: buried, rescheduled to death, or handed out with its last
 *       attempt and lost in a takeover, with no requeue after its last hand-out, and a purge after.
 *   <li><b>Nothing handed out twice under one claim</b>: (delivery, epoch, claims) is unique.
 *   <li><b>Fencing</b>: no completion, reschedule, burial or release through a token took effect
 *       after its lane was granted at a higher epoch or relinquished, or after a newer claim handed
 *       the same delivery out.
 *   <li><b>Per-key order</b>: a batch lists each (handler, key) in rising sequence; no delivery is
 *       handed out while an earlier-sequence delivery of its (handler, key) was known pending and
 *       not in flight for the whole claim (from its publish, a reschedule, a release or a requeue
 *       until its next hand-out); and of two publishes of a key, the one that committed first has
 *       the lower sequence while it is still pending (a key counter may only restart when nothing
 *       of the key is pending).
 * </ol>
 */
final class Checker {
  private static final int MAX_FINDINGS_PER_KIND = 20;

  private final World world;
  private final Drain drain;
  private final Map<String, List<String>> findings = new LinkedHashMap<>();

  private final List<Handout> handouts;
  private final Map<Long, List<Handout>> handoutsById = new HashMap<>();
  private final Map<DeliveryToken, List<Settlement>> settlementsByToken = new HashMap<>();
  private final Map<Long, List<Settlement>> settlementsById = new HashMap<>();
  private final Map<Long, List<Requeue>> requeuesById = new HashMap<>();
  private final Map<Long, Long> sequenceById = new HashMap<>();
  private final Map<Long, DeliveryView> left = new HashMap<>();

  /** Per (event, handler): the delivery ids seen, ascending (ids follow creation). */
  private final Map<List<String>, List<Long>> idsByRoute = new TreeMap<>(Checker::compareRoutes);

  private final Map<List<String>, List<Instance>> instancesByRoute =
      new TreeMap<>(Checker::compareRoutes);
  private final Map<Long, Instance> instanceById = new HashMap<>();

  Checker(World world, Drain drain) {
    this.world = world;
    this.drain = drain;
    Journal journal = world.journal;
    handouts = new ArrayList<>(journal.handouts);
    handouts.sort(Comparator.comparingLong(Handout::start).thenComparingInt(Handout::position));
    for (Handout h : handouts) {
      handoutsById.computeIfAbsent(h.id(), k -> new ArrayList<>()).add(h);
      sequenceById.put(h.id(), h.delivery().sequence());
      addId(List.of(h.delivery().eventId(), h.delivery().handler()), h.id());
    }
    for (DeliveryView v : drain.left) {
      left.put(v.id(), v);
      sequenceById.put(v.id(), v.sequence());
      addId(List.of(v.eventId(), v.handler()), v.id());
    }
    for (Settlement s : journal.settlements) {
      settlementsByToken.computeIfAbsent(s.token(), k -> new ArrayList<>()).add(s);
      settlementsById.computeIfAbsent(s.token().deliveryId(), k -> new ArrayList<>()).add(s);
    }
    settlementsById.values().forEach(l -> l.sort(Comparator.comparingLong(Settlement::start)));
    for (Requeue r : journal.requeues) {
      if (r.effective()) {
        requeuesById.computeIfAbsent(r.id(), k -> new ArrayList<>()).add(r);
      }
    }
    List<Instance> instances = new ArrayList<>(journal.instances);
    instances.sort(Comparator.comparingLong(Instance::end));
    for (Instance i : instances) {
      instancesByRoute
          .computeIfAbsent(List.of(i.eventId(), i.handler()), k -> new ArrayList<>())
          .add(i);
    }
    idsByRoute.values().forEach(ids -> ids.sort(Long::compare));
    // the k-th delivery of a route belongs to its k-th publish, when the counts agree
    idsByRoute.forEach(
        (route, ids) -> {
          List<Instance> created = instancesByRoute.getOrDefault(route, List.of());
          if (created.size() == ids.size()) {
            for (int k = 0; k < ids.size(); k++) {
              instanceById.put(ids.get(k), created.get(k));
            }
          }
        });
  }

  private void addId(List<String> route, long id) {
    List<Long> ids = idsByRoute.computeIfAbsent(route, k -> new ArrayList<>());
    if (!ids.contains(id)) {
      ids.add(id);
    }
  }

  private static int compareRoutes(List<String> a, List<String> b) {
    int c = a.get(0).compareTo(b.get(0));
    return c != 0 ? c : a.get(1).compareTo(b.get(1));
  }

  /** Every finding, grouped by invariant, at most {@value #MAX_FINDINGS_PER_KIND} of each. */
  List<String> check() {
    world.journal.violations.forEach(v -> add("seen during the run or the drain", v));
    handedOutOnceUnderOneClaim();
    fencing();
    nothingLost();
    batchOrder();
    keyOrderAgainstPendingPredecessors();
    sequenceFollowsCommitOrder();
    List<String> all = new ArrayList<>();
    findings.forEach(
        (kind, list) -> {
          all.add("%s: %d finding(s)".formatted(kind, list.size()));
          list.stream().limit(MAX_FINDINGS_PER_KIND).forEach(f -> all.add("  " + f));
        });
    return all;
  }

  private void add(String kind, String finding) {
    findings.computeIfAbsent(kind, k -> new ArrayList<>()).add(finding);
  }

  private void handedOutOnceUnderOneClaim() {
    Map<List<Long>, Handout> seen = new HashMap<>();
    for (Handout h : handouts) {
      DeliveryToken t = h.delivery().token();
      Handout before = seen.putIfAbsent(List.of(t.deliveryId(), t.epoch(), (long) t.claims()), h);
      if (before != null) {
        add(
            "handed out twice under one claim",
            "delivery %d (token %s) to %s in claim %d and to %s in claim %d; %s"
                .formatted(
                    t.deliveryId(),
                    t,
                    before.owner(),
                    before.claimId(),
                    h.owner(),
                    h.claimId(),
                    history(t.deliveryId())));
      }
    }
    settlementsById.forEach(
        (id, list) -> {
          long done = list.stream().filter(s -> s.kind() == Kind.COMPLETE && s.effective()).count();
          if (done > 1) {
            add("completed twice", "delivery %d completed %d times".formatted(id, done));
            // what happened to it, in time order: enough to tell which path handed it out again
            handoutsById
                .getOrDefault(id, List.of())
                .forEach(
                    h ->
                        add(
                            "completed twice",
                            "    handed out to %s, claim %d, token %s, at %d-%d"
                                .formatted(
                                    h.owner(),
                                    h.claimId(),
                                    h.delivery().token(),
                                    h.start(),
                                    h.end())));
            // the lane's grants between its first and last hand-out: a takeover racing a completion
            int lane = list.get(0).token().lane();
            List<Handout> outs = handoutsById.getOrDefault(id, List.of());
            long from = outs.isEmpty() ? list.get(0).start() : outs.get(0).start();
            long to = outs.isEmpty() ? Long.MAX_VALUE : outs.get(outs.size() - 1).start();
            world.journal.grants.stream()
                .filter(g -> g.lease().lane() == lane && g.end() >= from && g.start() <= to)
                .sorted(Comparator.comparingLong(Grant::start))
                .forEach(
                    g ->
                        add(
                            "completed twice",
                            "    lane %d granted to %s at epoch %d%s at %d-%d"
                                .formatted(
                                    lane,
                                    g.owner(),
                                    g.lease().epoch(),
                                    g.lease().takenOver()
                                        ? " (taken over, charging " + g.lease().charged() + ")"
                                        : "",
                                    g.start(),
                                    g.end())));
            list.forEach(
                st ->
                    add(
                        "completed twice",
                        "    %s%s through %s at %d-%d"
                            .formatted(
                                st.kind(),
                                st.effective() ? "" : " (no effect)",
                                st.token(),
                                st.start(),
                                st.end())));
          }
        });
  }

  private void fencing() {
    Map<Integer, List<Grant>> grantsByLane = new HashMap<>();
    for (Grant g : world.journal.grants) {
      grantsByLane.computeIfAbsent(g.lease().lane(), k -> new ArrayList<>()).add(g);
    }
    Map<List<Long>, Long> relinquishedAt = new HashMap<>();
    for (Relinquish r : world.journal.relinquishes) {
      if (r.released() == r.leases().size()) {
        r.leases()
            .forEach(
                l -> relinquishedAt.merge(List.of((long) l.lane(), l.epoch()), r.end(), Math::min));
      }
    }
    for (List<Settlement> list : settlementsByToken.values()) {
      for (Settlement s : list) {
        if (!s.effective()) {
          continue;
        }
        DeliveryToken t = s.token();
        for (Grant g : grantsByLane.getOrDefault(t.lane(), List.of())) {
          if (g.lease().epoch() > t.epoch() && g.end() < s.start()) {
            add(
                "fencing: stale token took effect",
                "%s through %s after lane %d went to %s at epoch %d"
                    .formatted(s.kind(), t, t.lane(), g.owner(), g.lease().epoch()));
            break;
          }
        }
        Long gone = relinquishedAt.get(List.of((long) t.lane(), t.epoch()));
        if (gone != null && gone < s.start()) {
          add(
              "fencing: stale token took effect",
              "%s through %s after its lane was relinquished".formatted(s.kind(), t));
        }
        List<Handout> of = handoutsById.getOrDefault(t.deliveryId(), List.of());
        Handout mine =
            of.stream().filter(h -> h.delivery().token().equals(t)).findFirst().orElse(null);
        for (Handout newer : of) {
          if (mine != null
              && !newer.delivery().token().equals(t)
              && newer.start() > mine.end()
              && newer.end() < s.start()) {
            add(
                "fencing: stale token took effect",
                "%s through %s after %s claimed the delivery again as %s"
                    .formatted(s.kind(), t, newer.owner(), newer.delivery().token()));
            break;
          }
        }
      }
    }
  }

  private void nothingLost() {
    Map<List<String>, List<Removal>> removals = new HashMap<>();
    for (Removal r : world.journal.removals) {
      removals.computeIfAbsent(List.of(r.eventId(), r.handler()), k -> new ArrayList<>()).add(r);
    }
    Set<List<String>> routes = new HashSet<>(instancesByRoute.keySet());
    routes.addAll(idsByRoute.keySet());
    routes.addAll(removals.keySet());
    for (List<String> route : routes) {
      int created = instancesByRoute.getOrDefault(route, List.of()).size();
      int removed = removals.getOrDefault(route, List.of()).size();
      int completed = 0;
      int present = 0;
      int purged = 0;
      int removedAfterHandout = 0;
      List<String> lost = new ArrayList<>();
      for (long id : idsByRoute.getOrDefault(route, List.of())) {
        if (isCompleted(id)) {
          completed++;
        } else if (left.containsKey(id)) {
          present++;
        } else if (removedAfterHandout < removed) {
          removedAfterHandout++;
        } else if (couldHaveBeenPurgedDead(id)) {
          purged++;
        } else {
          lost.add(lastKnown(id));
        }
      }
      int unexplained = created - completed - present - purged - removed - lost.size();
      if (!lost.isEmpty()) {
        add(
            "lost: handed out, never completed, not dead, gone",
            "event %s handler %s: %s".formatted(route.get(0), route.get(1), lost));
      }
      if (unexplained > 0) {
        add(
            "lost: published, never handed out, gone",
            "event %s handler %s: %d of %d created deliveries (completed %d, removed by timer calls %d)"
                .formatted(route.get(0), route.get(1), unexplained, created, completed, removed));
      } else if (unexplained < 0) {
        add(
            "more outcomes than publications (delivered twice, or removed and delivered)",
            "event %s handler %s: created %d, completed %d, still stored %d, purged dead %d, removed by timer calls %d, ids %s"
                .formatted(
                    route.get(0),
                    route.get(1),
                    created,
                    completed,
                    present,
                    purged,
                    removed,
                    idsByRoute.getOrDefault(route, List.of())));
      }
    }
  }

  private boolean isCompleted(long id) {
    return settlementsById.getOrDefault(id, List.of()).stream()
        .anyMatch(s -> s.kind() == Kind.COMPLETE && s.effective());
  }

  private Handout lastHandout(long id) {
    List<Handout> list = handoutsById.get(id);
    return list == null ? null : list.get(list.size() - 1);
  }

  /** Could the delivery have been dead at the end of some purge (and so purged legitimately)? */
  private boolean couldHaveBeenPurgedDead(long id) {
    Handout last = lastHandout(id);
    if (last == null) {
      return false;
    }
    boolean requeuedSince =
        requeuesById.getOrDefault(id, List.of()).stream().anyMatch(r -> r.start() > last.end());
    if (requeuedSince) {
      return false; // pending since that requeue, never handed out again
    }
    List<Settlement> ends = settlementsByToken.getOrDefault(last.delivery().token(), List.of());
    Long deadFrom = null;
    for (Settlement s : ends) {
      if (s.effective() && s.dead()) {
        deadFrom = s.start();
      } else if (s.effective()) {
        return false; // rescheduled or released: pending, not dead
      }
    }
    if (deadFrom == null) {
      // still in flight or lost in a takeover: a takeover charge kills it only on its last attempt
      if (last.delivery().attempts() + 1 < world.store.retryPolicy().maxAttempts()) {
        return false;
      }
      deadFrom = last.start();
    }
    long from = deadFrom;
    return world.journal.purges.stream().anyMatch(p -> p.end() > from);
  }

  private String lastKnown(long id) {
    Handout last = lastHandout(id);
    List<Settlement> ends =
        last == null
            ? List.of()
            : settlementsByToken.getOrDefault(last.delivery().token(), List.of());
    List<Requeue> requeues = requeuesById.getOrDefault(id, List.of());
    return "delivery %d (%s): last handed out to %s as %s, then %s; effective requeues %d%s"
        .formatted(
            id,
            last == null ? "?" : last.delivery(),
            last == null ? "-" : last.owner(),
            last == null ? "-" : last.delivery().token(),
            ends.stream()
                .map(
                    s ->
                        s.kind() + (s.effective() ? (s.dead() ? "(dead)" : "(ok)") : "(no effect)"))
                .toList(),
            requeues.size(),
            requeues.isEmpty() || last == null
                ? ""
                : requeues.get(requeues.size() - 1).start() > last.end()
                    ? " (the last one after its last hand-out: it was pending)"
                    : "");
  }

  /** Every hand-out and ending of a delivery, for a finding's diagnosis. */
  private String history(long id) {
    List<String> steps = new ArrayList<>();
    handoutsById
        .getOrDefault(id, List.of())
        .forEach(
            h ->
                steps.add(
                    "@%d handed out (call ended @%d) to %s in claim %d as %s"
                        .formatted(
                            h.start(), h.end(), h.owner(), h.claimId(), h.delivery().token())));
    settlementsById
        .getOrDefault(id, List.of())
        .forEach(
            s ->
                steps.add(
                    "@%d %s (call ended @%d) %s%s"
                        .formatted(
                            s.start(),
                            s.kind(),
                            s.end(),
                            s.token(),
                            s.effective() ? (s.dead() ? " (dead)" : "") : " (no effect)")));
    requeuesById
        .getOrDefault(id, List.of())
        .forEach(r -> steps.add("@%d requeued".formatted(r.start())));
    steps.sort(
        Comparator.comparingLong(step -> Long.parseLong(step.substring(1, step.indexOf(' ')))));
    return "its history: " + steps;
  }

  private void batchOrder() {
    Map<Long, List<Handout>> byClaim = new HashMap<>();
    handouts.forEach(h -> byClaim.computeIfAbsent(h.claimId(), k -> new ArrayList<>()).add(h));
    for (List<Handout> batch : byClaim.values()) {
      batch.sort(Comparator.comparingInt(Handout::position));
      Map<List<String>, Handout> lastOfKey = new HashMap<>();
      for (Handout h : batch) {
        if (h.delivery().key() == null) {
          continue;
        }
        List<String> hk = List.of(h.delivery().handler(), h.delivery().key());
        Handout before = lastOfKey.put(hk, h);
        // equal sequences are legitimate: a dead letter requeued after its key's counter was purged
        // keeps its old sequence, which the restarted counter hands out again
        if (before != null && before.delivery().sequence() > h.delivery().sequence()) {
          add(
              "per-key order: batch not in sequence order",
              "claim by %s listed %s before %s"
                  .formatted(h.owner(), before.delivery(), h.delivery()));
        }
      }
    }
  }

  /** A span during which a delivery was surely pending and not in flight. */
  private record Gap(long id, long sequence, long start, long end, String why) {}

  private void keyOrderAgainstPendingPredecessors() {
    Map<List<String>, List<Gap>> gaps = new HashMap<>();
    Map<List<String>, List<Handout>> keyed = new HashMap<>();
    for (Handout h : handouts) {
      if (h.delivery().key() != null) {
        keyed
            .computeIfAbsent(
                List.of(h.delivery().handler(), h.delivery().key()), k -> new ArrayList<>())
            .add(h);
      }
    }
    for (Map.Entry<Long, List<Handout>> e : handoutsById.entrySet()) {
      long id = e.getKey();
      List<Handout> list = e.getValue();
      Handout first = list.get(0);
      if (first.delivery().key() == null) {
        continue;
      }
      List<String> hk = List.of(first.delivery().handler(), first.delivery().key());
      long seq = first.delivery().sequence();
      List<Gap> out = gaps.computeIfAbsent(hk, k -> new ArrayList<>());
      Instance created = instanceById.get(id);
      if (created != null) {
        out.add(new Gap(id, seq, created.end(), first.start(), "published"));
      }
      for (Settlement s : settlementsById.getOrDefault(id, List.of())) {
        boolean backToPending =
            s.effective()
                && (s.kind() == Kind.RELEASE || (s.kind() == Kind.RESCHEDULE && !s.dead()));
        // as for requeues below: a claim overlapping the call may have taken it right after
        boolean overlapped =
            list.stream().anyMatch(h -> h.start() < s.end() && h.end() > s.start());
        if (backToPending && !overlapped) {
          nextHandout(list, s.end())
              .ifPresent(
                  n ->
                      out.add(new Gap(id, seq, s.end(), n.start(), s.kind().name().toLowerCase())));
        }
      }
      for (Requeue r : requeuesById.getOrDefault(id, List.of())) {
        // A claim of the delivery overlapping the requeue may have come after it (and ended its
        // pending span at once): the claim starts, the requeue revives the dead letter, the claim
        // takes it, its holder buries it again. Only a requeue no claim of it overlaps is surely
        // followed by a pending span.
        boolean overlapped =
            list.stream().anyMatch(h -> h.start() < r.end() && h.end() > r.start());
        if (!overlapped) {
          nextHandout(list, r.end())
              .ifPresent(n -> out.add(new Gap(id, seq, r.end(), n.start(), "requeued")));
        }
      }
    }
    gaps.forEach(
        (hk, spans) -> {
          List<Handout> outs = keyed.getOrDefault(hk, List.of());
          RangeMax sequences =
              new RangeMax(outs.stream().mapToLong(h -> h.delivery().sequence()).toArray());
          for (Gap gap : spans) {
            int from = firstStartingAfter(outs, gap.start());
            int to = firstStartingAfter(outs, gap.end() - 1); // starts before the gap's end
            if (from >= to || sequences.max(from, to) <= gap.sequence()) {
              continue; // what went out meanwhile all came before it: the common, sound case
            }
            for (int i = from; i < to; i++) {
              Handout x = outs.get(i);
              if (x.end() < gap.end() && x.delivery().sequence() > gap.sequence()) {
                add(
                    "per-key order: handed out past a pending predecessor",
                    "handler %s key %s: %s handed out to %s while delivery %d (seq %d, %s) was pending and not in flight; %s"
                        .formatted(
                            hk.get(0),
                            hk.get(1),
                            x.delivery(),
                            x.owner(),
                            gap.id(),
                            gap.sequence(),
                            gap.why(),
                            history(gap.id())));
              }
            }
          }
        });
  }

  /** Maximum over index ranges of a fixed array, in O(1) per query (a sparse table). */
  private static final class RangeMax {
    private final long[][] table;

    RangeMax(long[] values) {
      int levels = 1;
      while ((1 << levels) <= values.length) {
        levels++;
      }
      table = new long[levels][];
      table[0] = values;
      for (int k = 1; k < levels; k++) {
        int span = 1 << k;
        table[k] = new long[values.length - span + 1];
        for (int i = 0; i + span <= values.length; i++) {
          table[k][i] = Math.max(table[k - 1][i], table[k - 1][i + span / 2]);
        }
      }
    }

    /** The maximum of {@code [from, to)}, which must not be empty. */
    long max(int from, int to) {
      int k = 31 - Integer.numberOfLeadingZeros(to - from);
      return Math.max(table[k][from], table[k][to - (1 << k)]);
    }
  }

  private static java.util.Optional<Handout> nextHandout(List<Handout> list, long after) {
    return list.stream().filter(h -> h.start() > after).findFirst();
  }

  private static int firstStartingAfter(List<Handout> sorted, long time) {
    int lo = 0;
    int hi = sorted.size();
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (sorted.get(mid).start() > time) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  /** One publish of a keyed event that took a new sequence. */
  private record Publication(
      String eventId,
      String key,
      long callId,
      int index,
      long start,
      long end,
      long sequence,
      long pendingUntil) {}

  private void sequenceFollowsCommitOrder() {
    Map<List<Object>, Publication> byCall = new HashMap<>();
    for (Map.Entry<Long, Instance> e : instanceById.entrySet()) {
      Instance i = e.getValue();
      Long seq = sequenceById.get(e.getKey());
      if (i.key() == null || !i.newEvent() || seq == null) {
        continue;
      }
      List<Handout> hs = handoutsById.get(e.getKey());
      long firstOut = hs == null ? Long.MAX_VALUE : hs.get(0).start();
      List<Object> callKey = List.of(i.eventId(), i.callId());
      Publication before = byCall.get(callKey);
      long pendingUntil = before == null ? firstOut : Math.max(before.pendingUntil(), firstOut);
      if (before != null && before.sequence() != seq) {
        add(
            "per-key order: one event, two sequences",
            "event %s published in call %d has sequences %d and %d"
                .formatted(i.eventId(), i.callId(), before.sequence(), seq));
      }
      byCall.put(
          callKey,
          new Publication(
              i.eventId(), i.key(), i.callId(), i.index(), i.start(), i.end(), seq, pendingUntil));
    }
    Map<Long, List<Publication>> byCallId = new HashMap<>();
    byCall
        .values()
        .forEach(p -> byCallId.computeIfAbsent(p.callId(), k -> new ArrayList<>()).add(p));
    for (List<Publication> call : byCallId.values()) {
      // one publishAll: events of a key take its sequences in input order
      call.sort(Comparator.comparingInt(Publication::index));
      Map<String, Publication> lastOfKey = new HashMap<>();
      for (Publication b : call) {
        Publication a = lastOfKey.put(b.key(), b);
        if (a != null && a.sequence() >= b.sequence()) {
          add(
              "per-key order: sequence not in commit order",
              "key %s: in one publishAll %s (seq %d) came before %s (seq %d)"
                  .formatted(a.key(), a.eventId(), a.sequence(), b.eventId(), b.sequence()));
        }
      }
    }
    Map<String, List<Publication>> byKey = new HashMap<>();
    byCall.values().forEach(p -> byKey.computeIfAbsent(p.key(), k -> new ArrayList<>()).add(p));
    for (List<Publication> list : byKey.values()) {
      // Sweep the publishes B by start; the active ones A ended before B started and were still
      // pending when it started, indexed by sequence: only those above B's are looked at.
      List<Publication> byStart = new ArrayList<>(list);
      byStart.sort(Comparator.comparingLong(Publication::start));
      List<Publication> byEnd = new ArrayList<>(list);
      byEnd.sort(Comparator.comparingLong(Publication::end));
      TreeMap<Long, List<Publication>> active = new TreeMap<>();
      java.util.PriorityQueue<Publication> expiring =
          new java.util.PriorityQueue<>(Comparator.comparingLong(Publication::pendingUntil));
      int next = 0;
      for (Publication b : byStart) {
        while (next < byEnd.size() && byEnd.get(next).end() < b.start()) {
          Publication a = byEnd.get(next++);
          active.computeIfAbsent(a.sequence(), k -> new ArrayList<>()).add(a);
          expiring.add(a);
        }
        while (!expiring.isEmpty() && expiring.peek().pendingUntil() <= b.start()) {
          Publication gone = expiring.poll();
          List<Publication> same = active.get(gone.sequence());
          same.remove(gone);
          if (same.isEmpty()) {
            active.remove(gone.sequence());
          }
        }
        for (List<Publication> higher : active.tailMap(b.sequence(), false).values()) {
          for (Publication a : higher) {
            if (a.pendingUntil() > b.end()) {
              add(
                  "per-key order: sequence not in commit order",
                  "key %s: %s (seq %d) committed before %s (seq %d) started, and was pending throughout"
                      .formatted(a.key(), a.eventId(), a.sequence(), b.eventId(), b.sequence()));
            }
          }
        }
      }
    }
  }

  /** Counts for the run's summary line. */
  String summary() {
    Journal j = world.journal;
    long completed =
        j.settlements.stream().filter(s -> s.kind() == Kind.COMPLETE && s.effective()).count();
    long rescheduled =
        j.settlements.stream().filter(s -> s.kind() == Kind.RESCHEDULE && s.effective()).count();
    long died = j.settlements.stream().filter(Settlement::dead).count();
    long stale = j.settlements.stream().filter(s -> !s.effective()).count();
    long requeued = j.requeues.stream().filter(Requeue::effective).count();
    return ("%d operations: %d deliveries published, %d handed out, %d completed, %d rescheduled,"
            + " %d dead by bury/reschedule, %d settlements without effect (stale tokens), %d"
            + " takeovers charging %d, %d crashes, %d lease grants, %d relinquishes, %d requeued"
            + " one by one, %d requeue-all calls, %d purges removing %d dead letters and %d events,"
            + " %d timer removals, %d transient errors, %d drain claims")
        .formatted(
            j.operations.get(),
            j.instances.size(),
            j.handouts.size(),
            completed,
            rescheduled,
            died,
            stale,
            j.takeovers.get(),
            j.charged.get(),
            j.crashes.get(),
            j.grants.size(),
            j.relinquishes.size(),
            requeued,
            j.requeueAlls.size(),
            j.purges.size(),
            j.purgedDeadLetters.get(),
            j.purgedEvents.get(),
            j.removals.size(),
            j.transientErrors.size(),
            drain.claims);
  }
}
