package io.relaybus.inbox.rabbitmq;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;
import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestRabbitMq;
import io.relaybus.inbox.testing.UnheardCommits;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The RabbitMQ consumer against the machine's real RabbitMQ and a real PostgreSQL: acks after the
 * database commit, redeliveries skipped, failures requeued and then dead-lettered.
 */
class RabbitInboxConsumerTest {
  private static final Duration TIMEOUT = Duration.ofSeconds(30);
  private static final AtomicInteger QUEUES = new AtomicInteger();

  private static Connection rabbit;
  private static Channel admin;

  private PostgresOutboxStore store;
  private Inbox<java.sql.Connection> inbox;
  private Ledger ledger;
  private String queue;
  private final List<RabbitInboxConsumer<?>> consumers = new ArrayList<>();

  @BeforeAll
  static void connect() throws IOException {
    rabbit = TestRabbitMq.connect("inbox-tests");
    admin = rabbit.createChannel();
  }

  @AfterAll
  static void disconnect() {
    TestRabbitMq.closeQuietly(rabbit);
  }

  @BeforeEach
  void open() throws IOException {
    store = TestDatabase.freshStore();
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), "ledger_rabbit");
    queue = "relaybus-inbox-test-" + QUEUES.incrementAndGet() + "-" + ProcessHandle.current().pid();
    TestRabbitMq.declareWithDeadLetters(admin, queue);
  }

  @AfterEach
  void close() throws IOException {
    consumers.forEach(RabbitInboxConsumer::close);
    TestRabbitMq.deleteQueues(admin, queue);
    store.close();
  }

  private RabbitInboxConsumer.Builder<java.sql.Connection> builder(
      String handler, InboxWork<java.sql.Connection> work) {
    return RabbitInboxConsumer.builder(inbox)
        .connection(rabbit)
        .queue(queue)
        .handler(handler)
        .work(work)
        .requeueDelay(Duration.ZERO);
  }

  /** What a test does instead of acknowledging, given the channel's real settlement. */
  private interface Ack {
    void ack(Settlement real, long tag) throws IOException;
  }

  /** The channel's real settlement, but for {@code ack}. */
  private static Settlement withAck(Channel channel, Ack ack) {
    Settlement real = Settlement.on(channel);
    return new Settlement() {
      @Override
      public void ack(long tag) throws IOException {
        ack.ack(real, tag);
      }

      @Override
      public void requeue(long tag) throws IOException {
        real.requeue(tag);
      }

      @Override
      public void deadLetter(long tag) throws IOException {
        real.deadLetter(tag);
      }
    };
  }

  private <T> RabbitInboxConsumer<T> started(RabbitInboxConsumer<T> consumer) {
    consumers.add(consumer);
    consumer.start();
    return consumer;
  }

  /**
   * Symptom: a work that caught a failed statement and went on left PostgreSQL's transaction
   * aborted; its COMMIT rolled back without a word from pgjdbc, and the message was acked as
   * handled with nothing committed (gone: not in the queue, not dead-lettered).
   */
  @Test
  void aMessageWhoseTransactionWasAbortedIsNotAckedButTriedAgainThenDeadLettered()
      throws Exception {
    try (java.sql.Connection c = store.dataSource().getConnection();
        java.sql.Statement s = c.createStatement()) {
      s.execute("CREATE TABLE IF NOT EXISTS inbox_test.card_refs (ref text PRIMARY KEY)");
      s.execute("INSERT INTO inbox_test.card_refs VALUES ('card-7') ON CONFLICT DO NOTHING");
    }
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder(
                    "billing.charge",
                    (tx, message) -> {
                      charge.run(tx, message);
                      try (java.sql.Statement s = tx.createStatement()) {
                        s.executeUpdate("INSERT INTO inbox_test.card_refs VALUES ('card-7')");
                      } catch (java.sql.SQLException e) {
                        if (!"23505".equals(e.getSQLState())) {
                          throw e;
                        }
                        // taken for "known already": the transaction is aborted all the same
                      }
                    })
                .maxFailures(2)
                .build());

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
    assertThat(consumer.counts().handled()).isZero();
    assertThat(consumer.counts().failures()).isEqualTo(2);
    assertThat(ledger.committed()).isEmpty();
  }

  /**
   * Symptom: an Error thrown by the work (a parser's StackOverflowError on a deeply nested payload)
   * escaped handleDelivery, the client closed the channel, and the consumer received nothing more,
   * silently.
   */
  @Test
  void aWorkThatThrowsAnErrorIsAFailureAndTheMessagesBehindItAreHandled() throws Exception {
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder(
                    "billing.charge",
                    (tx, message) -> {
                      if (message.eventId().equals("e-deep")) {
                        throw new StackOverflowError("deeply nested payload");
                      }
                      charge.run(tx, message);
                    })
                .maxFailures(2)
                .build());

    TestRabbitMq.publish(admin, queue, "e-deep", "[[[[[[[[[[");
    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);
    ledger.assertRanOnce("e-1", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
    assertThat(consumer.counts().failures()).isEqualTo(2);
  }

  /**
   * Regression: a message whose transaction committed but that went back to the queue must not run
   * again.
   */
  @Test
  void messageNackedAfterCommitAndRedeliveredIsSkipped() throws Exception {
    AtomicBoolean nackedOnce = new AtomicBoolean();
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder("billing.charge", ledger.work("billing.charge"))
                .build(
                    channel ->
                        withAck(
                            channel,
                            (real, tag) -> {
                              if (nackedOnce.compareAndSet(false, true)) {
                                real.requeue(tag); // as if the consumer died before its ack
                              } else {
                                real.ack(tag);
                              }
                            })));

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    assertThat(consumer.counts().handled()).isEqualTo(1);
    ledger.assertRanOnce("e-1", "billing.charge");
    consumer.close();
    assertThat(TestRabbitMq.messageCount(admin, queue)).as("acked in the end").isZero();
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
  }

  /**
   * Symptom: a channel the broker closed with a channel-level error (here an acknowledgement it
   * refuses; in production an acknowledgement timeout, {@code consumer_timeout}) was logged at WARN
   * and never reopened; the consumer received nothing more while the connection stayed up.
   */
  @Test
  void aChannelTheBrokerClosesIsOpenedAgainAndTheMessagesBehindItAreHandled() throws Exception {
    AtomicBoolean refusedOnce = new AtomicBoolean();
    AtomicInteger channels = new AtomicInteger();
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder("billing.charge", ledger.work("billing.charge"))
                .recoveryInterval(Duration.ofMillis(200))
                .build(
                    channel -> {
                      channels.incrementAndGet();
                      // the first ack names a tag the broker never sent: it closes the channel
                      return withAck(
                          channel,
                          (real, tag) ->
                              real.ack(refusedOnce.compareAndSet(false, true) ? tag + 1_000 : tag));
                    }));

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    TestRabbitMq.publish(admin, queue, "e-2", "{\"n\":2}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 2);
    assertThat(channels).as("channels opened").hasValue(2);
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
  }

  /**
   * Symptom: deleting and declaring the queue again (a redeploy of its topology) cancelled the
   * consumer on the broker's side, and it consumed nothing from the new queue.
   */
  @Test
  void aConsumerTheBrokerCancelsSubscribesAgainOnceTheQueueIsBack() throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder("billing.charge", ledger.work("billing.charge"))
                .recoveryInterval(Duration.ofMillis(200))
                .build());
    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);

    admin.queueDelete(queue);
    Thread.sleep(600); // a few failed attempts to subscribe to a queue that is not there
    TestRabbitMq.declareWithDeadLetters(admin, queue);
    TestRabbitMq.publish(admin, queue, "e-2", "{\"n\":2}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 2);
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");
    assertThat(TestRabbitMq.messageCount(admin, queue)).isZero();
  }

  /**
   * The connection drops after PostgreSQL committed and before the consumer heard it: the inbox
   * record and the work are committed, the consumer takes it for a failure and requeues. The
   * redelivery must be skipped as a duplicate and acked, never run again nor dead-lettered.
   */
  @Test
  void aMessageWhoseCommitLandedUnheardIsSkippedAndAckedWhenItComesBack() throws Exception {
    UnheardCommits unheard = new UnheardCommits(store.dataSource(), 1);
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            RabbitInboxConsumer.builder(Inbox.postgres(store, unheard.dataSource()))
                .connection(rabbit)
                .queue(queue)
                .handler("billing.charge")
                .work(ledger.work("billing.charge"))
                .requeueDelay(Duration.ZERO)
                .build());

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    assertThat(unheard.unheard()).isEqualTo(1);
    assertThat(consumer.counts().failures()).isEqualTo(1);
    assertThat(consumer.counts().handled()).isZero();
    ledger.assertRanOnce("e-1", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
  }

  /**
   * Symptom: a message whose last allowed failure (maxFailures) was a commit that landed unheard
   * was rejected to the dead-letter exchange although its work had committed: a handled message in
   * the dead-letter queue, for an operator to chase (and, shovelled back, skipped).
   */
  @Test
  void aCommitThatLandedUnheardOnTheLastAllowedFailureIsAckedNotDeadLettered() throws Exception {
    UnheardCommits unheard = new UnheardCommits(store.dataSource(), 1);
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            RabbitInboxConsumer.builder(Inbox.postgres(store, unheard.dataSource()))
                .connection(rabbit)
                .queue(queue)
                .handler("billing.charge")
                .work(ledger.work("billing.charge"))
                .requeueDelay(Duration.ZERO)
                .maxFailures(1)
                .build());

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    TestRabbitMq.publish(admin, queue, "e-2", "{\"n\":2}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    assertThat(unheard.unheard()).isEqualTo(1);
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");
    assertThat(consumer.counts().failures()).isEqualTo(1);
    assertThat(consumer.counts().skipped()).as("e-1, found handled").isEqualTo(1);
    assertThat(consumer.counts().rejected()).isZero();
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead"))
        .as("handled messages in the dead-letter queue")
        .isZero();
  }

  /**
   * Symptom: with the pool's lock_timeout set, a message whose event another open transaction was
   * handling (a Kafka poll in one transaction, another consumer's work) failed to take its inbox
   * record at each attempt (SQLState 55P03), was dead-lettered after maxFailures (the last check,
   * "handled after all?", timed out on the same lock), and then the other transaction committed the
   * event: a handled message in the dead-letter queue. A lock wait on its own record is not a
   * failure of the message: it is requeued without counting, and once the other transaction
   * committed it is skipped and acked.
   */
  @Test
  void aMessageWhoseInboxRecordAnotherOpenTransactionHoldsIsNotDeadLetteredButSkippedOnceItCommits()
      throws Exception {
    store.close();
    store = TestDatabase.freshStore("&options=-c%20lock_timeout%3D200");
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), "ledger_rabbit");
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(builder("billing.charge", charge).maxFailures(3).build());

    try (java.sql.Connection holder = store.dataSource().getConnection()) {
      holder.setAutoCommit(false);
      // another consumer of the same event (a Kafka poll handled in one transaction), still open
      inbox.handle(
          holder,
          new io.relaybus.inbox.InboxMessage(
              "e-1",
              "order.placed",
              null,
              "{\"n\":1}".getBytes(StandardCharsets.UTF_8),
              "application/json",
              java.util.Map.of(),
              "kafka billing-0@0"),
          "billing.charge",
          charge);
      TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
      // maxFailures(3) lock timeouts of 200 ms and the last check take about 1 s: wait well past
      await()
          .pollDelay(Duration.ofSeconds(3))
          .atMost(TIMEOUT)
          .until(() -> consumer.counts().failures() >= 3);
      assertThat(TestRabbitMq.messageCount(admin, queue + ".dead"))
          .as("a message whose event another open transaction handles, in the dead-letter queue")
          .isZero();
      holder.commit();
    }

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(consumer.counts().handled()).isZero();
    assertThat(consumer.counts().rejected()).isZero();
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
  }

  /**
   * The last check before a dead-letter ("handled after all?") meets the inbox record held by
   * another open transaction, which handles the event: it must wait for it, not take the lock
   * timeout for "not handled" and dead-letter a message that the other transaction then commits.
   */
  @Test
  void aMessageWhoseRecordIsHeldAtTheLastCheckBeforeTheDeadLetterIsNotDeadLettered()
      throws Exception {
    store.close();
    store = TestDatabase.freshStore("&options=-c%20lock_timeout%3D200");
    ledger = new Ledger(store.dataSource(), "ledger_rabbit");
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    java.util.concurrent.CompletableFuture<java.sql.Connection> holding =
        new java.util.concurrent.CompletableFuture<>();
    AtomicInteger attempts = new AtomicInteger();
    javax.sql.DataSource pool = store.dataSource();
    // the last check's transaction begins once the other transaction holds the record
    inbox =
        Inbox.postgres(
            store,
            (javax.sql.DataSource)
                java.lang.reflect.Proxy.newProxyInstance(
                    getClass().getClassLoader(),
                    new Class<?>[] {javax.sql.DataSource.class},
                    (proxy, method, args) -> {
                      if (method.getName().equals("getConnection") && attempts.get() >= 3) {
                        holding.get(TIMEOUT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
                      }
                      try {
                        return method.invoke(pool, args);
                      } catch (java.lang.reflect.InvocationTargetException e) {
                        throw e.getCause();
                      }
                    }));
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder(
                    "billing.charge",
                    (tx, message) -> {
                      if (attempts.incrementAndGet() == 3) {
                        // another consumer takes the event as soon as this transaction rolls
                        // back, and keeps it open: the last check meets its record held
                        java.util.concurrent.CompletableFuture.runAsync(
                            () -> holding.complete(hold(message, charge)));
                      }
                      throw new IllegalStateException("card service down");
                    })
                .maxFailures(3)
                .build());

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    java.sql.Connection holder =
        holding.get(TIMEOUT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
    try {
      Thread.sleep(2_000); // the last check meets the held record, 200 ms at a time
      assertThat(TestRabbitMq.messageCount(admin, queue + ".dead"))
          .as("a message whose event another open transaction handles, in the dead-letter queue")
          .isZero();
      holder.commit();
    } finally {
      holder.close();
    }

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    assertThat(ledger.committed()).containsOnly(java.util.Map.entry("e-1/billing.charge", 1));
    assertThat(consumer.counts().rejected()).isZero();
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
  }

  /** Handles {@code message} in a transaction left open, waiting for its record without limit. */
  private java.sql.Connection hold(
      io.relaybus.inbox.InboxMessage message, InboxWork<java.sql.Connection> work) {
    try {
      java.sql.Connection holder = TestDatabase.dataSource().getConnection();
      holder.setAutoCommit(false);
      try (java.sql.Statement s = holder.createStatement()) {
        s.execute("SET LOCAL lock_timeout = 0");
      }
      inbox.handle(holder, message, "billing.charge", work);
      return holder;
    } catch (java.sql.SQLException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * The broker closes a consumer's channel while its work runs (its acknowledgement timeout, {@code
   * consumer_timeout}) and hands the message to another consumer of the queue while the first
   * transaction is still open. The second must wait for the first and then skip it; the first one's
   * ack fails on the closed channel; the work runs and commits once, nothing is dead-lettered.
   */
  @Test
  void aRedeliveryWhileTheFirstTransactionIsOpenWaitsForItAndIsSkipped() throws Exception {
    java.util.concurrent.CountDownLatch inWork = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.atomic.AtomicReference<Channel> slowChannel =
        new java.util.concurrent.atomic.AtomicReference<>();
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    RabbitInboxConsumer<java.sql.Connection> slow =
        started(
            builder(
                    "billing.charge",
                    (tx, message) -> {
                      charge.run(tx, message);
                      inWork.countDown();
                      try {
                        release.await();
                      } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                      }
                    })
                .recoveryInterval(Duration.ofMillis(200))
                .build(
                    channel -> {
                      slowChannel.compareAndSet(null, channel);
                      return Settlement.on(channel);
                    }));
    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    assertThat(inWork.await(30, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
    RabbitInboxConsumer<java.sql.Connection> other =
        started(builder("billing.charge", charge).build());

    slowChannel.get().basicAck(999_999, false); // a channel error: the broker closes the channel
    await().atMost(TIMEOUT).until(() -> lockWaiters() == 1); // the redelivery waits on the row
    release.countDown();

    await().atMost(TIMEOUT).until(() -> other.counts().skipped() == 1);
    ledger.assertRanOnce("e-1", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
    assertThat(other.counts().handled()).isZero();
    assertThat(slow.counts().failures() + other.counts().failures()).isZero();
    assertThat(slow.counts().handled()).as("the first delivery ran and committed").isEqualTo(1);
  }

  /**
   * Symptom: the only consumer of a queue whose work outlived the broker's acknowledgement timeout
   * ({@code consumer_timeout}; here the work has the broker close its channel with a refused ack)
   * subscribed again only once that work returned: the client tells a channel's consumer of the
   * close on the channel's dispatch thread, which the work holds. Meanwhile the broker had put the
   * queue's messages back and nobody consumed them: e-2 waited for the whole long work.
   */
  @Test
  void aChannelClosedDuringALongWorkIsReopenedAtOnceAndTheQueueGoesOn() throws Exception {
    theQueueGoesOnWhileALongWorksChannelIsReopened(builder -> builder);
  }

  /**
   * A long work has the broker close its channel (a refused ack, as {@code consumer_timeout} does);
   * e-2, published after its message, must commit while the long work still runs, and each runs
   * once, on two channels.
   */
  private void theQueueGoesOnWhileALongWorksChannelIsReopened(
      java.util.function.UnaryOperator<RabbitInboxConsumer.Builder<java.sql.Connection>> settings)
      throws Exception {
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.atomic.AtomicReference<Channel> current =
        new java.util.concurrent.atomic.AtomicReference<>();
    AtomicInteger channels = new AtomicInteger();
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            settings
                .apply(
                    builder(
                            "billing.charge",
                            (tx, message) -> {
                              charge.run(tx, message);
                              if (message.eventId().equals("e-long")) {
                                Channel channel = current.get();
                                try {
                                  channel.basicAck(999_999, false); // the broker closes the channel
                                } catch (IOException e) {
                                  throw new java.io.UncheckedIOException(e);
                                }
                                await().atMost(TIMEOUT).until(() -> !channel.isOpen());
                                try {
                                  release.await(
                                      TIMEOUT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
                                } catch (InterruptedException e) {
                                  Thread.currentThread().interrupt();
                                }
                              }
                            })
                        .recoveryInterval(Duration.ofMillis(200)))
                .build(
                    channel -> {
                      channels.incrementAndGet();
                      current.set(channel);
                      return Settlement.on(channel);
                    }));

    TestRabbitMq.publish(admin, queue, "e-long", "{\"n\":1}");
    TestRabbitMq.publish(admin, queue, "e-2", "{\"n\":2}");
    try {
      await()
          .atMost(Duration.ofSeconds(10))
          .untilAsserted(
              () ->
                  assertThat(ledger.committed())
                      .as("committed while e-long's work still runs")
                      .containsKey("e-2/billing.charge"));
    } finally {
      release.countDown();
    }

    await()
        .atMost(TIMEOUT)
        .until(() -> consumer.counts().handled() == 2 && consumer.counts().skipped() == 1);
    ledger.assertRanOnce("e-long", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue) == 0);
    assertThat(TestRabbitMq.messageCount(admin, queue + ".dead")).isZero();
    assertThat(consumer.counts().failures()).isZero();
    assertThat(channels).as("channels opened").hasValue(2);
    consumer.close();
    assertThat(TestRabbitMq.messageCount(admin, queue)).as("acked in the end").isZero();
  }

  /**
   * Row 110's case with {@code prefetch(1)}, usual for long works: the redelivery of the long
   * work's message, set aside on the new channel until that work ends, held the new channel's only
   * unacknowledged slot, so the broker sent it nothing else and the queue waited for the long work
   * as before row 110.
   */
  @Test
  void withPrefetchOneTheRedeliveryOfALongWorksMessageHoldsUpNothingOnTheNewChannel()
      throws Exception {
    theQueueGoesOnWhileALongWorksChannelIsReopened(builder -> builder.prefetch(1));
  }

  /**
   * close() during a work closed the channel under it and returned at once: the work went on using
   * the caller's database after close() (a pool closed next fails it midway), its commit landed
   * after close() returned, and its ack, refused by the closed channel, sent the handled message
   * back to the queue. close() now stops the deliveries, waits for the work in progress, which
   * commits and is acked, and then closes the channel; the messages not started go back.
   */
  @Test
  void closeDuringAWorkWaitsForItsCommitAndAckAndLeavesTheMessagesNotStarted() throws Exception {
    java.util.concurrent.CountDownLatch working = new java.util.concurrent.CountDownLatch(1);
    java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder(
                    "billing.charge",
                    (tx, message) -> {
                      charge.run(tx, message);
                      working.countDown();
                      try {
                        release.await(TIMEOUT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);
                      } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                      }
                    })
                .build());
    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    TestRabbitMq.publish(admin, queue, "e-2", "{\"n\":2}");
    assertThat(working.await(TIMEOUT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS)).isTrue();

    java.util.concurrent.CompletableFuture<Void> closing =
        java.util.concurrent.CompletableFuture.runAsync(consumer::close);
    Thread.sleep(1_000);
    try {
      assertThat(closing).as("close() while e-1's work still runs").isNotDone();
    } finally {
      release.countDown();
    }
    closing.get(TIMEOUT.toSeconds(), java.util.concurrent.TimeUnit.SECONDS);

    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(ledger.committed()).doesNotContainKey("e-2/billing.charge");
    assertThat(consumer.counts().handled()).isEqualTo(1);
    await()
        .atMost(TIMEOUT)
        .untilAsserted(
            () ->
                assertThat(TestRabbitMq.messageCount(admin, queue))
                    .as("e-1 acked, e-2 back in the queue")
                    .isEqualTo(1));
    GetResponse left = admin.basicGet(queue, true);
    assertThat(left.getProps().getHeaders().get("relaybus-event-id").toString()).isEqualTo("e-2");
  }

  private long lockWaiters() throws java.sql.SQLException {
    try (java.sql.Connection c = store.dataSource().getConnection();
        java.sql.Statement s = c.createStatement();
        java.sql.ResultSet rs =
            s.executeQuery(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    + " AND datname = current_database()")) {
      rs.next();
      return rs.getLong(1);
    }
  }

  /**
   * Symptom: a message whose work fails after the broker closed its channel (a work that runs past
   * {@code consumer_timeout}, then fails) was never dead-lettered. Each failure's requeue or reject
   * found the channel closed and threw; the broker put the message back; and the last failure had
   * already forgotten the message's failures before its reject failed, so it started again from
   * one: round after round, each as long as the work, for good.
   */
  @Test
  void aMessageWhoseRejectionFindsItsChannelClosedIsRejectedWhenItComesBack() throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        closingItsChannelThenThrowing(new IllegalStateException("card service timed out"));

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(2);
    assertThat(ledger.committed()).isEmpty();
    assertThat(consumer.counts().failures()).isEqualTo(2);
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(TestRabbitMq.messageCount(admin, queue)).isZero();
  }

  /** The same for a work that throws PoisonMessageException after its channel was closed. */
  @Test
  void aPoisonMessageWhoseRejectionFindsItsChannelClosedIsRejectedWhenItComesBack()
      throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        closingItsChannelThenThrowing(new PoisonMessageException("no such card, ever"));

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(1);
    assertThat(ledger.committed()).isEmpty();
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(TestRabbitMq.messageCount(admin, queue)).isZero();
  }

  /**
   * A consumer (maxFailures 2) whose work has the broker close its channel, as the broker's
   * acknowledgement timeout does during a long work, and then throws {@code failure}.
   */
  private RabbitInboxConsumer<java.sql.Connection> closingItsChannelThenThrowing(
      RuntimeException failure) {
    java.util.concurrent.atomic.AtomicReference<Channel> current =
        new java.util.concurrent.atomic.AtomicReference<>();
    InboxWork<java.sql.Connection> charge = ledger.work("billing.charge");
    return started(
        builder(
                "billing.charge",
                (tx, message) -> {
                  charge.run(tx, message);
                  Channel channel = current.get();
                  try {
                    channel.basicAck(999_999, false); // the broker closes the channel
                  } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                  }
                  await().atMost(TIMEOUT).until(() -> !channel.isOpen());
                  throw failure;
                })
            .maxFailures(2)
            .recoveryInterval(Duration.ofMillis(100))
            .build(
                channel -> {
                  current.set(channel);
                  return Settlement.on(channel);
                }));
  }

  @Test
  void messageThatAlwaysFailsEndsInTheDeadLetterQueueAfterMaxFailures() throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder(
                    "billing.charge",
                    ledger.failingWork(
                        "billing.charge", new IllegalStateException("card service down")))
                .maxFailures(3)
                .build());

    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(3);
    assertThat(consumer.counts().failures()).isEqualTo(3);
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(ledger.committed()).isEmpty();
    GetResponse dead = admin.basicGet(queue + ".dead", true);
    assertThat(new String(dead.getBody(), StandardCharsets.UTF_8)).isEqualTo("{\"n\":1}");
    assertThat(dead.getProps().getHeaders()).containsKey("x-death");
    assertThat(TestRabbitMq.messageCount(admin, queue)).isZero();
  }

  @Test
  void messageWithoutEventIdIsDeadLetteredAtOnce() throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(builder("billing.charge", ledger.work("billing.charge")).build());

    TestRabbitMq.publish(admin, queue, (String) null, "{\"n\":0}");
    TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");

    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);
    await().atMost(TIMEOUT).until(() -> TestRabbitMq.messageCount(admin, queue + ".dead") == 1);
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(consumer.counts().failures()).isZero();
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(ledger.committed()).hasSize(1);
  }

  @Test
  void messageIdPropertyServesAsEventIdWithoutTheHeader() throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(builder("billing.charge", ledger.work("billing.charge")).build());

    for (int copy = 0; copy < 2; copy++) {
      TestRabbitMq.publish(
          admin,
          queue,
          new AMQP.BasicProperties.Builder().messageId("m-1").type("order.placed"),
          "{\"n\":1}");
    }

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 1);
    assertThat(consumer.counts().handled()).isEqualTo(1);
    ledger.assertRanOnce("m-1", "billing.charge");
  }

  @Test
  void forwardedMessageGetsOneOutboxDeliveryPerRouteHoweverOftenItArrives() throws Exception {
    RabbitInboxConsumer<java.sql.Connection> consumer =
        started(
            builder(
                    "orders.forwarder",
                    (tx, message) -> inbox.forward(tx, message, List.of("billing", "shipping")))
                .build());

    for (int copy = 0; copy < 3; copy++) {
      TestRabbitMq.publish(admin, queue, "e-1", "{\"n\":1}");
    }

    await().atMost(TIMEOUT).until(() -> consumer.counts().skipped() == 2);
    assertThat(consumer.counts().handled()).isEqualTo(1);
    List<DeliveryView> deliveries = store.listDeliveries(DeliveryQuery.all()).items();
    assertThat(deliveries).extracting(DeliveryView::eventId).containsOnly("e-1");
    assertThat(deliveries)
        .extracting(DeliveryView::handler)
        .containsExactlyInAnyOrder("billing", "shipping");
  }
}
