package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.tuple;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.LaneLease;
import io.relaybus.store.Lanes;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.memory.InMemoryOutboxStore;
import io.relaybus.store.testing.MutableClock;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import javax.management.ObjectName;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.source.SourceRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class OutboxSourceTaskTest {
  private static final RetryPolicy POLICY = new RetryPolicy(3, Duration.ZERO, Duration.ZERO, 0);

  private final InMemoryOutboxStore store =
      InMemoryOutboxStore.builder().retryPolicy(POLICY).build();
  private final String connector = "orders-" + UUID.randomUUID();
  private final List<OutboxSourceTask> started = new ArrayList<>();

  @AfterEach
  void stopTasks() {
    started.forEach(OutboxSourceTask::stop);
  }

  private Map<String, String> props(String... overrides) {
    Map<String, String> props = new HashMap<>();
    props.put("name", connector);
    props.put("connection.url", "jdbc:postgresql://unused/db");
    props.put("task.lanes", "0-255");
    props.put("task.index", "0");
    props.put("completion.flush.interval.ms", "0");
    props.put("poll.interval.ms", "1");
    props.put("poll.linger.ms", "0"); // each poll claims at once: the tests count polls
    for (int i = 0; i < overrides.length; i += 2) {
      props.put(overrides[i], overrides[i + 1]);
    }
    return props;
  }

  private OutboxSourceTask start(Map<String, String> props) {
    return start(props, new TestSourceTaskContext());
  }

  private OutboxSourceTask start(Map<String, String> props, TestSourceTaskContext context) {
    OutboxSourceTask task =
        new OutboxSourceTask((config, name) -> new ForwardingStore(store), Clock.systemUTC());
    task.initialize(context);
    task.start(props);
    started.add(task);
    return task;
  }

  /** What a replaying store hands out at its second claim. */
  private interface SecondClaim {
    /**
     * The batch of the second claim, from the batch the first claim handed out and the store's own
     * claim (claimed only when asked for).
     */
    List<ClaimedDelivery> batch(List<ClaimedDelivery> first, Supplier<List<ClaimedDelivery>> fresh);
  }

  /**
   * A task started on a store that hands out at its second claim what {@code second} makes of the
   * first claim's batch (deliveries the PostgreSQL store hands out again after it read a lane
   * again); every other claim is the store's own.
   */
  private OutboxSourceTask startReplaying(SecondClaim second) {
    List<ClaimedDelivery> first = new ArrayList<>();
    AtomicInteger claims = new AtomicInteger();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public List<ClaimedDelivery> claim(
                      String owner, Collection<LaneLease> leases, int limit) {
                    int claim = claims.incrementAndGet();
                    if (claim == 2) {
                      return second.batch(first, () -> super.claim(owner, leases, limit));
                    }
                    List<ClaimedDelivery> batch = super.claim(owner, leases, limit);
                    if (claim == 1) {
                      first.addAll(batch);
                    }
                    return batch;
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props());
    started.add(task);
    return task;
  }

  private static OutboxEvent event(String id, String key, String payload, String... handlers) {
    return OutboxEvent.builder("order.placed")
        .id(id)
        .key(key)
        .payload(payload.getBytes(StandardCharsets.UTF_8), "application/json")
        .handlers(handlers)
        .build();
  }

  private static void acknowledgeAll(OutboxSourceTask task, List<SourceRecord> records)
      throws InterruptedException {
    for (SourceRecord record : records) {
      task.commitRecord(
          record, new RecordMetadata(new TopicPartition(record.topic(), 0), 0, 0, 0, 0, 0));
    }
  }

  private static String header(SourceRecord record, String name) {
    return String.valueOf(record.headers().lastWithName(name).value());
  }

  private List<DeliveryView> deliveries() {
    return store.listDeliveries(DeliveryQuery.all().withLimit(1000)).items();
  }

  /**
   * Symptom: a graceful stop deleted acknowledged deliveries only in full flush batches
   * (completion.flush.size); the rest was handed back with the lanes and sent again by the next
   * holder, duplicates of records Kafka had (up to 499 per stop at the defaults).
   */
  @Test
  void aGracefulStopDeletesEveryAcknowledgedDeliveryNotOnlyFullFlushBatches() throws Exception {
    for (int i = 1; i <= 3; i++) {
      store.publish(event("e" + i, "k" + i, "{}", "billing"));
    }
    Map<String, String> props =
        props("completion.flush.size", "2", "completion.flush.interval.ms", "60000");
    OutboxSourceTask task = start(props);
    List<SourceRecord> records = task.poll();
    assertThat(records).hasSize(3);
    acknowledgeAll(task, records);

    task.stop();

    assertThat(deliveries()).as("acknowledged, left in the outbox after stop").isEmpty();
    assertThat(start(props).poll()).as("sent again by the next holder").isNull();
  }

  /**
   * Symptom: with the type in the topic template, a key's records go to several topics, whose
   * partitions Kafka acknowledges independently; a stop took a record still waiting for its
   * partition for one overtaken by its key's later record on another topic, and dead-lettered it at
   * once instead of charging it an attempt.
   */
  @Test
  void aRecordWaitingForItsPartitionIsChargedNotBuriedWhenAnotherTopicAcknowledgedLater()
      throws Exception {
    store.publish(
        OutboxEvent.builder("order.placed")
            .id("placed")
            .key("order-1")
            .json("{}")
            .handlers("billing")
            .build());
    store.publish(
        OutboxEvent.builder("order.paid")
            .id("paid")
            .key("order-1")
            .json("{}")
            .handlers("billing")
            .build());
    OutboxSourceTask task = start(props("topic.template", "${handler}.${type}"));
    List<SourceRecord> records = task.poll();
    assertThat(records)
        .extracting(SourceRecord::topic)
        .containsExactly("billing.order.placed", "billing.order.paid");
    // billing.order.paid's leader answers, billing.order.placed's is down
    acknowledgeAll(task, records.subList(1, 2));

    task.stop(); // a rebalance after offset.flush.timeout.ms

    assertThat(deliveries())
        .extracting(
            DeliveryView::eventId,
            DeliveryView::status,
            DeliveryView::attempts,
            DeliveryView::lastError)
        .containsExactly(
            tuple("placed", DeliveryStatus.PENDING, 1, OutboxSourceTask.STOPPED_UNACKNOWLEDGED));
  }

  @Test
  void emitsEveryDeliveryOnceInKeyOrderAndDeletesItAfterAcknowledgement() throws Exception {
    store.publish(event("e1", "order-1", "{}", "billing", "shipping"));
    store.publish(event("e2", "order-1", "{}", "billing", "shipping"));
    store.publish(event("e3", null, "{}", "billing"));
    OutboxSourceTask task = start(props());

    List<SourceRecord> records = task.poll();

    assertThat(records).hasSize(5);
    assertThat(records)
        .filteredOn(r -> "order-1".equals(r.key()))
        .extracting(SourceRecord::topic, r -> header(r, "relaybus-sequence"))
        .containsSubsequence(tuple("billing", "1"), tuple("billing", "2"))
        .containsSubsequence(tuple("shipping", "1"), tuple("shipping", "2"));
    assertThat(task.poll()).isNull();

    acknowledgeAll(task, records);
    task.poll();

    assertThat(deliveries()).isEmpty();
    assertThat(task.metrics().value("emitted-total")).isEqualTo(5.0);
    assertThat(task.metrics().value("acknowledged-total")).isEqualTo(5.0);
    assertThat(task.metrics().value("deleted-total")).isEqualTo(5.0);
    Object emitted =
        ManagementFactory.getPlatformMBeanServer()
            .getAttribute(
                new ObjectName(
                    "relaybus.connect:type=source-task-metrics,connector=" + connector + ",task=0"),
                "emitted-total");
    assertThat(emitted).isEqualTo(5.0);
  }

  @Test
  void startFailsClearlyWhenTheSchemaIsMissingAndStopStaysQuiet() {
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public void verifySchema() {
                    throw new OutboxStoreException("not set up", false, null);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());

    assertThatThrownBy(() -> task.start(props()))
        .isInstanceOf(org.apache.kafka.connect.errors.ConnectException.class)
        .isNotInstanceOf(org.apache.kafka.connect.errors.RetriableException.class)
        .hasMessage("Starting task " + connector + "/task-0 failed: not set up");
    task.stop();
  }

  /**
   * Kafka Connect does not call {@code start()} again (nor retry it on a {@code
   * RetriableException}): a task whose start failed stays FAILED until someone restarts it. Until
   * 2026-12-07 a transient store failure at start (the database restarting or failing over while
   * Connect rebalanced, a deadlock) failed the task for good, its lanes stalled.
   */
  @Test
  void aTransientStoreFailureAtStartIsRetriedByPollAndTheTaskThenDelivers() throws Exception {
    store.publish(event("e1", "order-1", "{}", "billing"));
    AtomicInteger schemaChecks = new AtomicInteger();
    AtomicInteger acquisitions = new AtomicInteger();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public void verifySchema() {
                    if (schemaChecks.incrementAndGet() == 1) {
                      throw new OutboxStoreException("the server is starting up", true, null);
                    }
                    super.verifySchema();
                  }

                  // a start asks for the free lanes first (the only call when none is held)
                  @Override
                  public List<LaneLease> acquireFreeLanes(
                      String owner, String group, Collection<Integer> lanes, Duration duration) {
                    if (acquisitions.incrementAndGet() == 1) {
                      throw new OutboxStoreException("deadlock detected", true, null);
                    }
                    return super.acquireFreeLanes(owner, group, lanes, duration);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props()); // no exception: the task stays RUNNING and tries again from poll()
    started.add(task);

    List<SourceRecord> records = new ArrayList<>();
    long end = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (records.isEmpty() && System.nanoTime() < end) {
      List<SourceRecord> polled = task.poll();
      if (polled != null) {
        records.addAll(polled);
      }
    }

    assertThat(records).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e1");
    // each try checks the schema again: failed, then passed with the lanes refused, then both
    assertThat(schemaChecks.get()).isEqualTo(3);
    assertThat(acquisitions.get()).isEqualTo(2);
  }

  @Test
  void aPermanentStoreFailureAtStartStillFailsTheTask() {
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public List<LaneLease> acquireFreeLanes(
                      String owner, String group, Collection<Integer> lanes, Duration duration) {
                    throw new OutboxStoreException(
                        "permission denied for table lanes", false, null);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());

    assertThatThrownBy(() -> task.start(props()))
        .isInstanceOf(org.apache.kafka.connect.errors.ConnectException.class)
        .isNotInstanceOf(org.apache.kafka.connect.errors.RetriableException.class)
        .hasMessageContaining("permission denied for table lanes");
    task.stop();
  }

  @Test
  void undeliverablePayloadIsDeadLetteredAndTheKeyGoesOn() throws Exception {
    store.publish(event("bad", "order-1", "not json", "billing"));
    store.publish(event("good", "order-1", "{\"ok\":true}", "billing"));
    OutboxSourceTask task = start(props("value.format", "json"));

    List<SourceRecord> records = task.poll();

    assertThat(records).extracting(r -> header(r, "relaybus-event-id")).containsExactly("good");
    assertThat(deliveries())
        .filteredOn(d -> d.status() == DeliveryStatus.DEAD)
        .extracting(DeliveryView::eventId, DeliveryView::lastError)
        .containsExactly(
            tuple("bad", "payload is not valid JSON (value.format=json) at line 1, column 1"));
    assertThat(task.metrics().value("dead-lettered-total")).isEqualTo(1.0);
  }

  /** Guards against a claimed-but-unsent delivery holding back its key when burying it failed. */
  /**
   * Regression: a completion DELETE that failed (a killed connection) dropped its batch, leaving
   * delivered rows in the outbox until the task restarted (found by FaultInjectionIT).
   */
  @Test
  void completionThatFailedIsRetriedAtTheNextFlush() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    store.publish(event("e2", "k", "{}", "billing"));
    AtomicInteger completeCalls = new AtomicInteger();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public java.util.Set<Long> complete(java.util.Collection<DeliveryToken> tokens) {
                    if (completeCalls.incrementAndGet() == 1) {
                      throw new OutboxStoreException("terminating connection", true, null);
                    }
                    return super.complete(tokens);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props());
    started.add(task);
    List<SourceRecord> records = task.poll();
    assertThat(records).hasSize(2);
    acknowledgeAll(task, records);

    assertThatThrownBy(task::poll)
        .isInstanceOf(org.apache.kafka.connect.errors.RetriableException.class);
    assertThat(deliveries()).hasSize(2);
    task.poll();

    assertThat(completeCalls).hasValue(2);
    assertThat(deliveries()).isEmpty();
    assertThat(task.metrics().value("deleted-total")).isEqualTo(2.0);
  }

  /**
   * A lease renewal hangs in the database (a lock wait up to statement_timeout). stop() waits for
   * the renewal thread up to 10 s before it relinquishes the lanes, and then must not wait for it a
   * second time while closing: one bounded wait, not two.
   */
  @Test
  void aStopWaitsForAHungLeaseRenewalOnceNotTwice() throws Exception {
    java.util.concurrent.CountDownLatch renewalHangs = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public List<LaneLease> renewLanes(
                      String owner, Collection<LaneLease> leases, Duration duration) {
                    renewalHangs.countDown();
                    try {
                      release.await(60, java.util.concurrent.TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                      Thread.currentThread().interrupt();
                    }
                    return super.renewLanes(owner, leases, duration);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props("lease.duration.ms", "3000")); // renewed every second
    try {
      assertThat(task.poll()).isNull();
      assertThat(renewalHangs.await(10, java.util.concurrent.TimeUnit.SECONDS)).isTrue();

      long started = System.nanoTime();
      task.stop();
      Duration took = Duration.ofNanos(System.nanoTime() - started);

      assertThat(took).as("stop() with the renewal hung").isLessThan(Duration.ofSeconds(15));
    } finally {
      release.countDown();
    }
  }

  /**
   * A claim that fails at once with a transient error (during a failover the standby, still in
   * recovery, refuses it as read-only; a connection is terminated) makes poll() throw a
   * RetriableException, and Connect calls poll() again at once (AbstractWorkerSourceTask#poll logs
   * a warning with the stack trace and returns null; it does not pause). The task must not claim
   * again in a tight loop: at the default poll.interval.ms (1 s), at most a handful of claims in 2
   * s of polling, not one per call.
   */
  @Test
  void aClaimThatFailsAtOnceIsNotTriedAgainInATightLoop() throws Exception {
    AtomicInteger claims = new AtomicInteger();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public List<ClaimedDelivery> claim(
                      String owner, Collection<LaneLease> leases, int limit) {
                    claims.incrementAndGet();
                    throw new OutboxStoreException(
                        "claiming deliveries failed: the server is read-only (in recovery)",
                        true,
                        null);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props("poll.interval.ms", "1000"));
    started.add(task);

    int polls = 0;
    long end = System.nanoTime() + Duration.ofSeconds(2).toNanos();
    while (System.nanoTime() < end) {
      polls++;
      try {
        task.poll();
      } catch (org.apache.kafka.connect.errors.RetriableException e) {
        // as Connect: logged, then poll() again at once
      }
    }

    assertThat(claims.get())
        .as("claims in 2 s of polling (%d polls)", polls)
        .isLessThanOrEqualTo(20);
  }

  /**
   * Symptom: after a PostgreSQL failover the tasks sent again what they had in flight, and in
   * exactly-once mode those were duplicates in committed transactions (FaultExactlyOnceIT's
   * failover: 46). The store resumes its lanes from their cursor rows when the server lost WAL and
   * hands out again, under the same tokens, deliveries the task has sent and not yet settled.
   */
  @Test
  void aDeliveryHandedOutAgainWhileItsRecordIsOnItsWayIsNotSentTwice() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    store.publish(event("e2", "k", "{}", "billing"));
    OutboxSourceTask task =
        startReplaying(
            (first, fresh) -> {
              // what the PostgreSQL store hands out after it resumed from its cursor rows
              List<ClaimedDelivery> batch = new ArrayList<>(first);
              batch.addAll(fresh.get());
              return batch;
            });
    List<SourceRecord> sent = task.poll();
    assertThat(sent).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e1", "e2");
    store.publish(event("e3", "k", "{}", "billing"));

    List<SourceRecord> next = task.poll();

    assertThat(next).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e3");
    acknowledgeAll(task, sent);
    acknowledgeAll(task, next);
    task.poll();
    assertThat(deliveries()).isEmpty();
    assertThat(task.metrics().value("emitted-total")).isEqualTo(3.0);
    assertThat(task.metrics().value("deleted-total")).isEqualTo(3.0);
  }

  /**
   * Symptom (the exactly-once fault suite's restart, 22 duplicates): a delivery handed out again
   * while the task had it on its way was queued behind its key's retry; the copy on its way was
   * acknowledged and completed meanwhile, and then the queued one was sent too.
   */
  @Test
  void aDeliveryHandedOutAgainIsNotQueuedToBeSentAfterTheCopyOnItsWayWasCompleted()
      throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    OutboxSourceTask task =
        startReplaying(
            (first, fresh) -> {
              // a retry of the key first, then e1 again (the store read its lane again)
              ClaimedDelivery e1 = first.get(0);
              ClaimedDelivery retry =
                  new ClaimedDelivery(
                      new DeliveryToken(999, e1.lane(), e1.token().epoch(), 1, "e0"),
                      "e0",
                      "billing",
                      "k",
                      1L,
                      1,
                      "order.placed",
                      "{}".getBytes(StandardCharsets.UTF_8),
                      "application/json",
                      Map.of(),
                      java.time.Instant.EPOCH);
              return List.of(retry, e1);
            });
    List<SourceRecord> sent = new ArrayList<>(task.poll());
    List<SourceRecord> retried = task.poll();
    assertThat(retried).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e0");
    sent.addAll(retried);
    acknowledgeAll(task, List.of(sent.get(0))); // e1's copy on its way: completed next
    for (int i = 0; i < 3; i++) {
      List<SourceRecord> more = task.poll();
      if (more != null) {
        sent.addAll(more);
      }
    }
    acknowledgeAll(task, retried);
    for (int i = 0; i < 3; i++) {
      List<SourceRecord> more = task.poll();
      if (more != null) {
        sent.addAll(more);
      }
    }

    assertThat(sent).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e1", "e0");
  }

  @Test
  void deliveryThatCouldNotBeDeadLetteredIsHandedBackAndBuriedLater() throws Exception {
    store.publish(event("bad", "k", "not json", "billing"));
    AtomicInteger buryCalls = new AtomicInteger();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public boolean bury(DeliveryToken token, String reason) {
                    if (buryCalls.incrementAndGet() == 1) {
                      throw new OutboxStoreException("connection lost", true, null);
                    }
                    return super.bury(token, reason);
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props("value.format", "json"));
    started.add(task);

    assertThat(task.poll()).isNull();
    assertThat(deliveries()).extracting(DeliveryView::inFlight).containsExactly(true);
    assertThat(task.poll()).isNull();

    assertThat(buryCalls).hasValue(2);
    assertThat(deliveries())
        .extracting(DeliveryView::status, DeliveryView::lastError)
        .containsExactly(
            tuple(
                DeliveryStatus.DEAD,
                "payload is not valid JSON (value.format=json) at line 1, column 1"));
  }

  @Test
  void missingMetadataReschedulesTheDeliveryAndNeverDeletesIt() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    OutboxSourceTask task = start(props());
    List<SourceRecord> records = task.poll();

    task.commitRecord(records.get(0), null);
    List<SourceRecord> again = task.poll();

    assertThat(deliveries())
        .extracting(
            DeliveryView::eventId,
            DeliveryView::status,
            DeliveryView::attempts,
            DeliveryView::lastError)
        .containsExactly(tuple("e1", DeliveryStatus.PENDING, 1, OutboxSourceTask.NOT_ACKNOWLEDGED));
    assertThat(again).extracting(r -> header(r, "relaybus-attempt")).containsExactly("2");
    assertThat(task.metrics().value("rescheduled-total")).isEqualTo(1.0);
  }

  /**
   * Guards against unacknowledged deliveries left in flight for good: when {@code reschedule} fails
   * part-way through the drained tokens, the ones not rescheduled must be tried again at the next
   * poll, not forgotten (they would hold their lane's in-flight set until a restart).
   */
  @Test
  void rescheduleThatFailsPartWayRetriesTheRestAtTheNextPoll() throws Exception {
    store.publish(event("e1", "k1", "{}", "billing"));
    store.publish(event("e2", "k2", "{}", "billing"));
    store.publish(event("e3", "k3", "{}", "billing"));
    AtomicInteger calls = new AtomicInteger();
    Map<Long, Integer> rescheduled = new java.util.concurrent.ConcurrentHashMap<>();
    OutboxSourceTask task =
        new OutboxSourceTask(
            (config, name) ->
                new ForwardingStore(store) {
                  @Override
                  public io.relaybus.store.FailOutcome reschedule(
                      DeliveryToken token, String reason) {
                    if (calls.incrementAndGet() == 2) {
                      throw new OutboxStoreException("connection lost", true, null);
                    }
                    io.relaybus.store.FailOutcome outcome = super.reschedule(token, reason);
                    if (outcome == io.relaybus.store.FailOutcome.RESCHEDULED) {
                      rescheduled.merge(token.deliveryId(), 1, Integer::sum);
                    }
                    return outcome;
                  }
                },
            Clock.systemUTC());
    task.initialize(new TestSourceTaskContext());
    task.start(props("poll.interval.ms", "60000"));
    started.add(task);
    List<SourceRecord> records = task.poll();
    assertThat(records).hasSize(3);
    for (SourceRecord record : records) {
      task.commitRecord(record, null);
    }

    assertThatThrownBy(task::poll)
        .isInstanceOf(org.apache.kafka.connect.errors.RetriableException.class);
    List<SourceRecord> again = task.poll();

    assertThat(calls).hasValue(4);
    assertThat(rescheduled.values()).containsExactly(1, 1, 1);
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::attempts)
        .containsExactlyInAnyOrder(tuple("e1", 1), tuple("e2", 1), tuple("e3", 1));
    assertThat(again)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactlyInAnyOrder(tuple("e1", "2"), tuple("e2", "2"), tuple("e3", "2"));
    assertThat(task.metrics().value("rescheduled-total")).isEqualTo(3.0);
  }

  /**
   * A graceful stop after Connect waited for the producer: what Kafka acknowledged is deleted, what
   * it never acknowledged is charged one attempt with the reason.
   */
  @Test
  void stopChargesAnAttemptToRecordsKafkaNeverAcknowledged() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    store.publish(event("e2", "k", "{}", "billing"));
    OutboxSourceTask task = start(props());
    List<SourceRecord> records = task.poll();
    acknowledgeAll(task, records.subList(0, 1));

    task.stop();

    assertThat(deliveries())
        .extracting(
            DeliveryView::eventId,
            DeliveryView::status,
            DeliveryView::inFlight,
            DeliveryView::attempts,
            DeliveryView::lastError)
        .containsExactly(
            tuple("e2", DeliveryStatus.PENDING, false, 1, OutboxSourceTask.STOPPED_UNACKNOWLEDGED));
    OutboxSourceTask next = start(props());
    assertThat(next.poll())
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("e2", "2"));
  }

  /**
   * Regression (issue 13, item 4): a record Kafka rejects fails its task under {@code
   * errors.tolerance=none}; stopping handed it back uncharged, so it failed every restart forever,
   * and the key's later records, sent in the same batch as its retry, reached Kafka before it. Now
   * each failure charges it, nothing of its key follows a retry until Kafka acknowledged it, from
   * its second failure on it goes out alone, and it is dead after retry.max.attempts (3 here); the
   * key's later event waits, claimed but never sent, and is handed back uncharged.
   */
  @Test
  void recordThatFailsItsTaskEveryTimeEndsDeadAndNothingAfterItIsSentMeanwhile() throws Exception {
    store.publish(event("rejected", "k", "{}", "billing"));
    store.publish(event("bystander", "other", "{}", "billing"));
    OutboxSourceTask first = start(props());
    List<SourceRecord> sent = first.poll();
    assertThat(sent).hasSize(2);
    // Kafka rejects "rejected": no commitRecord; Connect sent the bystander after it, or not.
    first.stop();
    store.publish(event("later", "k", "{}", "billing"));

    List<String> bystanderAttempts = new ArrayList<>();
    for (int attempt = 2; attempt <= POLICY.maxAttempts(); attempt++) {
      OutboxSourceTask task = start(props());
      List<String> returned = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        List<SourceRecord> polled = task.poll();
        if (polled == null) {
          continue;
        }
        if (attempt > 2) { // a suspect (two failed attempts) goes out alone
          assertThat(polled).hasSize(1);
        }
        for (SourceRecord record : polled) {
          String id = header(record, "relaybus-event-id");
          returned.add(id + "#" + header(record, "relaybus-attempt"));
          if (id.equals("bystander")) { // Kafka takes it; "rejected" it never acknowledges
            bystanderAttempts.add(header(record, "relaybus-attempt"));
            acknowledgeAll(task, List.of(record));
          }
        }
      }
      // Nothing follows the rejected record until Kafka acknowledged it: "later" never goes out.
      assertThat(returned).contains("rejected#" + attempt).doesNotContain("later#1");
      task.stop(); // it failed the task again
      assertThat(deliveries())
          .filteredOn(d -> d.eventId().equals("later"))
          .extracting(DeliveryView::inFlight, DeliveryView::attempts)
          .containsExactly(tuple(false, 0));
    }

    assertThat(deliveries())
        .filteredOn(d -> d.status() == DeliveryStatus.DEAD)
        .extracting(DeliveryView::eventId, DeliveryView::attempts, DeliveryView::lastError)
        .containsExactly(tuple("rejected", 3, OutboxSourceTask.STOPPED_UNACKNOWLEDGED));
    OutboxSourceTask last = start(props());
    List<String> rest = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      List<SourceRecord> polled = last.poll();
      if (polled != null) {
        polled.forEach(r -> rest.add(header(r, "relaybus-event-id")));
        polled.stream()
            .filter(r -> header(r, "relaybus-event-id").equals("bystander"))
            .forEach(r -> bystanderAttempts.add(header(r, "relaybus-attempt")));
        acknowledgeAll(last, polled);
      }
    }
    last.poll();
    // The bystander was charged once, for the failure it was caught in, and sent once more.
    assertThat(bystanderAttempts).containsExactly("2");
    assertThat(rest).contains("later").doesNotContain("rejected");
    assertThat(deliveries()).extracting(DeliveryView::eventId).containsExactly("rejected");
  }

  /**
   * The first time Kafka rejects a record, later records of its key may already be with the
   * producer and get written (Connect's producer goes on after a rejected batch): retrying the
   * rejected one would put it after them, so it is dead-lettered at once with the reason.
   */
  @Test
  void recordOvertakenByALaterRecordOfItsKeyIsDeadLetteredAtOnceNotRetriedOutOfOrder()
      throws Exception {
    store.publish(event("rejected", "k", "{}", "billing"));
    store.publish(event("later", "k", "{}", "billing"));
    store.publish(event("other", "o", "{}", "billing"));
    OutboxSourceTask task = start(props());
    List<SourceRecord> records = task.poll();
    assertThat(records).hasSize(3);
    acknowledgeAll(
        task,
        records.stream().filter(r -> !header(r, "relaybus-event-id").equals("rejected")).toList());

    task.stop();

    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::status, DeliveryView::lastError)
        .containsExactly(tuple("rejected", DeliveryStatus.DEAD, OutboxSourceTask.OVERTAKEN));
  }

  /**
   * Under {@code errors.tolerance=all} Connect reports a record the producer failed on with {@code
   * commitRecord(record, null)}, in the producer's callback order: before the key's later records
   * of the same partition, which it goes on sending and may get written. Retrying the failed one
   * then puts it after them (a rejection that passes: an ACL fixed, a partition back), so the
   * decision waits for the key's later records and dead-letters it once one of them is in Kafka.
   */
  @Test
  void
      withToleranceAllARecordFailedWhileItsKeysLaterRecordIsWrittenIsDeadLetteredNotRetriedAfterIt()
          throws Exception {
    store.publish(event("rejected", "k", "{}", "billing"));
    store.publish(event("later", "k", "{}", "billing"));
    store.publish(event("other", "o", "{}", "billing"));
    OutboxSourceTask task = start(props("errors.tolerance", "all"));
    List<SourceRecord> records = task.poll();
    assertThat(records)
        .extracting(r -> header(r, "relaybus-event-id"))
        .containsExactlyInAnyOrder("rejected", "later", "other");
    SourceRecord rejected =
        records.stream()
            .filter(r -> header(r, "relaybus-event-id").equals("rejected"))
            .findFirst()
            .orElseThrow();

    task.commitRecord(rejected, null); // the producer failed on it
    List<SourceRecord> whileLaterInFlight = task.poll();
    List<DeliveryView> meanwhile = deliveries();
    acknowledgeAll(task, records.stream().filter(r -> r != rejected).toList()); // "later" written
    List<SourceRecord> after = task.poll();

    assertThat(whileLaterInFlight).isNull();
    assertThat(meanwhile)
        .filteredOn(d -> d.eventId().equals("rejected"))
        .extracting(DeliveryView::attempts, DeliveryView::inFlight)
        .as("not rescheduled while its key's later record is in flight")
        .containsExactly(tuple(0, true));
    assertThat(after).isNull();
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::status, DeliveryView::lastError)
        .containsExactly(tuple("rejected", DeliveryStatus.DEAD, OutboxSourceTask.OVERTAKEN));
    assertThat(task.metrics().value("dead-lettered-total")).isEqualTo(1.0);
  }

  /**
   * The same under {@code errors.tolerance=all} when the key's later record failed too: neither is
   * in Kafka, so both are retried, in their order, the later one only once the first is written.
   */
  @Test
  void withToleranceAllRecordsOfAKeyThatAllFailedAreRetriedInTheirOrder() throws Exception {
    store.publish(event("first", "k", "{}", "billing"));
    store.publish(event("second", "k", "{}", "billing"));
    OutboxSourceTask task = start(props("errors.tolerance", "all"));
    List<SourceRecord> records = task.poll();
    assertThat(records).hasSize(2);

    task.commitRecord(records.get(0), null);
    task.commitRecord(records.get(1), null);
    List<SourceRecord> retry = task.poll();
    List<SourceRecord> whileRetryInFlight = task.poll();
    acknowledgeAll(task, retry);
    List<SourceRecord> after = task.poll();

    assertThat(retry)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("first", "2"));
    assertThat(whileRetryInFlight).isNull();
    assertThat(after)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("second", "2"));
  }

  @Test
  void afterARetryTheKeysLaterDeliveriesWaitForItsAcknowledgementWhileOtherKeysFlow()
      throws Exception {
    store.publish(event("a1", "k", "{}", "billing"));
    OutboxSourceTask task = start(props());
    task.commitRecord(task.poll().get(0), null); // not acknowledged: rescheduled
    store.publish(event("a2", "k", "{}", "billing"));
    store.publish(event("x", "other", "{}", "billing"));

    List<SourceRecord> first = task.poll();
    List<SourceRecord> whileRetryInFlight = task.poll();
    acknowledgeAll(task, first);
    List<SourceRecord> after = task.poll();

    assertThat(first)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactlyInAnyOrder(tuple("a1", "2"), tuple("x", "1"));
    assertThat(whileRetryInFlight).isNull();
    assertThat(after).extracting(r -> header(r, "relaybus-event-id")).containsExactly("a2");
  }

  /**
   * A retry whose record Kafka does not acknowledge for a while (its partition has no leader; the
   * producer retries without end, as validate() requires) holds back its key's later deliveries,
   * claimed with it. It must not hold back the other keys: an event of another key published
   * meanwhile goes out within a few polls, as the documented cost is "a retried key's later records
   * wait for one acknowledgement", not the task's.
   */
  @Test
  void aRetryAwaitingItsAcknowledgementDoesNotStopTheTaskClaimingOtherKeys() throws Exception {
    store.publish(event("a1", "k", "{}", "billing"));
    OutboxSourceTask task = start(props());
    task.commitRecord(task.poll().get(0), null); // not acknowledged: rescheduled, a retry
    store.publish(event("a2", "k", "{}", "billing"));
    List<SourceRecord> retry = task.poll(); // a1 again; a2 waits for a1's acknowledgement
    // a1's partition is unavailable: Kafka does not acknowledge it during the polls below
    store.publish(event("y", "other", "{}", "billing"));

    List<String> sent = new ArrayList<>();
    for (int i = 0; i < 5 && sent.isEmpty(); i++) {
      List<SourceRecord> polled = task.poll();
      if (polled != null) {
        polled.forEach(r -> sent.add(header(r, "relaybus-event-id")));
        acknowledgeAll(task, polled);
      }
    }

    assertThat(retry).extracting(r -> header(r, "relaybus-event-id")).containsExactly("a1");
    assertThat(sent).as("sent in 5 polls while a1 is unacknowledged").containsExactly("y");
  }

  @Test
  void suspectWaitsUntilNothingIsInFlightAndNothingFollowsItUntilAcknowledged() throws Exception {
    store.publish(event("a", "k1", "{}", "billing"));
    store.publish(event("b", "k2", "{}", "billing"));
    OutboxSourceTask task = start(props());
    List<SourceRecord> records = task.poll();
    SourceRecord a =
        records.stream()
            .filter(r -> header(r, "relaybus-event-id").equals("a"))
            .findFirst()
            .orElseThrow();
    SourceRecord b =
        records.stream()
            .filter(r -> header(r, "relaybus-event-id").equals("b"))
            .findFirst()
            .orElseThrow();
    task.commitRecord(a, null); // failed once: a retry, sent while b is in flight
    List<SourceRecord> firstRetry = task.poll();
    task.commitRecord(firstRetry.get(0), null); // failed twice: a suspect

    assertThat(task.poll()).isNull(); // a is due again, but b is in flight
    acknowledgeAll(task, List.of(b));
    List<SourceRecord> suspect = task.poll();
    store.publish(event("c", "k3", "{}", "billing"));
    List<SourceRecord> whileSuspectInFlight = task.poll();
    acknowledgeAll(task, suspect);
    List<SourceRecord> after = task.poll();

    assertThat(firstRetry)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("a", "2"));
    assertThat(suspect)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("a", "3"));
    assertThat(whileSuspectInFlight).isNull();
    assertThat(after).extracting(r -> header(r, "relaybus-event-id")).containsExactly("c");
  }

  /**
   * Guards against a zombie: a task whose lanes a newer incarnation took over must stop emitting
   * from them, and its late acknowledgements must delete nothing.
   */
  @Test
  void newIncarnationTakesOverAtOnceAndTheOldOneStopsEmitting() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    OutboxSourceTask old = start(props());
    List<SourceRecord> sentByOld = old.poll();

    OutboxSourceTask next = start(props());
    List<SourceRecord> sentByNext = next.poll();
    old.renewLeasesNow();
    store.publish(event("e2", "k", "{}", "billing"));
    acknowledgeAll(old, sentByOld);

    assertThat(old.poll()).isNull();
    assertThat(deliveries()).extracting(DeliveryView::eventId).containsExactly("e1", "e2");
    assertThat(sentByNext)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("e1", "2"));
    assertThat(next.metrics().value("takeovers-total")).isEqualTo(256.0);
  }

  /**
   * The old holder's acknowledgement arrives after the takeover charged its delivery and before its
   * renewal learned of the loss: the old task still holds the token as its own and asks the store
   * to delete it. The store refuses (fenced by the lane's epoch); the delivery stays for the new
   * holder, whose copy's acknowledgement deletes it, and the old task claims nothing more.
   */
  @Test
  void anAcknowledgementOfAChargedDeliveryBeforeTheOldTaskLearnedOfTheTakeoverDeletesNothing()
      throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    OutboxSourceTask old = start(props());
    List<SourceRecord> sentByOld = old.poll();
    OutboxSourceTask next = start(props());
    List<SourceRecord> sentByNext = next.poll();

    acknowledgeAll(old, sentByOld); // before old's renewal: it still takes the lanes for its own
    assertThat(old.poll()).isNull();
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::attempts)
        .containsExactly(tuple("e1", 1));

    old.renewLeasesNow();
    assertThat(old.poll()).isNull();
    acknowledgeAll(next, sentByNext);
    next.poll();
    assertThat(deliveries()).isEmpty();
    assertThat(sentByNext)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("e1", "2"));
  }

  /**
   * A lane lost to a newer incarnation that hands it back unsent comes back to the old task under a
   * new epoch: the delivery it had sent goes out again (at least once), the late acknowledgement of
   * the first copy deletes nothing, and the second copy's deletes it; nothing of the lost lease is
   * left to hold the lane back.
   */
  @Test
  void aLaneLostAndLeasedAgainSendsItsDeliveryAgainAndOnlyTheNewCopysAcknowledgementDeletesIt()
      throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    int lane = deliveries().get(0).lane();
    OutboxSourceTask task = start(props());
    List<SourceRecord> first = task.poll();

    List<LaneLease> taken =
        store.acquireLanes("newer", connector, List.of(lane), Duration.ofSeconds(30));
    store.relinquishLanes("newer", taken);
    task.renewLeasesNow(); // learns the loss
    assertThat(task.poll()).isNull();
    task.renewLeasesNow(); // leases the lane again, under a new epoch
    List<SourceRecord> second = task.poll();
    assertThat(second)
        .extracting(r -> header(r, "relaybus-event-id"), r -> header(r, "relaybus-attempt"))
        .containsExactly(tuple("e1", "2"));

    acknowledgeAll(task, first); // the old lease's copy: too late to count
    assertThat(task.poll()).isNull();
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::inFlight)
        .containsExactly(tuple("e1", true));
    store.publish(event("e2", "k", "{}", "billing"));
    assertThat(task.poll()).as("e2 waits behind e1, a retry not yet acknowledged").isNull();
    acknowledgeAll(task, second);
    assertThat(task.poll()).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e2");
    assertThat(deliveries()).extracting(DeliveryView::eventId).containsExactly("e2");
  }

  /**
   * Exactly once, transaction.boundary=poll: what the task sent of a lane it lost is committed
   * before it learns of the loss; leased again, the task deletes the delivery handed out again
   * instead of sending it a second time.
   */
  @Test
  void withExactlyOnceALaneLostAndLeasedAgainDeletesWhatItsCommittedCopyDeliveredNotSendsIt()
      throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    int lane = deliveries().get(0).lane();
    OutboxSourceTask task = start(props("exactly.once.support", "required"));
    List<SourceRecord> first = task.poll();
    acknowledgeAll(task, first); // the poll's transaction committed

    List<LaneLease> taken =
        store.acquireLanes("newer", connector, List.of(lane), Duration.ofSeconds(30));
    store.relinquishLanes("newer", taken);
    task.renewLeasesNow();
    assertThat(task.poll()).isNull(); // the old copy's deletion is fenced: not deleted
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::attempts)
        .containsExactly(tuple("e1", 1));
    task.renewLeasesNow();
    assertThat(task.poll()).as("handed out again: deleted, not sent").isNull();
    task.poll();
    assertThat(deliveries()).isEmpty();
  }

  @Test
  void taskLeasesOnlyItsOwnLanes() throws Exception {
    OutboxEvent inRange = null;
    OutboxEvent outOfRange = null;
    for (int i = 0; inRange == null || outOfRange == null; i++) {
      OutboxEvent e = event("e" + i, "key-" + i, "{}", "billing");
      if (Lanes.laneOf(e.key(), e.id()) < 128) {
        inRange = inRange == null ? e : inRange;
      } else {
        outOfRange = outOfRange == null ? e : outOfRange;
      }
    }
    store.publish(inRange);
    store.publish(outOfRange);
    OutboxSourceTask task = start(props("task.lanes", "0-127"));

    assertThat(task.poll())
        .extracting(r -> header(r, "relaybus-event-id"))
        .containsExactly(inRange.id());
  }

  @Test
  void withExactlyOnceDeliveriesNamedByCommittedOffsetsAreDeletedNotResent() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    store.publish(event("e2", "k", "{}", "billing"));
    DeliveryView first = deliveries().get(0);
    TestSourceTaskContext context = new TestSourceTaskContext();
    context.offsets.put(
        LaneOffsets.partition(first.lane()),
        Map.of("emitted", first.id() + ":" + LaneOffsets.fingerprint("e1", "billing")));

    OutboxSourceTask task = start(props("exactly.once.support", "required"), context);
    List<SourceRecord> records = task.poll();
    task.poll();

    assertThat(records).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e2");
    assertThat(deliveries()).extracting(DeliveryView::eventId).containsExactly("e2");
  }

  /**
   * Guards against a new delivery deleted unsent after a database restore (or failover, or schema
   * set up again): its id repeats one that a committed offset names for another event.
   */
  @Test
  void withExactlyOnceAnOffsetNamingTheSameIdForAnotherEventDeletesNothing() throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    DeliveryView first = deliveries().get(0);
    TestSourceTaskContext context = new TestSourceTaskContext();
    context.offsets.put(
        LaneOffsets.partition(first.lane()),
        Map.of(
            "emitted",
            first.id()
                + ":"
                + LaneOffsets.fingerprint("before-restore", "billing")
                + ","
                + first.id()));

    OutboxSourceTask task = start(props("exactly.once.support", "required"), context);

    assertThat(task.poll()).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e1");
    assertThat(deliveries()).extracting(DeliveryView::eventId).containsExactly("e1");
  }

  /**
   * Guards against offsets growing with the in-flight count on every record: only a lane's last
   * record of a batch lists the lane's sent deliveries; the others share the offset from before the
   * batch.
   */
  @Test
  void withExactlyOnceOnlyTheLastRecordOfALaneInABatchListsTheBatch() throws Exception {
    for (int i = 1; i <= 4; i++) {
      store.publish(event("e" + i, "k", "{}", "billing"));
    }
    OutboxSourceTask task = start(props("exactly.once.support", "required", "batch.size", "2"));

    List<SourceRecord> first = task.poll();
    List<SourceRecord> second = task.poll();

    List<DeliveryView> views = deliveries();
    String e1 = views.get(0).id() + ":" + LaneOffsets.fingerprint("e1", "billing");
    String e2 = views.get(1).id() + ":" + LaneOffsets.fingerprint("e2", "billing");
    String e3 = views.get(2).id() + ":" + LaneOffsets.fingerprint("e3", "billing");
    String e4 = views.get(3).id() + ":" + LaneOffsets.fingerprint("e4", "billing");
    assertThat(first)
        .extracting(SourceRecord::sourceOffset)
        .containsExactly(Map.of("emitted", ""), Map.of("emitted", e1 + "," + e2));
    assertThat(second)
        .extracting(SourceRecord::sourceOffset)
        .containsExactly(
            Map.of("emitted", e1 + "," + e2), Map.of("emitted", String.join(",", e1, e2, e3, e4)));
  }

  /**
   * With exactly-once, a lane's committed offset must keep naming every delivery of the lane that
   * is in Kafka and not yet deleted: Connect keeps only a lane's last offset. A task that took the
   * lane over learns such deliveries from the offsets it read at start, but its own offsets for the
   * lane list only what it sent or claimed since: a delivery named by the old offset and not
   * claimable yet (here d, behind x of its key: a transform filtered x's record, x was
   * dead-lettered as overtaken by d and an operator requeued it) drops out of the lane's offset as
   * soon as the new task sends anything else on the lane. After the next restart (a rebalance) d is
   * sent a second time, a duplicate for read_committed consumers, and after x.
   */
  @Test
  void withExactlyOnceALanesOffsetKeepsNamingDeliveriesInKafkaThatTheNewTaskHasNotClaimedYet()
      throws Exception {
    MutableClock clock = new MutableClock(Instant.now());
    InMemoryOutboxStore slow =
        InMemoryOutboxStore.builder()
            .clock(clock)
            .retryPolicy(new RetryPolicy(5, Duration.ofHours(1), Duration.ofHours(1), 0))
            .build();
    int lane = Lanes.laneOf("b", "x");
    String otherKey = null;
    for (int i = 0; otherKey == null; i++) {
      if (Lanes.laneOf("c" + i, "e") == lane) {
        otherKey = "c" + i;
      }
    }
    slow.publish(event("x", "b", "{}", "billing"));
    slow.publish(event("d", "b", "{}", "billing"));
    Map<String, String> eos =
        props("exactly.once.support", "required", "completion.flush.interval.ms", "60000");

    // The old task sends x and d in one transaction; a transform filters x, d is in Kafka.
    OutboxSourceTask old = startOn(slow, eos, new TestSourceTaskContext());
    List<SourceRecord> sentByOld = old.poll();
    assertThat(sentByOld).extracting(r -> header(r, "relaybus-event-id")).containsExactly("x", "d");
    old.commitRecord(sentByOld.get(0), null);
    acknowledgeAll(old, sentByOld.subList(1, 2));
    old.poll(); // x dead-lettered (d, after it, is in Kafka); d acknowledged, not yet deleted
    DeliveryView x =
        slow.listDeliveries(DeliveryQuery.all().withLimit(10)).items().stream()
            .filter(v -> v.eventId().equals("x"))
            .findFirst()
            .orElseThrow();
    assertThat(x.status()).isEqualTo(DeliveryStatus.DEAD);
    assertThat(slow.requeue(List.of(x.id()))).isEqualTo(1); // now ahead of d again
    Map<String, ?> committed = sentByOld.get(1).sourceOffset();
    String dEntry =
        slow.listDeliveries(DeliveryQuery.all().withLimit(10)).items().stream()
                .filter(v -> v.eventId().equals("d"))
                .findFirst()
                .orElseThrow()
                .id()
            + ":"
            + LaneOffsets.fingerprint("d", "billing");
    assertThat(LaneOffsets.emitted(committed)).contains(dEntry);

    // The old task dies (no stop); a new one starts with the lane's committed offset.
    slow.publish(event("e", otherKey, "{}", "billing"));
    TestSourceTaskContext context = new TestSourceTaskContext();
    context.offsets.put(LaneOffsets.partition(lane), new HashMap<>(committed));
    OutboxSourceTask next = startOn(slow, eos, context);
    List<SourceRecord> sentByNext = next.poll();
    assertThat(sentByNext).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e");
    Map<String, ?> committedByNext = sentByNext.get(sentByNext.size() - 1).sourceOffset();
    acknowledgeAll(next, sentByNext);
    next.stop(); // a rebalance

    // The task after it reads the lane's offset as the new task committed it.
    TestSourceTaskContext afterRebalance = new TestSourceTaskContext();
    afterRebalance.offsets.put(LaneOffsets.partition(lane), new HashMap<>(committedByNext));
    OutboxSourceTask third = startOn(slow, eos, afterRebalance);
    clock.advance(Duration.ofHours(2)); // x's backoff is over
    List<String> sentByThird = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      List<SourceRecord> records = third.poll();
      if (records != null) {
        records.forEach(r -> sentByThird.add(header(r, "relaybus-event-id")));
        acknowledgeAll(third, records);
      }
    }

    assertThat(sentByThird).as("sent again although Kafka has it").doesNotContain("d");
    assertThat(LaneOffsets.emitted(committedByNext))
        .as("the lane's offset committed with e still names d, which Kafka has")
        .contains(dEntry);
  }

  /**
   * With exactly-once, a lane's offset read at start names what the previous incarnation sent and
   * had not settled when it sent the lane's last record; a graceful stop deletes all of it. Those
   * entries named deliveries the outbox no longer has, so no claim ever handed them to the task and
   * it listed them in every offset of the lane for good; each restart added its own, so the lane's
   * offset grew with every restart until the record of it exceeds what Kafka takes (the producer's
   * max.request.size, the offsets topic's max.message.bytes), failing every start.
   */
  @Test
  void withExactlyOnceARestartedTasksOffsetsDoNotKeepNamingDeliveriesTheOutboxDeleted()
      throws Exception {
    Map<String, String> eos = props("exactly.once.support", "required");
    Map<String, Object> committed = null;
    int lane = Lanes.laneOf("k", "e0");
    List<String> lastListed = List.of();
    for (int restart = 0; restart < 4; restart++) {
      store.publish(event("e" + restart, "k", "{}", "billing"));
      TestSourceTaskContext context = new TestSourceTaskContext();
      if (committed != null) {
        context.offsets.put(LaneOffsets.partition(lane), new HashMap<>(committed));
      }
      OutboxSourceTask task = start(eos, context);
      List<SourceRecord> records = task.poll();
      assertThat(records)
          .extracting(r -> header(r, "relaybus-event-id"))
          .containsExactly("e" + restart);
      @SuppressWarnings("unchecked")
      Map<String, Object> offset = (Map<String, Object>) records.get(0).sourceOffset();
      committed = offset;
      acknowledgeAll(task, records);
      task.stop(); // graceful: deletes what Kafka acknowledged
      assertThat(deliveries()).isEmpty();
      lastListed = List.copyOf(LaneOffsets.emitted(committed));
    }
    String e3 =
        lastListed.stream()
            .filter(entry -> entry.endsWith(":" + LaneOffsets.fingerprint("e3", "billing")))
            .findFirst()
            .orElseThrow();
    assertThat(lastListed)
        .as("the fourth incarnation's offset names only its own record, not the deleted e0..e2")
        .containsExactly(e3);
  }

  /**
   * Symptom: with exactly-once, a record a transform dropped was deleted unsent after a restart
   * instead of being retried (and dead-lettered once its attempts were spent). The lane's last
   * record of the batch lists the batch, the dropped record too, and its offset commits with the
   * transaction; the task learns of the drop only afterwards (commitRecord without metadata) and
   * reschedules the delivery, but the lane's committed offset kept naming it until the lane sent
   * again, and the next task took every delivery its offsets name for one Kafka has. With a
   * transform in the chain that may drop records (any class but Kafka's own, Filter included) the
   * task now trusts no offset: the dropped delivery goes again.
   */
  @Test
  void withExactlyOnceARecordATransformDroppedIsSentAgainAfterARestartNotDeleted()
      throws Exception {
    store.publish(event("x", "k", "{}", "billing"));
    store.publish(event("d", "k", "{}", "billing"));
    Map<String, String> eos =
        props(
            "exactly.once.support", "required",
            "transforms", "some",
            "transforms.some.type", "com.example.DropSome");
    OutboxSourceTask old = start(eos);
    List<SourceRecord> sentByOld = old.poll();
    assertThat(sentByOld).extracting(r -> header(r, "relaybus-event-id")).containsExactly("x", "d");
    old.commitRecord(sentByOld.get(0), null); // the transform dropped x
    acknowledgeAll(old, sentByOld.subList(1, 2));
    old.stop(); // d deleted, x dead-lettered: d, after it, is in Kafka
    assertThat(deliveries())
        .extracting(DeliveryView::eventId, DeliveryView::status)
        .containsExactly(tuple("x", DeliveryStatus.DEAD));
    assertThat(store.requeue(List.of(deliveries().get(0).id()))).isEqualTo(1);

    TestSourceTaskContext context = new TestSourceTaskContext();
    SourceRecord last = sentByOld.get(1);
    context.offsets.put(last.sourcePartition(), new HashMap<>(last.sourceOffset()));
    OutboxSourceTask next = start(eos, context);
    List<SourceRecord> sentByNext = next.poll();

    assertThat(sentByNext)
        .as("x, which Kafka never had")
        .extracting(r -> header(r, "relaybus-event-id"))
        .containsExactly("x");
    assertThat(deliveries()).extracting(DeliveryView::eventId).containsExactly("x");
  }

  /**
   * With exactly-once and transaction.boundary=interval, a poll's records can still be in an open
   * transaction at the next poll. A task that lost a lane meanwhile took what it had sent of the
   * lane for in Kafka; should it take the lane back and be handed such a delivery again, it deleted
   * it unsent. When that transaction then aborted (the task failed, or was fenced), the delivery
   * was gone: neither in Kafka nor in the outbox.
   */
  @Test
  void withExactlyOnceARecordOfALostLaneWhoseTransactionIsOpenIsNotDeletedWhenTheLaneComesBack()
      throws Exception {
    store.publish(event("e1", "k", "{}", "billing"));
    int lane = deliveries().get(0).lane();
    OutboxSourceTask task =
        start(props("exactly.once.support", "required", "transaction.boundary", "interval"));
    List<SourceRecord> sent = task.poll();
    assertThat(sent).extracting(r -> header(r, "relaybus-event-id")).containsExactly("e1");
    // its transaction stays open (interval boundary): no commitRecord yet

    // another incarnation takes the lane over (charging e1) and hands it back unsent
    List<LaneLease> taken =
        store.acquireLanes("newer", connector, List.of(lane), Duration.ofSeconds(30));
    assertThat(taken).extracting(LaneLease::charged).containsExactly(1);
    store.relinquishLanes("newer", taken);
    task.renewLeasesNow(); // learns the loss
    assertThat(task.poll()).isNull(); // takes it
    task.renewLeasesNow(); // leases the lane again, under a new epoch
    assertThat(task.poll()).as("e1 again, while its first copy's transaction is open").isNull();

    task.stop(); // the transaction aborted: the task failed, Connect never acknowledged e1

    assertThat(deliveries())
        .as("e1, which Kafka never had")
        .extracting(DeliveryView::eventId, DeliveryView::status)
        .containsExactly(tuple("e1", DeliveryStatus.PENDING));
  }

  /**
   * Which chains let a task trust its offsets under exactly-once: Kafka's own transforms other than
   * Filter keep every record; Filter and any other class may drop one; errors.tolerance=all lets
   * the producer drop one.
   */
  @Test
  void offsetsAreTrustedOnlyWhenNothingCanDropARecord() {
    String eos = "exactly.once.support";
    assertThat(new OutboxSourceTaskConfig(props(eos, "required")).resumeFromOffsets()).isTrue();
    assertThat(new OutboxSourceTaskConfig(props()).resumeFromOffsets()).isFalse();
    assertThat(
            new OutboxSourceTaskConfig(props(eos, "required", "errors.tolerance", "all"))
                .resumeFromOffsets())
        .isFalse();
    assertThat(
            new OutboxSourceTaskConfig(
                    props(
                        eos,
                        "required",
                        "transforms",
                        "a,b",
                        "transforms.a.type",
                        "org.apache.kafka.connect.transforms.InsertHeader",
                        "transforms.b.type",
                        "org.apache.kafka.connect.transforms.RegexRouter"))
                .resumeFromOffsets())
        .isTrue();
    OutboxSourceTaskConfig filtered =
        new OutboxSourceTaskConfig(
            props(
                eos,
                "required",
                "transforms",
                "a, f",
                "transforms.a.type",
                "org.apache.kafka.connect.transforms.InsertHeader",
                "transforms.f.type",
                "org.apache.kafka.connect.transforms.Filter"));
    assertThat(filtered.resumeFromOffsets()).isFalse();
    assertThat(filtered.transformsThatMayDrop())
        .containsExactly("f (org.apache.kafka.connect.transforms.Filter)");
    assertThat(
            new OutboxSourceTaskConfig(
                    props(
                        eos,
                        "required",
                        "transforms",
                        "own",
                        "transforms.own.type",
                        "com.example.Enrich"))
                .transformsThatMayDrop())
        .containsExactly("own (com.example.Enrich)");
  }

  /**
   * Connect resolves the simple class name of a plugin as an alias ("RegexRouter" is Kafka's
   * org.apache.kafka.connect.transforms.RegexRouter): Kafka's own transforms named so keep every
   * record as they do by their class name, so offsets stay trusted; its Filter named so may drop.
   */
  @Test
  void kafkasOwnTransformsNamedByConnectsAliasesAreKnown() {
    String eos = "exactly.once.support";
    assertThat(
            new OutboxSourceTaskConfig(
                    props(
                        eos,
                        "required",
                        "transforms",
                        "a,b,c",
                        "transforms.a.type",
                        "InsertHeader",
                        "transforms.b.type",
                        "RegexRouter",
                        "transforms.c.type",
                        "TimestampRouter"))
                .resumeFromOffsets())
        .isTrue();
    OutboxSourceTaskConfig filtered =
        new OutboxSourceTaskConfig(
            props(eos, "required", "transforms", "f", "transforms.f.type", "Filter"));
    assertThat(filtered.resumeFromOffsets()).isFalse();
    assertThat(filtered.transformsThatMayDrop()).containsExactly("f (Filter)");
  }

  private OutboxSourceTask startOn(
      InMemoryOutboxStore on, Map<String, String> props, TestSourceTaskContext context) {
    OutboxSourceTask task =
        new OutboxSourceTask((config, name) -> new ForwardingStore(on), Clock.systemUTC());
    task.initialize(context);
    task.start(props);
    started.add(task);
    return task;
  }

  @Test
  void withoutExactlyOnceEveryRecordCarriesTheSameConstantOffset() throws Exception {
    for (int i = 1; i <= 3; i++) {
      store.publish(event("e" + i, "k", "{}", "billing"));
    }
    OutboxSourceTask task = start(props());

    assertThat(task.poll())
        .hasSize(3)
        .allSatisfy(r -> assertThat(r.sourceOffset()).isSameAs(LaneOffsets.UNTRACKED));
  }

  @Test
  void idlePollReturnsWithinAboutASecond() throws Exception {
    OutboxSourceTask task = start(props("poll.interval.ms", "60000"));

    long started = System.nanoTime();
    assertThat(task.poll()).isNull();
    assertThat(task.poll()).isNull();

    assertThat(Duration.ofNanos(System.nanoTime() - started)).isLessThan(Duration.ofMillis(2_500));
  }
}
