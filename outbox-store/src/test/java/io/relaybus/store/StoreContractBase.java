package io.relaybus.store;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;

/**
 * What every part of the store contract ({@link OutboxStoreContractTest}) uses: a store's test
 * class says how to make a fresh, set-up store and how to open a transaction; the fresh {@link
 * #store} of each test and the helpers that build events, lease lanes and read the deliveries.
 */
public abstract class StoreContractBase {
  protected static final String GROUP = "connector-a";
  protected static final Duration LEASE = Duration.ofSeconds(30);
  protected static final List<Integer> ALL_LANES = LaneRange.all().lanes();

  /** A transaction of the caller, as an application would hold it. */
  protected interface Tx extends AutoCloseable {
    PublishResult publish(OutboxEvent event);

    InboxOutcome recordHandled(OutboxEvent received, String handler);

    TimerResult schedule(OutboxEvent event, Timer timer);

    TimerResult cancelTimer(String handler, String timerId);

    void commit();

    void rollback();

    @Override
    void close();
  }

  /** A fresh, set-up store with nothing in it. */
  protected abstract OutboxStore newStore(RetryPolicy retryPolicy, boolean completionHistory);

  protected abstract Tx begin(OutboxStore store);

  /** A fresh store like {@link #newStore}, built with {@code strictRepublish(true)}. */
  protected abstract OutboxStore newStrictStore();

  /**
   * Why {@link #begin} cannot work against the server under test, or {@code null} when it can (the
   * default). Tests that need a caller transaction are then reported as skipped with this reason,
   * never passed: e.g. MongoDB without a replica set has no transactions.
   */
  protected String transactionsUnavailableReason() {
    return null;
  }

  protected void assumeTransactions() {
    String reason = transactionsUnavailableReason();
    assumeTrue(reason == null, reason);
  }

  protected OutboxStore store;
  private final List<OutboxStore> opened = new ArrayList<>();

  @BeforeEach
  void openStore() {
    store = open(RetryPolicy.defaults(), false);
  }

  @AfterEach
  void closeStores() {
    opened.forEach(OutboxStore::close);
  }

  protected OutboxStore open(RetryPolicy policy, boolean history) {
    OutboxStore s = newStore(policy, history);
    opened.add(s);
    return s;
  }

  protected OutboxStore openStrict() {
    OutboxStore s = newStrictStore();
    opened.add(s);
    return s;
  }

  protected static OutboxEvent event(String id, String key, String... handlers) {
    return OutboxEvent.builder("test.happened")
        .id(id)
        .key(key)
        .payload(("payload of " + id).getBytes(StandardCharsets.UTF_8), "text/plain")
        .header("traceparent", "00-" + id)
        .handlers(handlers)
        .build();
  }

  protected List<LaneLease> leaseAll(OutboxStore s, String owner, String group) {
    return s.acquireLanes(owner, group, ALL_LANES, LEASE);
  }

  protected static List<String> eventIds(List<ClaimedDelivery> batch) {
    return batch.stream().map(ClaimedDelivery::eventId).toList();
  }

  protected static List<DeliveryToken> tokens(List<ClaimedDelivery> batch) {
    return batch.stream().map(ClaimedDelivery::token).toList();
  }

  protected static LaneLease leaseOf(List<LaneLease> leases, int lane) {
    return leases.stream().filter(l -> l.lane() == lane).findFirst().orElseThrow();
  }

  protected List<DeliveryView> all() {
    return store.listDeliveries(DeliveryQuery.all().withLimit(10_000)).items();
  }

  // timer events: the timer, claim and admin tests use them

  protected static final String TIMERS = "timers";

  protected static OutboxEvent timerEvent(String id) {
    return event(id, null, TIMERS);
  }

  protected static Timer due() {
    return Timer.at(java.time.Instant.now().minusSeconds(1));
  }

  protected static Timer later() {
    return Timer.in(Duration.ofHours(1));
  }
}
