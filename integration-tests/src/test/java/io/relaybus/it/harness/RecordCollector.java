package io.relaybus.it.harness;

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
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * Reads topics from the beginning and checks what arrived against what was published.
 *
 * <p>A record is counted once per (topic, partition, offset): the consumer commits no offsets, so
 * after a rebalance of its own group (it subscribes before the connector creates the topics, and
 * each new topic rebalances it) it starts over from the earliest offset and reads records again.
 * Such a re-read is the same Kafka record, not a duplicate the connector sent.
 */
public final class RecordCollector implements AutoCloseable {
  private final Consumer<String, byte[]> consumer;
  private final List<Received> received = new ArrayList<>();
  private final Set<String> positions = new HashSet<>();
  private int reread;

  public RecordCollector(Consumer<String, byte[]> consumer, Collection<String> topics) {
    this.consumer = consumer;
    consumer.subscribe(topics);
  }

  private void pollOnce() {
    for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(200))) {
      if (positions.add(record.topic() + "/" + record.partition() + "/" + record.offset())) {
        received.add(Received.of(record));
      } else {
        reread++;
      }
    }
  }

  /** Records read again after the consumer's position was reset (not counted as received). */
  public int reread() {
    return reread;
  }

  /** Polls until every pair in {@code expected} arrived at least once. */
  public List<Received> awaitAll(Set<String> expected, Duration timeout) {
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
  public List<Received> drain(Duration quiet) {
    long end = System.nanoTime() + quiet.toNanos();
    do {
      pollOnce();
    } while (System.nanoTime() < end);
    return List.copyOf(received);
  }

  public Set<String> pairs() {
    return received.stream().map(Received::pair).collect(Collectors.toSet());
  }

  /** Records that repeat a pair already received. */
  public static List<Received> duplicates(List<Received> records) {
    Set<String> seen = new HashSet<>();
    return records.stream().filter(r -> !seen.add(r.pair())).toList();
  }

  /**
   * Per (topic, key), in partition order, first copies only: sequences strictly increase. A key
   * always lands in one partition, so partition order is the order a consumer sees.
   */
  public static void assertPerKeyOrder(List<Received> records) {
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
