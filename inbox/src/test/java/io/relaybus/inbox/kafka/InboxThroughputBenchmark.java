package io.relaybus.inbox.kafka;

import io.relaybus.inbox.Inbox;
import io.relaybus.inbox.InboxWork;
import io.relaybus.inbox.testing.TestDatabase;
import io.relaybus.inbox.testing.TestKafka;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.relaybus.store.testing.Machine;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import javax.sql.DataSource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Benchmark, not a test (run on demand, see docs/benchmarks.md): messages per second of the Kafka
 * inbox beside a plain consumer loop doing the same work, on one topic, one broker, one PostgreSQL,
 * in one run.
 *
 * <ul>
 *   <li><b>plain</b>: a {@code KafkaConsumer} loop that runs the work (one INSERT) in a transaction
 *       per record, then commits the poll's offsets; what a user writes without the inbox.
 *   <li><b>inbox per record</b>: {@link KafkaInboxConsumer} as built by default: the inbox record
 *       and the same INSERT in a transaction per record.
 *   <li><b>inbox per poll</b>: the same with {@code transactionPerPoll(true)}.
 *   <li><b>plain per poll</b>: the plain loop with one transaction per poll, for scale: what
 *       batching alone gains without the inbox.
 * </ul>
 *
 * Each variant reads the whole topic with a group of its own and writes to tables of its own (fresh
 * outbox tables, fresh work table), {@code max.poll.records=500} (Kafka's default) for all. The
 * clock runs from the first record's work to the moment all N are handled and committed to the
 * database; the group join is not counted. Every variant must write exactly N rows, else the run
 * fails.
 *
 * <p>Arguments: {@code [records, default 50000] [rounds, default 1]}.
 */
public final class InboxThroughputBenchmark {
  private static final int MAX_POLL_RECORDS = 500;
  private static final int VARIANTS = 4;

  private InboxThroughputBenchmark() {}

  private record Result(String variant, int records, double seconds) {
    double perSecond() {
      return records / seconds;
    }
  }

  public static void main(String[] args) throws Exception {
    int records = args.length > 0 ? Integer.parseInt(args[0]) : 50_000;
    int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 1;
    String start = "Started " + Instant.now() + ", load average " + loadAverage();
    String topic = "inbox-bench";
    TestKafka.createTopic(topic, 3);
    produce(topic, records);
    List<Result> results = new ArrayList<>();
    for (int round = 1; round <= rounds; round++) {
      results.add(plain(topic, records, round, false));
      results.add(inbox(topic, records, round, false));
      results.add(inbox(topic, records, round, true));
      results.add(plain(topic, records, round, true));
    }
    StringBuilder out = new StringBuilder();
    out.append(machine()).append('\n').append(start).append('\n');
    out.append("Ended ").append(Instant.now()).append(", load average ").append(loadAverage());
    out.append("\n\n| round | variant | records | seconds | messages/s | ÷ plain |\n");
    out.append("|---:|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < results.size(); i++) {
      Result r = results.get(i);
      double plain = results.get(i - i % VARIANTS).perSecond();
      out.append(
          "| %d | %s | %,d | %.1f | %,.0f | **%.2f×** |\n"
              .formatted(
                  i / VARIANTS + 1,
                  r.variant(),
                  r.records(),
                  r.seconds(),
                  r.perSecond(),
                  r.perSecond() / plain));
    }
    System.out.println(out);
    System.exit(0); // the embedded broker's threads
  }

  private static void produce(String topic, int records) throws Exception {
    Map<String, Object> config = new HashMap<>();
    config.put("bootstrap.servers", TestKafka.bootstrapServers());
    config.put("acks", "all");
    config.put("linger.ms", "5");
    byte[] payload =
        ("{\"amount\":1999,\"currency\":\"EUR\",\"note\":\"" + "x".repeat(150) + "\"}")
            .getBytes(StandardCharsets.UTF_8);
    try (KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer())) {
      for (int i = 0; i < records; i++) {
        ProducerRecord<byte[], byte[]> record =
            new ProducerRecord<>(topic, bytes("order-" + (i % 1000)), payload);
        record.headers().add("relaybus-event-id", bytes(UUID.randomUUID().toString()));
        record.headers().add("relaybus-event-type", bytes("order.placed"));
        record.headers().add("relaybus-content-type", bytes("application/json"));
        producer.send(record);
      }
      producer.flush();
    }
  }

  private static Map<String, Object> consumerConfig(String group) {
    Map<String, Object> config = new HashMap<>(TestKafka.consumerConfig(group));
    config.put("max.poll.records", Integer.toString(MAX_POLL_RECORDS));
    return config;
  }

  /** A fresh work table; the work is one INSERT of (event id, handler) into it. */
  private static String workTable(DataSource dataSource, String name) throws SQLException {
    String table = "inbox_test." + name;
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement()) {
      s.execute("CREATE SCHEMA IF NOT EXISTS inbox_test");
      s.execute("DROP TABLE IF EXISTS " + table);
      s.execute("CREATE TABLE " + table + " (event_id text NOT NULL, handler text NOT NULL)");
    }
    return table;
  }

  private static void insert(Connection tx, String table, String eventId, String handler)
      throws SQLException {
    try (PreparedStatement insert =
        tx.prepareStatement("INSERT INTO " + table + " (event_id, handler) VALUES (?, ?)")) {
      insert.setString(1, eventId);
      insert.setString(2, handler);
      insert.executeUpdate();
    }
  }

  private static Result plain(String topic, int records, int round, boolean perPoll)
      throws SQLException {
    PostgresOutboxStore store = TestDatabase.freshStore();
    DataSource dataSource = store.dataSource();
    String name = perPoll ? "bench_plain_poll_" : "bench_plain_";
    String table = workTable(dataSource, name + round);
    long first = 0;
    int handled = 0;
    try (KafkaConsumer<byte[], byte[]> consumer =
        new KafkaConsumer<>(
            withPlainDefaults(consumerConfig(name + round)),
            new ByteArrayDeserializer(),
            new ByteArrayDeserializer())) {
      consumer.subscribe(List.of(topic));
      while (handled < records) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        ConsumerRecords<byte[], byte[]> polled = consumer.poll(Duration.ofMillis(200));
        if (polled.isEmpty()) {
          continue;
        }
        if (first == 0) {
          first = System.nanoTime();
        }
        Connection tx = perPoll ? begin(dataSource) : null;
        for (ConsumerRecord<byte[], byte[]> record : polled) {
          if (!perPoll) {
            tx = begin(dataSource);
          }
          insert(tx, table, eventId(record), "bench.plain");
          if (!perPoll) {
            commit(tx);
          }
          offsets.put(
              new TopicPartition(record.topic(), record.partition()),
              new OffsetAndMetadata(record.offset() + 1));
          handled++;
        }
        if (perPoll) {
          commit(tx);
        }
        consumer.commitSync(offsets);
      }
    }
    double seconds = (System.nanoTime() - first) / 1e9;
    check(dataSource, table, records);
    store.close();
    return new Result(
        perPoll ? "plain loop, transaction per poll" : "plain loop, transaction per record",
        records,
        seconds);
  }

  private static Connection begin(DataSource dataSource) throws SQLException {
    Connection tx = dataSource.getConnection();
    tx.setAutoCommit(false);
    return tx;
  }

  /** Commits and hands the connection back to the pool, as {@code Transactions.jdbc} does. */
  private static void commit(Connection tx) throws SQLException {
    try (tx) {
      tx.commit();
      tx.setAutoCommit(true);
    }
  }

  private static String eventId(ConsumerRecord<byte[], byte[]> record) {
    return new String(
        record.headers().lastHeader("relaybus-event-id").value(), StandardCharsets.UTF_8);
  }

  private static Map<String, Object> withPlainDefaults(Map<String, Object> config) {
    config.put("enable.auto.commit", "false");
    config.put("auto.offset.reset", "earliest");
    return config;
  }

  private static Result inbox(String topic, int records, int round, boolean perPoll)
      throws Exception {
    PostgresOutboxStore store = TestDatabase.freshStore();
    String handler = perPoll ? "bench.per-poll" : "bench.per-record";
    String table =
        workTable(store.dataSource(), "bench_" + (perPoll ? "poll_" : "record_") + round);
    AtomicLong first = new AtomicLong();
    InboxWork<Connection> work =
        (tx, message) -> {
          first.compareAndSet(0, System.nanoTime());
          insert(tx, table, message.eventId(), handler);
        };
    KafkaInboxConsumer<Connection> consumer =
        KafkaInboxConsumer.builder(Inbox.postgres(store))
            .consumerConfig(consumerConfig("bench-" + handler + "-" + round))
            .topics(List.of(topic))
            .handler(handler)
            .work(work)
            .transactionPerPoll(perPoll)
            .build();
    Thread thread = new Thread(consumer, "bench-" + handler);
    thread.start();
    while (consumer.counts().handled() < records) {
      Thread.sleep(2);
    }
    double seconds = (System.nanoTime() - first.get()) / 1e9;
    consumer.close();
    check(store.dataSource(), table, records);
    if (consumer.counts().skipped() != 0 || consumer.counts().failures() != 0) {
      throw new IllegalStateException(
          handler + " did not handle every record once: " + consumer.counts());
    }
    store.close();
    return new Result(
        perPoll ? "inbox, transaction per poll" : "inbox, transaction per record",
        records,
        seconds);
  }

  private static void check(DataSource dataSource, String table, int records) throws SQLException {
    try (Connection c = dataSource.getConnection();
        Statement s = c.createStatement();
        ResultSet rs = s.executeQuery("SELECT count(*), count(DISTINCT event_id) FROM " + table)) {
      rs.next();
      if (rs.getInt(1) != records || rs.getInt(2) != records) {
        throw new IllegalStateException(
            "%s has %d rows, %d distinct, expected %d"
                .formatted(table, rs.getInt(1), rs.getInt(2), records));
      }
    }
  }

  private static byte[] bytes(String value) {
    return value.getBytes(StandardCharsets.UTF_8);
  }

  private static String loadAverage() {
    try {
      return Files.readString(Path.of("/proc/loadavg")).strip();
    } catch (IOException e) {
      return "unknown";
    }
  }

  private static String machine() {
    return "Machine: %s, %d cores (nproc), Java %s, Kafka 4.3.1 embedded broker, PostgreSQL 17 embedded."
        .formatted(
            Machine.cpu(),
            Runtime.getRuntime().availableProcessors(),
            System.getProperty("java.version"));
  }
}
