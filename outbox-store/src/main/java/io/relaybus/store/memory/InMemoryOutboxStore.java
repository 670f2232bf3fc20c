package io.relaybus.store.memory;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeadLetterFilter;
import io.relaybus.store.DeadLetterPage;
import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.HandlerBacklog;
import io.relaybus.store.InboxOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneStatus;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.TransactionalPublisher;
import io.relaybus.store.Validation;
import io.relaybus.store.memory.MemoryPublisher.Buffered;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;

/**
 * An outbox held in memory, for unit tests of code built on the store (the connector's among them).
 * It follows the same contract as the PostgreSQL store, rule for rule: lanes and epochs, fencing
 * tokens, the per-key rule, attempts charged at takeover, idempotent publish by event id.
 *
 * <p>Transactions are buffers: {@link #publish(Transaction, OutboxEvent)} records the event and
 * {@link Transaction#commit()} applies the buffer atomically, taking key sequences at commit so
 * sequence order is commit order, as the SQL store's counter row lock does. Unlike PostgreSQL, a
 * transaction does not block another that publishes the same id: the result a publish returns is
 * computed against what was committed at that moment, and commit applies only what is still
 * missing. An inbox record ({@link #recordHandled}) is answered the same way, so two transactions
 * may both be told {@link InboxOutcome#FIRST}; the second to commit then fails with a transient
 * {@link OutboxStoreException} and applies nothing, so exactly one committed transaction ran the
 * work (optimistic, where PostgreSQL makes the second wait for the first).
 *
 * <p>Times come from the {@link Clock} given to the builder (a mutable clock in tests) and are cut
 * to microseconds, the precision of {@code timestamptz}. One lock guards every operation.
 */
public final class InMemoryOutboxStore
    implements OutboxStore, TransactionalPublisher<InMemoryOutboxStore.Transaction> {

  private final Clock clock;
  private final RetryPolicy retryPolicy;
  private final ReentrantLock lock = new ReentrantLock();
  private final MemoryTables tables = new MemoryTables();
  private final MemoryPublisher publisher;
  private final MemoryTimers timers = new MemoryTimers(tables);
  private final MemoryLanes leases;
  private final MemoryCompletion completion;
  private final MemoryAdmin admin;
  private final MemoryOperatorQueries operator;

  /**
   * Per owner, the lane its previous claim started at, so its next one starts after it (lock). One
   * per owner, as in the other stores: another owner's claims do not move an owner's turn.
   */
  private final Map<String, Integer> lastClaimStart = new HashMap<>();

  /** Signalled when a commit inserted deliveries; {@link #awaitWork} waits on it. */
  private final Condition workArrived = lock.newCondition();

  /** Commits that inserted deliveries so far, and as the last awaitWork saw them (lock). */
  private long workSignals;

  private long workSignalsSeen;

  private InMemoryOutboxStore(Builder builder) {
    this.clock = builder.clock;
    this.retryPolicy = builder.retryPolicy;
    this.publisher = new MemoryPublisher(tables, builder.strictRepublish);
    this.leases = new MemoryLanes(tables, retryPolicy);
    this.completion = new MemoryCompletion(tables, retryPolicy, builder.completionHistory);
    this.admin = new MemoryAdmin(tables);
    this.operator = new MemoryOperatorQueries(tables);
  }

  /** A store on the system clock with the default retry policy and no completion history. */
  public static InMemoryOutboxStore create() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Settings of an {@link InMemoryOutboxStore}. */
  public static final class Builder {
    private Clock clock = Clock.systemUTC();
    private RetryPolicy retryPolicy = RetryPolicy.defaults();
    private boolean completionHistory;
    private boolean strictRepublish;

    private Builder() {}

    /** The time source of due times, lease expiry and ages; default the system clock. */
    public Builder clock(Clock clock) {
      this.clock = Validation.notNull("clock", clock);
      return this;
    }

    public Builder retryPolicy(RetryPolicy retryPolicy) {
      this.retryPolicy = Validation.notNull("retryPolicy", retryPolicy);
      return this;
    }

    /** Keep completed deliveries for listings and statistics. Default off. */
    public Builder completionHistory(boolean enabled) {
      this.completionHistory = enabled;
      return this;
    }

    /**
     * Refuse a republish whose event differs from the stored one (type, key, payload, content type
     * or headers) with a {@link io.relaybus.store.RepublishConflictException} naming the id and the
     * fields, instead of keeping the stored event and saying so in {@link
     * PublishResult#differingFields()}. In a transaction the publish call refuses, or, when a
     * conflicting event was committed after it, the commit does (and rolls back). Default off.
     */
    public Builder strictRepublish(boolean enabled) {
      this.strictRepublish = enabled;
      return this;
    }

    public InMemoryOutboxStore build() {
      return new InMemoryOutboxStore(this);
    }
  }

  /**
   * The in-memory stand-in for the caller's database transaction: published events and inbox
   * records are invisible until {@link #commit()} and discarded by {@link #rollback()} or {@link
   * #close()}. Used by one thread at a time, like a JDBC connection.
   */
  public static final class Transaction implements AutoCloseable {
    private final InMemoryOutboxStore store;
    private final List<Buffered> writes = new ArrayList<>();
    private final List<MemoryTimers.Op> timerOps = new ArrayList<>();
    // per timer op, how many writes were buffered before it: the commit applies both in call order
    private final List<Integer> timerOpsAfter = new ArrayList<>();
    private boolean open = true;

    private Transaction(InMemoryOutboxStore store) {
      this.store = store;
    }

    /**
     * Applies every buffered write at once.
     *
     * @throws OutboxStoreException (transient) when another transaction committed an inbox record
     *     this one was told was first; nothing is applied and the transaction has ended
     */
    public void commit() {
      store.commit(this);
    }

    /** Discards the buffered writes; does nothing once the transaction has ended. */
    public void rollback() {
      store.locked(
          () -> {
            writes.clear();
            timerOps.clear();
            timerOpsAfter.clear();
            open = false;
            return null;
          });
    }

    public boolean isOpen() {
      return store.locked(() -> open);
    }

    /** Rolls back unless committed, so try-with-resources never leaves a transaction half open. */
    @Override
    public void close() {
      rollback();
    }
  }

  public Transaction begin() {
    return new Transaction(this);
  }

  /** Nothing to create: the tables exist from construction. */
  @Override
  public void setup() {}

  /** Always complete. */
  @Override
  public void verifySchema() {}

  @Override
  public PublishResult publish(OutboxEvent event) {
    return publishAll(List.of(Validation.notNull("event", event))).get(0);
  }

  @Override
  public List<PublishResult> publishAll(List<OutboxEvent> events) {
    Validation.events(events);
    return locked(
        () -> {
          Instant now = now();
          RuntimeException conflict = publisher.conflict(List.of(), events);
          if (conflict != null) {
            throw conflict;
          }
          List<PublishResult> results =
              events.stream().map(event -> publisher.apply(event, now)).toList();
          signalWork();
          return results;
        });
  }

  @Override
  public PublishResult publish(Transaction transaction, OutboxEvent event) {
    return publishAll(transaction, List.of(Validation.notNull("event", event))).get(0);
  }

  @Override
  public List<PublishResult> publishAll(Transaction transaction, List<OutboxEvent> events) {
    requireOwn(transaction);
    Validation.events(events);
    return locked(
        () -> {
          requireOpen(transaction);
          List<PublishResult> results = new ArrayList<>();
          for (OutboxEvent event : events) {
            results.add(publisher.preview(withArmedTimers(transaction), event));
            transaction.writes.add(Buffered.publish(event));
          }
          return results;
        });
  }

  @Override
  public InboxOutcome recordHandled(Transaction transaction, OutboxEvent received, String handler) {
    requireOwn(transaction);
    Validation.notNull("received", received);
    Validation.handler(handler);
    return locked(
        () -> {
          requireOpen(transaction);
          InboxOutcome outcome = publisher.previewRecord(transaction.writes, received, handler);
          transaction.writes.add(Buffered.inbox(received, handler, outcome));
          return outcome;
        });
  }

  private void commit(Transaction transaction) {
    locked(
        () -> {
          requireOpen(transaction);
          Buffered lost = publisher.lostRace(transaction.writes);
          transaction.open = false;
          Instant now = now();
          for (MemoryTimers.Op op : transaction.timerOps) {
            String stale = timers.stale(op, now);
            if (stale != null) {
              transaction.writes.clear();
              transaction.timerOps.clear();
              transaction.timerOpsAfter.clear();
              throw new OutboxStoreException(
                  "commit failed (transient): "
                      + stale
                      + "; this transaction is rolled back, and retrying it decides again",
                  true,
                  null);
            }
          }
          RuntimeException conflict =
              publisher.conflict(
                  List.of(),
                  transaction.writes.stream()
                      .filter(write -> !write.isInboxRecord())
                      .map(Buffered::event)
                      .toList());
          if (conflict != null) {
            transaction.writes.clear();
            transaction.timerOps.clear();
            transaction.timerOpsAfter.clear();
            throw conflict;
          }
          if (lost != null) {
            transaction.writes.clear();
            transaction.timerOps.clear();
            transaction.timerOpsAfter.clear();
            throw new OutboxStoreException(
                ("commit failed (transient): handler '%s' of event '%s' was recorded by a"
                        + " concurrent transaction that committed first; this transaction is rolled"
                        + " back, and retrying it finds a redelivery")
                    .formatted(lost.inboxHandler(), lost.event().id()),
                true,
                null);
          }
          boolean inserts =
              !transaction.timerOps.isEmpty()
                  || transaction.writes.stream().anyMatch(write -> !write.isInboxRecord());
          // In call order, as PostgreSQL runs them: a keyed timer scheduled before a publish of
          // its key takes the earlier sequence (applying the timers after every publish gave
          // the publish the earlier one, and it went out before the timer).
          int nextOp = 0;
          for (int i = 0; i <= transaction.writes.size(); i++) {
            while (nextOp < transaction.timerOps.size()
                && transaction.timerOpsAfter.get(nextOp) <= i) {
              timers.apply(transaction.timerOps.get(nextOp++), now);
            }
            if (i == transaction.writes.size()) {
              break;
            }
            Buffered write = transaction.writes.get(i);
            if (write.isInboxRecord()) {
              publisher.record(write.event(), write.inboxHandler(), now);
            } else {
              publisher.apply(write.event(), now);
            }
          }
          transaction.writes.clear();
          transaction.timerOps.clear();
          transaction.timerOpsAfter.clear();
          if (inserts) {
            signalWork();
          }
          return null;
        });
  }

  @Override
  public TimerResult schedule(OutboxEvent event, Timer timer) {
    Validation.notNull("timer", timer).check(event);
    return locked(
        () -> {
          MemoryTimers.Op op = timers.schedule(event, timer, now());
          timers.apply(op, now());
          signalWork();
          return op.told();
        });
  }

  @Override
  public TimerResult cancelTimer(String handler, String timerId) {
    Validation.handler(handler);
    Timer.checkCancelId("timerId", timerId);
    return locked(
        () -> {
          MemoryTimers.Op op = timers.cancel(handler, timerId);
          timers.apply(op, now());
          return op.told();
        });
  }

  /**
   * {@inheritDoc}
   *
   * <p>In memory the call is decided against what is committed and applied at commit; the commit
   * fails (transient, nothing applied) if the answer no longer holds then. One timer call per timer
   * id per transaction.
   */
  @Override
  public TimerResult schedule(Transaction transaction, OutboxEvent event, Timer timer) {
    requireOwn(transaction);
    Validation.notNull("timer", timer).check(event);
    return locked(
        () -> {
          requireOpen(transaction);
          // a timer arms a new event: one this transaction wrote exists at its commit, as
          // PostgreSQL refuses it at the call (until 2026-12-07 the commit replaced the event
          // published first with the timer's, and its deliveries went out with the timer's payload)
          for (Buffered write : withArmedTimers(transaction)) {
            if (write.event().id().equals(event.id())) {
              throw MemoryTimers.eventIdExists(event.id());
            }
          }
          return buffer(transaction, timers.schedule(event, timer, now()));
        });
  }

  /**
   * The transaction's buffered writes, after the events its timer calls arm at commit (their ids
   * are new, so each comes before any write of its id): what a publish in the transaction finds.
   */
  private static List<Buffered> withArmedTimers(Transaction transaction) {
    List<Buffered> seen = new ArrayList<>();
    for (MemoryTimers.Op op : transaction.timerOps) {
      TimerOutcome outcome = op.told().outcome();
      if (op.event() != null
          && (outcome == TimerOutcome.ARMED || outcome == TimerOutcome.REPLACED)) {
        seen.add(Buffered.publish(op.event()));
      }
    }
    seen.addAll(transaction.writes);
    return seen;
  }

  @Override
  public TimerResult cancelTimer(Transaction transaction, String handler, String timerId) {
    requireOwn(transaction);
    Validation.handler(handler);
    Timer.checkCancelId("timerId", timerId);
    return locked(() -> buffer(transaction, timers.cancel(handler, timerId)));
  }

  private TimerResult buffer(Transaction transaction, MemoryTimers.Op op) {
    requireOpen(transaction);
    for (MemoryTimers.Op earlier : transaction.timerOps) {
      if (earlier.sameTimer(op)) {
        throw new IllegalStateException(
            ("the in-memory store takes one call per timer per transaction, and timer '%s' of"
                    + " handler '%s' was already scheduled or cancelled in this one")
                .formatted(op.timerId(), op.handler()));
      }
    }
    transaction.timerOps.add(op);
    transaction.timerOpsAfter.add(transaction.writes.size());
    return op.told();
  }

  private void requireOwn(Transaction transaction) {
    Validation.notNull("transaction", transaction);
    if (transaction.store != this) {
      throw new IllegalArgumentException("transaction must have been begun by this store");
    }
  }

  private static void requireOpen(Transaction transaction) {
    if (!transaction.open) {
      throw new IllegalStateException("transaction has already been committed or rolled back");
    }
  }

  @Override
  public List<LaneLease> acquireLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.notBlank("group", group);
    var sorted = Validation.lanes(lanes);
    Validation.positive("duration", duration);
    return locked(() -> leases.acquire(owner, group, sorted, duration, true, now()));
  }

  @Override
  public List<LaneLease> acquireFreeLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.notBlank("group", group);
    var sorted = Validation.lanes(lanes);
    Validation.positive("duration", duration);
    return locked(() -> leases.acquire(owner, group, sorted, duration, false, now()));
  }

  @Override
  public List<LaneLease> renewLanes(String owner, Collection<LaneLease> held, Duration duration) {
    Validation.notBlank("owner", owner);
    Validation.leases(held);
    Validation.positive("duration", duration);
    return locked(() -> leases.renew(owner, held, duration, now()));
  }

  @Override
  public int relinquishLanes(String owner, Collection<LaneLease> held) {
    Validation.notBlank("owner", owner);
    Validation.leases(held);
    return locked(() -> leases.relinquish(owner, held));
  }

  @Override
  public List<ClaimedDelivery> claim(String owner, Collection<LaneLease> held, int limit) {
    Validation.notBlank("owner", owner);
    Validation.leases(held);
    Validation.positive("limit", limit);
    return locked(
        () -> {
          Instant now = now();
          TreeMap<Integer, LaneState> lanes = new TreeMap<>();
          for (LaneLease lease : held) {
            LaneState lane = tables.lanes[lease.lane()];
            if (lane.isHeldBy(owner, lease.epoch())) {
              lanes.put(lane.lane, lane);
            }
          }
          if (lanes.isEmpty()) {
            return List.of();
          }
          // Start after the lane the previous claim took from last: a deep lane cannot starve
          // the others.
          Integer start = lanes.higherKey(lastClaimStart.getOrDefault(owner, -1));
          int first = start != null ? start : lanes.firstKey();
          lastClaimStart.put(owner, first);
          List<LaneState> order = new ArrayList<>(lanes.tailMap(first).values());
          order.addAll(lanes.headMap(first).values());
          List<ClaimedDelivery> batch = new ArrayList<>();
          for (LaneState lane : order) {
            MemoryClaims.rearm(lane, now);
            for (StoredDelivery delivery : MemoryClaims.select(lane, now, limit - batch.size())) {
              batch.add(claimed(delivery, lane.epoch));
            }
            if (batch.size() == limit) {
              break;
            }
          }
          // The next claim starts after the last lane this one took from (after its first lane
          // when it took nothing): lanes with work take turns, whatever the lanes between them.
          if (!batch.isEmpty()) {
            lastClaimStart.put(owner, batch.get(batch.size() - 1).lane());
          }
          // Recorded only once the whole batch is built: a claim that fails records nothing.
          for (ClaimedDelivery claimed : batch) {
            tables.lanes[claimed.lane()].inFlight.add(claimed.token().deliveryId());
          }
          return batch;
        });
  }

  private ClaimedDelivery claimed(StoredDelivery delivery, long epoch) {
    StoredEvent event = tables.events.get(delivery.eventId);
    return new ClaimedDelivery(
        new DeliveryToken(delivery.id, delivery.lane, epoch, delivery.claims, delivery.eventId),
        delivery.eventId,
        delivery.handler,
        delivery.key,
        delivery.sequence,
        delivery.attempts,
        event.type,
        event.payload(),
        event.contentType,
        event.headers,
        event.createdAt);
  }

  @Override
  public Set<Long> complete(Collection<DeliveryToken> tokens) {
    Validation.elements("tokens", tokens);
    return locked(() -> completion.complete(tokens, now()));
  }

  @Override
  public FailOutcome reschedule(DeliveryToken token, String reason) {
    Validation.notNull("token", token);
    Validation.notBlank("reason", reason);
    return locked(() -> completion.reschedule(token, reason, now()));
  }

  @Override
  public boolean bury(DeliveryToken token, String reason) {
    Validation.notNull("token", token);
    Validation.notBlank("reason", reason);
    return locked(() -> completion.bury(token, reason, now()));
  }

  @Override
  public int release(Collection<DeliveryToken> tokens) {
    Validation.elements("tokens", tokens);
    return locked(() -> completion.release(tokens));
  }

  @Override
  public int requeue(Collection<Long> deliveryIds) {
    Validation.elements("deliveryIds", deliveryIds);
    return locked(
        () -> admin.requeue(deliveryIds.stream().map(tables.deliveries::get).toList(), now()));
  }

  @Override
  public int requeueDead(String handler) {
    if (handler != null) {
      Validation.handler(handler);
    }
    return locked(
        () ->
            admin.requeue(
                tables.deliveries.values().stream()
                    .filter(d -> handler == null || d.handler.equals(handler))
                    .toList(),
                now()));
  }

  @Override
  public DeliveryPage listDeliveries(DeliveryQuery query) {
    Validation.notNull("query", query);
    return locked(() -> admin.list(query));
  }

  @Override
  public Set<Long> remaining(int lane, Collection<Long> deliveryIds) {
    Validation.lane(lane);
    Validation.elements("deliveryIds", deliveryIds);
    return locked(
        () -> {
          Set<Long> held = new java.util.HashSet<>();
          for (Long id : deliveryIds) {
            StoredDelivery delivery = tables.deliveries.get(id);
            if (delivery != null && delivery.lane == lane) {
              held.add(id);
            }
          }
          return held;
        });
  }

  @Override
  public OutboxStatistics statistics() {
    return locked(() -> admin.statistics(now()));
  }

  @Override
  public PurgeResult purge(RetentionPolicy retention) {
    Validation.notNull("retention", retention);
    return locked(() -> admin.purge(retention, now()));
  }

  @Override
  public List<HandlerBacklog> backlog() {
    return locked(() -> operator.backlog(now()));
  }

  @Override
  public List<LaneStatus> laneStatus() {
    return locked(() -> operator.lanes(now()));
  }

  @Override
  public DeadLetterPage listDeadLetters(DeadLetterFilter filter, Long afterId, int limit) {
    Validation.notNull("filter", filter);
    Validation.pageLimit(limit);
    return locked(() -> operator.deadLetters(filter, afterId, limit, now()));
  }

  @Override
  public long countDeadLetters(DeadLetterFilter filter) {
    Validation.notNull("filter", filter);
    return locked(() -> operator.count(filter, now()));
  }

  @Override
  public long requeueMatching(DeadLetterFilter filter) {
    Validation.notNull("filter", filter);
    return locked(
        () -> {
          Instant now = now();
          return (long) admin.requeue(operator.all(filter, now), now);
        });
  }

  @Override
  public RetryPolicy retryPolicy() {
    return retryPolicy;
  }

  /** Nothing to release. */
  @Override
  public void close() {}

  private Instant now() {
    return clock.instant().truncatedTo(ChronoUnit.MICROS);
  }

  /**
   * {@inheritDoc}
   *
   * <p>In memory: returns {@code true} at once if deliveries were inserted since the previous call
   * returned, else when a publish, a committed transaction or a scheduled timer inserts some while
   * it waits. Every waiting caller is woken.
   */
  @Override
  public boolean awaitWork(Duration timeout) throws InterruptedException {
    Validation.notNegative("timeout", timeout);
    long nanos = timeout.toNanos();
    lock.lockInterruptibly();
    try {
      long entry = workSignals;
      if (entry == workSignalsSeen) {
        while (workSignals == entry) {
          if (nanos <= 0) {
            return false;
          }
          nanos = workArrived.awaitNanos(nanos);
        }
      }
      workSignalsSeen = workSignals;
      return true;
    } finally {
      lock.unlock();
    }
  }

  // visible for testing: callers waiting in awaitWork now
  int waitingForWork() {
    lock.lock();
    try {
      return lock.getWaitQueueLength(workArrived);
    } finally {
      lock.unlock();
    }
  }

  /** Under the lock: deliveries were inserted; wakes every awaitWork. */
  private void signalWork() {
    workSignals++;
    workArrived.signalAll();
  }

  private <T> T locked(Supplier<T> action) {
    lock.lock();
    try {
      return action.get();
    } finally {
      lock.unlock();
    }
  }
}
