package io.relaybus.inbox.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxException;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.PoisonMessageException;
import io.relaybus.inbox.testing.Ledger;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.Test;

/**
 * Poison records and one transaction per poll on Kafka, against a real broker and a real
 * PostgreSQL: poison is dead-lettered with its reason and origin, committed past, never re-handled,
 * never lost; a transient failure is retried, not dead-lettered; a poll in one transaction falls
 * back to one transaction per record when any record fails.
 */
class KafkaInboxDeadLetterTest extends KafkaInboxFixture {
  KafkaInboxDeadLetterTest() {
    super("ledger_kafka_dlt", "payments-", "inbox-dlt-", 1);
  }

  private static String header(ConsumerRecord<byte[], byte[]> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
  }

  private static List<String> headerNames(ConsumerRecord<byte[], byte[]> record) {
    List<String> names = new ArrayList<>();
    record.headers().forEach(h -> names.add(h.key()));
    return names;
  }

  /**
   * Symptom: a record whose event id held U+0000, which no PostgreSQL text can store, failed at
   * every attempt, a failure and not poison, so the consumer stopped at its offset on every
   * restart. Now it breaks the outbox's rules for an event, is poison, and goes to the DLT.
   */
  @Test
  void recordWhoseEventIdHoldsANulIsDeadLetteredAndTheRecordsBehindItAreHandled() {
    TestKafka.createTopic(topic + ".DLT", 1);
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(topic, "order-1", "e-\u0000-2", "{\"n\":2}");
    TestKafka.send(topic, "order-1", "e-3", "{\"n\":3}");
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").maxAttempts(3).build();

    CompletableFuture<Void> done = start(consumer, "inbox-nul");
    await().atMost(TIMEOUT).until(() -> done.isDone() || consumer.counts().handled() == 2);

    assertThat(done).as("the consumer loop").isNotDone();
    assertThat(consumer.counts().handled()).isEqualTo(2);
    ledger.assertRanOnce("e-3", "billing.charge");
    await().atMost(TIMEOUT).until(() -> TestKafka.read(topic + ".DLT").size() == 1);
    assertThat(header(TestKafka.read(topic + ".DLT").get(0), "relaybus-dlt-reason"))
        .contains("must not contain the character U+0000");
  }

  /**
   * Regression (issue 16): by default a record without an event id stopped the consumer at its
   * offset on every restart. Now it goes to {@code <topic>.DLT} with its reason and origin, the
   * offset is committed past it and the records behind it are handled, once, also after a restart.
   */
  @Test
  void recordWithoutEventIdGoesToTheDeadLetterTopicByDefaultAndTheConsumerGoesOn() {
    TestKafka.createTopic(topic + ".DLT", 1);
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(topic, "order-1", null, "{\"n\":\"poison\"}");
    TestKafka.send(topic, "order-1", "e-2", "{\"n\":2}");
    ConsumerRecord<byte[], byte[]> original = TestKafka.read(topic).get(1);
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").build();

    start(consumer, "inbox-dlt");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 2);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 3L);

    List<ConsumerRecord<byte[], byte[]>> dead = TestKafka.read(topic + ".DLT");
    assertThat(dead).hasSize(1);
    ConsumerRecord<byte[], byte[]> record = dead.get(0);
    assertThat(new String(record.key(), StandardCharsets.UTF_8)).isEqualTo("order-1");
    assertThat(new String(record.value(), StandardCharsets.UTF_8)).isEqualTo("{\"n\":\"poison\"}");
    assertThat(headerNames(record))
        .containsExactly(
            "traceparent",
            "relaybus-event-type",
            "relaybus-content-type",
            "relaybus-handler",
            "relaybus-attempt",
            "relaybus-dlt-reason",
            "relaybus-dlt-exception",
            "relaybus-dlt-original-topic",
            "relaybus-dlt-original-partition",
            "relaybus-dlt-original-offset",
            "relaybus-dlt-original-timestamp",
            "relaybus-dlt-original-consumer-group",
            "relaybus-dlt-handler");
    assertThat(header(record, "traceparent")).isEqualTo("00-null");
    assertThat(header(record, "relaybus-dlt-reason"))
        .startsWith("record kafka " + topic + "-0@1 has no 'relaybus-event-id' header");
    assertThat(header(record, "relaybus-dlt-exception"))
        .isEqualTo("io.relaybus.inbox.PoisonMessageException");
    assertThat(header(record, "relaybus-dlt-original-topic")).isEqualTo(topic);
    assertThat(header(record, "relaybus-dlt-original-partition")).isEqualTo("0");
    assertThat(header(record, "relaybus-dlt-original-offset")).isEqualTo("1");
    assertThat(header(record, "relaybus-dlt-original-timestamp"))
        .isEqualTo(Long.toString(original.timestamp()));
    assertThat(header(record, "relaybus-dlt-original-consumer-group")).isEqualTo(group);
    assertThat(header(record, "relaybus-dlt-handler")).isEqualTo("billing.charge");
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(consumer.counts().failures()).isZero();
    ledger.assertRanOnce("e-1", "billing.charge");
    ledger.assertRanOnce("e-2", "billing.charge");

    consumer.close();
    TestKafka.send(topic, "order-1", "e-3", "{\"n\":3}");
    KafkaInboxConsumer<Connection> restarted = builder("billing.charge").build();
    start(restarted, "inbox-dlt-restarted");
    await().atMost(TIMEOUT).until(() -> restarted.counts().handled() == 1);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 4L);

    assertThat(restarted.counts().rejected()).isZero();
    assertThat(restarted.counts().skipped()).isZero();
    assertThat(TestKafka.read(topic + ".DLT")).hasSize(1);
    assertThat(ledger.committed())
        .containsOnly(
            Map.entry("e-1/billing.charge", 1),
            Map.entry("e-2/billing.charge", 1),
            Map.entry("e-3/billing.charge", 1));
    assertThat(ledger.totalInvocations()).isEqualTo(3);
  }

  @Test
  void workThrowingPoisonMessageExceptionGoesToTheDeadLetterTopicAndNothingOfItCommits() {
    TestKafka.createTopic(topic + ".DLT", 1);
    for (int i = 0; i < 3; i++) {
      TestKafka.send(topic, "order-1", "e-" + i, "{\"n\":" + i + "}");
    }
    InboxWork<Connection> ledgerWork = ledger.work("billing.charge");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .work(
                (tx, message) -> {
                  ledgerWork.run(tx, message);
                  if (message.eventId().equals("e-1")) {
                    throw new PoisonMessageException("card number of e-1 is malformed");
                  }
                })
            .build();

    start(consumer, "inbox-dlt-work");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 2);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 3L);

    List<ConsumerRecord<byte[], byte[]>> dead = TestKafka.read(topic + ".DLT");
    assertThat(dead).hasSize(1);
    assertThat(header(dead.get(0), "relaybus-event-id")).isEqualTo("e-1");
    assertThat(header(dead.get(0), "relaybus-dlt-reason"))
        .isEqualTo("card number of e-1 is malformed");
    assertThat(header(dead.get(0), "relaybus-dlt-exception"))
        .isEqualTo(PoisonMessageException.class.getName());
    assertThat(header(dead.get(0), "relaybus-dlt-original-offset")).isEqualTo("1");
    assertThat(new String(dead.get(0).value(), StandardCharsets.UTF_8)).isEqualTo("{\"n\":1}");
    assertThat(ledger.invocations("e-1", "billing.charge")).isEqualTo(1);
    assertThat(ledger.committed())
        .containsOnly(Map.entry("e-0/billing.charge", 1), Map.entry("e-2/billing.charge", 1));
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(consumer.counts().failures()).isZero();
  }

  /**
   * The database refusing the inbox's write (here: another transaction holds the events table
   * locked and the consumer's lock_timeout runs out, SQLState 55P03) is a transient failure: the
   * record is retried from its offset until the database answers, never dead-lettered.
   */
  @Test
  void transientDatabaseFailureIsRetriedNotDeadLettered() throws Exception {
    store.close();
    store = TestDatabase.freshStore("&options=-c%20lock_timeout%3D200");
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), "ledger_kafka_dlt");
    TestKafka.createTopic(topic + ".DLT", 1);
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").maxAttempts(1000).build();

    try (Connection locker = TestDatabase.dataSource().getConnection();
        Statement lock = locker.createStatement()) {
      locker.setAutoCommit(false);
      lock.execute("LOCK TABLE " + store.tableName("events") + " IN ACCESS EXCLUSIVE MODE");
      start(consumer, "inbox-db-down");
      await().atMost(TIMEOUT).until(() -> consumer.counts().failures() >= 3);
      assertThat(consumer.counts().handled()).isZero();
      assertThat(consumer.counts().rejected()).isZero();
      locker.rollback();
    }
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 1L);

    assertThat(consumer.counts().rejected()).isZero();
    assertThat(TestKafka.read(topic + ".DLT")).isEmpty();
    ledger.assertRanOnce("e-1", "billing.charge");
  }

  /**
   * A poison record is committed past only once its dead-lettered copy was acknowledged: with no
   * dead-letter topic (the broker does not create topics) the send fails, the record counts as a
   * failure, the loop stops with the offset on the poison record, and once the topic exists a
   * restart dead-letters it.
   */
  @Test
  void poisonRecordIsNotCommittedPastUntilTheDeadLetterTopicAcknowledgedIt() {
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    TestKafka.send(topic, "order-1", null, "{\"n\":\"poison\"}");
    TestKafka.send(topic, "order-1", "e-2", "{\"n\":2}");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .maxAttempts(2)
            .deadLetterProducerConfig(Map.of("max.block.ms", "1000"))
            .build();

    CompletableFuture<Void> run = start(consumer, "inbox-no-dlt");
    await().atMost(TIMEOUT).until(run::isDone);

    assertThat(run)
        .failsWithin(0, TimeUnit.SECONDS)
        .withThrowableOfType(ExecutionException.class)
        .havingCause()
        .isInstanceOf(InboxException.class)
        .withMessageContaining("gave up on kafka " + topic + "-0@1 after 2 attempts")
        .havingCause()
        .withMessageContaining(
            "could not dead-letter kafka " + topic + "-0@1 to topic '" + topic + ".DLT'");
    assertThat(consumer.counts().failures()).isEqualTo(2);
    assertThat(consumer.counts().rejected()).isZero();
    assertThat(TestKafka.committed(group, topic, 0)).isEqualTo(1L);
    assertThat(ledger.committed()).containsOnly(Map.entry("e-1/billing.charge", 1));

    TestKafka.createTopic(topic + ".DLT", 1);
    KafkaInboxConsumer<Connection> restarted = builder("billing.charge").build();
    start(restarted, "inbox-dlt-created");
    await().atMost(TIMEOUT).until(() -> restarted.counts().handled() == 1);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 3L);

    assertThat(TestKafka.read(topic + ".DLT")).hasSize(1);
    assertThat(restarted.counts().rejected()).isEqualTo(1);
    assertThat(ledger.committed())
        .containsOnly(Map.entry("e-1/billing.charge", 1), Map.entry("e-2/billing.charge", 1));
  }

  /**
   * A poison record that fits Kafka's limits (the producer's default max.request.size, 1 MiB) but
   * whose dead-letter copy, with the relaybus-dlt-* headers added, does not: the send fails with
   * RecordTooLargeException at every attempt, so the loop stops on it after maxAttempts, and on
   * every restart. A deterministic failure of the copy stalls the partition for good.
   */
  @Test
  void poisonRecordNearTheSizeLimitIsDeadLetteredAndTheRecordsBehindItAreHandled() {
    TestKafka.createTopic(topic + ".DLT", 1);
    TestKafka.send(topic, "order-1", null, "x".repeat(1_048_000));
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").maxAttempts(3).build();

    CompletableFuture<Void> done = start(consumer, "inbox-dlt-large");
    await().atMost(TIMEOUT).until(() -> done.isDone() || consumer.counts().handled() == 1);

    assertThat(done).as("the consumer loop").isNotDone();
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(consumer.counts().rejected()).isEqualTo(1);
  }

  /**
   * A consumer whose database is not UTF-8 (here LATIN1, which setup() accepts) cannot store a key
   * holding a character outside its encoding: PostgreSQL refuses the inbox record with 22P05 at
   * every attempt. Like U+0000 it is the record's content, so no retry can succeed; as a failure,
   * not poison, the loop stops on it after maxAttempts, and on every restart.
   */
  @Test
  void recordThatTheDatabaseEncodingCannotStoreIsDeadLetteredNotRetriedForever() throws Exception {
    try (Connection c = TestDatabase.dataSource().getConnection();
        Statement s = c.createStatement();
        ResultSet exists =
            c.createStatement()
                .executeQuery("SELECT 1 FROM pg_database WHERE datname = 'inbox_latin1'")) {
      if (!exists.next()) {
        s.execute(
            "CREATE DATABASE inbox_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
                + " TEMPLATE template0");
      }
    }
    store.close();
    store =
        io.relaybus.store.postgres.PostgresOutboxStore.builder()
            .jdbcUrl(
                io.relaybus.store.testing.EmbeddedPostgres17.server()
                    .getJdbcUrl("postgres", "inbox_latin1"))
            .tablePrefix("t" + System.nanoTime() % 1_000_000 + "_")
            .poolSize(4)
            .build();
    store.setup();
    inbox = Inbox.postgres(store);
    ledger = new Ledger(store.dataSource(), "ledger_kafka_dlt");
    TestKafka.createTopic(topic + ".DLT", 1);
    TestKafka.send(topic, "order-\u20ac", "e-euro", "{\"n\":1}");
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":2}");
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").maxAttempts(3).build();

    CompletableFuture<Void> done = start(consumer, "inbox-latin1");
    await().atMost(TIMEOUT).until(() -> done.isDone() || consumer.counts().handled() == 1);

    assertThat(done).as("the consumer loop").isNotDone();
    ledger.assertRanOnce("e-1", "billing.charge");
    assertThat(TestKafka.read(topic + ".DLT")).hasSize(1);
  }

  /**
   * The event id header is decoded as UTF-8 with replacement: ids that are not UTF-8 (here the
   * ISO-8859-1 bytes of "caf\u00e9-1" and "caf\u00e8-1", as a non-Java producer writes them) both
   * become "caf\ufffd-1", so the second event is taken for a redelivery of the first and silently
   * skipped, its offset committed. An id that is not well-formed UTF-8 must be poison, never
   * merged.
   */
  @Test
  void eventIdsThatAreNotUtf8AreNotMergedIntoOneEvent() throws Exception {
    TestKafka.createTopic(topic + ".DLT", 1);
    java.util.Map<String, Object> config = new java.util.HashMap<>();
    config.put("bootstrap.servers", TestKafka.bootstrapServers());
    config.put("acks", "all");
    try (org.apache.kafka.clients.producer.KafkaProducer<byte[], byte[]> producer =
        new org.apache.kafka.clients.producer.KafkaProducer<>(
            config,
            new org.apache.kafka.common.serialization.ByteArraySerializer(),
            new org.apache.kafka.common.serialization.ByteArraySerializer())) {
      for (String id : List.of("caf\u00e9-1", "caf\u00e8-1")) {
        org.apache.kafka.clients.producer.ProducerRecord<byte[], byte[]> record =
            new org.apache.kafka.clients.producer.ProducerRecord<>(
                topic,
                "order-1".getBytes(StandardCharsets.UTF_8),
                "{}".getBytes(StandardCharsets.UTF_8));
        record.headers().add("relaybus-event-id", id.getBytes(StandardCharsets.ISO_8859_1));
        record
            .headers()
            .add("relaybus-event-type", "order.placed".getBytes(StandardCharsets.UTF_8));
        producer.send(record).get();
      }
    }
    KafkaInboxConsumer<Connection> consumer = builder("billing.charge").build();

    start(consumer, "inbox-latin1-ids");
    await()
        .atMost(TIMEOUT)
        .until(
            () ->
                consumer.counts().handled()
                        + consumer.counts().skipped()
                        + consumer.counts().rejected()
                    == 2);

    assertThat(consumer.counts().skipped())
        .as("records taken for a redelivery of another event: %s", consumer.counts())
        .isZero();
  }

  @Test
  void deadLetterTopicIsConfigurable() {
    String deadLetterTopic = topic + "-poison";
    TestKafka.createTopic(deadLetterTopic, 2);
    TestKafka.send(topic, "order-1", null, "{\"n\":\"poison\"}");
    TestKafka.send(topic, "order-1", "e-1", "{\"n\":1}");
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge").deadLetterTopic(deadLetterTopic).build();

    start(consumer, "inbox-dlt-named");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 1);

    List<ConsumerRecord<byte[], byte[]>> dead = TestKafka.read(deadLetterTopic);
    assertThat(dead).hasSize(1);
    assertThat(header(dead.get(0), "relaybus-dlt-original-offset")).isEqualTo("0");
    assertThat(consumer.counts().rejected()).isEqualTo(1);
  }

  /** The transaction each invocation of the work ran in. */
  private InboxWork<Connection> recordingTransactions(
      Set<Long> transactions, InboxWork<Connection> work) {
    return (tx, message) -> {
      try (Statement s = tx.createStatement();
          ResultSet rs = s.executeQuery("SELECT txid_current()")) {
        rs.next();
        transactions.add(rs.getLong(1));
      }
      work.run(tx, message);
    };
  }

  @Test
  void transactionPerPollHandlesAPollsRecordsInOneTransaction() {
    for (int i = 0; i < 20; i++) {
      TestKafka.send(topic, "order-1", "e-" + i, "{\"n\":" + i + "}");
    }
    Set<Long> transactions = ConcurrentHashMap.newKeySet();
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .transactionPerPoll(true)
            .work(recordingTransactions(transactions, ledger.work("billing.charge")))
            .build();

    start(consumer, "inbox-batch");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 20);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 20L);

    assertThat(transactions).hasSize(1);
    assertThat(ledger.totalInvocations()).isEqualTo(20);
    Map<String, Integer> committed = ledger.committed();
    assertThat(committed).hasSize(20);
    assertThat(committed.values()).containsOnly(1);
    assertThat(consumer.counts().skipped()).isZero();
  }

  @Test
  void poisonRecordInAPollHandledInOneTransactionIsDeadLetteredAndTheOthersRunOnce() {
    TestKafka.createTopic(topic + ".DLT", 1);
    for (int i = 0; i < 10; i++) {
      TestKafka.send(topic, "order-1", "e-" + i, "{\"n\":" + i + "}");
    }
    InboxWork<Connection> ledgerWork = ledger.work("billing.charge");
    Set<Long> transactions = ConcurrentHashMap.newKeySet();
    KafkaInboxConsumer<Connection> consumer =
        builder("billing.charge")
            .transactionPerPoll(true)
            .work(
                recordingTransactions(
                    transactions,
                    (tx, message) -> {
                      ledgerWork.run(tx, message);
                      if (message.eventId().equals("e-5")) {
                        throw new PoisonMessageException("e-5 can never succeed");
                      }
                    }))
            .build();

    start(consumer, "inbox-batch-poison");
    await().atMost(TIMEOUT).until(() -> consumer.counts().handled() == 9);
    await().atMost(TIMEOUT).until(() -> TestKafka.committed(group, topic, 0) == 10L);

    List<ConsumerRecord<byte[], byte[]>> dead = TestKafka.read(topic + ".DLT");
    assertThat(dead).hasSize(1);
    assertThat(header(dead.get(0), "relaybus-event-id")).isEqualTo("e-5");
    assertThat(header(dead.get(0), "relaybus-dlt-original-offset")).isEqualTo("5");
    Map<String, Integer> committed = ledger.committed();
    assertThat(committed).hasSize(9).doesNotContainKey("e-5/billing.charge");
    assertThat(committed.values()).containsOnly(1);
    // Once in the rolled-back transaction of the poll, once on its own.
    assertThat(ledger.invocations("e-5", "billing.charge")).isEqualTo(2);
    assertThat(consumer.counts().rejected()).isEqualTo(1);
    assertThat(consumer.counts().skipped()).isZero();
    assertThat(consumer.counts().failures()).isZero();
  }

  /**
   * A dead-letter topic Kafka refuses by its name made every poison record a failure: a consumed
   * topic of 246 to 249 characters (Kafka allows 249) has a default {@code <topic>.DLT} of 250 to
   * 253, whose send fails with {@code InvalidTopicException} at every attempt, so the loop stopped
   * at the first poison record after {@code maxAttempts}, on every restart. The same for a {@code
   * deadLetterTopic} of characters Kafka does not allow. Both are refused at build, naming the
   * topic and the rule.
   */
  @Test
  void builderRejectsADeadLetterTopicWhoseNameKafkaRefuses() {
    String longest = "t".repeat(246);
    assertThatThrownBy(() -> builder("billing.charge").topics(List.of(longest)).build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "the dead-letter topic of topic '"
                + longest
                + "' would be '"
                + longest
                + ".DLT', which Kafka refuses: a topic name is 1 to 249 characters of"
                + " [a-zA-Z0-9._-], not '.' or '..' (it has 250); set deadLetterTopic");
    assertThatThrownBy(() -> builder("billing.charge").deadLetterTopic("billing poison").build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "deadLetterTopic 'billing poison' is a name Kafka refuses: a topic name is 1 to 249"
                + " characters of [a-zA-Z0-9._-], not '.' or '..'");
    // Other policies send nothing to a dead-letter topic.
    builder("billing.charge")
        .topics(List.of(longest))
        .invalidRecords(InvalidRecordPolicy.SKIP)
        .build()
        .close();
  }

  @Test
  void builderRejectsADeadLetterTopicThatIsConsumedAndAcksOtherThanAll() {
    assertThatThrownBy(() -> builder("billing.charge").deadLetterTopic(topic).build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage(
            "deadLetterTopic must not be one of the consumed topics, but was '"
                + topic
                + "': its poison records would come back forever");
    assertThatThrownBy(
            () -> builder("billing.charge").deadLetterProducerConfig(Map.of("acks", "1")).build())
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageStartingWith("deadLetterProducerConfig acks must be all or unset, but was 1");
  }
}
