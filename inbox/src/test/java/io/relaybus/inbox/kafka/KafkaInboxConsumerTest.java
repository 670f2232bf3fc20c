package io.relaybus.inbox.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxException;
import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestKafka;
import io.relaybus.inbox.testing.UnheardCommits;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.Test;

/**
 * The Kafka consumer loop against a real broker and a real PostgreSQL: offsets committed only after
 * the database, redeliveries skipped, rebalances lose nothing and run nothing twice.
 */
class KafkaInboxConsumerTest extends KafkaInboxFixture {
  KafkaInboxConsumerTest() {
    super("ledger_kafka", "billing-", "inbox-", 3);
  }

  private static Consumer<byte[], byte[]> kafkaConsumer(String group) {
    Map<String, Object> config = new HashMap<>(TestKafka.consumerConfig(group));
    config.put("enable.auto.commit", "false");
    config.put("auto.offset.reset", "earliest");
    return new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer());
  }

  /**
   * Regression: a consumer that dies after its database commit and before its offset commit must
   * not run the work again when the record comes back.
   */
  @Test
  void consumerKilledAfterDatabaseCommitBeforeOffsetCommitGetsTheRecordAgainAndSkipsIt()
      throws Exception {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    RuntimeException killed = new RuntimeException("killed after the database commit");
    KafkaInboxConsumer<Connection> first =
        builder("billing.charge")
            .build(
                kafkaConsumer(group),
                (record, outcome) -> {
                  throw killed;
                });

    CompletableFuture<Void> firstRun = start(first, "inbox-first");
    await().atMost(TIMEOUT).until(firstRun::isDone);
    assertThat(firstRun).isCompletedExceptionally();
    ledger.assertRanOnce("e-1", "billing.charge");

    KafkaInboxConsumer<Connection> second = builder("billing.charge").build();
    start(second, "inbox-second");
    await().atMost(TIMEOUT).until(() -> second.counts().skipped() == 1);

    assertThat(second.counts().handled()).isZero();
    ledger.assertRanOnce("e-1", "billing.charge");
  }

  private void send(int from, int to) {
    for (int i = from; i < to; i++) {
      TestKafka.send(topic, "order-" + (i % 37), "r-" + i, "{\"n\":" + i + "}");
    }
  }

  @Test
  void rebalancesMidStreamLoseNothingAndRunEachEventOnce() {
    KafkaInboxConsumer<Connection> a = builder("billing.charge").build();
    KafkaInboxConsumer<Connection> b = builder("billing.charge").build();
    send(0, 200);

    start(a, "inbox-a");
    await().atMost(TIMEOUT).until(() -> a.counts().handled() >= 100);
    start(b, "inbox-b"); // the group rebalances: partitions move from a to b
    send(200, 400); // to every partition, so b has records whichever it got
    await().atMost(TIMEOUT).until(() -> b.counts().handled() > 0);
    a.close(); // and back: b takes all partitions
    send(400, 500);
    await().atMost(TIMEOUT).until(() -> a.counts().handled() + b.counts().handled() == 500);

    assertThat(ledger.totalInvocations()).isEqualTo(500);
    Map<String, Integer> committed = ledger.committed();
    assertThat(committed).hasSize(500);
    assertThat(committed.values()).containsOnly(1);
  }

  /**
   * Regression: a consumer that overruns max.poll.interval.ms is put out of the group while it
   * still works through its poll, its offset commit fails, and the next owner reads the same
   * records, some of them while the first is still handling them. Each must run once.
   */
  @Test
  void consumerPutOutOfTheGroupMidPollHasItsCommittedRecordsSkippedByTheNextOwner() {
    send(0, 30);
    Map<String, Object> slowConfig = new HashMap<>(TestKafka.consumerConfig(group));
    slowConfig.put("max.poll.interval.ms", "1500");
    slowConfig.put("max.poll.records", "30");
    InboxWork<Connection> recorded = ledger.work("billing.charge");
    KafkaInboxConsumer<Connection> slow =
        builder("billing.charge")
            .consumerConfig(slowConfig)
            .work(
                (tx, message) -> {
                  recorded.run(tx, message);
                  sleep(Duration.ofMillis(150));
                })
            .build();
    KafkaInboxConsumer<Connection> next = builder("billing.charge").build();

    start(slow, "inbox-slow");
    await().atMost(TIMEOUT).until(() -> slow.counts().handled() >= 1);
    start(next, "inbox-next");
    await()
        .atMost(TIMEOUT)
        .until(() -> ledger.committed().size() == 30 && next.counts().skipped() > 0);
    slow.close();
    next.close();

    assertThat(ledger.totalInvocations()).isEqualTo(30);
    assertThat(ledger.committed().values()).containsOnly(1);
    assertThat(slow.counts().handled() + next.counts().handled()).isEqualTo(30);
  }

  private static void sleep(Duration duration) {
    try {
      Thread.sleep(duration.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * close() during a long poll: the loop checks for close only between polls, so it goes on
   * handling every record of the poll (up to max.poll.records, 500 by default) before it stops;
   * with slow work close() blocks for all of them, and past 30 s returns with the loop still
   * running, the Kafka consumer still in the group and still using the caller's database.
   */
  @Test
  void closeStopsTheLoopAfterTheRecordInProgressNotAfterTheWholePoll() throws Exception {
    for (int i = 0; i < 40; i++) {
      TestKafka.send(topic, "order-1", "c-" + i, "{\"n\":" + i + "}");
    }
    InboxWork<Connection> recorded = ledger.work("billing.charge");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .work(
                (tx, message) -> {
                  recorded.run(tx, message);
                  sleep(Duration.ofMillis(300));
                })
            .build();

    CompletableFuture<Void> run = start(consumer, "inbox-close-mid-poll");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() >= 1);
    long start = System.nanoTime();
    consumer.close();
    long closeMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);

    // close() returns once the loop counted down its stop, a few statements before run() returns
    // and the thread completes the future: not the same instant
    await().atMost(Duration.ofSeconds(1)).until(run::isDone);
    assertThat(run).as("the loop after close()").isNotCompletedExceptionally();
    assertThat(consumer.counts().handled())
        .as("records handled after close() was called, in %d ms", closeMillis)
        .isLessThanOrEqualTo(3);
    assertThat(closeMillis).isLessThan(3_000);
  }

  /**
   * Symptom: close() called from a work (on the loop thread) waited 30 s for the loop it runs on to
   * stop, with the work's transaction open meanwhile (PostgreSQL's
   * idle_in_transaction_session_timeout, 30 s for the store's sessions, can end it, and the record
   * then counts as a failure). Called from the loop thread, close() now asks the loop to stop and
   * returns: the work's transaction commits, its offset is committed, and run() returns.
   */
  @Test
  void closeCalledFromAWorkDoesNotWaitForTheLoopItRunsOn() throws Exception {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    InboxWork<Connection> recorded = ledger.work("billing.charge");
    java.util.concurrent.atomic.AtomicReference<KafkaInboxConsumer<Connection>> self =
        new java.util.concurrent.atomic.AtomicReference<>();
    java.util.concurrent.atomic.AtomicLong closeMillis =
        new java.util.concurrent.atomic.AtomicLong(-1);
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .work(
                (tx, message) -> {
                  recorded.run(tx, message);
                  long start = System.nanoTime();
                  self.get().close(); // e.g. a work that found the service must stop
                  closeMillis.set(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
                })
            .build();
    self.set(consumer);

    CompletableFuture<Void> run = start(consumer, "inbox-close-from-work");
    await().atMost(TIMEOUT).until(run::isDone);

    assertThat(closeMillis.get()).as("close() from the work, in ms").isBetween(0L, 3_000L);
    assertThat(run).as("the loop after close()").isNotCompletedExceptionally();
    assertThat(consumer.counts().handled()).isEqualTo(1);
    assertThat(consumer.counts().failures()).isZero();
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(committedOffsets()).isEqualTo(1L);
  }

  /**
   * With one transaction per poll the inbox records of the whole poll are taken before its first
   * work, so a close() between two works cannot commit what was handled (it would commit the
   * records of the works not run as handled): it rolls the poll back after the work in progress,
   * and the partition's next reader handles every record of it, each once.
   */
  @Test
  void closeDuringAPollInOneTransactionRollsItBackAndTheNextReaderHandlesItOnce() throws Exception {
    for (int i = 0; i < 40; i++) {
      TestKafka.send(topic, "order-1", "c-" + i, "{\"n\":" + i + "}");
    }
    InboxWork<Connection> recorded = ledger.work("billing.charge");
    AtomicInteger started = new AtomicInteger();
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .transactionPerPoll(true)
            .work(
                (tx, message) -> {
                  recorded.run(tx, message);
                  started.incrementAndGet();
                  sleep(Duration.ofMillis(300));
                })
            .build();

    CompletableFuture<Void> run = start(consumer, "inbox-close-mid-poll-in-one");
    await().atMost(TIMEOUT).until(() -> started.get() >= 2);
    long start = System.nanoTime();
    consumer.close();
    long closeMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    await().atMost(Duration.ofSeconds(1)).until(run::isDone);

    assertThat(run).as("the loop after close()").isNotCompletedExceptionally();
    assertThat(closeMillis).isLessThan(3_000);
    assertThat(consumer.counts().handled()).isZero();
    assertThat(ledger.committed()).isEmpty();

    KafkaInboxConsumer<Connection> next = builder("billing.charge").build();
    start(next, "inbox-after-close");
    await().atMost(TIMEOUT).until(() -> next.counts().handled() == 40);
    assertThat(ledger.committed()).hasSize(40).doesNotContainValue(2);
    assertThat(next.counts().skipped()).isZero();
  }

  /**
   * One transaction per poll records the poll's events in id order, and runs the works in the
   * poll's order all the same; an event that comes twice in the poll runs once, at its first place.
   */
  @Test
  void aPollInOneTransactionRunsItsWorksInPartitionOrderAndARepeatedEventOnce() {
    List<String> ids = List.of("e-2", "e-3", "e-1", "e-3", "e-0");
    ids.forEach(id -> TestKafka.send(topic, "order-1", id, "{}"));
    java.util.Queue<String> ran = new java.util.concurrent.ConcurrentLinkedQueue<>();
    InboxWork<Connection> recorded = ledger.work("billing.charge");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .transactionPerPoll(true)
            .work(
                (tx, message) -> {
                  recorded.run(tx, message);
                  ran.add(message.eventId());
                })
            .build();

    start(consumer, "inbox-poll-order");
    await()
        .atMost(TIMEOUT)
        .until(() -> consumer.counts().handled() + consumer.counts().skipped() == 5);

    assertThat(ran).containsExactly("e-2", "e-3", "e-1", "e-0");
    assertThat(consumer.counts().skipped()).isEqualTo(1);
    assertThat(ledger.committed()).hasSize(4).doesNotContainValue(2);
  }

  /**
   * An offset commit that fails while the consumer keeps its partitions (a commit timeout, or
   * RebalanceInProgressException under the cooperative protocol) is dropped, on the assumption that
   * a next owner re-reads the records. There is none: the consumer still owns the partition, so
   * with no later record there the handled offset is never committed, not even by close(), and the
   * group's lag stays above zero for as long as the partition is idle.
   */
  @Test
  void handledOffsetIsCommittedAfterAFailedCommitWhileThePartitionIsStillOwned() {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    int partition = TestKafka.read(topic).get(0).partition();
    Consumer<byte[], byte[]> real = kafkaConsumer(group);
    java.util.concurrent.atomic.AtomicBoolean failedOnce =
        new java.util.concurrent.atomic.AtomicBoolean();
    @SuppressWarnings("unchecked")
    Consumer<byte[], byte[]> commitTimesOutOnce =
        (Consumer<byte[], byte[]>)
            java.lang.reflect.Proxy.newProxyInstance(
                Consumer.class.getClassLoader(),
                new Class<?>[] {Consumer.class},
                (proxy, method, args) -> {
                  if (method.getName().equals("commitSync")
                      && failedOnce.compareAndSet(false, true)) {
                    throw new org.apache.kafka.common.errors.TimeoutException(
                        "Timeout of 60000ms expired before successfully committing offsets");
                  }
                  try {
                    return method.invoke(real, args);
                  } catch (java.lang.reflect.InvocationTargetException e) {
                    throw e.getCause();
                  }
                });
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge").build(commitTimesOutOnce, (record, outcome) -> {});

    start(consumer, "inbox-commit-timeout");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);
    assertThat(failedOnce).isTrue();

    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () ->
                assertThat(TestKafka.committed(group, topic, partition))
                    .as("the group's committed offset of the handled record's partition")
                    .isEqualTo(1L));
  }

  @Test
  void recordWithoutEventIdIsSkippedWithALogUnderSkip() {
    TestKafka.send(topic, "order-1", null, "{\"n\":0}");
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge").invalidRecords(InvalidRecordPolicy.SKIP).build();

    start(consumer, "inbox-skip");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);

    assertThat(consumer.counts().rejected()).isEqualTo(1);
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(ledger.committed()).hasSize(1);
  }

  @Test
  void recordWithoutEventIdStopsTheLoopUnderFail() {
    TestKafka.send(topic, "order-1", null, "{\"n\":0}");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge").invalidRecords(InvalidRecordPolicy.FAIL).build();

    CompletableFuture<Void> run = start(consumer, "inbox-fail");

    await().atMost(TIMEOUT).until(run::isDone);
    assertThat(run)
        .failsWithin(0, TimeUnit.SECONDS)
        .withThrowableOfType(java.util.concurrent.ExecutionException.class)
        .havingCause()
        .isInstanceOf(InboxException.class)
        .withMessageContaining("stops at kafka " + topic)
        .withMessageContaining("has no 'relaybus-event-id' header");
    assertThat(ledger.committed()).isEmpty();
  }

  /**
   * The connection drops after PostgreSQL committed and before the loop heard it: the record counts
   * as failed and is retried from its offset, the retry finds it recorded and skips it, and the
   * offset is committed past it. The work ran and committed once.
   */
  @Test
  void aRecordWhoseCommitLandedUnheardIsSkippedOnItsRetryAndCommittedPast() {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(topic, "order-1", "e-2", "{\"n\":2}");
    int partition = TestKafka.read(topic).get(0).partition();
    UnheardCommits unheard = new UnheardCommits(store.dataSource(), 1);
    KafkaInboxConsumer<Connection> consumer =
        KafkaInboxConsumer.builder(Inbox.postgres(store, unheard.dataSource()))
            .consumerConfig(TestKafka.consumerConfig(group))
            .topics(List.of(topic))
            .handler("billing.charge")
            .work(ledger.work("billing.charge"))
            .retryBackoff(Duration.ofMillis(50))
            .pollTimeout(Duration.ofMillis(200))
            .build();

    start(consumer, "inbox-unheard-commit");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, partition) == 2L);

    assertThat(unheard.unheard()).isEqualTo(1);
    assertThat(consumer.counts().failures()).isEqualTo(1);
    assertThat(consumer.counts().skipped()).isEqualTo(1);
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");
  }

  /**
   * The same with one transaction per poll: the poll's commit lands unheard, the loop handles the
   * poll's records one transaction each, finds every one recorded and commits their offsets.
   */
  @Test
  void aPollWhoseCommitLandedUnheardIsSkippedRecordByRecordAndCommittedPast() {
    for (int i = 1; i <= 5; i++) {
      TestKafka.send(topic, "order-1", "e-" + i, "{\"n\":" + i + "}");
    }
    int partition = TestKafka.read(topic).get(0).partition();
    UnheardCommits unheard = new UnheardCommits(store.dataSource(), 1);
    KafkaInboxConsumer<Connection> consumer =
        KafkaInboxConsumer.builder(Inbox.postgres(store, unheard.dataSource()))
            .consumerConfig(TestKafka.consumerConfig(group))
            .topics(List.of(topic))
            .handler("billing.charge")
            .work(ledger.work("billing.charge"))
            .transactionPerPoll(true)
            .pollTimeout(Duration.ofMillis(200))
            .build();

    start(consumer, "inbox-unheard-poll-commit");
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, partition) == 5L);

    assertThat(unheard.unheard()).isEqualTo(1);
    assertThat(ledger.totalInvocations()).isEqualTo(5);
    assertThat(ledger.committed().values()).hasSize(5).containsOnly(1);
    assertThat(consumer.counts().handled() + consumer.counts().skipped()).isEqualTo(5);
    assertThat(consumer.counts().failures()).isZero();
  }

  /**
   * Symptom: two polls handled in one transaction each that hold the same events in opposite orders
   * (here the same two events on two topics, read by two groups; in production also a poll read
   * again after a rebalance, its partitions in another order) deadlocked in PostgreSQL. Each took
   * its first event's inbox row, ran its work, then waited for the row the other held; PostgreSQL
   * failed one of them (40P01), which rolled back its whole poll and handled the records again one
   * transaction each: a work ran twice, once rolled back.
   */
  @Test
  void twoPollsHoldingTheSameEventsInOppositeOrdersDoNotDeadlock() throws Exception {
    handlePollsInOppositeOrders("billing.charge", "billing.charge");

    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");
  }

  /** The same for two handlers of one event, each consumer group its own (one row per event). */
  @Test
  void twoHandlersPollingTheSameEventsInOppositeOrdersDoNotDeadlock() throws Exception {
    handlePollsInOppositeOrders("billing.charge", "billing.audit");

    for (String handler : List.of("billing.charge", "billing.audit")) {
      ledger.assertRanOnce("e-1", handler);
      ledger.assertRanOnce("e-2", handler);
    }
  }

  /**
   * Consumer a reads e-1, e-2 and consumer b reads e-2, e-1, each poll in one transaction; the
   * first work of each waits (at most 2 s) until the other's first work runs, so both hold their
   * first event's row when they go on to the second.
   */
  private void handlePollsInOppositeOrders(String handlerA, String handlerB) throws Exception {
    String forward = topic + "-forward";
    String backward = topic + "-backward";
    TestKafka.createTopic(forward, 1);
    TestKafka.createTopic(backward, 1);
    TestKafka.send(forward, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(forward, "order-2", "e-2", "{\"n\":2}");
    TestKafka.send(backward, "order-2", "e-2", "{\"n\":2}");
    TestKafka.send(backward, "order-1", "e-1", "{\"n\":1}");
    java.util.concurrent.CountDownLatch firstWorks = new java.util.concurrent.CountDownLatch(2);
    KafkaInboxConsumer<Connection> a = perPoll(handlerA, forward, group + "-a", firstWorks);
    KafkaInboxConsumer<Connection> b = perPoll(handlerB, backward, group + "-b", firstWorks);

    start(a, "inbox-forward");
    start(b, "inbox-backward");
    await()
        .atMost(TIMEOUT)
        .until(
            () ->
                a.counts().handled() + a.counts().skipped() == 2
                    && b.counts().handled() + b.counts().skipped() == 2);

    assertThat(a.counts().failures() + b.counts().failures()).isZero();
    assertThat(a.counts().handled() + b.counts().handled())
        .isEqualTo(handlerA.equals(handlerB) ? 2 : 4);
  }

  private KafkaInboxConsumer<Connection> perPoll(
      String handler, String topic, String group, java.util.concurrent.CountDownLatch firstWorks) {
    InboxWork<Connection> recorded = ledger.work(handler);
    java.util.concurrent.atomic.AtomicBoolean first =
        new java.util.concurrent.atomic.AtomicBoolean(true);
    return builder(handler)
        .consumerConfig(TestKafka.consumerConfig(group))
        .topics(List.of(topic))
        .transactionPerPoll(true)
        .work(
            (tx, message) -> {
              recorded.run(tx, message);
              if (first.compareAndSet(true, false)) {
                firstWorks.countDown();
                try {
                  firstWorks.await(2, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                }
              }
            })
        .build();
  }

  /**
   * Symptom: with the pool's lock_timeout set, a record whose event another open transaction was
   * handling (another group's poll in one transaction, a RabbitMQ consumer's work) failed to take
   * its inbox record at each attempt (SQLState 55P03), and after maxAttempts run() gave up: the
   * loop stopped, although the other transaction then committed the event. A lock wait on its own
   * record is not a failure of the record: it is tried again without counting, and once the other
   * transaction committed it is skipped and committed past.
   */
  @Test
  void
      aRecordWhoseInboxRecordAnotherOpenTransactionHoldsDoesNotStopTheLoopAndIsSkippedOnceItCommits()
          throws Exception {
    store.close();
    store = TestDatabase.freshStore("&options=-c%20lock_timeout%3D200");
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), "ledger_kafka");
    InboxWork<Connection> charge = ledger.work("billing.charge");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge").work(charge).maxAttempts(3).build();

    CompletableFuture<Void> run;
    try (Connection holder = store.dataSource().getConnection()) {
      holder.setAutoCommit(false);
      // another consumer of the same event (a RabbitMQ consumer's work), still open
      inbox.handle(
          holder,
          new InboxMessage(
              "e-1",
              "order.placed",
              "order-1",
              "{\"n\":1}".getBytes(StandardCharsets.UTF_8),
              "application/json",
              Map.of(),
              "rabbitmq queue billing-in delivery 1"),
          "billing.charge",
          charge);
      TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
      run = start(consumer, "inbox-held-record");
      // maxAttempts(3) lock timeouts of 200 ms take under 1 s: wait well past
      await()
          .pollDelay(Duration.ofSeconds(3))
          .atMost(TIMEOUT)
          .until(() -> run.isDone() || consumer.counts().failures() >= 3);
      assertThat(run)
          .as("the loop while another open transaction holds e-1's inbox record")
          .isNotDone();
      holder.commit();
    }

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    await().atMost(TIMEOUT).until(() -> committedOffsets() == 1L);
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(consumer.counts().handled()).isZero();
    assertThat(run).isNotDone();
  }

  /** The group's committed offsets over the topic's partitions (none counted as 0). */
  private long committedOffsets() {
    long sum = 0;
    for (int partition = 0; partition < 3; partition++) {
      sum += Math.max(0, TestKafka.committed(group, topic, partition));
    }
    return sum;
  }

  @Test
  void failingRecordIsRetriedFromItsOffsetAndRunsOnceItSucceeds() {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(topic, "order-1", "e-2", "{\"n\":2}");
    AtomicInteger failuresLeft = new AtomicInteger(3);
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .work(
                (tx, message) -> {
                  ledger.work("billing.charge").run(tx, message);
                  if (message.eventId().equals("e-1") && failuresLeft.getAndDecrement() > 0) {
                    throw new IllegalStateException("downstream busy");
                  }
                })
            .build();

    start(consumer, "inbox-retry");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 2);

    assertThat(consumer.counts().failures()).isEqualTo(3);
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(4);
    assertThat(ledger.committed())
        .containsOnly(Map.entry("e-1/billing.charge", 1), Map.entry("e-2/billing.charge", 1));
  }

  @Test
  void recordThatFailsEveryAttemptStopsTheLoopWithItsOffsetUncommitted() {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .maxAttempts(3)
            .work(ledger.failingWork("billing.charge", new IllegalStateException("always")))
            .build();

    CompletableFuture<Void> run = start(consumer, "inbox-give-up");
    await().atMost(TIMEOUT).until(run::isDone);

    assertThat(run).isCompletedExceptionally();
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(3);
    assertThat(ledger.committed()).isEmpty();

    KafkaInboxConsumer<Connection> restarted = builder("billing.charge").build();
    start(restarted, "inbox-restarted");
    await().atMost(TIMEOUT).until(() -> restarted.counts().handled() == 1);
    assertThat(ledger.committed()).containsOnly(Map.entry("e-1/billing.charge", 1));
  }
}
