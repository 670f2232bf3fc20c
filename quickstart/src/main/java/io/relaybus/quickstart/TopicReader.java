package io.relaybus.quickstart;

import io.relaybus.store.RecordHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/** A plain Kafka consumer of the handlers' topics, from the beginning, as a downstream service. */
final class TopicReader implements AutoCloseable {
  private static final RecordHeaders HEADERS = RecordHeaders.defaults();

  /** One record as a consumer sees it: where it sits, its key, and the connector's headers. */
  record Arrived(
      String topic,
      int partition,
      long offset,
      String key,
      String eventId,
      String type,
      String handler,
      Long sequence) {

    String pair() {
      return eventId + "/" + handler;
    }
  }

  private final KafkaConsumer<String, byte[]> consumer;
  private final List<Arrived> arrived = new ArrayList<>();

  TopicReader(String bootstrapServers, Collection<String> topics) {
    Map<String, Object> props = new HashMap<>();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
    props.put(ConsumerConfig.GROUP_ID_CONFIG, "relaybus-quickstart-" + UUID.randomUUID());
    props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    // The connector creates the topics with its first records: notice them soon after.
    props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "500");
    consumer = new KafkaConsumer<>(props, new StringDeserializer(), new ByteArrayDeserializer());
    consumer.subscribe(topics);
  }

  /**
   * Polls until every pair in {@code expected} arrived, or {@code timeout}; then keeps polling for
   * {@code quiet}, so that a duplicate arriving late is counted too. Returns everything read.
   */
  List<Arrived> read(Set<String> expected, Duration timeout, Duration quiet) {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (System.nanoTime() < deadline && !pairs().containsAll(expected)) {
      pollOnce();
    }
    long end = System.nanoTime() + quiet.toNanos();
    while (System.nanoTime() < end) {
      pollOnce();
    }
    return List.copyOf(arrived);
  }

  private void pollOnce() {
    for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(200))) {
      String sequence = header(record, HEADERS.sequence());
      arrived.add(
          new Arrived(
              record.topic(),
              record.partition(),
              record.offset(),
              record.key(),
              header(record, HEADERS.eventId()),
              header(record, HEADERS.eventType()),
              header(record, HEADERS.handler()),
              sequence == null ? null : Long.valueOf(sequence)));
    }
  }

  private Set<String> pairs() {
    return arrived.stream().map(Arrived::pair).collect(Collectors.toSet());
  }

  private static String header(ConsumerRecord<String, byte[]> record, String name) {
    Header header = record.headers().lastHeader(name);
    return header == null ? null : new String(header.value(), StandardCharsets.UTF_8);
  }

  @Override
  public void close() {
    consumer.close();
  }
}
