package io.relaybus.quickstart;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.PublishResult;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import javax.sql.DataSource;

/**
 * The demo an application would run: orders move through placed, paid, packed, shipped; each step
 * updates the order row and publishes its event in the same transaction. The order is the ordering
 * key, so each order's events reach each handler in commit order.
 *
 * <ul>
 *   <li>{@code order.placed} and {@code order.shipped} go to both handlers, {@code order.paid} to
 *       billing, {@code order.packed} to shipping.
 *   <li>Steps are published round by round (every order placed, then paid, ...) by three threads,
 *       each transaction holding one order (up to {@value #MAX_PER_TRANSACTION} for big runs): the
 *       orders interleave in the topics while each order keeps its own order.
 *   <li>Every fourth order's {@code order.paid} (at most {@value #MAX_REPUBLISHED}) is published
 *       again with the same id, as a retried request would: nothing is added.
 *   <li>The second order gets an {@code order.note} for billing whose payload is not JSON: the
 *       connector (value.format=json) dead-letters it, and the order's later events still arrive.
 * </ul>
 *
 * Order numbers continue from the orders table, so a run on kept data publishes new events.
 */
final class DemoWorkload {
  static final List<String> HANDLERS = List.of("billing", "shipping");
  private static final int MAX_PER_TRANSACTION = 100;
  private static final int MAX_REPUBLISHED = 100;
  private static final int THREADS = 3;

  private enum Step {
    PLACED("order.placed", "billing", "shipping"),
    PAID("order.paid", "billing"),
    PACKED("order.packed", "shipping"),
    SHIPPED("order.shipped", "billing", "shipping");

    final String type;
    final String[] handlers;

    Step(String type, String... handlers) {
      this.type = type;
      this.handlers = handlers;
    }

    String status() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /**
   * What was published.
   *
   * @param orders the order numbers, first to last
   * @param events every event published once and expected on Kafka
   * @param republished events published a second time with the same id
   * @param poison the event whose payload is not JSON
   * @param transactions transactions committed
   */
  record Published(
      List<Integer> orders,
      List<OutboxEvent> events,
      List<OutboxEvent> republished,
      OutboxEvent poison,
      int transactions) {

    /** Every (event id, handler) pair that must arrive once. */
    Set<String> expectedPairs() {
      Set<String> pairs = new LinkedHashSet<>();
      for (OutboxEvent event : events) {
        event.handlers().forEach(h -> pairs.add(event.id() + "/" + h));
      }
      return pairs;
    }
  }

  private final PostgresOutboxStore store;
  private final DataSource dataSource;
  private final AtomicInteger publishedCount = new AtomicInteger();
  private int transactions;

  DemoWorkload(PostgresOutboxStore store, DataSource dataSource) {
    this.store = store;
    this.dataSource = dataSource;
  }

  /** Events published so far, for the progress line. */
  int publishedSoFar() {
    return publishedCount.get();
  }

  static String key(int order) {
    return "order-" + order;
  }

  Published publish(int eventCount) throws Exception {
    int first = prepareOrdersTable();
    int orderCount = (eventCount + Step.values().length - 1) / Step.values().length;
    List<Integer> orders = new ArrayList<>();
    for (int i = 0; i < orderCount; i++) {
      orders.add(first + i);
    }
    List<OutboxEvent> published = Collections.synchronizedList(new ArrayList<>());
    OutboxEvent poison = null;
    int remaining = eventCount;
    for (Step step : Step.values()) {
      List<OutboxEvent> round = new ArrayList<>();
      for (int order : orders) {
        if (remaining-- > 0) {
          round.add(event(order, step));
        }
      }
      publishRound(round);
      published.addAll(round);
      if (step == Step.PLACED) {
        poison = poison(orders.get(1));
        publishInTransaction(List.of(poison), false);
      }
    }
    List<OutboxEvent> republished = new ArrayList<>();
    for (OutboxEvent event : published) {
      int order = Integer.parseInt(event.key().substring("order-".length()));
      if (event.type().equals(Step.PAID.type)
          && (order - first) % 4 == 0
          && republished.size() < MAX_REPUBLISHED) {
        List<PublishResult> results = publishInTransaction(List.of(event), false);
        if (results.get(0).newEvent() || !results.get(0).addedHandlers().isEmpty()) {
          throw new IllegalStateException("a republish added something: " + results);
        }
        republished.add(event);
      }
    }
    return new Published(orders, List.copyOf(published), republished, poison, transactions);
  }

  private int prepareOrdersTable() throws SQLException {
    try (Connection connection = dataSource.getConnection();
        Statement statement = connection.createStatement()) {
      statement.execute(
          """
          CREATE TABLE IF NOT EXISTS quickstart_orders (
            number integer PRIMARY KEY,
            status text NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now()
          )""");
      try (ResultSet rs =
          statement.executeQuery("SELECT coalesce(max(number), 0) + 1 FROM quickstart_orders")) {
        rs.next();
        return rs.getInt(1);
      }
    }
  }

  private static OutboxEvent event(int order, Step step) {
    return OutboxEvent.builder(step.type)
        .id(key(order) + "-" + step.status())
        .key(key(order))
        .json(
            "{\"order\":\"%s\",\"status\":\"%s\",\"amount\":%d.50}"
                .formatted(key(order), step.status(), 10 + order * 7 % 90))
        .header("traceparent", "00-%032x-%016x-01".formatted(order, step.ordinal() + 1))
        .handlers(step.handlers)
        .build();
  }

  private static OutboxEvent poison(int order) {
    return OutboxEvent.builder("order.note")
        .id(key(order) + "-note")
        .key(key(order))
        .json("{\"order\":\"" + key(order) + "\",\"note\":\"gift wrap") // cut short: not JSON
        .handlers("billing")
        .build();
  }

  /** One step of every order: transactions of distinct orders, so they run side by side. */
  private void publishRound(List<OutboxEvent> round) throws Exception {
    ExecutorService pool =
        Executors.newFixedThreadPool(THREADS, r -> new Thread(r, "relaybus-quickstart-publisher"));
    try {
      List<Future<?>> running = new ArrayList<>();
      int perTransaction = Math.max(1, Math.min(MAX_PER_TRANSACTION, round.size() / 20));
      for (int from = 0; from < round.size(); from += perTransaction) {
        List<OutboxEvent> batch =
            round.subList(from, Math.min(round.size(), from + perTransaction));
        running.add(pool.submit(() -> publishInTransaction(batch, true)));
      }
      for (Future<?> future : running) {
        future.get();
      }
    } finally {
      pool.shutdownNow();
    }
  }

  /**
   * The application's transaction: update the orders (unless {@code orderChange} is false: a note,
   * a retried request), publish the events, commit both together.
   */
  private List<PublishResult> publishInTransaction(List<OutboxEvent> events, boolean orderChange)
      throws SQLException {
    for (int attempt = 1; ; attempt++) {
      try (Connection tx = dataSource.getConnection()) {
        tx.setAutoCommit(false);
        try {
          if (orderChange) {
            updateOrders(tx, events);
          }
          List<PublishResult> results = store.publishAll(tx, events);
          tx.commit();
          synchronized (this) {
            transactions++;
          }
          if (orderChange) {
            publishedCount.addAndGet(events.size());
          }
          return results;
        } catch (OutboxStoreException | SQLException e) {
          tx.rollback();
          boolean transientFailure = e instanceof OutboxStoreException o ? o.isTransient() : false;
          if (!transientFailure || attempt == 3) {
            throw e;
          }
        }
      }
    }
  }

  private static void updateOrders(Connection tx, List<OutboxEvent> events) throws SQLException {
    try (PreparedStatement upsert =
        tx.prepareStatement(
            """
            INSERT INTO quickstart_orders (number, status) VALUES (?, ?)
            ON CONFLICT (number) DO UPDATE SET status = excluded.status, updated_at = now()""")) {
      for (OutboxEvent event : events) {
        upsert.setInt(1, Integer.parseInt(event.key().substring("order-".length())));
        upsert.setString(2, event.type().substring("order.".length()));
        upsert.addBatch();
      }
      upsert.executeBatch();
    }
  }
}
