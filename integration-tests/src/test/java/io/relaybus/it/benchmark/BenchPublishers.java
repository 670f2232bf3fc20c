package io.relaybus.it.benchmark;

import io.relaybus.it.benchmark.BenchOutbox.Event;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import javax.sql.DataSource;

/**
 * The benchmark's application: {@code threads} publishers, each owning the keys {@code k} with
 * {@code k % threads == thread} (so a key's order is its publisher's commit order, whatever the
 * outbox), writing through a {@link BenchOutbox} in transactions of their own. Remembers every
 * committed event with the time its commit returned, for the verifier's accounting and latency.
 */
final class BenchPublishers {
  /** A committed event: its key, its per-key sequence, when its commit returned (nanoTime). */
  record Committed(String key, long seq, long committedAt) {}

  private final DataSource app;
  private final BenchOutbox outbox;
  private final int threads;
  private final int keys;
  private final long[] nextSeq;
  private final Map<String, Committed> committed = new ConcurrentHashMap<>();
  private final AtomicLong count = new AtomicLong();

  BenchPublishers(DataSource app, BenchOutbox outbox, int threads, int keys) {
    this.app = app;
    this.outbox = outbox;
    this.threads = threads;
    this.keys = keys;
    this.nextSeq = new long[keys];
  }

  Map<String, Committed> committed() {
    return committed;
  }

  /** Events committed so far. */
  long count() {
    return count.get();
  }

  /** {@code total} events in transactions of {@code batch}, as fast as the database takes them. */
  void publish(int total, int batch) throws Exception {
    run(
        (thread, cursor) -> {
          int mine = total / threads + (thread < total % threads ? 1 : 0);
          for (int done = 0; done < mine; ) {
            int n = Math.min(batch, mine - done);
            commit(next(thread, cursor, n));
            done += n;
          }
        });
  }

  /**
   * One event per transaction at {@code ratePerSecond} in all for {@code seconds}: event i of the
   * run is due at {@code i / rate}; a publisher that falls behind publishes at once (the committed
   * rate then shows it could not keep up).
   */
  void publishAtRate(double ratePerSecond, double seconds) throws Exception {
    long start = System.nanoTime();
    long total = Math.round(ratePerSecond * seconds);
    run(
        (thread, cursor) -> {
          for (long i = thread; i < total; i += threads) {
            long due = start + (long) (i * 1e9 / ratePerSecond);
            long wait = due - System.nanoTime();
            if (wait > 0) {
              LockSupport.parkNanos(wait);
            }
            commit(next(thread, cursor, 1));
          }
        });
  }

  private interface Work {
    void run(int thread, int[] cursor) throws Exception;
  }

  private void run(Work work) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      List<Future<?>> running = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        int thread = t;
        running.add(
            pool.submit(
                () -> {
                  work.run(thread, new int[] {thread});
                  return null;
                }));
      }
      for (Future<?> f : running) {
        f.get();
      }
    } finally {
      pool.shutdownNow();
    }
  }

  /** The next {@code n} events of {@code thread}, its keys taken in turn. */
  private List<Event> next(int thread, int[] cursor, int n) {
    List<Event> events = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      int key = cursor[0];
      cursor[0] = key + threads >= keys ? thread : key + threads;
      long seq;
      synchronized (nextSeq) {
        seq = ++nextSeq[key];
      }
      events.add(new Event(BenchOutbox.newId(), "key-" + key, seq));
    }
    return events;
  }

  private void commit(List<Event> events) throws SQLException {
    try (Connection c = app.getConnection()) {
      c.setAutoCommit(false);
      outbox.write(c, events);
      c.commit();
    }
    long now = System.nanoTime();
    for (Event e : events) {
      committed.put(e.id(), new Committed(e.key(), e.seq(), now));
    }
    count.addAndGet(events.size());
  }
}
