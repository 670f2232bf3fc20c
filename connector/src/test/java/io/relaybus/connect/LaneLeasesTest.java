package io.relaybus.connect;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxStatistics;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.OutboxStoreException;
import io.relaybus.store.memory.InMemoryOutboxStore;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

class LaneLeasesTest {
  private static final String GROUP = "orders";
  private static final LaneRange RANGE = new LaneRange(0, 3);
  private static final Duration LEASE = Duration.ofMinutes(5);

  private final InMemoryOutboxStore store = InMemoryOutboxStore.builder().build();
  private final List<LaneLeases> opened = new ArrayList<>();
  private final List<TaskMetrics> metrics = new ArrayList<>();

  @AfterEach
  void close() {
    opened.forEach(LaneLeases::close);
    metrics.forEach(TaskMetrics::close);
  }

  private LaneLeases incarnation(String owner, OutboxStore through, Duration lease) {
    TaskMetrics taskMetrics = new TaskMetrics(GROUP + "-" + UUID.randomUUID(), 0);
    metrics.add(taskMetrics);
    LaneLeases leases =
        new LaneLeases(
            through,
            owner,
            GROUP,
            RANGE,
            lease,
            Clock.systemUTC(),
            taskMetrics,
            "relaybus-lease-renewal-" + owner);
    opened.add(leases);
    return leases;
  }

  private LaneLeases started(String owner) {
    LaneLeases leases = incarnation(owner, store, LEASE);
    leases.start();
    return leases;
  }

  private static List<Integer> lanes(LaneLeases leases) {
    return leases.held().stream().map(LaneLease::lane).toList();
  }

  /**
   * Guards against a lane lost for good: taken by another holder that later hands it back, it must
   * come back to the task within a round or two, not stay unowned until a restart.
   */
  @Test
  void laneLostToAHolderThatRelinquishesItComesBack() {
    LaneLeases task = started("task-a");
    List<LaneLease> taken = store.acquireLanes("other", GROUP, List.of(2), LEASE);

    task.renew();
    assertThat(lanes(task)).containsExactly(0, 1, 3);
    assertThat(task.takeLost()).containsExactly(2);
    store.relinquishLanes("other", taken);
    task.renew();

    assertThat(lanes(task)).containsExactly(0, 1, 2, 3);
  }

  @Test
  void laneLostToAHolderWhoseLeaseLapsesComesBack() {
    LaneLeases task = started("task-a");
    store.acquireLanes("other", GROUP, List.of(1), Duration.ofMillis(200));
    task.renew();
    assertThat(task.takeLost()).containsExactly(1);

    await()
        .atMost(Duration.ofSeconds(10))
        .untilAsserted(
            () -> {
              task.renew();
              assertThat(lanes(task)).containsExactly(0, 1, 2, 3);
            });
  }

  /** A lost lane is asked for again only once the task thread has forgotten the old lease. */
  @Test
  void lostLaneIsNotAskedForAgainBeforeTheTaskTookTheLoss() {
    LaneLeases task = started("task-a");
    List<LaneLease> taken = store.acquireLanes("other", GROUP, List.of(2), LEASE);
    task.renew();
    store.relinquishLanes("other", taken);

    task.renew();
    assertThat(lanes(task)).containsExactly(0, 1, 3);
    assertThat(task.takeLost()).containsExactly(2);
    task.renew();
    assertThat(lanes(task)).containsExactly(0, 1, 2, 3);
  }

  /**
   * Guards against lanes-held counting leases that lapsed: while renewals fail (the database
   * unreachable, the worker cut off from it) the task stops emitting from a lane once its lease
   * expires, and lanes-held, which the RelaybusNoLanesHeld alert sums per connector ("check ...
   * that the database is reachable"), must say so rather than keep the count of the last round that
   * reached the store.
   */
  @Test
  void lanesHeldCountsOnlyTheLeasesStillValid() {
    AtomicReference<Instant> now = new AtomicReference<>(Instant.now());
    Clock clock =
        new Clock() {
          @Override
          public java.time.ZoneId getZone() {
            return java.time.ZoneOffset.UTC;
          }

          @Override
          public Clock withZone(java.time.ZoneId zone) {
            return this;
          }

          @Override
          public Instant instant() {
            return now.get();
          }
        };
    AtomicBoolean unreachable = new AtomicBoolean();
    OutboxStore through =
        new ForwardingStore(store) {
          @Override
          public List<LaneLease> renewLanes(
              String owner, Collection<LaneLease> leases, Duration duration) {
            if (unreachable.get()) {
              throw new OutboxStoreException("the database is unreachable", true, null);
            }
            return super.renewLanes(owner, leases, duration);
          }
        };
    TaskMetrics taskMetrics = new TaskMetrics(GROUP + "-" + UUID.randomUUID(), 0);
    metrics.add(taskMetrics);
    LaneLeases task =
        new LaneLeases(
            through,
            "task-a",
            GROUP,
            RANGE,
            LEASE,
            clock,
            taskMetrics,
            "relaybus-lease-renewal-task-a");
    opened.add(task);
    task.start();
    assertThat(taskMetrics.value("lanes-held")).isEqualTo(4.0);

    unreachable.set(true);
    now.set(now.get().plus(LEASE).plusSeconds(1));
    assertThatThrownBy(task::renew).isInstanceOf(OutboxStoreException.class);

    assertThat(task.held()).as("leases usable now").isEmpty();
    assertThat(taskMetrics.value("lanes-held")).isEqualTo(0.0);
  }

  /**
   * Guards against an old incarnation taking a lane from a newer one: with three overlapping
   * incarnations A < B < C, a lane none got at start (another group held it) goes to C when it is
   * free, and A's and B's later rounds must leave it with C, also after they stop.
   */
  @Test
  void olderIncarnationNeverTakesALaneFromANewerOne() {
    List<LaneLease> foreign =
        store.acquireLanes("other-connector/task", "other", List.of(3), LEASE);
    LaneLeases a = started("task-0/a");
    LaneLeases b = started("task-0/b");
    LaneLeases c = started("task-0/c");
    assertThat(lanes(c)).containsExactly(0, 1, 2);
    store.relinquishLanes("other-connector/task", foreign);

    c.renew();
    a.renew();
    b.renew();
    c.renew();

    assertThat(lanes(a)).isEmpty();
    assertThat(lanes(b)).isEmpty();
    assertThat(lanes(c)).containsExactly(0, 1, 2, 3);
    a.relinquish();
    b.relinquish();
    c.renew();
    assertThat(lanes(c)).containsExactly(0, 1, 2, 3);
    assertThat(store.acquireFreeLanes("probe", GROUP, List.of(0, 1, 2, 3), LEASE)).isEmpty();
  }

  /**
   * Guards against renewals stuck behind the statistics scan: a scan that takes long must not hold
   * up the renewal rounds, or the leases lapse under a large backlog.
   */
  @Test
  void slowStatisticsScanDoesNotDelayRenewals() throws Exception {
    CountDownLatch scanMayEnd = new CountDownLatch(1);
    CountDownLatch scanStarted = new CountDownLatch(1);
    AtomicInteger renewals = new AtomicInteger();
    OutboxStore slowStatistics =
        new ForwardingStore(store) {
          @Override
          public OutboxStatistics statistics() {
            scanStarted.countDown();
            try {
              scanMayEnd.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
            return super.statistics();
          }

          @Override
          public List<LaneLease> renewLanes(
              String owner, Collection<LaneLease> leases, Duration duration) {
            renewals.incrementAndGet();
            return super.renewLanes(owner, leases, duration);
          }
        };
    LaneLeases task = incarnation("task-a", slowStatistics, Duration.ofMillis(300));
    try {
      task.start();
      await().atMost(Duration.ofSeconds(10)).until(() -> scanStarted.getCount() == 0);

      await().atMost(Duration.ofSeconds(20)).until(() -> renewals.get() >= 5);
      assertThat(lanes(task)).containsExactly(0, 1, 2, 3);
    } finally {
      scanMayEnd.countDown();
    }
  }

  /**
   * A start takes lanes over from holders of its group that started before it (by the stamp in
   * their owner ids, or without one: a relaybus that did not stamp), not from one that started
   * after it; the latter it gets once they are free.
   */
  @Test
  void aStartTakesOverFromOlderAndUnstampedHoldersOnly() {
    Instant now = Instant.now();
    String unstamped = GROUP + "/task-0/12345678-1234-1234-1234-123456789abc"; // no stamp
    String older = LaneLeases.owner(GROUP + "/task-1", now.minusSeconds(60));
    String newer = LaneLeases.owner(GROUP + "/task-0", now.plusSeconds(60));
    assertThat(LaneLeases.startStamp(unstamped)).isEmpty();
    assertThat(LaneLeases.startStamp(older))
        .hasValue(ChronoUnit.MICROS.between(Instant.EPOCH, now.minusSeconds(60)));
    store.acquireLanes(unstamped, GROUP, List.of(0), LEASE);
    store.acquireLanes(older, GROUP, List.of(1), LEASE);
    List<LaneLease> newers = store.acquireLanes(newer, GROUP, List.of(2), LEASE);

    LaneLeases task = started(LaneLeases.owner(GROUP + "/task-0", now));

    assertThat(lanes(task)).containsExactly(0, 1, 3);
    store.relinquishLanes(newer, newers);
    task.renew();
    assertThat(lanes(task)).containsExactly(0, 1, 2, 3);
  }
}
