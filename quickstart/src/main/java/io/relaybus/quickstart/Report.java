package io.relaybus.quickstart;

import io.relaybus.quickstart.DemoWorkload.Published;
import io.relaybus.quickstart.TopicReader.Arrived;
import io.relaybus.store.DeliveryQuery;
import io.relaybus.store.DeliveryStatus;
import io.relaybus.store.DeliveryView;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStatistics.HandlerCounts;
import io.relaybus.store.OutboxStore;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Prints what arrived, checked against what was published: per topic and key in partition order
 * (the order a consumer sees), duplicates, the republished events, the dead letters and the store's
 * statistics. Every claim printed is checked here, not assumed.
 */
final class Report {
  /** Keys listed per topic; the others are checked and summarized. */
  static final int KEYS_SHOWN = 12;

  private final Console console;

  Report(Console console) {
    this.console = console;
  }

  /** Prints the arrivals; returns the problems found (empty when all is as promised). */
  List<String> arrivals(Published published, List<Arrived> arrived) {
    List<String> problems = new ArrayList<>();
    console.blank();
    console.line("What arrived on Kafka, per topic and key, in partition order (sequence:event):");
    Map<String, Map<String, List<Arrived>>> byTopicAndKey = new TreeMap<>();
    arrived.stream()
        .sorted(
            Comparator.comparing(Arrived::topic)
                .thenComparingInt(Arrived::partition)
                .thenComparingLong(Arrived::offset))
        .forEach(
            a ->
                byTopicAndKey
                    .computeIfAbsent(a.topic(), t -> new TreeMap<>(Report::byOrderNumber))
                    .computeIfAbsent(String.valueOf(a.key()), k -> new ArrayList<>())
                    .add(a));
    for (Map.Entry<String, Map<String, List<Arrived>>> topic : byTopicAndKey.entrySet()) {
      Map<String, List<Arrived>> keys = topic.getValue();
      int records = keys.values().stream().mapToInt(List::size).sum();
      console.line("  %s: %,d records, %,d keys", topic.getKey(), records, keys.size());
      int shown = 0;
      for (Map.Entry<String, List<Arrived>> key : keys.entrySet()) {
        String order = inOrder(key.getValue());
        if (order != null) {
          problems.add(topic.getKey() + " " + key.getKey() + ": " + order);
        }
        if (shown++ < KEYS_SHOWN) {
          StringBuilder line = new StringBuilder("    %-10s".formatted(key.getKey()));
          for (Arrived a : key.getValue()) {
            line.append(' ').append(a.sequence()).append(':').append(shortType(a.type()));
          }
          if (order != null) {
            line.append("   <- OUT OF ORDER");
          }
          console.line(line.toString());
        }
      }
      if (keys.size() > KEYS_SHOWN) {
        console.line("    ... and %d more keys", keys.size() - KEYS_SHOWN);
      }
    }
    if (problems.isEmpty()) {
      console.line(
          "Per-key order: within every key the sequence numbers rise (a key stays in one"
              + " partition).");
    }

    Set<String> expected = published.expectedPairs();
    Map<String, Integer> copies = new HashMap<>();
    arrived.forEach(a -> copies.merge(a.pair(), 1, Integer::sum));
    Set<String> missing = new HashSet<>(expected);
    missing.removeAll(copies.keySet());
    if (!missing.isEmpty()) {
      problems.add(missing.size() + " (event, handler) pairs did not arrive: " + first(missing));
    }
    List<String> duplicates =
        copies.entrySet().stream().filter(e -> e.getValue() > 1).map(Map.Entry::getKey).toList();
    List<String> republishedPairs = new ArrayList<>();
    for (OutboxEvent event : published.republished()) {
      event.handlers().forEach(h -> republishedPairs.add(event.id() + "/" + h));
    }
    boolean republishedOnce =
        republishedPairs.stream().allMatch(p -> copies.getOrDefault(p, 0) == 1);
    console.line(
        "Idempotency: %d events were published twice with the same id (%s); %s.",
        published.republished().size(),
        first(published.republished().stream().map(OutboxEvent::id).toList()),
        republishedOnce ? "each arrived once per handler" : "SOME ARRIVED TWICE");
    if (duplicates.isEmpty()) {
      console.line(
          "Duplicates: none. All %,d (event, handler) pairs arrived exactly once.",
          expected.size());
    } else {
      // At-least-once: a redelivery after a failure may repeat records; the inbox drops them.
      console.line(
          "Duplicates: %d pairs arrived more than once: %s", duplicates.size(), first(duplicates));
    }
    if (!republishedOnce) {
      problems.add("a republished event arrived twice");
    }
    String poisonPair = published.poison().id() + "/billing";
    if (copies.containsKey(poisonPair)) {
      problems.add("the poison event arrived on Kafka");
    }
    return problems;
  }

  /** Prints the dead letters and the statistics; returns the problems found. */
  List<String> store(OutboxStore store, Published published) {
    List<String> problems = new ArrayList<>();
    List<DeliveryView> dead =
        store.listDeliveries(DeliveryQuery.all().withStatus(DeliveryStatus.DEAD)).items();
    console.blank();
    console.line(
        "Dead letters: %d (a delivery that cannot become a record is set aside with its reason;"
            + " its key moves on)",
        dead.size());
    for (DeliveryView d : dead.subList(0, Math.min(10, dead.size()))) {
      console.line(
          "  delivery %d: event %s, handler %s, key %s, sequence %s",
          d.id(), d.eventId(), d.handler(), d.key(), d.sequence());
      console.line("    reason: %s", d.lastError());
    }
    if (dead.stream().noneMatch(d -> d.eventId().equals(published.poison().id()))) {
      problems.add("the poison event " + published.poison().id() + " is not a dead letter");
    } else {
      DeliveryView poison =
          dead.stream().filter(d -> d.eventId().equals(published.poison().id())).findFirst().get();
      console.line(
          "  After fixing the cause, requeue: store.requeue(List.of(%dL)) or"
              + " store.requeueDead(\"%s\").",
          poison.id(), poison.handler());
    }

    OutboxStatistics statistics = store.statistics();
    console.blank();
    console.line("Outbox statistics (OutboxStore.statistics()):");
    console.line("  %-10s %8s %8s %8s", "handler", "pending", "due", "dead");
    Set<String> handlers = new TreeSet<>(DemoWorkload.HANDLERS);
    handlers.addAll(statistics.handlers().keySet());
    for (String handler : handlers) {
      HandlerCounts c = statistics.handlers().getOrDefault(handler, new HandlerCounts(0, 0, 0, 0));
      console.line("  %-10s %8d %8d %8d", handler, c.pending(), c.due(), c.dead());
    }
    console.line(
        "  oldest pending delivery: %s",
        statistics.totalPending() == 0
            ? "none (every delivery was sent, acknowledged and deleted)"
            : statistics.oldestPendingAge().toMillis() + " ms");
    if (statistics.totalPending() != 0) {
      problems.add(statistics.totalPending() + " deliveries are still pending");
    }
    return problems;
  }

  /** Null when the sequences rise; else what is wrong. */
  private static String inOrder(List<Arrived> records) {
    Set<String> seen = new HashSet<>();
    long last = Long.MIN_VALUE;
    int partition = records.get(0).partition();
    for (Arrived a : records) {
      if (a.partition() != partition) {
        return "in partitions " + partition + " and " + a.partition();
      }
      if (!seen.add(a.pair())) {
        continue; // a duplicate, counted separately
      }
      if (a.sequence() == null || a.sequence() <= last) {
        return "sequence " + a.sequence() + " after " + last;
      }
      last = a.sequence();
    }
    return null;
  }

  private static String shortType(String type) {
    return type.startsWith("order.") ? type.substring("order.".length()) : type;
  }

  private static int byOrderNumber(String a, String b) {
    return Comparator.<String>comparingInt(k -> k.length()).thenComparing(k -> k).compare(a, b);
  }

  private static String first(java.util.Collection<String> values) {
    List<String> list = new ArrayList<>(values);
    return list.size() <= 3
        ? String.join(", ", list)
        : String.join(", ", list.subList(0, 3)) + ", ...";
  }
}
