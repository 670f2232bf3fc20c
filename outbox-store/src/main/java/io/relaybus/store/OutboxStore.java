package io.relaybus.store;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * The outbox: publish events, and move their deliveries through lanes to whoever sends them (the
 * Kafka Connect task). One contract for every store (PostgreSQL, MongoDB, in memory), pinned by one
 * contract test suite.
 *
 * <h2>The delivery path</h2>
 *
 * <ol>
 *   <li>{@link #acquireLanes} leases lanes. A lane is free, expired, held by the same owner
 *       (renewed), or held by an owner of the same {@code group} (taken over at once: a previous
 *       incarnation of the same task). Any change of hands bumps the lane's epoch; a takeover also
 *       charges one attempt to each delivery the lane had in flight.
 *   <li>{@link #claim} reads due pending deliveries of held lanes that are not in flight, applies
 *       the per-key rule, and records the batch as in flight on the lane (no delivery is written).
 *       <b>Per-key rule</b>: a delivery with a key is handed out only when every earlier pending
 *       delivery of the same (handler, key) is in flight or earlier in the same batch; a batch
 *       lists each (handler, key) in sequence order. Dead deliveries do not block their key.
 *   <li>{@link #complete} deletes delivered rows, {@link #reschedule} retries one later with
 *       backoff (or buries it when its attempts are spent), {@link #bury} dead-letters one with a
 *       reason, {@link #release} gives deliveries back without charging an attempt.
 *   <li>{@link #relinquishLanes} hands lanes back (graceful stop): nothing is charged.
 * </ol>
 *
 * Every state change is fenced by its {@link LaneLease} or {@link DeliveryToken} and reports
 * whether it took effect; a stale holder changes nothing.
 *
 * <h2>Errors</h2>
 *
 * Bad arguments throw {@link IllegalArgumentException} naming the argument and the rule. Database
 * failures throw {@link OutboxStoreException}; the failed call leaves nothing half-written.
 *
 * <p>Implementations are thread-safe.
 */
public interface OutboxStore extends AutoCloseable {

  /** Creates or upgrades the schema, idempotently; safe when several processes call it at once. */
  void setup();

  /**
   * Checks that the schema exists, is of the version this code expects and has all 256 lanes.
   *
   * @throws OutboxStoreException naming what is missing and how to fix it
   */
  void verifySchema();

  /** Publishes one event in a transaction of its own. See {@link TransactionalPublisher}. */
  PublishResult publish(OutboxEvent event);

  /** Publishes events in one transaction of their own. See {@link TransactionalPublisher}. */
  List<PublishResult> publishAll(List<OutboxEvent> events);

  /** Schedules a timer in a transaction of its own. See {@link TransactionalPublisher#schedule}. */
  TimerResult schedule(OutboxEvent event, Timer timer);

  /**
   * Cancels a timer in a transaction of its own. See {@link TransactionalPublisher#cancelTimer}.
   */
  TimerResult cancelTimer(String handler, String timerId);

  /**
   * Leases the given lanes for {@code owner}. Returns the leases granted, in lane order; a lane
   * held live by an owner of another group is left out (ask again after it expires).
   *
   * @param owner unique name of this holder incarnation, e.g. {@code connector/task-0/uuid}
   * @param group holders of the same group replace each other at once, e.g. the connector name
   * @param lanes lanes to lease, 0 to 255
   * @param duration lease length, from the database clock
   */
  List<LaneLease> acquireLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration);

  /**
   * Like {@link #acquireLanes}, but takes no live lease, not even one of the same group: grants
   * only lanes that are free, expired or already held by {@code owner}. A running holder asks with
   * this for the lanes it lacks (lost, or never granted), so it never takes a lane back from a
   * newer incarnation of its group, which took it over with {@link #acquireLanes} when it started.
   */
  List<LaneLease> acquireFreeLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration);

  /**
   * Extends leases still held by {@code owner} under their epoch. Returns the renewed leases; a
   * lease missing from the result was lost (taken over) and nothing more may be emitted from it. On
   * PostgreSQL the expiry is the owner's (one row per owner, so a renewal writes one row): a
   * renewal extends every lease the owner holds, the ones it names among them. To give a lane up,
   * relinquish it.
   */
  List<LaneLease> renewLanes(String owner, Collection<LaneLease> leases, Duration duration);

  /**
   * Hands lanes back: they become free at once, their in-flight deliveries pending again with no
   * attempt charged. Returns how many lanes were still held and released.
   */
  int relinquishLanes(String owner, Collection<LaneLease> leases);

  /**
   * Claims up to {@code limit} due deliveries from the given held leases (see the per-key rule
   * above). Leases that were lost contribute nothing. Lanes take turns: a claim visits the held
   * lanes in lane order, starting after the last lane the same owner's previous claim took
   * deliveries from (wrapping around), so no lane starves behind a deep one. A delivery whose event
   * cannot be read (headers that are not a JSON object of strings, as a plain-SQL publisher may
   * write them) is dead-lettered with the reason instead of returned. A due timer whose deadline
   * was extended meanwhile is not returned but re-armed for its new deadline.
   */
  List<ClaimedDelivery> claim(String owner, Collection<LaneLease> leases, int limit);

  /**
   * Deletes the deliveries of these tokens, each only if its token still holds (and records the
   * completion history when enabled). Returns the ids that were completed.
   */
  Set<Long> complete(Collection<DeliveryToken> tokens);

  /**
   * Ends a failed attempt: charges it, and makes the delivery due again after the policy's backoff,
   * or dead with {@code reason} when the attempts are spent.
   */
  FailOutcome reschedule(DeliveryToken token, String reason);

  /** Dead-letters a claimed delivery with {@code reason} at once. False if the token was stale. */
  boolean bury(DeliveryToken token, String reason);

  /**
   * Gives claimed deliveries back without charging an attempt: they are pending and may be claimed
   * again. Returns how many were still held and released.
   */
  int release(Collection<DeliveryToken> tokens);

  /**
   * Moves dead deliveries back to pending, due now, with a fresh attempt budget. Ids that are not
   * dead are ignored. Returns how many were requeued.
   */
  int requeue(Collection<Long> deliveryIds);

  /** Requeues every dead delivery of {@code handler}, or of all handlers when it is null. */
  int requeueDead(String handler);

  /** Lists deliveries; see {@link DeliveryQuery}. */
  DeliveryPage listDeliveries(DeliveryQuery query);

  /**
   * Of {@code deliveryIds}, the deliveries of {@code lane} the outbox still holds, pending or dead;
   * a delivery completed (deleted) is not among them, nor an id the lane never had. One indexed
   * lookup per id. The connector's exactly-once offsets ask it at a task's start, to stop naming
   * deliveries already deleted.
   */
  Set<Long> remaining(int lane, Collection<Long> deliveryIds);

  /** Counts per handler, age of the oldest pending delivery, backlog per lane. */
  OutboxStatistics statistics();

  /**
   * The database's xmin horizon as seen from the outbox's database (one catalog query), for
   * metrics. Empty where the store has no such thing (MongoDB, in memory). On PostgreSQL, other
   * roles' sessions are seen only with {@code pg_read_all_stats} (or {@code pg_monitor}).
   */
  default Optional<XminHorizon> xminHorizon() {
    return Optional.empty();
  }

  /** Removes what the policy says is old enough; see {@link RetentionPolicy}. */
  PurgeResult purge(RetentionPolicy retention);

  /**
   * The backlog per handler, sorted by handler: due vs scheduled (timers, retry backoff), in
   * flight, dead, oldest age and lag. Ages are measured on the store's clock.
   */
  List<HandlerBacklog> backlog();

  /** The 256 lanes in lane order: owner, epoch, lease expiry, in flight and pending counts. */
  List<LaneStatus> laneStatus();

  /**
   * Lists dead letters matching {@code filter} in id order, with their event type; keyset pages as
   * in {@link #listDeliveries}.
   *
   * @param afterId only ids greater than this, or {@code null} from the start
   * @param limit page size, 1 to {@link DeliveryQuery#MAX_LIMIT}
   */
  DeadLetterPage listDeadLetters(DeadLetterFilter filter, Long afterId, int limit);

  /** Counts the dead letters matching {@code filter}: what {@link #requeueMatching} would move. */
  long countDeadLetters(DeadLetterFilter filter);

  /**
   * Requeues, as {@link #requeue} does, every dead letter matching {@code filter}. A dead letter
   * that stops matching meanwhile (requeued, purged) is left alone. Returns how many were requeued.
   */
  long requeueMatching(DeadLetterFilter filter);

  /**
   * Waits up to {@code timeout} for a sign that there may be work: a transaction that inserted
   * deliveries committed (a publish, a timer scheduled) since the previous call returned or while
   * this one waits. Returns {@code true} when woken that way, {@code false} at the timeout. It is a
   * hint, not a promise: a claim after {@code true} may still find nothing (the deliveries are on
   * another holder's lanes, not due yet, or another caller claimed them), and work that comes due
   * without an insert (a timer's deadline, a retry's backoff, a requeue, a lane set free) never
   * wakes it, so a caller still claims at least every {@code timeout}.
   *
   * <p>It never fails because the database does: without a way to listen it sleeps the timeout and
   * returns {@code false}. Stores:
   *
   * <ul>
   *   <li>PostgreSQL: LISTEN on a connection of its own; the schema's statement trigger on the
   *       deliveries table sends a NOTIFY when a publishing transaction commits, whoever publishes
   *       (this store, or the SQL function {@code <prefix>publish}). Off when the store was built
   *       with {@code notifyOnPublish(false)}; see the PostgreSQL store's documentation.
   *   <li>In memory: woken by a publish, a committed transaction or a timer scheduled.
   *   <li>MongoDB, and this default: sleeps the timeout and returns {@code false}.
   * </ul>
   *
   * @param timeout longest wait, zero or more
   * @throws InterruptedException if the thread is interrupted while waiting
   */
  default boolean awaitWork(Duration timeout) throws InterruptedException {
    Validation.notNegative("timeout", timeout);
    Thread.sleep(timeout.toMillis());
    return false;
  }

  /** The retry policy this store charges attempts against. */
  RetryPolicy retryPolicy();

  /** Releases the store's resources (its connection pool, when it owns one). */
  @Override
  void close();
}
