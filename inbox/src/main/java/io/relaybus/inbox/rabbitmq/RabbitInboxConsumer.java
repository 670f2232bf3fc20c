package io.relaybus.inbox.rabbitmq;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.Recoverable;
import com.rabbitmq.client.ShutdownSignalException;
import io.relaybus.inbox.HandleOutcome;
import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxCounts;
import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.InboxRecordHeldException;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.store.RecordHeaders;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Consumes a RabbitMQ queue through an {@link Inbox}: the handler's work runs once per event
 * however often the broker delivers the message.
 *
 * <ul>
 *   <li>Manual acknowledgement: a message is acked only after its database transaction committed. A
 *       consumer that dies in between leaves it unacked; RabbitMQ delivers it again and the inbox
 *       skips it.
 *   <li>A failed message is nacked with requeue after {@code requeueDelay}, until it has failed
 *       {@code maxFailures} times; then it is rejected without requeue, which sends it to the
 *       queue's dead-letter exchange ({@code x-dead-letter-exchange}: declare one, or RabbitMQ
 *       drops it). Failures are counted per event id in this consumer ({@link FailureCounts}). A
 *       message whose last failure left it handled all the same (its commit landed unheard) is
 *       acked instead. A message whose inbox record another open transaction holds (the pool's
 *       {@code lock_timeout} ran out on it: {@link InboxRecordHeldException}) is not failing: it is
 *       tried again on its delivery, uncounted, until the record is let go, and never dead-lettered
 *       while it is held.
 *   <li>A message that can never be handled (no event id, or the work throws {@link
 *       PoisonMessageException}) is rejected to the dead-letter exchange at once.
 *   <li>A channel the broker closes (a channel-level error such as an acknowledgement timeout) or a
 *       consumer the broker cancels (its queue deleted) is opened and subscribed again every {@code
 *       recoveryInterval} until it succeeds: the client's automatic recovery reopens channels only
 *       when it recovers their connection. A closed channel is reopened while a work that outlived
 *       the broker's {@code consumer_timeout} still runs on it, so the queue goes on meanwhile; the
 *       redelivery of that work's message waits, off the new channel's thread, until it ends.
 *   <li>An ack, requeue or reject that finds its channel closed (a work that ran past the broker's
 *       {@code consumer_timeout}) is logged, not thrown: the broker delivers the message again; one
 *       whose reject was refused so is rejected when it comes back, before its work runs again.
 * </ul>
 *
 * <pre>{@code
 * RabbitInboxConsumer<Connection> billing = RabbitInboxConsumer.builder(inbox)
 *     .connection(rabbitConnection).queue("billing-in")
 *     .handler("billing.charge-card")
 *     .work((tx, message) -> chargeCard(tx, message.payloadAsString()))
 *     .build();
 * billing.start();   // deliveries run on the connection's consumer threads
 * // ... on shutdown:
 * billing.close();   // waits up to 30 s for the work in progress, then closes the channel
 * }</pre>
 */
public final class RabbitInboxConsumer<T> implements AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(RabbitInboxConsumer.class);

  /** Longest close() waits for the works in progress. */
  static final Duration CLOSE_WAIT = Duration.ofSeconds(30);

  /**
   * Shortest wait before trying again a message whose inbox record another open transaction holds
   * (the wait is {@code requeueDelay}, but at least this): a short {@code lock_timeout} with no
   * requeue delay would otherwise retry it hot.
   */
  static final Duration MIN_HELD_RECORD_PAUSE = Duration.ofMillis(100);

  /** The largest {@code basic.qos} prefetch count AMQP carries (a short). */
  private static final int MAX_PREFETCH = 65_535;

  private final Inbox<T> inbox;
  private final Connection connection;
  private final String queue;
  private final String handler;
  private final InboxWork<T> work;
  private final RabbitMessages messages;
  private final int maxFailures;
  private final Duration requeueDelay;
  private final int prefetch;
  private final Duration recoveryInterval;
  private final Function<Channel, Settlement> settlements;
  private final FailureCounts failures = new FailureCounts();
  private final InboxCounts counts = new InboxCounts();

  /**
   * The event ids whose delivery a thread is handling now, each with the deliveries of the same id
   * that arrived meanwhile on another channel (a redelivery after the broker closed the channel of
   * a long work): they wait here, not on a dispatch thread, and that thread handles them next.
   */
  private final Map<String, Deque<Delivery>> inProgress = new HashMap<>();

  private Channel channel;
  private String consumerTag;
  private ScheduledExecutorService recovery;
  private volatile boolean closed;

  /** Whether the current thread is handling a delivery of this consumer (close() from a work). */
  private final ThreadLocal<Boolean> handling = ThreadLocal.withInitial(() -> false);

  // visible for testing
  RabbitInboxConsumer(Builder<T> b, Function<Channel, Settlement> settlements) {
    this.inbox = b.inbox;
    this.connection = b.connection;
    this.queue = b.queue;
    this.handler = b.handler;
    this.work = b.work;
    this.messages = new RabbitMessages(b.headers);
    this.maxFailures = b.maxFailures;
    this.requeueDelay = b.requeueDelay;
    this.prefetch = b.prefetch;
    this.recoveryInterval = b.recoveryInterval;
    this.settlements = settlements;
  }

  public static <T> Builder<T> builder(Inbox<T> inbox) {
    return new Builder<>(inbox);
  }

  /** Opens a channel and starts consuming; deliveries run on the connection's consumer threads. */
  public synchronized void start() {
    if (recovery != null) {
      throw new IllegalStateException("already started");
    }
    recovery =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread thread = new Thread(r, "relaybus-rabbit-inbox-recovery-" + handler);
              thread.setDaemon(true);
              return thread;
            });
    try {
      subscribe();
    } catch (IOException e) {
      recovery.shutdownNow();
      recovery = null;
      throw new UncheckedIOException(
          "could not start consuming queue '%s' for handler '%s'".formatted(queue, handler), e);
    }
    log.info("RabbitMQ inbox of handler {} consuming queue {} ({})", handler, queue, consumerTag);
  }

  /** A new channel consuming the queue; the one before, if any, is closed. */
  private void subscribe() throws IOException {
    Channel opened = connection.createChannel();
    ScheduledExecutorService recoverOn = recovery;
    // The client tells the channel's consumer of a close on the channel's dispatch thread, after
    // the delivery in progress: a work that outlived the broker's consumer_timeout would hold the
    // queue until it returned. A shutdown listener hears it at once, on the connection's thread,
    // which must not wait for this consumer's lock (subscribe() holds it through RPCs that thread
    // answers): the recovery thread takes it over.
    opened.addShutdownListener(
        signal -> {
          if (signal.isInitiatedByApplication() || signal.isHardError()) {
            return; // close(), or the connection: the client's automatic recovery reopens it
          }
          try {
            recoverOn.execute(
                () ->
                    recoverLater(opened, "the broker closed its channel: " + signal.getMessage()));
          } catch (RejectedExecutionException closing) {
            log.debug("RabbitMQ inbox of handler {} is closing; not subscribing again", handler);
          }
        });
    try {
      // A work still running on a closed channel gets its message again here, set aside until
      // that work ends (handleInTurn) and unacknowledged meanwhile: one slot more for each, or
      // with prefetch(1) that redelivery would take the new channel's only slot and the queue
      // would wait for the work after all.
      int stillRunning;
      synchronized (inProgress) {
        stillRunning = inProgress.size();
      }
      opened.basicQos(Math.min(MAX_PREFETCH, prefetch + stillRunning));
      Settlement settlement = settlements.apply(opened);
      consumerTag = opened.basicConsume(queue, false, new Deliveries(opened, settlement));
    } catch (IOException | RuntimeException e) {
      closeQuietly(opened);
      throw e;
    }
    Channel before = channel;
    channel = opened;
    if (before != null) {
      // closed by the broker already, but close() is what takes an automatically recovering
      // channel and its consumer off the connection's recovery list
      closeQuietly(before);
    }
  }

  /** Subscribes again after the broker closed {@code lost} or cancelled its consumer. */
  private synchronized void recoverLater(Channel lost, String why) {
    if (closed || lost != channel) {
      return; // closing, or a channel already replaced
    }
    log.warn(
        "RabbitMQ inbox of handler {} stopped receiving from queue {} ({}); subscribing again in"
            + " {} ms",
        handler,
        queue,
        why,
        recoveryInterval.toMillis());
    recovery.schedule(() -> recover(lost), recoveryInterval.toMillis(), TimeUnit.MILLISECONDS);
  }

  private synchronized void recover(Channel lost) {
    if (closed || lost != channel) {
      return;
    }
    try {
      subscribe();
      log.info(
          "RabbitMQ inbox of handler {} consuming queue {} again ({})",
          handler,
          queue,
          consumerTag);
    } catch (IOException | RuntimeException e) {
      log.warn(
          "RabbitMQ inbox of handler {} could not subscribe to queue {} again; retrying in {} ms",
          handler,
          queue,
          recoveryInterval.toMillis(),
          e);
      recovery.schedule(() -> recover(lost), recoveryInterval.toMillis(), TimeUnit.MILLISECONDS);
    }
  }

  private void closeQuietly(Channel c) {
    try {
      c.close();
    } catch (IOException | TimeoutException | RuntimeException e) {
      log.debug("RabbitMQ inbox of handler {}: closing a channel failed", handler, e);
    }
  }

  /** What this consumer did with the messages it received so far. */
  public InboxCounts counts() {
    return counts;
  }

  /**
   * Stops consuming, waits up to {@link #CLOSE_WAIT} for the works in progress to end (each commits
   * and is acked, or rolls back and is handed back, on its still open channel), then closes the
   * channel: the messages received and not started go back to the queue. Idempotent. Called from a
   * work, it does not wait for that work.
   */
  @Override
  public void close() {
    Channel open;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      if (recovery != null) {
        recovery.shutdownNow();
      }
      open = channel != null && channel.isOpen() ? channel : null;
      if (open != null) {
        try {
          open.basicCancel(consumerTag);
        } catch (IOException | ShutdownSignalException e) {
          log.warn("RabbitMQ inbox of handler {} could not cancel its consumer", handler, e);
        }
      }
    }
    awaitWorksInProgress();
    if (open == null) {
      return;
    }
    try {
      open.close();
    } catch (IOException | TimeoutException | ShutdownSignalException e) {
      log.warn("RabbitMQ inbox of handler {} could not close its channel cleanly", handler, e);
    }
    log.info("RabbitMQ inbox of handler {} stopped consuming queue {}", handler, queue);
  }

  /**
   * Waits until no thread handles a delivery of this consumer (none starts once {@code closed}), or
   * {@link #CLOSE_WAIT} passed: a work must not go on with the caller's database after close().
   */
  private void awaitWorksInProgress() {
    if (handling.get()) {
      return; // close() from a work: it would wait for itself
    }
    long deadline = System.nanoTime() + CLOSE_WAIT.toNanos();
    synchronized (inProgress) {
      while (!inProgress.isEmpty()) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          log.warn(
              "RabbitMQ inbox of handler {} closes its channel under works still running after {}"
                  + " s ({}): their messages go back to the queue",
              handler,
              CLOSE_WAIT.toSeconds(),
              inProgress.keySet());
          return;
        }
        try {
          TimeUnit.NANOSECONDS.timedWait(inProgress, left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
      }
    }
  }

  private final class Deliveries extends DefaultConsumer {
    private final Settlement settlement;

    Deliveries(Channel channel, Settlement settlement) {
      super(channel);
      this.settlement = settlement;
    }

    @Override
    public void handleDelivery(
        String tag, Envelope envelope, AMQP.BasicProperties properties, byte[] body)
        throws IOException {
      long deliveryTag = envelope.getDeliveryTag();
      InboxMessage message;
      try {
        message = messages.read(queue, envelope, properties, body);
      } catch (PoisonMessageException e) {
        deadLetter(deliveryTag, e);
        return;
      }
      handleInTurn(new Delivery(this, deliveryTag, message, properties));
    }

    /** Handles a delivery whose event no other thread of this consumer is handling. */
    private void handle(long deliveryTag, InboxMessage message, AMQP.BasicProperties properties)
        throws IOException {
      if (!getChannel().isOpen()) {
        // The broker put it back when it closed the channel (the client still hands over what it
        // had received): handled now, it could not be acked, and it would race its redelivery.
        log.debug(
            "RabbitMQ inbox of handler {} leaves {} to its redelivery: its channel is closed",
            handler,
            message);
        return;
      }
      if (failures.failures(message.eventId()) >= maxFailures) {
        // Its attempts are spent, and the reject that should have ended it found its channel
        // closed: rejected now, without running the work again.
        giveUp(deliveryTag, message, null);
        return;
      }
      HandleOutcome outcome;
      try {
        outcome =
            waitingOutHeldRecord(deliveryTag, message, () -> inbox.handle(message, handler, work));
      } catch (PoisonMessageException e) {
        if (!deadLetter(deliveryTag, e)) {
          failures.spend(message.eventId(), maxFailures); // rejected when it comes back
        }
        return;
      } catch (RuntimeException | Error e) {
        // An Error too (a parser's StackOverflowError on a deeply nested payload): escaping
        // handleDelivery, it would make the client close the channel, and the consumer would stop
        // for good without a word; as a failure the message is tried again, then dead-lettered.
        failed(deliveryTag, message, properties, e);
        return;
      }
      if (outcome == null) {
        return; // closing, or its channel closed: left unacknowledged to its redelivery
      }
      failures.forget(message.eventId());
      counts.count(outcome);
      log.trace("{}: {} {}", handler, message, outcome);
      acknowledge(deliveryTag, message, outcome);
    }

    /**
     * Acks a message whose transaction committed. A channel closed meanwhile (the broker's
     * acknowledgement timeout during a long work, a channel error, {@link #close()}) refuses the
     * ack: the broker has put the message back already, and its redelivery is skipped by the inbox
     * and acked then. That is the inbox's whole point, so it is logged at INFO rather than thrown,
     * which would have the client log it as a consumer that crashed.
     */
    private void acknowledge(long deliveryTag, InboxMessage message, HandleOutcome outcome)
        throws IOException {
      try {
        settlement.ack(deliveryTag);
      } catch (ShutdownSignalException closed) {
        log.info(
            "RabbitMQ inbox of handler {} committed {} ({}) but could not ack it, its channel"
                + " being closed ({}): the broker delivers it again and the inbox skips it",
            handler,
            message,
            outcome,
            closed.getMessage());
      }
    }

    /** Rejects a poison message; false when its channel was closed (see {@link #reject}). */
    private boolean deadLetter(long deliveryTag, PoisonMessageException e) throws IOException {
      log.error(
          "RabbitMQ inbox of handler {} rejects a message of queue {} to its dead-letter exchange"
              + " without handling it: {}",
          handler,
          queue,
          e.getMessage());
      return reject(deliveryTag, e.getMessage());
    }

    private void failed(
        long deliveryTag, InboxMessage message, AMQP.BasicProperties properties, Throwable e)
        throws IOException {
      counts.countFailure();
      int failed = failures.failed(message.eventId(), deliveryCount(properties));
      if (failed >= maxFailures) {
        giveUp(deliveryTag, message, e);
        return;
      }
      log.warn(
          "RabbitMQ inbox of handler {} failed on {} (failure {} of {}); requeueing it in {} ms",
          handler,
          message,
          failed,
          maxFailures,
          requeueDelay.toMillis(),
          e);
      try {
        Thread.sleep(requeueDelay.toMillis());
      } catch (InterruptedException interrupted) {
        Thread.currentThread().interrupt();
      }
      requeue(deliveryTag, message);
    }

    /** Hands the message back to the queue; a closed channel has the broker do it. */
    private void requeue(long deliveryTag, InboxMessage message) throws IOException {
      try {
        settlement.requeue(deliveryTag);
      } catch (ShutdownSignalException closed) {
        log.info(
            "RabbitMQ inbox of handler {} could not requeue {}, its channel being closed ({}):"
                + " the broker delivers it again",
            handler,
            message,
            closed.getMessage());
      }
    }

    /**
     * The message failed {@code maxFailures} times ({@code failure} the last one, or null when it
     * comes back after a reject that did not reach the broker): acked if the handler has it after
     * all, else rejected to the dead-letter exchange.
     */
    private void giveUp(long deliveryTag, InboxMessage message, Throwable failure)
        throws IOException {
      Boolean known = waitingOutHeldRecord(deliveryTag, message, () -> handledAfterAll(message));
      if (known == null) {
        // closing, or its channel closed, while another transaction still held its record:
        // unacknowledged, it comes back with its attempts spent and is asked about again then
        return;
      }
      if (known) {
        log.info(
            "RabbitMQ inbox of handler {} failed on {}, which it finds handled all the same (its"
                + " commit landed unheard, or another delivery handled it meanwhile); acking it",
            handler,
            message,
            failure);
        failures.forget(message.eventId());
        counts.count(HandleOutcome.SKIPPED_REDELIVERY);
        acknowledge(deliveryTag, message, HandleOutcome.SKIPPED_REDELIVERY);
        return;
      }
      if (failure == null) {
        log.error(
            "RabbitMQ inbox of handler {} rejects {} to the dead-letter exchange of queue {}"
                + " without handling it again: its attempts were spent before (its reject found its"
                + " channel closed, or the consumer closed while asking whether it was handled)",
            handler,
            message,
            queue);
      } else {
        log.error(
            "RabbitMQ inbox of handler {} failed on {} {} times (maxFailures); rejecting it to the"
                + " dead-letter exchange of queue {}",
            handler,
            message,
            failures.failures(message.eventId()),
            queue,
            failure);
      }
      if (reject(deliveryTag, message.toString())) {
        failures.forget(message.eventId());
      }
    }

    /**
     * Rejects to the dead-letter exchange; false when the channel was closed meanwhile (a work that
     * ran past the broker's {@code consumer_timeout}): the broker then puts the message back, and
     * the caller keeps its failures counted so that it is rejected when it comes back, before its
     * work runs again. Thrown, the refusal would also have been logged as a consumer that crashed.
     */
    private boolean reject(long deliveryTag, String what) throws IOException {
      try {
        settlement.deadLetter(deliveryTag);
      } catch (ShutdownSignalException closed) {
        log.warn(
            "RabbitMQ inbox of handler {} could not reject {} to the dead-letter exchange, its"
                + " channel being closed ({}): the broker delivers it again, and it is rejected"
                + " then without being handled",
            handler,
            what,
            closed.getMessage());
        return false;
      }
      counts.countRejected();
      return true;
    }

    /**
     * Whether the handler has the event recorded although its last attempt failed: a commit that
     * landed while the connection dropped before its answer (the work committed, the consumer heard
     * a failure), or another delivery that handled it meanwhile. Asked before the last failure
     * dead-letters the message, so a handled message is acked, not left in the dead-letter queue;
     * earlier failures requeue it and its redelivery tells. One more inbox transaction whose work
     * refuses to run: it answers SKIPPED_REDELIVERY only for a recorded event, else it rolls back.
     * If it fails too (the database still down), the message is not known handled. A record held by
     * another open transaction, which may be handling the event, is no answer: {@link
     * InboxRecordHeldException} passes through, and the caller asks again once it is let go.
     */
    private boolean handledAfterAll(InboxMessage message) {
      InboxWork<T> notHandledYet =
          (tx, m) -> {
            throw new NotHandledYet();
          };
      try {
        return inbox.handle(message, handler, notHandledYet) == HandleOutcome.SKIPPED_REDELIVERY;
      } catch (NotHandledYet e) {
        return false;
      } catch (InboxRecordHeldException e) {
        throw e;
      } catch (RuntimeException e) {
        log.debug(
            "RabbitMQ inbox of handler {} could not tell whether {} was handled",
            handler,
            message,
            e);
        return false;
      }
    }

    /**
     * {@code attempt}, tried again while its event's inbox record is held by another open
     * transaction ({@link InboxRecordHeldException}: the pool's {@code lock_timeout} or {@code
     * statement_timeout} ran out while that transaction handles the same event). Such a wait is not
     * a failure of the message: not counted toward {@code maxFailures}, and the message stays with
     * this delivery (a requeue would count on a quorum queue's {@code x-delivery-count} and its
     * {@code delivery-limit}). Each new attempt comes after {@code requeueDelay}, at least {@link
     * #MIN_HELD_RECORD_PAUSE}. Null when the consumer closes or the channel closes meanwhile (the
     * message is left unacknowledged, and the broker delivers it again), or the thread is
     * interrupted (the message is requeued, its failures as they were).
     */
    private <R> R waitingOutHeldRecord(long deliveryTag, InboxMessage message, Supplier<R> attempt)
        throws IOException {
      long pause = Math.max(requeueDelay.toMillis(), MIN_HELD_RECORD_PAUSE.toMillis());
      for (int held = 1; ; held++) {
        try {
          return attempt.get();
        } catch (InboxRecordHeldException e) {
          counts.countFailure();
          if (held == 1) {
            log.info(
                "RabbitMQ inbox of handler {}: another open transaction holds the inbox record of"
                    + " {} (it handles the same event, or locks the table); trying again every {} ms"
                    + " until it ends, without counting it toward maxFailures ({})",
                handler,
                message,
                pause,
                e.getMessage());
          } else {
            log.debug(
                "RabbitMQ inbox of handler {}: the inbox record of {} is still held ({} attempts)",
                handler,
                message,
                held);
          }
        }
        try {
          Thread.sleep(pause);
        } catch (InterruptedException interrupted) {
          Thread.currentThread().interrupt();
          requeue(deliveryTag, message);
          return null;
        }
        if (closed || !getChannel().isOpen()) {
          log.debug(
              "RabbitMQ inbox of handler {} leaves {} to its redelivery: the consumer or its"
                  + " channel closed while its inbox record was held",
              handler,
              message);
          return null;
        }
      }
    }

    @Override
    public void handleShutdownSignal(String tag, ShutdownSignalException signal) {
      if (signal.isInitiatedByApplication() || !signal.isHardError()) {
        return; // close(), or a channel the listener of subscribe() subscribes again
      }
      if (connection instanceof Recoverable) {
        log.warn(
            "RabbitMQ inbox of handler {} lost its connection on queue {}: {}; the client's"
                + " automatic recovery reopens it",
            handler,
            queue,
            signal.getMessage());
      } else {
        log.error(
            "RabbitMQ inbox of handler {} lost its connection on queue {}: {}; it consumes nothing"
                + " more, since the connection has no automatic recovery (enable it on the"
                + " ConnectionFactory, or start a new consumer on a new connection)",
            handler,
            queue,
            signal.getMessage());
      }
    }

    @Override
    public void handleCancel(String tag) {
      recoverLater(getChannel(), "the broker cancelled its consumer, as when the queue is deleted");
    }
  }

  /** A message received on the channel of {@code on}, settled there. */
  private final class Delivery {
    private final Deliveries on;
    private final long deliveryTag;
    private final InboxMessage message;
    private final AMQP.BasicProperties properties;

    Delivery(
        Deliveries on, long deliveryTag, InboxMessage message, AMQP.BasicProperties properties) {
      this.on = on;
      this.deliveryTag = deliveryTag;
      this.message = message;
      this.properties = properties;
    }

    void handle() throws IOException {
      on.handle(deliveryTag, message, properties);
    }
  }

  /**
   * Handles {@code delivery}, unless another thread is handling its event: then it is left to that
   * thread, which handles it after its own (a redelivery of a long work's message, on the channel
   * opened after the broker closed the work's channel: it would otherwise wait on the event's row
   * on its channel's dispatch thread, and hold up the queue's other messages there). Then the
   * deliveries of the same event left to this thread, one after the other.
   */
  private void handleInTurn(Delivery delivery) throws IOException {
    String eventId = delivery.message.eventId();
    synchronized (inProgress) {
      if (closed) {
        // received before the consumer was cancelled: left unacknowledged, and the channel's
        // close, once the works in progress ended, hands it back to the queue
        log.debug(
            "RabbitMQ inbox of handler {} is closing; leaves {} to its redelivery",
            handler,
            delivery.message);
        return;
      }
      Deque<Delivery> waiting = inProgress.get(eventId);
      if (waiting != null) {
        waiting.add(delivery);
        log.debug(
            "RabbitMQ inbox of handler {} handles {} once the delivery of it in progress ends",
            handler,
            delivery.message);
        return;
      }
      inProgress.put(eventId, new ArrayDeque<>());
    }
    boolean nested = handling.get();
    handling.set(true);
    try {
      delivery.handle();
    } finally {
      for (Delivery next = nextOf(eventId); next != null; next = nextOf(eventId)) {
        try {
          next.handle();
        } catch (IOException | RuntimeException e) {
          // a failure of its own channel, not of the delivery this thread came with
          log.warn(
              "RabbitMQ inbox of handler {} could not settle {}, which waited for a delivery of"
                  + " the same event; the broker delivers it again",
              handler,
              next.message,
              e);
        }
      }
      handling.set(nested);
    }
  }

  /** The next delivery left waiting for {@code eventId}, or null when the event is let go. */
  private Delivery nextOf(String eventId) {
    synchronized (inProgress) {
      Deque<Delivery> waiting = inProgress.get(eventId);
      Delivery next = closed || waiting == null ? null : waiting.poll();
      if (next == null) {
        // closed: left unacknowledged, the channel's close hands them back to the queue
        inProgress.remove(eventId);
        inProgress.notifyAll(); // close() waits for the works in progress
      }
      return next;
    }
  }

  /** Thrown by the work of {@link Deliveries#handledAfterAll}, which runs only for a new event. */
  private static final class NotHandledYet extends RuntimeException {
    NotHandledYet() {
      super("not handled yet", null, false, false);
    }
  }

  /** A quorum queue's count of earlier deliveries, when the broker sends one. */
  private static Long deliveryCount(AMQP.BasicProperties properties) {
    Object count =
        properties.getHeaders() == null ? null : properties.getHeaders().get("x-delivery-count");
    return count instanceof Number n ? n.longValue() : null;
  }

  /** Settings of a {@link RabbitInboxConsumer}; {@link #build()} validates them. */
  public static final class Builder<T> {
    private final Inbox<T> inbox;
    private Connection connection;
    private String queue;
    private String handler;
    private InboxWork<T> work;
    private RecordHeaders headers = RecordHeaders.defaults();
    private int maxFailures = 5;
    private Duration requeueDelay = Duration.ofSeconds(1);
    private int prefetch = 20;
    private Duration recoveryInterval = Duration.ofSeconds(5);

    private Builder(Inbox<T> inbox) {
      if (inbox == null) {
        throw new IllegalArgumentException("inbox must not be null");
      }
      this.inbox = inbox;
    }

    /**
     * The connection to consume on; the consumer opens a channel of its own, the caller owns it.
     */
    public Builder<T> connection(Connection connection) {
      this.connection = connection;
      return this;
    }

    public Builder<T> queue(String queue) {
      this.queue = queue;
      return this;
    }

    /** The inbox handler name, {@code [A-Za-z0-9._-]+}: one per piece of work, stable forever. */
    public Builder<T> handler(String handler) {
      this.handler = handler;
      return this;
    }

    public Builder<T> work(InboxWork<T> work) {
      this.work = work;
      return this;
    }

    /** The header names; default prefix {@code relaybus-}, as the connector's. */
    public Builder<T> headers(RecordHeaders headers) {
      this.headers = headers;
      return this;
    }

    /** Failures of one message before it goes to the dead-letter exchange, default 5. */
    public Builder<T> maxFailures(int maxFailures) {
      this.maxFailures = maxFailures;
      return this;
    }

    /** Wait before a failed message is handed back to the queue, default 1 s. */
    public Builder<T> requeueDelay(Duration delay) {
      this.requeueDelay = delay;
      return this;
    }

    /**
     * Unacknowledged messages the broker sends ahead ({@code basic.qos}), default 20. A channel
     * opened again while works still run on the closed one gets one more for each (the redelivery
     * of such a work's message waits there, unacknowledged, until the work ends).
     */
    public Builder<T> prefetch(int prefetch) {
      this.prefetch = prefetch;
      return this;
    }

    /**
     * Wait before subscribing again after the broker closed the channel or cancelled the consumer,
     * and between attempts while that fails; default 5 s, as the client's network recovery.
     */
    public Builder<T> recoveryInterval(Duration interval) {
      this.recoveryInterval = interval;
      return this;
    }

    public RabbitInboxConsumer<T> build() {
      return build(Settlement::on);
    }

    // visible for testing
    RabbitInboxConsumer<T> build(Function<Channel, Settlement> settlements) {
      io.relaybus.store.Validation.handler(handler);
      require(connection != null, "connection must be set");
      require(queue != null && !queue.isBlank(), "queue must be set, but was " + queue);
      require(work != null, "work must be set");
      require(headers != null, "headers must not be null");
      require(maxFailures > 0, "maxFailures must be positive, but was " + maxFailures);
      require(
          requeueDelay != null && !requeueDelay.isNegative(),
          "requeueDelay must be zero or positive, but was " + requeueDelay);
      require(prefetch > 0, "prefetch must be positive, but was " + prefetch);
      require(
          recoveryInterval != null && recoveryInterval.toMillis() > 0,
          "recoveryInterval must be at least 1 ms, but was " + recoveryInterval);
      return new RabbitInboxConsumer<>(this, settlements);
    }

    private static void require(boolean ok, String message) {
      if (!ok) {
        throw new IllegalArgumentException(message);
      }
    }
  }
}
