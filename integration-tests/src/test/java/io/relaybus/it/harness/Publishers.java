package io.relaybus.it.harness;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Collectors;
import javax.sql.DataSource;

/**
 * Application-side publishers: several threads, each publishing in its own database transactions
 * and holding every transaction open a random while before committing, so transactions commit in
 * another order than they inserted (delivery ids are not commit order; key sequences are).
 *
 * <p>Events of type {@code order.placed} go to handlers billing and shipping, {@code order.paid} to
 * billing and audit; one in ten has no key.
 */
public final class Publishers {
  public static final List<String> HANDLERS = List.of("billing", "shipping", "audit");

  private final PostgresOutboxStore store;
  private final DataSource dataSource;
  private final String idPrefix;
  private final int keys;
  private final List<OutboxEvent> committed = Collections.synchronizedList(new ArrayList<>());

  public Publishers(PostgresOutboxStore store, DataSource dataSource, String idPrefix, int keys) {
    this.store = store;
    this.dataSource = dataSource;
    this.idPrefix = idPrefix;
    this.keys = keys;
  }

  /**
   * Runs {@code threads} publishers of {@code transactions} transactions of {@code perTransaction}
   * events each, pausing {@code pause} between transactions; returns when all committed.
   */
  public List<OutboxEvent> run(int threads, int transactions, int perTransaction, Duration pause)
      throws Exception {
    ExecutorService pool =
        Executors.newFixedThreadPool(
            threads, r -> new Thread(r, "it-publisher-" + System.identityHashCode(r)));
    try {
      List<Future<?>> running = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int thread = t;
        running.add(
            pool.submit(
                () -> {
                  Random random = new Random(31L * thread + idPrefix.hashCode());
                  for (int tx = 0; tx < transactions; tx++) {
                    publishOne(random, thread, tx, perTransaction);
                    Thread.sleep(pause.toMillis());
                  }
                  return null;
                }));
      }
      for (Future<?> f : running) {
        f.get();
      }
    } finally {
      pool.shutdownNow();
    }
    return List.copyOf(committed);
  }

  private void publishOne(Random random, int thread, int tx, int perTransaction)
      throws SQLException, InterruptedException {
    List<OutboxEvent> events = new ArrayList<>();
    for (int i = 0; i < perTransaction; i++) {
      boolean placed = random.nextBoolean();
      events.add(
          OutboxEvent.builder(placed ? "order.placed" : "order.paid")
              .id("%s-%d-%d-%d".formatted(idPrefix, thread, tx, i))
              .key(random.nextInt(10) == 0 ? null : "key-" + random.nextInt(keys))
              .payload(
                  ("{\"thread\":%d,\"tx\":%d,\"i\":%d}".formatted(thread, tx, i))
                      .getBytes(StandardCharsets.UTF_8),
                  "application/json")
              .header("traceparent", "00-%032x-%016x-01".formatted(tx, i))
              .handlers(
                  placed ? new String[] {"billing", "shipping"} : new String[] {"billing", "audit"})
              .build());
    }
    for (int attempt = 1; ; attempt++) {
      try (Connection connection = dataSource.getConnection()) {
        connection.setAutoCommit(false);
        try {
          store.publishAll(connection, events);
          Thread.sleep(random.nextInt(25));
          connection.commit();
          committed.addAll(events);
          return;
        } catch (OutboxStoreException e) {
          connection.rollback();
          // Two transactions locking the same keys in another order: PostgreSQL aborts one
          // (deadlock); an application retries it.
          if (!e.isTransient() || attempt == 10) {
            throw e;
          }
        }
      }
    }
  }

  /** Every (event, handler) pair the events must arrive as. */
  public static Set<String> pairs(List<OutboxEvent> events) {
    return events.stream()
        .flatMap(e -> e.handlers().stream().map(h -> e.id() + "/" + h))
        .collect(Collectors.toSet());
  }
}
