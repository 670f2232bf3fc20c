package io.relaybus.quickstart;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.StringJoiner;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * {@code --tail}: prints every record of every topic but Kafka's and the worker's own, from the
 * first, then each as it arrives, until stopped. A topic the connector creates later (a new
 * handler) is picked up within a few seconds, from its first record. No consumer group: the
 * partitions are assigned directly, so nothing is committed and nothing rebalances.
 */
final class TopicTail implements AutoCloseable {
  /** Characters of a value shown; the rest is counted. */
  static final int VALUE_SHOWN = 160;

  /** Kafka's internal topics and the worker's (config/connect-distributed.properties). */
  private static final Pattern NOT_SHOWN = Pattern.compile("__.*|relaybus-connect-.*");

  private static final Duration TOPIC_REFRESH = Duration.ofSeconds(2);

  private final KafkaConsumer<String, byte[]> consumer;
  private final Console console;
  private final Thread thread;
  private final Set<TopicPartition> assigned = new HashSet<>();

  TopicTail(String bootstrapServers, Console console) {
    Map<String, Object> props = new HashMap<>();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    props.put(ConsumerConfig.CLIENT_ID_CONFIG, "relaybus-quickstart-tail");
    this.consumer =
        new KafkaConsumer<>(props, new StringDeserializer(), new ByteArrayDeserializer());
    this.console = console;
    this.thread = new Thread(this::run, "relaybus-quickstart-tail");
    thread.setDaemon(true);
  }

  void start() {
    thread.start();
  }

  private void run() {
    try {
      long nextRefresh = 0;
      while (true) {
        if (System.nanoTime() >= nextRefresh) {
          assignNewPartitions();
          nextRefresh = System.nanoTime() + TOPIC_REFRESH.toNanos();
        }
        if (assigned.isEmpty()) {
          Thread.sleep(200);
          continue;
        }
        for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(500))) {
          print(record);
        }
      }
    } catch (WakeupException | InterruptException | InterruptedException e) {
      // close(): Ctrl-C
    } finally {
      Thread.interrupted(); // so that close() does not fail on the flag
      consumer.close(CloseOptions.timeout(Duration.ofSeconds(2)));
    }
  }

  private void assignNewPartitions() {
    List<TopicPartition> partitions = new ArrayList<>();
    for (Map.Entry<String, List<PartitionInfo>> topic :
        consumer.listTopics(Duration.ofSeconds(10)).entrySet()) {
      if (NOT_SHOWN.matcher(topic.getKey()).matches()) {
        continue;
      }
      for (PartitionInfo p : topic.getValue()) {
        partitions.add(new TopicPartition(p.topic(), p.partition()));
      }
    }
    if (assigned.addAll(partitions)) {
      consumer.assign(assigned); // a new partition starts at its first record (earliest)
    }
  }

  private void print(ConsumerRecord<String, byte[]> record) {
    StringJoiner headers = new StringJoiner(", ");
    for (Header header : record.headers()) {
      headers.add(
          header.key()
              + "="
              + (header.value() == null
                  ? "null"
                  : new String(header.value(), StandardCharsets.UTF_8)));
    }
    console.line(
        "%s partition %d offset %d  key %s%n  headers %s%n  value   %s",
        record.topic(),
        record.partition(),
        record.offset(),
        record.key(),
        headers,
        value(record.value()));
  }

  /** The value as text, cut at {@link #VALUE_SHOWN} characters. */
  static String value(byte[] value) {
    if (value == null) {
      return "null";
    }
    String text = new String(value, StandardCharsets.UTF_8);
    return text.length() <= VALUE_SHOWN
        ? text
        : text.substring(0, VALUE_SHOWN) + "... (" + value.length + " bytes)";
  }

  /** Stops printing and closes the consumer; waits for it, a few seconds at most. */
  @Override
  public void close() {
    consumer.wakeup();
    thread.interrupt();
    try {
      thread.join(5_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
