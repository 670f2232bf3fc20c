package io.relaybus.inbox.testing;

import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.connect.util.clusters.EmbeddedKafkaCluster;

/**
 * One real KRaft broker per test JVM (Kafka's {@code EmbeddedKafkaCluster}, not public API: used
 * only here), started on first use and stopped when the test session ends ({@link
 * StopKafkaAtSessionEnd}). Tests isolate by topic and group.
 */
public final class TestKafka {
  private static EmbeddedKafkaCluster cluster;
  private static KafkaProducer<byte[], byte[]> producer;

  private TestKafka() {}

  private static synchronized EmbeddedKafkaCluster cluster() {
    if (cluster == null) {
      Properties broker = new Properties();
      broker.put("auto.create.topics.enable", "false");
      broker.put("group.initial.rebalance.delay.ms", "0");
      EmbeddedKafkaCluster started = new EmbeddedKafkaCluster(1, broker);
      started.start();
      cluster = started;
      Map<String, Object> config = new HashMap<>();
      config.put("bootstrap.servers", started.bootstrapServers());
      config.put("acks", "all");
      producer = started.createProducer(config);
    }
    return cluster;
  }

  /**
   * Stops the broker, if started. Not from a JVM shutdown hook: Kafka deletes the broker's log
   * directories from a shutdown hook of its own, the two run concurrently, and a broker whose log
   * directory vanishes under it halts the JVM with status 1 (surefire then fails the build after
   * every test passed).
   */
  static synchronized void stop() {
    if (cluster != null) {
      producer.close();
      cluster.stop();
      cluster = null;
      producer = null;
    }
  }

  public static String bootstrapServers() {
    return cluster().bootstrapServers();
  }

  public static void createTopic(String topic, int partitions) {
    cluster().createTopic(topic, partitions);
  }

  /** Consumer settings for the inbox loop: this broker, the group, short session for rebalances. */
  public static Map<String, Object> consumerConfig(String group) {
    Map<String, Object> config = new HashMap<>();
    config.put("bootstrap.servers", bootstrapServers());
    config.put("group.id", group);
    config.put("session.timeout.ms", "10000");
    config.put("heartbeat.interval.ms", "500");
    // Small polls, so a rebalance finds the loop between polls soon.
    config.put("max.poll.records", "50");
    return config;
  }

  /**
   * Sends a record as the connector writes it: key = ordering key, the event's own header, then the
   * connector's headers; {@code eventId} null leaves the event id header out.
   */
  public static void send(String topic, String key, String eventId, String payload) {
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(
            topic,
            key == null ? null : key.getBytes(StandardCharsets.UTF_8),
            payload.getBytes(StandardCharsets.UTF_8));
    RecordHeaders names = RecordHeaders.defaults();
    record.headers().add(new RecordHeader("traceparent", bytes("00-" + eventId)));
    if (eventId != null) {
      record.headers().add(new RecordHeader(names.eventId(), bytes(eventId)));
    }
    record.headers().add(new RecordHeader(names.eventType(), bytes("order.placed")));
    record.headers().add(new RecordHeader(names.contentType(), bytes("application/json")));
    record.headers().add(new RecordHeader(names.handler(), bytes(topic)));
    record.headers().add(new RecordHeader(names.attempt(), bytes("1")));
    cluster();
    try {
      producer.send(record).get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("could not send to " + topic, e.getCause());
    }
  }

  private static byte[] bytes(String value) {
    return value.getBytes(StandardCharsets.UTF_8);
  }

  /** Every record of {@code topic} now, partition by partition, in offset order. */
  public static List<ConsumerRecord<byte[], byte[]>> read(String topic) {
    Map<String, Object> config = new HashMap<>();
    config.put("bootstrap.servers", bootstrapServers());
    config.put("enable.auto.commit", "false");
    try (KafkaConsumer<byte[], byte[]> reader =
        new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      List<TopicPartition> partitions = new ArrayList<>();
      reader
          .partitionsFor(topic, Duration.ofSeconds(30))
          .forEach(p -> partitions.add(new TopicPartition(topic, p.partition())));
      reader.assign(partitions);
      reader.seekToBeginning(partitions);
      Map<TopicPartition, Long> end = reader.endOffsets(partitions, Duration.ofSeconds(30));
      List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>();
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (partitions.stream().anyMatch(p -> reader.position(p) < end.get(p))) {
        if (System.nanoTime() > deadline) {
          throw new IllegalStateException("could not read " + topic + " up to " + end);
        }
        reader.poll(Duration.ofMillis(200)).forEach(records::add);
      }
      records.sort(
          (a, b) ->
              a.partition() != b.partition()
                  ? Integer.compare(a.partition(), b.partition())
                  : Long.compare(a.offset(), b.offset()));
      return records;
    }
  }

  /** The offset {@code group} committed for a partition, or -1 when none. */
  public static long committed(String group, String topic, int partition) {
    try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrapServers()))) {
      Map<TopicPartition, OffsetAndMetadata> offsets =
          admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
      OffsetAndMetadata offset = offsets.get(new TopicPartition(topic, partition));
      return offset == null ? -1 : offset.offset();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    } catch (ExecutionException e) {
      throw new IllegalStateException("could not read the offsets of " + group, e.getCause());
    }
  }
}
