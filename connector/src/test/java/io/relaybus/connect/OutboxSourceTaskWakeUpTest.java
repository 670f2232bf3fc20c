package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.OutboxEvent;
import io.relaybus.store.postgres.PostgresOutboxStore;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.connect.source.SourceRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The task over a real PostgreSQL 17 with a long safety-net poll ({@code poll.interval.ms=5000}): a
 * publish wakes the idle task (the schema's trigger NOTIFYs, the task's store LISTENs), so the
 * event is claimed long before the next poll would have found it; with {@code outbox.notify=false}
 * it waits for that poll.
 */
class OutboxSourceTaskWakeUpTest {
  private static final AtomicInteger PREFIXES = new AtomicInteger();
  private static EmbeddedPostgres server;

  @BeforeAll
  static void startServer() throws IOException {
    server = EmbeddedPostgres.builder().start();
  }

  @AfterAll
  static void stopServer() throws IOException {
    server.close();
  }

  private static String url() {
    return "jdbc:postgresql://127.0.0.1:" + server.getPort() + "/postgres";
  }

  private static PostgresOutboxStore publisher(String prefix) {
    return PostgresOutboxStore.builder()
        .jdbcUrl(url())
        .user("postgres")
        .tablePrefix(prefix)
        .poolSize(2)
        .build();
  }

  private static Map<String, String> props(String prefix, boolean notify) {
    Map<String, String> props = new HashMap<>();
    props.put("name", "wake-" + prefix);
    props.put("connection.url", url());
    props.put("connection.user", "postgres");
    props.put("outbox.table.prefix", prefix);
    props.put("outbox.notify", String.valueOf(notify));
    props.put("task.lanes", "0-255");
    props.put("task.index", "0");
    props.put("poll.interval.ms", "5000");
    return props;
  }

  /** A task that polls on a thread of its own, collecting what poll returns. */
  private static final class Polling implements AutoCloseable {
    final OutboxSourceTask task = new OutboxSourceTask();
    final ConcurrentLinkedQueue<SourceRecord> records = new ConcurrentLinkedQueue<>();
    final AtomicInteger polls = new AtomicInteger();
    private final AtomicBoolean running = new AtomicBoolean(true);
    private final ExecutorService thread = Executors.newSingleThreadExecutor();
    private final Future<?> loop;

    Polling(Map<String, String> props) {
      task.initialize(new TestSourceTaskContext());
      task.start(props);
      loop =
          thread.submit(
              () -> {
                while (running.get()) {
                  List<SourceRecord> batch;
                  try {
                    batch = task.poll();
                  } catch (org.apache.kafka.connect.errors.RetriableException e) {
                    batch = null; // as Connect: logged, then poll() again
                  }
                  polls.incrementAndGet();
                  if (batch != null) {
                    records.addAll(batch);
                  }
                }
                return null;
              });
    }

    /**
     * Ends the poll loop (failing with what it threw) and stops the task. Interrupted while it
     * waits for the loop, it keeps the interrupt status for the test's runner and leaves the rest.
     */
    @Override
    public void close() throws ExecutionException, TimeoutException {
      running.set(false);
      try {
        loop.get(30, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
      thread.shutdown();
      task.stop();
    }
  }

  private static OutboxEvent event(String id) {
    return OutboxEvent.builder("order.placed").id(id).key("k").json("{}").handlers("h").build();
  }

  /** Waits for the task's first poll (a claim that found nothing), publishes e1, waits for it. */
  private static void deliverFirstEvent(PostgresOutboxStore publisher, Polling polling) {
    await().atMost(Duration.ofSeconds(30)).until(() -> polling.polls.get() >= 1);
    publisher.publish(event("e1"));
    await()
        .pollInterval(Duration.ofMillis(5))
        .atMost(Duration.ofSeconds(5))
        .until(() -> polling.records.size() == 1);
  }

  /**
   * Idle (its first claim found nothing, so the next is due 5 s later), the task claims an event
   * published about a second later within 2 s: the publish woke it (without the wake-up it came 4 s
   * after the publish).
   */
  @Test
  void aPublishWakesAnIdleTaskLongBeforeItsPollInterval() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      try (Polling polling = new Polling(props(prefix, true))) {
        // idle: the first poll's claim found nothing, the next claim is due 5 s after it
        await().atMost(Duration.ofSeconds(30)).until(() -> polling.polls.get() >= 1);
        assertThat(polling.records).isEmpty();

        publisher.publish(event("e1"));

        await().atMost(Duration.ofSeconds(2)).until(() -> polling.records.size() == 1);
        assertThat(polling.records)
            .singleElement()
            .satisfies(record -> assertThat(record.topic()).isEqualTo("h"));
        assertThat(polling.task.metrics().value("wake-ups-total")).isGreaterThanOrEqualTo(1.0);
      }
    }
  }

  /** With outbox.notify=false the task does not listen: the event waits for the next poll. */
  @Test
  void withoutNotifyTheEventWaitsForThePollInterval() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      try (Polling polling = new Polling(props(prefix, false))) {
        await().atMost(Duration.ofSeconds(30)).until(() -> polling.polls.get() >= 1);

        publisher.publish(event("e1"));

        await()
            .during(Duration.ofSeconds(2))
            .atMost(Duration.ofSeconds(3))
            .until(() -> polling.records.isEmpty());
        await().atMost(Duration.ofSeconds(30)).until(() -> polling.records.size() == 1);
        assertThat(polling.task.metrics().value("wake-ups-total")).isZero();
      }
    }
  }

  /**
   * Kafka has not acknowledged the last batch (here it never does: nothing calls commitRecord), and
   * an event is published a moment after it went out: the task claims it after a short wait (10 ms
   * after the first empty claim, doubling), not after the acknowledgements. Before, it waited for
   * them up to a second per claim (MAX_IDLE_WAIT), so the event came about a second later.
   */
  @Test
  void anEventPublishedWhileAcknowledgementsAreOutstandingIsNotHeldForThem() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      try (Polling polling = new Polling(props(prefix, true))) {
        deliverFirstEvent(publisher, polling);

        publisher.publish(event("e2"));

        await()
            .pollInterval(Duration.ofMillis(5))
            .atMost(Duration.ofMillis(600))
            .until(() -> polling.records.size() == 2);
      }
    }
  }

  /**
   * A task that holds none of its lanes (another connector on the same outbox holds them, or a
   * newer incarnation of the task took them over) has nothing to claim and is idle: its poll()
   * returns about once a second, as an idle poll does. Its store has never claimed, so every wait
   * for work takes any log row as news and returns at once; the task then polls in a tight loop,
   * one wake-up statement (raising the waiting flag, so every publish notifies) per poll.
   */
  @Test
  void aTaskThatHoldsNoLaneIdlesInsteadOfSpinning() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      publisher.acquireLanes(
          "another-connector/task-0",
          "another-connector",
          io.relaybus.store.LaneRange.all().lanes(),
          Duration.ofMinutes(10));
      try (Polling polling = new Polling(props(prefix, true))) {
        await().atMost(Duration.ofSeconds(30)).until(() -> polling.polls.get() >= 1);
        Thread.sleep(1_000);
        int before = polling.polls.get();
        Thread.sleep(3_000);
        int polls = polling.polls.get() - before;

        assertThat(polls).as("polls in 3 s by a task that holds no lane").isLessThanOrEqualTo(10);
      }
    }
  }

  /** The pids of the task's backends (its pool and its listener), by their application name. */
  private static List<Long> backendsOf(String connectorName) throws Exception {
    List<Long> pids = new java.util.ArrayList<>();
    try (java.sql.Connection c = java.sql.DriverManager.getConnection(url(), "postgres", null);
        java.sql.PreparedStatement s =
            c.prepareStatement("SELECT pid FROM pg_stat_activity WHERE application_name = ?")) {
      s.setString(1, "relaybus-connect " + connectorName + "/task-0");
      try (java.sql.ResultSet rs = s.executeQuery()) {
        while (rs.next()) {
          pids.add(rs.getLong(1));
        }
      }
    }
    return pids;
  }

  private static void signal(String signal, List<Long> pids) throws Exception {
    for (long pid : pids) {
      Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).start();
      assertThat(kill.waitFor()).as("kill -" + signal + " " + pid).isZero();
    }
  }

  /**
   * The task's database connections stop answering (a server that froze, or connections a firewall
   * dropped silently: each socket stays open and no reply comes). The store's statements are
   * bounded by statement_timeout (60 s), which only a live backend enforces; the client sets no
   * timeout of its own, so the claim in progress blocks for as long as the peer is silent: poll()
   * never returns (Connect can neither stop nor pause the task), and the task's lanes stay leased,
   * renewed on other connections, while nothing of them is sent. The pool's connections now get the
   * driver's socketTimeout (the statement timeout plus 5 s, 65 s by default: {@code
   * PostgresOutboxStoreTest.theSocketTimeoutFollowsTheStatementTimeoutUnlessTheUrlSetsOne}); here
   * the URL sets 3 s, so that the test waits seconds, not a minute: poll() must return within 30 s
   * of the freeze, and the task go on polling.
   */
  @Test
  void aPollWhoseConnectionStopsAnsweringReturnsWithinTheStatementTimeout() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    Map<String, String> props = props(prefix, false);
    props.put("poll.interval.ms", "100"); // claims every 100 ms, on the same pooled connection
    props.put("connection.url", url() + "?socketTimeout=3");
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      try (Polling polling = new Polling(props)) {
        await().atMost(Duration.ofSeconds(30)).until(() -> polling.polls.get() >= 5);
        List<Long> backends = backendsOf("wake-" + prefix);
        assertThat(backends).isNotEmpty();

        signal("STOP", backends);
        try {
          Thread.sleep(500); // the claim in progress, or the next, is on a silent connection
          int polls = polling.polls.get();

          await("poll() to return again after the task's connections stopped answering")
              .atMost(Duration.ofSeconds(30))
              .until(() -> polling.polls.get() > polls + 1);
        } finally {
          signal("CONT", backends);
        }
      }
    }
  }

  /**
   * With poll.linger.ms, a claim that could have taken more is followed by the next only once the
   * linger has passed since it began, even though a publish would wake the task: e2, published as
   * soon as e1 arrived, is not claimed for well over a second (without the linger: within a few
   * milliseconds, see the test above), and then is.
   */
  @Test
  void aLingeringTaskClaimsAgainOnlyOnceTheLingerHasPassed() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    Map<String, String> props = props(prefix, true);
    props.put("poll.linger.ms", "1500");
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      try (Polling polling = new Polling(props)) {
        deliverFirstEvent(publisher, polling);

        publisher.publish(event("e2"));

        await()
            .during(Duration.ofMillis(900))
            .atMost(Duration.ofSeconds(2))
            .until(() -> polling.records.size() == 1);
        await().atMost(Duration.ofSeconds(3)).until(() -> polling.records.size() == 2);
      }
    }
  }

  /**
   * A claim that returned all it asked for (batch.size 2 of a backlog of five) is followed by the
   * next at once, lingering or not: the backlog goes out within a second with a linger of 3 s (each
   * claim lingering, the last three would come 3 and 6 s later).
   */
  @Test
  void aFullClaimIsFollowedAtOnceWhileLingering() throws Exception {
    String prefix = "wk" + PREFIXES.incrementAndGet() + "_";
    Map<String, String> props = props(prefix, true);
    props.put("poll.linger.ms", "3000");
    props.put("batch.size", "2");
    try (PostgresOutboxStore publisher = publisher(prefix)) {
      publisher.setup();
      try (Polling polling = new Polling(props)) {
        await().atMost(Duration.ofSeconds(30)).until(() -> polling.polls.get() >= 1);
        // the first claim found nothing: let its linger pass (the task listens meanwhile, for its
        // poll interval is longer), so the publish below wakes it at once
        Thread.sleep(3_500);
        publisher.publishAll(
            List.of(1, 2, 3, 4, 5).stream()
                .map(
                    n ->
                        OutboxEvent.builder("order.placed")
                            .id("e" + n)
                            .key("k" + n)
                            .json("{}")
                            .handlers("h")
                            .build())
                .toList());
        await()
            .pollInterval(Duration.ofMillis(5))
            .atMost(Duration.ofSeconds(5))
            .until(() -> !polling.records.isEmpty());

        await()
            .pollInterval(Duration.ofMillis(5))
            .atMost(Duration.ofSeconds(1))
            .until(() -> polling.records.size() == 5);
      }
    }
  }
}
