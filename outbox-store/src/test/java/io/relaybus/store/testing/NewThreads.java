package io.relaybus.store.testing;

import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Tests: the threads a piece of code leaves behind. {@link #since()} notes the threads alive now;
 * {@link #leftAfter(Duration)} names the threads alive that were not, once they had up to {@code
 * grace} to end by themselves. pgjdbc's one {@code PostgreSQL-JDBC-Cleaner} thread does not count:
 * it serves the whole JVM and ends by itself after 30 s without work.
 */
public final class NewThreads {
  private final Set<Thread> before;

  private NewThreads(Set<Thread> before) {
    this.before = before;
  }

  /** The threads alive now, and {@code also} (e.g. a fixture's own thread started next). */
  public static NewThreads since(Thread... also) {
    Set<Thread> before = new HashSet<>(Thread.getAllStackTraces().keySet());
    before.addAll(List.of(also));
    return new NewThreads(before);
  }

  /** The names of the threads alive now that were not before, sorted. */
  public List<String> now() {
    return Thread.getAllStackTraces().keySet().stream()
        .filter(t -> t.isAlive() && !before.contains(t))
        .filter(t -> !t.getName().equals("PostgreSQL-JDBC-Cleaner"))
        .map(Thread::getName)
        .sorted()
        .toList();
  }

  /** {@link #now()} once it is empty, or once {@code grace} has passed. */
  public List<String> leftAfter(Duration grace) throws InterruptedException {
    long deadline = System.nanoTime() + grace.toNanos();
    List<String> left = now();
    while (!left.isEmpty() && System.nanoTime() < deadline) {
      Thread.sleep(100);
      left = now();
    }
    return left;
  }
}
