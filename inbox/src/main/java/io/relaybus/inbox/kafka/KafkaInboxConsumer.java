package io.relaybus.inbox.kafka;

import io.relaybus.inbox.HandleOutcome;
import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxCounts;
import io.relaybus.inbox.InboxException;
import io.relaybus.inbox.InboxMessage;
import io.relaybus.inbox.InboxRecordHeldException;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.inbox.Transactions;
import io.relaybus.store.RecordHeaders;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Kafka consumer loop that hands every record to an {@link Inbox}: the handler's work runs once
 * per event however often Kafka delivers the record.
 *
 * <p><b>Order of commits</b>: each record is handled in a database transaction of its own, and its
 * offset is committed to Kafka only after that transaction committed (after each poll's records,
 * before the next poll). A consumer that dies in between, or loses its partitions, leaves the
 * offset uncommitted: whoever reads the partition next gets the record again and the inbox skips
 * it. So nothing is lost (no offset runs ahead of the database) and nothing runs twice (the inbox
 * record committed with the work).
 *
 * <p><b>Failures</b>: a record that fails is retried from its offset after {@code retryBackoff}
 * (records of its partition wait behind it, other partitions go on), up to {@code maxAttempts};
 * then {@link #run()} stops with an {@link InboxException} and the offset stays uncommitted. An
 * inbox record held by another open transaction ({@link InboxRecordHeldException}: the pool's
 * {@code lock_timeout} ran out on it) is retried too, but not counted toward {@code maxAttempts}. A
 * record that can never be handled (a poison record: no event id header, fields that break the
 * outbox's rules, or a {@link PoisonMessageException} from the work; see {@link
 * InvalidRecordPolicy}) is by default sent to a dead-letter topic, and its offset committed only
 * after the broker acknowledged that copy.
 *
 * <p><b>One transaction per poll</b> ({@link Builder#transactionPerPoll}): all records of a poll
 * are handled in one database transaction, then their offsets committed: their inbox records first,
 * in event id order (so two such transactions over the same events wait for each other rather than
 * deadlock), then their works in the poll's order. If any of them fails, the transaction rolls back
 * (nothing of the poll is recorded or done) and the poll's records are handled one transaction each
 * as above, so one bad record holds up only its partition.
 *
 * <pre>{@code
 * KafkaInboxConsumer<Connection> billing = KafkaInboxConsumer.builder(inbox)
 *     .consumerConfig(Map.of("bootstrap.servers", "kafka:9092", "group.id", "billing"))
 *     .topics(List.of("billing"))
 *     .handler("billing.charge-card")
 *     .work((tx, message) -> chargeCard(tx, message.payloadAsString()))
 *     .build();
 * Thread thread = new Thread(billing, "billing-inbox");
 * thread.start();
 * // ... on shutdown:
 * billing.close();   // stops the loop, commits what was handled, closes the Kafka consumer
 * }</pre>
 *
 * <p>{@link #run()} runs on the caller's thread; {@link #close()} may be called from any thread.
 */
public final class KafkaInboxConsumer<T> implements Runnable, AutoCloseable {
  private static final Logger log = LoggerFactory.getLogger(KafkaInboxConsumer.class);

  /** Called after a record's transaction committed, before its offset is recorded. */
  // visible for testing: the point where a killed consumer leaves a committed, unacknowledged
  // record
  @FunctionalInterface
  interface AfterCommit {
    void committed(ConsumerRecord<byte[], byte[]> record, HandleOutcome outcome);
  }

  private final Inbox<T> inbox;
  private final String handler;
  private final InboxWork<T> work;
  private final List<String> topics;
  private final KafkaMessages messages;
  private final InvalidRecordPolicy invalidRecords;
  private final Duration pollTimeout;
  private final Duration retryBackoff;
  private final int maxAttempts;
  private final Consumer<byte[], byte[]> consumer;
  private final DeadLetters deadLetters;
  private final boolean transactionPerPoll;
  private final Transactions<T> transactions;
  private final AfterCommit afterCommit;
  private final InboxCounts counts = new InboxCounts();
  private final HandledOffsets offsets;

  /** The record each partition is retrying and how often it failed; loop thread only. */
  private final Map<TopicPartition, FailedRecord> failing = new HashMap<>();

  /**
   * Shortest wait before trying again a record whose inbox record another open transaction holds
   * (the wait is {@code retryBackoff}, but at least this): a short {@code lock_timeout} with no
   * backoff would otherwise retry it hot.
   */
  static final Duration MIN_HELD_RECORD_PAUSE = Duration.ofMillis(100);

  private final AtomicBoolean started = new AtomicBoolean();

  /** The thread running {@link #run()}, once it started: close() from it must not wait for it. */
  private volatile Thread loop;

  private final CountDownLatch closing = new CountDownLatch(1);
  private final CountDownLatch stopped = new CountDownLatch(1);

  private record FailedRecord(long offset, int failures) {}

  // visible for testing
  KafkaInboxConsumer(
      Builder<T> b,
      Consumer<byte[], byte[]> consumer,
      Producer<byte[], byte[]> deadLetterProducer,
      AfterCommit afterCommit) {
    this.inbox = b.inbox;
    this.handler = b.handler;
    this.work = b.work;
    this.topics = b.topics;
    this.messages = new KafkaMessages(b.headers);
    this.invalidRecords = b.invalidRecords;
    this.pollTimeout = b.pollTimeout;
    this.retryBackoff = b.retryBackoff;
    this.maxAttempts = b.maxAttempts;
    this.consumer = consumer;
    this.deadLetters =
        deadLetterProducer == null
            ? null
            : new DeadLetters(
                deadLetterProducer,
                b.deadLetterTopic,
                DeadLetterHeaders.of(b.headers),
                b.headers.eventId(),
                String.valueOf(b.consumerConfig.get("group.id")),
                b.handler,
                b.deadLetterTimeout);
    this.transactionPerPoll = b.transactionPerPoll;
    this.transactions = b.transactionPerPoll ? inbox.transactions() : null;
    this.afterCommit = afterCommit;
    this.offsets = new HandledOffsets(consumer, handler, failing.keySet()::removeAll);
  }

  public static <T> Builder<T> builder(Inbox<T> inbox) {
    return new Builder<>(inbox);
  }

  /**
   * Subscribes and handles records until {@link #close()}; then commits what was handled and closes
   * the Kafka consumer.
   *
   * @throws InboxException when a record failed {@code maxAttempts} times (a failed dead-letter
   *     send counts as a failure), or a poison record met {@link InvalidRecordPolicy#FAIL}; the
   *     records before it are committed
   */
  @Override
  public void run() {
    if (!started.compareAndSet(false, true)) {
      throw new IllegalStateException("a KafkaInboxConsumer runs once; build another to restart");
    }
    loop = Thread.currentThread();
    long start = System.nanoTime();
    try {
      consumer.subscribe(topics, offsets);
      log.info("Kafka inbox of handler {} consuming {}", handler, topics);
      while (closing.getCount() > 0) {
        pollOnce();
      }
    } catch (WakeupException e) {
      if (closing.getCount() > 0) {
        throw e;
      }
    } finally {
      try {
        offsets.commit();
      } catch (RuntimeException e) {
        log.warn("Kafka inbox of handler {} could not commit its last offsets", handler, e);
      }
      consumer.close();
      closeDeadLetters();
      stopped.countDown();
      log.info(
          "Kafka inbox of handler {} stopped after {} ms",
          handler,
          TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
    }
  }

  /** What this consumer did with the records it received so far. */
  public InboxCounts counts() {
    return counts;
  }

  /**
   * Stops the loop after the record in progress (the rest of the poll is left for the partitions'
   * next reader) and waits up to 30 s for it to commit what was handled and close; idempotent. A
   * poll handled in one transaction is rolled back instead, unless its last work was in progress.
   * Called from a work (on the loop's own thread), it does not wait for the loop it runs on: it
   * returns at once, the work's transaction commits as usual, and the loop stops after it.
   */
  @Override
  public void close() {
    closing.countDown();
    if (started.compareAndSet(false, true)) {
      consumer.close();
      closeDeadLetters();
      stopped.countDown();
      return;
    }
    if (Thread.currentThread() == loop) {
      // from a work or a rebalance callback: waiting would hold its transaction open for 30 s,
      // and the loop, not blocked in a poll, sees the close when the work returns
      log.debug("Kafka inbox of handler {} closing from its own loop thread", handler);
      return;
    }
    consumer.wakeup();
    try {
      if (!stopped.await(30, TimeUnit.SECONDS)) {
        log.warn("Kafka inbox of handler {} did not stop within 30 s", handler);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private void closeDeadLetters() {
    if (deadLetters != null) {
      deadLetters.close();
    }
  }

  private void pollOnce() {
    ConsumerRecords<byte[], byte[]> records = consumer.poll(pollTimeout);
    try {
      // A partition still retrying a record goes record by record: a retry is one attempt.
      boolean inOne =
          transactionPerPoll && records.count() > 1 && failing.isEmpty() && closing.getCount() > 0;
      if (!inOne || !handleInOneTransaction(records)) {
        handleEach(records);
      }
    } catch (RuntimeException | Error e) {
      offsets.commitQuietly(e);
      throw e;
    }
    if (!records.isEmpty()) {
      log.debug("Kafka inbox of handler {} handled a poll of {} records", handler, records.count());
    }
    offsets.commit();
  }

  /**
   * Handles all of a poll's records in one transaction: their inbox records first, in event id
   * order, then their works in the poll's order ({@link Inbox#handleAll}), so two such transactions
   * over the same events wait for each other rather than deadlock. False when any of them failed,
   * or {@link #close()} came before the last work: then the transaction rolled back, nothing of the
   * poll counts as handled, and the caller goes record by record (which dead-letters a poison
   * record, retries a failing one on its own, and when closing seeks each partition back).
   */
  private boolean handleInOneTransaction(ConsumerRecords<byte[], byte[]> records) {
    List<ConsumerRecord<byte[], byte[]>> all = new ArrayList<>(records.count());
    records.forEach(all::add);
    // The records of works not run yet are taken too: a close() between two works cannot commit
    // what was handled without committing those records as handled, so it rolls the poll back.
    InboxWork<T> unlessClosing =
        (tx, message) -> {
          if (closing.getCount() == 0) {
            throw new Closing();
          }
          work.run(tx, message);
        };
    List<HandleOutcome> outcomes;
    try {
      outcomes =
          transactions.inTransaction(
              tx -> {
                List<InboxMessage> read = new ArrayList<>(all.size());
                for (ConsumerRecord<byte[], byte[]> record : all) {
                  read.add(messages.read(record));
                }
                return inbox.handleAll(tx, read, handler, unlessClosing);
              });
    } catch (Closing e) {
      log.info(
          "Kafka inbox of handler {} closing: rolled back a poll of {} records handled in one"
              + " transaction; the partitions' next reader handles them",
          handler,
          all.size());
      return false;
    } catch (RuntimeException e) {
      log.info(
          "Kafka inbox of handler {} rolled back a poll of {} records handled in one transaction"
              + " ({}); handling them one transaction each",
          handler,
          all.size(),
          e.toString());
      return false;
    }
    for (int i = 0; i < outcomes.size(); i++) {
      afterCommit.committed(all.get(i), outcomes.get(i));
      counts.count(outcomes.get(i));
      offsets.handled(all.get(i));
    }
    return true;
  }

  /** Thrown by a work of a poll handled in one transaction once {@link #close()} was called. */
  private static final class Closing extends RuntimeException {
    Closing() {
      super("closing", null, false, false);
    }
  }

  private void handleEach(ConsumerRecords<byte[], byte[]> records) {
    for (TopicPartition partition : records.partitions()) {
      for (ConsumerRecord<byte[], byte[]> record : records.records(partition)) {
        if (closing.getCount() == 0) {
          // Closing: stop at the next record, not after the whole poll.
          consumer.seek(partition, record.offset());
          break;
        }
        if (!handle(partition, record)) {
          // Retry from here on the next poll; the records behind it wait, in order.
          consumer.seek(partition, record.offset());
          break;
        }
        offsets.handled(record);
      }
    }
  }

  /** Handles one record in a transaction of its own; false when it must be tried again. */
  private boolean handle(TopicPartition partition, ConsumerRecord<byte[], byte[]> record) {
    HandleOutcome outcome;
    try {
      InboxMessage message = messages.read(record);
      outcome = inbox.handle(message, handler, work);
    } catch (PoisonMessageException e) {
      return invalid(partition, record, e);
    } catch (InboxRecordHeldException e) {
      return held(partition, record, e);
    } catch (RuntimeException e) {
      return failed(partition, record, e);
    }
    afterCommit.committed(record, outcome);
    counts.count(outcome);
    failing.remove(partition);
    log.trace("{}: {} {}", handler, KafkaMessages.origin(record), outcome);
    return true;
  }

  private boolean invalid(
      TopicPartition partition, ConsumerRecord<byte[], byte[]> record, PoisonMessageException e) {
    if (invalidRecords == InvalidRecordPolicy.DEAD_LETTER) {
      String topic = deadLetters.topicFor(record.topic());
      try {
        deadLetters.send(record, e);
      } catch (InboxException notSent) {
        return failed(partition, record, notSent);
      }
      counts.countRejected();
      failing.remove(partition);
      log.error(
          "Kafka inbox of handler {} sent {} to dead-letter topic {} without handling it: {}",
          handler,
          KafkaMessages.origin(record),
          topic,
          e.getMessage());
      return true;
    }
    counts.countRejected();
    if (invalidRecords == InvalidRecordPolicy.FAIL) {
      throw new InboxException(
          "Kafka inbox of handler '%s' stops at %s (invalidRecords=FAIL): %s"
              .formatted(handler, KafkaMessages.origin(record), e.getMessage()),
          e);
    }
    log.error(
        "Kafka inbox of handler {} skips {} without handling it (invalidRecords=SKIP): {}",
        handler,
        KafkaMessages.origin(record),
        e.getMessage());
    return true;
  }

  private boolean failed(
      TopicPartition partition, ConsumerRecord<byte[], byte[]> record, RuntimeException e) {
    counts.countFailure();
    FailedRecord before = failing.get(partition);
    int failures = before != null && before.offset() == record.offset() ? before.failures() + 1 : 1;
    if (failures >= maxAttempts) {
      throw new InboxException(
          ("Kafka inbox of handler '%s' gave up on %s after %d attempts; its offset is not"
                  + " committed, so the consumer group meets it again after a restart")
              .formatted(handler, KafkaMessages.origin(record), failures),
          e);
    }
    failing.put(partition, new FailedRecord(record.offset(), failures));
    log.warn(
        "Kafka inbox of handler {} failed on {} (attempt {} of {}); retrying in {} ms",
        handler,
        KafkaMessages.origin(record),
        failures,
        maxAttempts,
        retryBackoff.toMillis(),
        e);
    try {
      closing.await(retryBackoff.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw new InterruptException(interrupted);
    }
    return false;
  }

  /**
   * Another open transaction holds the record's inbox record (the pool's {@code lock_timeout} or
   * {@code statement_timeout} ran out while that transaction handles the same event): not a failure
   * of the record, so not counted toward {@code maxAttempts} (counted in {@code
   * counts().failures()} all the same). Tried again from its offset after {@code retryBackoff}, at
   * least {@link #MIN_HELD_RECORD_PAUSE}: once that transaction ended, the record is handled, or
   * skipped when it committed the event.
   */
  private boolean held(
      TopicPartition partition, ConsumerRecord<byte[], byte[]> record, InboxRecordHeldException e) {
    counts.countFailure();
    FailedRecord before = failing.get(partition);
    boolean again = before != null && before.offset() == record.offset();
    failing.put(partition, new FailedRecord(record.offset(), again ? before.failures() : 0));
    long pause = Math.max(retryBackoff.toMillis(), MIN_HELD_RECORD_PAUSE.toMillis());
    if (again) {
      log.debug(
          "Kafka inbox of handler {}: the inbox record of {} is still held; retrying in {} ms",
          handler,
          KafkaMessages.origin(record),
          pause);
    } else {
      log.info(
          "Kafka inbox of handler {}: another open transaction holds the inbox record of {} (it"
              + " handles the same event, or locks the table); retrying every {} ms until it ends,"
              + " without counting it toward maxAttempts ({})",
          handler,
          KafkaMessages.origin(record),
          pause,
          e.getMessage());
    }
    try {
      closing.await(pause, TimeUnit.MILLISECONDS);
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw new InterruptException(interrupted);
    }
    return false;
  }

  /** Settings of a {@link KafkaInboxConsumer}; {@link #build()} validates them. */
  public static final class Builder<T> {
    private final Inbox<T> inbox;
    private Map<String, Object> consumerConfig;
    private List<String> topics;
    private String handler;
    private InboxWork<T> work;
    private RecordHeaders headers = RecordHeaders.defaults();
    private InvalidRecordPolicy invalidRecords = InvalidRecordPolicy.DEAD_LETTER;
    private String deadLetterTopic;
    private Map<String, Object> deadLetterProducerConfig = Map.of();
    private Duration deadLetterTimeout = Duration.ofSeconds(30);
    private boolean transactionPerPoll;
    private Duration pollTimeout = Duration.ofSeconds(1);
    private Duration retryBackoff = Duration.ofSeconds(1);
    private int maxAttempts = 10;

    private Builder(Inbox<T> inbox) {
      if (inbox == null) {
        throw new IllegalArgumentException("inbox must not be null");
      }
      this.inbox = inbox;
    }

    /**
     * Kafka consumer settings; {@code bootstrap.servers} and {@code group.id} are required. The
     * loop sets {@code enable.auto.commit=false} (it commits itself, after the database) and byte
     * array deserializers; {@code auto.offset.reset} defaults to {@code earliest}, so a new group
     * misses nothing.
     */
    public Builder<T> consumerConfig(Map<String, Object> config) {
      this.consumerConfig = config == null ? null : new HashMap<>(config);
      return this;
    }

    public Builder<T> topics(Collection<String> topics) {
      this.topics = topics == null ? null : List.copyOf(topics);
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

    /** The connector's header names; default prefix {@code relaybus-}. */
    public Builder<T> headers(RecordHeaders headers) {
      this.headers = headers;
      return this;
    }

    /**
     * What to do with a record that can never be handled; default {@link
     * InvalidRecordPolicy#DEAD_LETTER}.
     */
    public Builder<T> invalidRecords(InvalidRecordPolicy policy) {
      this.invalidRecords = policy;
      return this;
    }

    /**
     * The topic poison records go to under {@link InvalidRecordPolicy#DEAD_LETTER}; default {@code
     * <topic>.DLT} for each consumed topic, as Spring Kafka names them. Create it (a broker with
     * {@code auto.create.topics.enable=false} does not): until a send succeeds the record is
     * retried as a failure, and the loop stops after {@code maxAttempts}. {@link #build()} refuses
     * a name Kafka would refuse (more than 249 characters, or others than {@code [a-zA-Z0-9._-]}),
     * also a default {@code <topic>.DLT} that would be one: a consumed topic of more than 245.
     */
    public Builder<T> deadLetterTopic(String topic) {
      this.deadLetterTopic = topic;
      return this;
    }

    /**
     * Settings of the dead-letter producer, over the defaults: {@code bootstrap.servers} and the
     * {@code security.*}, {@code sasl.*} and {@code ssl.*} settings of {@link #consumerConfig},
     * {@code enable.idempotence=true}, {@code max.block.ms=10000}, {@code
     * delivery.timeout.ms=30000}. {@code acks} is always {@code all}.
     */
    public Builder<T> deadLetterProducerConfig(Map<String, Object> config) {
      this.deadLetterProducerConfig = config == null ? null : new HashMap<>(config);
      return this;
    }

    /** Longest wait for the broker to acknowledge a dead-lettered copy, default 30 s. */
    public Builder<T> deadLetterTimeout(Duration timeout) {
      this.deadLetterTimeout = timeout;
      return this;
    }

    /**
     * Handle all records of a poll in one database transaction (default false: one per record).
     * Fewer commits, so more records per second; a poll in which any record fails rolls back as a
     * whole and is handled again one transaction per record. Keep {@code max.poll.records} to what
     * one transaction may hold (locks on every event row of the poll until the commit).
     */
    public Builder<T> transactionPerPoll(boolean enabled) {
      this.transactionPerPoll = enabled;
      return this;
    }

    /** Longest a poll waits for records, default 1 s; {@link #close()} wakes it at once. */
    public Builder<T> pollTimeout(Duration timeout) {
      this.pollTimeout = timeout;
      return this;
    }

    /** Wait before a failed record is tried again, default 1 s. */
    public Builder<T> retryBackoff(Duration backoff) {
      this.retryBackoff = backoff;
      return this;
    }

    /** Attempts at one record before the loop stops, default 10. */
    public Builder<T> maxAttempts(int attempts) {
      this.maxAttempts = attempts;
      return this;
    }

    public KafkaInboxConsumer<T> build() {
      validate();
      Map<String, Object> config = new HashMap<>(consumerConfig);
      config.put("enable.auto.commit", "false");
      config.putIfAbsent("auto.offset.reset", "earliest");
      config.putIfAbsent("client.id", "relaybus-inbox-" + handler);
      return new KafkaInboxConsumer<>(
          this,
          new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer()),
          deadLetterProducer(),
          (record, outcome) -> {});
    }

    // visible for testing
    KafkaInboxConsumer<T> build(Consumer<byte[], byte[]> consumer, AfterCommit afterCommit) {
      validate();
      return new KafkaInboxConsumer<>(this, consumer, deadLetterProducer(), afterCommit);
    }

    private Producer<byte[], byte[]> deadLetterProducer() {
      if (invalidRecords != InvalidRecordPolicy.DEAD_LETTER) {
        return null;
      }
      Map<String, Object> config =
          DeadLetters.producerConfig(consumerConfig, deadLetterProducerConfig, handler);
      return new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer());
    }

    private void validate() {
      io.relaybus.store.Validation.handler(handler);
      require(work != null, "work must be set");
      require(topics != null && !topics.isEmpty(), "topics must name at least one topic");
      require(headers != null, "headers must not be null");
      require(
          invalidRecords != null, "invalidRecords must be DEAD_LETTER, SKIP or FAIL, but was null");
      require(
          deadLetterTopic == null || !deadLetterTopic.isBlank(),
          "deadLetterTopic must not be blank, but was '" + deadLetterTopic + "'");
      require(
          deadLetterTopic == null || topics == null || !topics.contains(deadLetterTopic),
          "deadLetterTopic must not be one of the consumed topics, but was '"
              + deadLetterTopic
              + "': its poison records would come back forever");
      if (invalidRecords == InvalidRecordPolicy.DEAD_LETTER) {
        // A name Kafka refuses fails every send: each poison record would stop the loop.
        if (deadLetterTopic != null) {
          require(
              legalTopic(deadLetterTopic),
              "deadLetterTopic '%s' is a name Kafka refuses: %s"
                  .formatted(deadLetterTopic, TOPIC_NAME_RULE));
        } else if (topics != null) {
          for (String consumed : topics) {
            String dead = DeadLetters.defaultTopic(consumed);
            require(
                legalTopic(dead),
                "the dead-letter topic of topic '%s' would be '%s', which Kafka refuses: %s (it has %d); set deadLetterTopic"
                    .formatted(consumed, dead, TOPIC_NAME_RULE, dead.length()));
          }
        }
      }
      require(deadLetterProducerConfig != null, "deadLetterProducerConfig must not be null");
      Object acks = deadLetterProducerConfig.get("acks");
      require(
          acks == null || "all".equals(String.valueOf(acks)) || "-1".equals(String.valueOf(acks)),
          "deadLetterProducerConfig acks must be all or unset, but was "
              + acks
              + ": a record is committed past only once its dead-lettered copy is safe");
      require(
          positive(deadLetterTimeout),
          "deadLetterTimeout must be positive, but was " + deadLetterTimeout);
      require(positive(pollTimeout), "pollTimeout must be positive, but was " + pollTimeout);
      require(
          retryBackoff != null && !retryBackoff.isNegative(),
          "retryBackoff must be zero or positive, but was " + retryBackoff);
      require(maxAttempts > 0, "maxAttempts must be positive, but was " + maxAttempts);
      require(consumerConfig != null, "consumerConfig must be set");
      require(
          consumerConfig.get("group.id") != null,
          "consumerConfig must set group.id: offsets are committed for the group");
      Object autoCommit = consumerConfig.get("enable.auto.commit");
      require(
          autoCommit == null || "false".equals(String.valueOf(autoCommit)),
          "consumerConfig enable.auto.commit must be false or unset, but was "
              + autoCommit
              + ": the loop commits offsets itself, after the database transaction");
    }

    private static final String TOPIC_NAME_RULE =
        "a topic name is 1 to 249 characters of [a-zA-Z0-9._-], not '.' or '..'";

    /** Kafka's rule for a topic name ({@code org.apache.kafka.common.internals.Topic}). */
    private static boolean legalTopic(String name) {
      return name.length() <= 249
          && !name.equals(".")
          && !name.equals("..")
          && name.matches("[a-zA-Z0-9._-]+");
    }

    private static boolean positive(Duration d) {
      return d != null && !d.isNegative() && !d.isZero();
    }

    private static void require(boolean ok, String message) {
      if (!ok) {
        throw new IllegalArgumentException(message);
      }
    }
  }
}
