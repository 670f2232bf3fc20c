package io.relaybus.it.benchmark;

import io.relaybus.it.benchmark.BenchPublishers.Committed;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * The verifying consumer: reads one topic from the beginning on a thread of its own and notes, for
 * every record in arrival order, the event id (from {@code idHeader}), the key, when it arrived and
 * its timestamp (the broker's append time on topics created with {@code LogAppendTime}); {@link
 * #account} then settles every committed event by id.
 */
final class BenchConsumer implements AutoCloseable {
  /** {@code at}: nanoTime of arrival; {@code appendedAt}: the record's timestamp, epoch ms. */
  record Arrival(String id, String key, long at, long appendedAt) {}

  /** The accounting of one run; a run that is not {@link #exact()} is invalid, not fast. */
  record Accounting(
      int committed,
      int received,
      int lost,
      int unexpected,
      int duplicates,
      int orderViolations,
      long rowsLeft,
      long[] latenciesMicros,
      long[] toBrokerMicros,
      String slowest) {

    boolean exact() {
      return lost == 0 && unexpected == 0 && orderViolations == 0 && rowsLeft == 0;
    }

    String summary() {
      return exact()
          ? duplicates == 0 ? "valid" : "valid, " + duplicates + " duplicates"
          : "**INVALID**: lost %d, unexpected %d, duplicates %d, order violations %d, rows left %d"
              .formatted(lost, unexpected, duplicates, orderViolations, rowsLeft);
    }

    /** Percentile {@code p} (0-100) of commit-to-consumer latency in milliseconds. */
    double latencyMillis(double p) {
      return percentileMillis(latenciesMicros, p);
    }

    /**
     * Percentile {@code p} of commit-to-append latency (the record's timestamp, millisecond
     * resolution): the connector's part of {@link #latencyMillis}, Kafka's and the consumer's left
     * out. Meaningful only on a topic with {@code message.timestamp.type=LogAppendTime}.
     */
    double toBrokerMillis(double p) {
      return percentileMillis(toBrokerMicros, p);
    }

    private static double percentileMillis(long[] sortedMicros, double p) {
      if (sortedMicros.length == 0) {
        return Double.NaN;
      }
      int i = (int) Math.ceil(p / 100.0 * sortedMicros.length) - 1;
      return sortedMicros[Math.max(0, Math.min(i, sortedMicros.length - 1))] / 1000.0;
    }
  }

  private final KafkaConsumer<String, byte[]> consumer;
  private final String idHeader;
  private final List<Arrival> arrivals = new ArrayList<>();
  private final Set<String> distinct = ConcurrentHashMap.newKeySet();
  private final Thread thread;
  private volatile boolean running = true;
  private volatile long lastNewAt;

  /**
   * Epoch microseconds minus nanoTime / 1000 in this JVM: puts commit times on the broker's clock.
   */
  private final long epochMicrosOffset =
      System.currentTimeMillis() * 1000 - System.nanoTime() / 1000;

  BenchConsumer(String bootstrap, String topic, int partitions, String idHeader) {
    this.idHeader = idHeader;
    consumer =
        new KafkaConsumer<>(
            Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap,
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5000",
                ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "20",
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted"),
            new StringDeserializer(),
            new ByteArrayDeserializer());
    List<TopicPartition> assigned = new ArrayList<>();
    for (int p = 0; p < partitions; p++) {
      assigned.add(new TopicPartition(topic, p));
    }
    consumer.assign(assigned);
    consumer.seekToBeginning(assigned);
    thread = new Thread(this::consume, "bench-consumer-" + topic);
    thread.start();
  }

  private void consume() {
    while (running) {
      for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(50))) {
        long now = System.nanoTime();
        Header id = r.headers().lastHeader(idHeader);
        String eventId = id == null ? "(no " + idHeader + " header)" : header(id);
        synchronized (arrivals) {
          arrivals.add(new Arrival(eventId, r.key(), now, r.timestamp()));
        }
        if (distinct.add(eventId)) {
          lastNewAt = now;
        }
      }
    }
  }

  /** Connect's SimpleHeaderConverter writes a string header as its UTF-8 bytes. */
  private static String header(Header h) {
    return h.value() == null ? "" : new String(h.value(), StandardCharsets.UTF_8);
  }

  int distinct() {
    return distinct.size();
  }

  /** When the last record with a new id arrived (nanoTime). */
  long lastNewAt() {
    return lastNewAt;
  }

  /** Waits until every id in {@code ids} arrived; false when {@code timeout} passed first. */
  boolean awaitAll(Set<String> ids, Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    // the size check spares a full containsAll over a large backlog until it can be true
    while (distinct.size() < ids.size() || !distinct.containsAll(ids)) {
      if (System.nanoTime() > deadline) {
        return false;
      }
      Thread.sleep(5);
    }
    return true;
  }

  /**
   * Settles every committed event: lost, unexpected, duplicates, per-key order violations (after
   * dropping copies of ids already seen, a sequence not above the key's previous one), and the
   * commit-to-arrival latency of the first copy of each event in {@code window} (all when null).
   */
  Accounting account(Map<String, Committed> committed, long rowsLeft, Set<String> window) {
    List<Arrival> copy;
    synchronized (arrivals) {
      copy = new ArrayList<>(arrivals);
    }
    Set<String> seen = new HashSet<>();
    Map<String, Long> lastSeq = new HashMap<>();
    int duplicates = 0;
    int unexpected = 0;
    int violations = 0;
    long[] latencies = new long[copy.size()];
    long[] toBroker = new long[copy.size()];
    long[] committedAt = new long[copy.size()];
    int n = 0;
    for (Arrival a : copy) {
      if (!seen.add(a.id())) {
        duplicates++;
        continue;
      }
      Committed c = committed.get(a.id());
      if (c == null || !c.key().equals(a.key())) {
        unexpected++;
        continue;
      }
      Long previous = lastSeq.put(c.key(), c.seq());
      if (previous != null && c.seq() <= previous) {
        violations++;
      }
      if (window == null || window.contains(a.id())) {
        committedAt[n] = c.committedAt();
        latencies[n] = Math.max(0, (a.at() - c.committedAt()) / 1000);
        toBroker[n++] =
            Math.max(0, a.appendedAt() * 1000 - (c.committedAt() / 1000 + epochMicrosOffset));
      }
    }
    int lost = 0;
    for (String id : committed.keySet()) {
      if (!seen.contains(id)) {
        lost++;
      }
    }
    String slowest = slowest(committedAt, toBroker, n);
    long[] sorted = Arrays.copyOf(latencies, n);
    Arrays.sort(sorted);
    long[] sortedToBroker = Arrays.copyOf(toBroker, n);
    Arrays.sort(sortedToBroker);
    return new Accounting(
        committed.size(),
        copy.size(),
        lost,
        unexpected,
        duplicates,
        violations,
        rowsLeft,
        sorted,
        sortedToBroker,
        slowest);
  }

  /** Events slower than this to the broker's append are located in time by {@link #slowest}. */
  static final long SLOW_MICROS = 100_000;

  /**
   * Where the tail is: how many events took over {@link #SLOW_MICROS} from commit to the broker's
   * append, and the (at most five) 100 ms stretches of commit time with the most of them, in
   * seconds from the window's first commit. One stretch holding them all is a stall; many, a load.
   */
  private static String slowest(long[] committedAt, long[] toBroker, int n) {
    if (n == 0) {
      return "none";
    }
    long first = Long.MAX_VALUE;
    for (int i = 0; i < n; i++) {
      first = Math.min(first, committedAt[i]);
    }
    Map<Long, Integer> perStretch = new HashMap<>();
    Map<Long, Long> worst = new HashMap<>();
    int slow = 0;
    for (int i = 0; i < n; i++) {
      if (toBroker[i] > SLOW_MICROS) {
        slow++;
        long stretch = (committedAt[i] - first) / 100_000_000L;
        perStretch.merge(stretch, 1, Integer::sum);
        worst.merge(stretch, toBroker[i], Math::max);
      }
    }
    if (slow == 0) {
      return "0 of %,d over %d ms".formatted(n, SLOW_MICROS / 1000);
    }
    StringBuilder text =
        new StringBuilder(
            "%,d of %,d over %d ms, in %d stretches of 100 ms; most at"
                .formatted(slow, n, SLOW_MICROS / 1000, perStretch.size()));
    perStretch.entrySet().stream()
        .sorted(Map.Entry.<Long, Integer>comparingByValue().reversed())
        .limit(5)
        .forEach(
            e ->
                text.append(
                    " %.1f s: %d (up to %d ms),"
                        .formatted(e.getKey() / 10.0, e.getValue(), worst.get(e.getKey()) / 1000)));
    text.setLength(text.length() - 1);
    return text.toString();
  }

  /**
   * Stops the polling thread and closes the consumer. Interrupted while it waits for the thread, it
   * keeps the interrupt status and leaves the consumer open: the thread may still be polling it.
   */
  @Override
  public void close() {
    running = false;
    try {
      thread.join(10_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    consumer.close();
  }
}
