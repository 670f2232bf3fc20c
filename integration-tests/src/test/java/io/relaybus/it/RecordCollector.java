package io.relaybus.it;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;

/** Reads topics from the beginning and checks what arrived against what was published. */
final class RecordCollector implements AutoCloseable {
  private final KafkaConsumer<String, byte[]> consumer;
  private final List<Received> received = new ArrayList<>();

  RecordCollector(KafkaConsumer<String, byte[]> consumer, Collection<String> topics) {
    this.consumer = consumer;
    consumer.subscribe(topics);
  }

  private void pollOnce() {
    for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(200))) {
      received.add(Received.of(record));
    }
  }

  /** Polls until every pair in {@code expected} arrived at least once. */
  List<Received> awaitAll(Set<String> expected, Duration timeout) {
    await()
        .atMost(timeout)
        .pollInterval(Duration.ZERO)
        .pollDelay(Duration.ZERO)
        .until(
            () -> {
              pollOnce();
              return pairs().containsAll(expected);
            });
    return List.copyOf(received);
  }

  /** Polls once, then keeps polling for {@code quiet}, so a record that arrives late is counted. */
  List<Received> drain(Duration quiet) {
    long end = System.nanoTime() + quiet.toNanos();
    do {
      pollOnce();
    } while (System.nanoTime() < end);
    return List.copyOf(received);
  }

  Set<String> pairs() {
    return received.stream().map(Received::pair).collect(Collectors.toSet());
  }

  /** Records that repeat a pair already received. */
  static List<Received> duplicates(List<Received> records) {
    Set<String> seen = new HashSet<>();
    return records.stream().filter(r -> !seen.add(r.pair())).toList();
  }

  /**
   * Per (topic, key), in partition order, first copies only: sequences strictly increase. A key
   * always lands in one partition, so partition order is the order a consumer sees.
   */
  static void assertPerKeyOrder(List<Received> records) {
    Map<String, List<Received>> byKey = new LinkedHashMap<>();
    records.stream()
        .filter(r -> r.key() != null)
        .sorted(
            Comparator.comparing(Received::topic)
                .thenComparingInt(Received::partition)
                .thenComparingLong(Received::offset))
        .forEach(
            r -> byKey.computeIfAbsent(r.topic() + "/" + r.key(), k -> new ArrayList<>()).add(r));
    for (Map.Entry<String, List<Received>> entry : byKey.entrySet()) {
      assertThat(entry.getValue().stream().map(Received::partition).distinct())
          .as("partitions of %s", entry.getKey())
          .hasSize(1);
      Set<String> seen = new HashSet<>();
      List<Long> firstCopies =
          entry.getValue().stream()
              .filter(r -> seen.add(r.pair()))
              .map(Received::sequence)
              .toList();
      assertThat(firstCopies).as("sequences of %s in partition order", entry.getKey()).isSorted();
      assertThat(new HashSet<>(firstCopies))
          .as("sequences of %s", entry.getKey())
          .hasSameSizeAs(firstCopies);
    }
  }

  @Override
  public void close() {
    consumer.close();
  }
}
