package io.relaybus.store.randomized;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.LaneLease;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What the actors of a randomized run did and what the store answered, with the moments each call
 * started and ended ({@link System#nanoTime()}, one clock for all threads). A call's effect took
 * place somewhere inside its window, so "A ended before B started" is the only order the checker
 * relies on. Every queue is appended to concurrently and read once everything has stopped.
 */
final class Journal {
  /** One (event, handler) delivery a publish, batch publish or timer call created. */
  record Instance(
      String eventId,
      String handler,
      String key,
      boolean newEvent,
      long callId,
      int index,
      long start,
      long end) {}

  /** A timer call that removed the pending delivery of {@code eventId} (cancelled, replaced). */
  record Removal(String eventId, String handler, long start, long end) {}

  /** One delivery a claim returned, at {@code position} in its batch. */
  record Handout(
      String owner, long claimId, int position, ClaimedDelivery delivery, long start, long end) {
    long id() {
      return delivery.deliveryId();
    }
  }

  enum Kind {
    COMPLETE,
    RESCHEDULE,
    BURY,
    RELEASE
  }

  /**
   * One ending of a claim through its token. {@code effective}: the store said it took effect;
   * {@code dead}: it left the delivery dead (bury, or reschedule with the attempts spent).
   */
  record Settlement(
      DeliveryToken token, Kind kind, boolean effective, boolean dead, long start, long end) {}

  /** {@code requeue(List.of(id))}: {@code effective} when it returned 1. */
  record Requeue(long id, boolean effective, long start, long end) {}

  /** A lease {@code acquireLanes} granted. */
  record Grant(String owner, LaneLease lease, long start, long end) {}

  /** A {@code relinquishLanes} call and how many lanes it handed back. */
  record Relinquish(String owner, List<LaneLease> leases, int released, long start, long end) {}

  record Window(long start, long end) {}

  final ConcurrentLinkedQueue<Instance> instances = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Removal> removals = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Handout> handouts = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Settlement> settlements = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Requeue> requeues = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Window> requeueAlls = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Window> purges = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Grant> grants = new ConcurrentLinkedQueue<>();
  final ConcurrentLinkedQueue<Relinquish> relinquishes = new ConcurrentLinkedQueue<>();

  /** Broken invariants seen while running (the checker adds the rest afterwards). */
  final ConcurrentLinkedQueue<String> violations = new ConcurrentLinkedQueue<>();

  final ConcurrentLinkedQueue<String> transientErrors = new ConcurrentLinkedQueue<>();
  final AtomicLong operations = new AtomicLong();
  final AtomicLong callIds = new AtomicLong();
  final AtomicLong purgedDeadLetters = new AtomicLong();
  final AtomicLong purgedEvents = new AtomicLong();
  final AtomicLong takeovers = new AtomicLong();
  final AtomicLong charged = new AtomicLong();
  final AtomicLong crashes = new AtomicLong();

  static long now() {
    return System.nanoTime();
  }
}
