package io.relaybus.connect;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryPage;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.FailOutcome;
import io.relaybus.store.LaneLease;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.PublishResult;
import io.relaybus.store.PurgeResult;
import io.relaybus.store.RetentionPolicy;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerResult;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Set;

/** Delegates every call; tests override the one they want to break or observe. */
class ForwardingStore implements OutboxStore {
  private final OutboxStore delegate;

  ForwardingStore(OutboxStore delegate) {
    this.delegate = delegate;
  }

  @Override
  public void setup() {
    delegate.setup();
  }

  @Override
  public void verifySchema() {
    delegate.verifySchema();
  }

  @Override
  public PublishResult publish(OutboxEvent event) {
    return delegate.publish(event);
  }

  @Override
  public List<PublishResult> publishAll(List<OutboxEvent> events) {
    return delegate.publishAll(events);
  }

  @Override
  public TimerResult schedule(OutboxEvent event, Timer timer) {
    return delegate.schedule(event, timer);
  }

  @Override
  public TimerResult cancelTimer(String handler, String timerId) {
    return delegate.cancelTimer(handler, timerId);
  }

  @Override
  public List<LaneLease> acquireLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration) {
    return delegate.acquireLanes(owner, group, lanes, duration);
  }

  @Override
  public List<LaneLease> acquireFreeLanes(
      String owner, String group, Collection<Integer> lanes, Duration duration) {
    return delegate.acquireFreeLanes(owner, group, lanes, duration);
  }

  @Override
  public List<LaneLease> renewLanes(String owner, Collection<LaneLease> leases, Duration duration) {
    return delegate.renewLanes(owner, leases, duration);
  }

  @Override
  public int relinquishLanes(String owner, Collection<LaneLease> leases) {
    return delegate.relinquishLanes(owner, leases);
  }

  @Override
  public List<ClaimedDelivery> claim(String owner, Collection<LaneLease> leases, int limit) {
    return delegate.claim(owner, leases, limit);
  }

  @Override
  public Set<Long> complete(Collection<DeliveryToken> tokens) {
    return delegate.complete(tokens);
  }

  @Override
  public FailOutcome reschedule(DeliveryToken token, String reason) {
    return delegate.reschedule(token, reason);
  }

  @Override
  public boolean bury(DeliveryToken token, String reason) {
    return delegate.bury(token, reason);
  }

  @Override
  public int release(Collection<DeliveryToken> tokens) {
    return delegate.release(tokens);
  }

  @Override
  public int requeue(Collection<Long> deliveryIds) {
    return delegate.requeue(deliveryIds);
  }

  @Override
  public int requeueDead(String handler) {
    return delegate.requeueDead(handler);
  }

  @Override
  public DeliveryPage listDeliveries(DeliveryQuery query) {
    return delegate.listDeliveries(query);
  }

  @Override
  public Set<Long> remaining(int lane, Collection<Long> deliveryIds) {
    return delegate.remaining(lane, deliveryIds);
  }

  @Override
  public OutboxStatistics statistics() {
    return delegate.statistics();
  }

  @Override
  public java.util.Optional<io.relaybus.store.XminHorizon> xminHorizon() {
    return delegate.xminHorizon();
  }

  @Override
  public PurgeResult purge(RetentionPolicy retention) {
    return delegate.purge(retention);
  }

  @Override
  public java.util.List<io.relaybus.store.HandlerBacklog> backlog() {
    return delegate.backlog();
  }

  @Override
  public java.util.List<io.relaybus.store.LaneStatus> laneStatus() {
    return delegate.laneStatus();
  }

  @Override
  public io.relaybus.store.DeadLetterPage listDeadLetters(
      io.relaybus.store.DeadLetterFilter filter, Long afterId, int limit) {
    return delegate.listDeadLetters(filter, afterId, limit);
  }

  @Override
  public long countDeadLetters(io.relaybus.store.DeadLetterFilter filter) {
    return delegate.countDeadLetters(filter);
  }

  @Override
  public long requeueMatching(io.relaybus.store.DeadLetterFilter filter) {
    return delegate.requeueMatching(filter);
  }

  @Override
  public RetryPolicy retryPolicy() {
    return delegate.retryPolicy();
  }

  @Override
  public boolean awaitWork(Duration timeout) throws InterruptedException {
    return delegate.awaitWork(timeout);
  }

  /** Does not close the delegate: tests keep inspecting it after the task stopped. */
  @Override
  public void close() {}
}
