package io.relaybus.store.randomized;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.OutboxStore;
import io.relaybus.store.RetryPolicy;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * A randomized concurrency test of a store: {@value World#TASKS} tasks (lane holders of one
 * connector that crash, restart and lose lanes), a holder of another connector, two publishers
 * (events, batches, republishes, timers, cancels) and an operator (requeue, purge, listings) run at
 * once against one store until {@value #OPS_PROPERTY} store calls are spent; then the chaos stops,
 * a {@link Drain} takes every lane and drains, and the {@link Checker} checks the journal: nothing
 * lost, nothing handed out twice under one claim, fencing, per-key order, no delivery in flight
 * without a holder, no stall.
 *
 * <p>Seeded: the seed is printed at the start and every finding names it; {@code
 * -Drelaybus.random.seed=N} runs the same choices again. The interleaving of the threads is the
 * scheduler's, so a seed that found a race finds it again often, not always. The short form runs in
 * every build; the long form: {@code -Drelaybus.random.ops=200000}.
 */
public abstract class StoreConcurrencyTest {
  static final String SEED_PROPERTY = "relaybus.random.seed";
  static final String OPS_PROPERTY = "relaybus.random.ops";

  /** The short form, a few tens of seconds on a loaded 2-core machine. */
  protected static final long DEFAULT_OPS = 4_000;

  /** A fresh, set-up store with nothing in it, charging attempts against {@code policy}. */
  protected abstract OutboxStore newStore(RetryPolicy policy);

  /**
   * What the store itself noticed that breaks an invariant (a safety net that repaired it, so the
   * journal's checks may not see it); none by default.
   */
  protected List<String> storeFindings(OutboxStore store) {
    return List.of();
  }

  /** Store calls of the short form; {@value #OPS_PROPERTY} overrides it. */
  protected long defaultOperations() {
    return DEFAULT_OPS;
  }

  @Test
  void randomizedRunKeepsEveryGuarantee() throws Exception {
    String given = System.getProperty(SEED_PROPERTY);
    long seed =
        given == null || given.isBlank()
            ? new SecureRandom().nextLong()
            : Long.parseLong(given.strip());
    long budget = Long.getLong(OPS_PROPERTY, defaultOperations());
    String name = getClass().getSimpleName();
    System.out.printf(
        "%s: seed %d (rerun with -D%s=%d), %d operations%n",
        name, seed, SEED_PROPERTY, seed, budget);
    long began = System.nanoTime();
    try (OutboxStore store = newStore(World.POLICY)) {
      Outcome outcome = run(store, seed, budget);
      System.out.printf(
          "%s: seed %d, %d s: %s%n",
          name, seed, (System.nanoTime() - began) / 1_000_000_000L, outcome.summary());
      List<String> findings = new ArrayList<>(outcome.findings());
      findings.addAll(storeFindings(store));
      findings.forEach(f -> System.out.printf("%s: seed %d: %s%n", name, seed, f));
      assertThat(findings)
          .as("seed %d (rerun with -D%s=%d): invariants broken", seed, SEED_PROPERTY, seed)
          .isEmpty();
    }
  }

  /** What a run found (empty when every invariant held) and its counts. */
  record Outcome(List<String> findings, String summary) {}

  /** One run: the chaos until {@code budget} store calls are spent, the drain, the checks. */
  static Outcome run(OutboxStore store, long seed, long budget) throws Exception {
    World world = new World(store, seed, budget);
    runActors(world);
    Drain drain = new Drain(world);
    drain.run();
    Checker checker = new Checker(world, drain);
    List<String> findings = checker.check();
    return new Outcome(findings, checker.summary());
  }

  private static void runActors(World world) throws Exception {
    List<Runnable> actors = new ArrayList<>();
    for (int t = 0; t < World.TASKS; t++) {
      actors.add(new TaskActor(world, t));
    }
    actors.add(new ForeignActor(world));
    actors.add(new PublisherActor(world, 0));
    actors.add(new PublisherActor(world, 1));
    actors.add(new OperatorActor(world));
    AtomicInteger threads = new AtomicInteger();
    ExecutorService pool =
        Executors.newFixedThreadPool(
            actors.size(), r -> new Thread(r, "random-actor-" + threads.incrementAndGet()));
    try {
      List<Future<?>> running = new ArrayList<>();
      for (Runnable actor : actors) {
        running.add(
            pool.submit(
                () -> {
                  try {
                    actor.run();
                  } catch (RuntimeException | Error e) {
                    world.stop();
                    world.journal.violations.add(
                        actor.getClass().getSimpleName() + " failed: " + e);
                    throw e;
                  }
                }));
      }
      for (Future<?> f : running) {
        try {
          f.get(4, TimeUnit.HOURS);
        } catch (java.util.concurrent.ExecutionException e) {
          // recorded as a finding above
        }
      }
    } finally {
      pool.shutdownNow();
    }
  }
}
