package io.relaybus.it.fault;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import javax.sql.DataSource;

/**
 * The application side of a fault scenario: publisher threads that publish a keyed workload
 * continuously, in transactions held open a random while (so commit order differs from insert
 * order), until {@link #stop()}. Same shape as {@link io.relaybus.it.harness.Publishers} (handlers
 * billing and shipping or billing and audit, one event in ten without a key), but open-ended, so
 * faults land mid-stream.
 *
 * <p>A commit that fails is "in doubt" (the server may have committed it before the connection
 * broke); {@link #stop()} resolves those against the events table, where events stay after delivery
 * (nothing purges them during a test). A transaction that fails before commit is rolled back and
 * published again under the same ids, as an application retries.
 */
public final class FaultWorkload implements AutoCloseable {
  private final PostgresOutboxStore store;
  private final DataSource dataSource;
  private final String idPrefix;
  private final String tablePrefix;
  private final int keys;
  private final Duration pause;
  private final List<OutboxEvent> committed = Collections.synchronizedList(new ArrayList<>());
  private final List<OutboxEvent> inDoubt = Collections.synchronizedList(new ArrayList<>());
  private final AtomicBoolean running = new AtomicBoolean(true);
  private final AtomicReference<Throwable> failure = new AtomicReference<>();
  private final List<Thread> threads = new ArrayList<>();

  private FaultWorkload(
      PostgresOutboxStore store,
      DataSource dataSource,
      String idPrefix,
      String tablePrefix,
      int keys,
      Duration pause) {
    this.store = store;
    this.dataSource = dataSource;
    this.idPrefix = idPrefix;
    this.tablePrefix = tablePrefix;
    this.keys = keys;
    this.pause = pause;
  }

  /**
   * Starts {@code threads} publishers of 3-event transactions over {@code keys} keys, pausing
   * {@code pause} between transactions.
   */
  public static FaultWorkload start(
      PostgresOutboxStore store,
      DataSource dataSource,
      String idPrefix,
      String tablePrefix,
      int threads,
      int keys,
      Duration pause) {
    FaultWorkload workload =
        new FaultWorkload(store, dataSource, idPrefix, tablePrefix, keys, pause);
    for (int t = 0; t < threads; t++) {
      int thread = t;
      Thread th = new Thread(() -> workload.run(thread), "fault-publisher-" + idPrefix + "-" + t);
      th.setDaemon(true);
      workload.threads.add(th);
      th.start();
    }
    return workload;
  }

  private void run(int thread) {
    Random random = new Random(31L * thread + idPrefix.hashCode());
    try {
      for (int tx = 0; running.get(); tx++) {
        publishOne(random, thread, tx);
        Thread.sleep(pause.toMillis());
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Throwable e) {
      failure.compareAndSet(null, e);
    }
  }

  private void publishOne(Random random, int thread, int tx) throws InterruptedException {
    List<OutboxEvent> events = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      boolean placed = random.nextBoolean();
      events.add(
          OutboxEvent.builder(placed ? "order.placed" : "order.paid")
              .id("%s-%d-%d-%d".formatted(idPrefix, thread, tx, i))
              .key(random.nextInt(10) == 0 ? null : "key-" + random.nextInt(keys))
              .payload(
                  "{\"thread\":%d,\"tx\":%d,\"i\":%d}"
                      .formatted(thread, tx, i)
                      .getBytes(StandardCharsets.UTF_8),
                  "application/json")
              .header("traceparent", "00-%032x-%016x-01".formatted(tx, i))
              .handlers(
                  placed ? new String[] {"billing", "shipping"} : new String[] {"billing", "audit"})
              .build());
    }
    // Retry for a minute: long enough for a PostgreSQL restart, bounded so a test cannot hang.
    long giveUp = System.nanoTime() + Duration.ofSeconds(60).toNanos();
    while (true) {
      boolean committing = false;
      try (Connection connection = dataSource.getConnection()) {
        connection.setAutoCommit(false);
        try {
          store.publishAll(connection, events);
          Thread.sleep(random.nextInt(25));
          committing = true;
          connection.commit();
          committed.addAll(events);
          return;
        } catch (RuntimeException | SQLException e) {
          if (committing) {
            inDoubt.addAll(events);
            return;
          }
          try {
            connection.rollback();
          } catch (SQLException ignored) {
            // the connection is gone; so is the transaction
          }
          if (System.nanoTime() > giveUp) {
            throw e;
          }
        }
      } catch (SQLException e) {
        if (committing || System.nanoTime() > giveUp) {
          throw new IllegalStateException("publisher could not reach the database", e);
        }
      }
      // A deadlock between two publishers of the same keys, or the database away: retry.
      Thread.sleep(100);
    }
  }

  /** Events committed so far (for recovery measurements while running). */
  public List<OutboxEvent> committedSoFar() {
    synchronized (committed) {
      return List.copyOf(committed);
    }
  }

  /** Stops publishing; returns every committed event, in-doubt commits resolved. */
  public List<OutboxEvent> stop() throws InterruptedException, SQLException {
    running.set(false);
    for (Thread t : threads) {
      t.join(Duration.ofSeconds(60).toMillis());
    }
    if (failure.get() != null) {
      throw new AssertionError("a publisher failed", failure.get());
    }
    List<OutboxEvent> all = new ArrayList<>(committedSoFar());
    if (!inDoubt.isEmpty()) {
      all.addAll(inTheDatabase(inDoubt));
    }
    return all;
  }

  /**
   * Those of {@code events} the events table has (events stay there after delivery: nothing purges
   * them during a test).
   */
  public List<OutboxEvent> inTheDatabase(List<OutboxEvent> events) throws SQLException {
    Set<String> present = new HashSet<>();
    try (Connection c = dataSource.getConnection();
        PreparedStatement s =
            c.prepareStatement("SELECT id FROM " + tablePrefix + "events WHERE id = ANY(?)")) {
      s.setArray(1, c.createArrayOf("text", events.stream().map(OutboxEvent::id).toArray()));
      try (ResultSet rs = s.executeQuery()) {
        while (rs.next()) {
          present.add(rs.getString(1));
        }
      }
    }
    return events.stream().filter(e -> present.contains(e.id())).toList();
  }

  @Override
  public void close() {
    running.set(false);
  }
}
