package io.relaybus.store.randomized;

import static org.assertj.core.api.Assertions.assertThat;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.DeliveryToken;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.OutboxStore;
import io.relaybus.store.PublishResult;
import io.relaybus.store.memory.InMemoryOutboxStore;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.time.Clock;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/**
 * The randomized test can fail: each test breaks one guarantee of a sound store (the in-memory one)
 * by intercepting one of its methods, runs the randomized test on it, and expects the finding that
 * names the broken invariant. Each breakage fires many times in a run.
 */
class CheckerCatchesBrokenStoresTest {
  private static final long SEED = 13;
  private static final long OPS = 10_000;

  /** Replaces one call of the store: {@code proceed} runs the real one. */
  @FunctionalInterface
  private interface Breakage {
    Object call(Method method, Object[] args, Proceed proceed) throws Throwable;
  }

  @FunctionalInterface
  private interface Proceed {
    Object run() throws Throwable;
  }

  /** A sound in-memory store with one method broken; a proxy, so new store methods pass through. */
  private static OutboxStore broken(String methodName, Breakage breakage) {
    OutboxStore sound =
        InMemoryOutboxStore.builder().clock(Clock.systemUTC()).retryPolicy(World.POLICY).build();
    return (OutboxStore)
        Proxy.newProxyInstance(
            OutboxStore.class.getClassLoader(),
            new Class<?>[] {OutboxStore.class},
            (proxy, method, args) -> {
              Proceed proceed =
                  () -> {
                    try {
                      return method.invoke(sound, args);
                    } catch (InvocationTargetException e) {
                      throw e.getCause();
                    }
                  };
              return method.getName().equals(methodName)
                  ? breakage.call(method, args, proceed)
                  : proceed.run();
            });
  }

  private static List<String> findings(OutboxStore store) throws Exception {
    try (store) {
      StoreConcurrencyTest.Outcome outcome = StoreConcurrencyTest.run(store, SEED, OPS);
      System.out.println(outcome.summary());
      outcome.findings().stream().limit(40).forEach(System.out::println);
      return outcome.findings();
    }
  }

  @SuppressWarnings("unchecked")
  private static List<ClaimedDelivery> batch(Proceed proceed) throws Throwable {
    return new ArrayList<>((List<ClaimedDelivery>) proceed.run());
  }

  @Test
  void soundStorePasses() throws Exception {
    assertThat(findings(broken("none", (m, a, proceed) -> proceed.run()))).isEmpty();
  }

  @Test
  void publishThatReportsAnEventItNeverWroteIsALoss() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    OutboxStore store =
        broken(
            "publish",
            (method, args, proceed) -> {
              OutboxEvent event = (OutboxEvent) args[0];
              return calls.incrementAndGet() % 100 == 0
                  ? new PublishResult(event.id(), true, event.handlers())
                  : proceed.run();
            });
    assertThat(findings(store)).anyMatch(f -> f.startsWith("lost: published, never handed out"));
  }

  @Test
  void claimThatRepeatsADeliveryIsCaught() throws Exception {
    AtomicInteger calls = new AtomicInteger();
    OutboxStore store =
        broken(
            "claim",
            (method, args, proceed) -> {
              List<ClaimedDelivery> batch = batch(proceed);
              if (!batch.isEmpty() && calls.incrementAndGet() % 20 == 0) {
                batch.add(batch.get(0));
              }
              return batch;
            });
    assertThat(findings(store)).anyMatch(f -> f.startsWith("handed out twice under one claim"));
  }

  @Test
  void claimThatReversesItsBatchBreaksKeyOrder() throws Exception {
    OutboxStore store =
        broken(
            "claim",
            (method, args, proceed) -> {
              List<ClaimedDelivery> batch = batch(proceed);
              Collections.reverse(batch);
              return batch;
            });
    assertThat(findings(store))
        .anyMatch(f -> f.startsWith("per-key order: batch not in sequence order"));
  }

  @Test
  void claimThatPassesOverTheHeadOfAKeyBreaksKeyOrder() throws Exception {
    OutboxStore[] self = new OutboxStore[1];
    self[0] =
        broken(
            "claim",
            (method, args, proceed) -> {
              List<ClaimedDelivery> batch = batch(proceed);
              // gives the head of each key back, and hands out the rest: the heads stay pending
              Set<List<String>> seen = new HashSet<>();
              List<ClaimedDelivery> heads =
                  batch.stream()
                      .filter(d -> d.key() != null && seen.add(List.of(d.handler(), d.key())))
                      .collect(Collectors.toList());
              List<ClaimedDelivery> rest =
                  batch.stream().filter(d -> !heads.contains(d)).collect(Collectors.toList());
              if (heads.isEmpty() || rest.stream().noneMatch(d -> d.key() != null)) {
                return batch;
              }
              self[0].release(heads.stream().map(ClaimedDelivery::token).toList());
              return rest;
            });
    assertThat(findings(self[0]))
        .anyMatch(f -> f.startsWith("per-key order: handed out past a pending predecessor"));
  }

  @Test
  void completionThatIgnoresItsTokenBreaksFencing() throws Exception {
    OutboxStore store =
        broken(
            "complete",
            (method, args, proceed) -> {
              proceed.run();
              // answers that every token took effect, stale or not
              @SuppressWarnings("unchecked")
              Collection<DeliveryToken> tokens = (Collection<DeliveryToken>) args[0];
              return tokens.stream().map(DeliveryToken::deliveryId).collect(Collectors.toSet());
            });
    assertThat(findings(store)).anyMatch(f -> f.startsWith("fencing: stale token took effect"));
  }

  @Test
  void claimThatGivesTheDrainNothingIsAStall() throws Exception {
    OutboxStore store =
        broken(
            "claim",
            (method, args, proceed) -> Drain.OWNER.equals(args[0]) ? List.of() : proceed.run());
    assertThat(findings(store)).anyMatch(f -> f.contains("stall:"));
  }
}
