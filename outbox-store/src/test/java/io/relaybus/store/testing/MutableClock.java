package io.relaybus.store.testing;

import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.concurrent.atomic.AtomicReference;

/**
 * A clock the test moves by hand, for the stores' {@code clock(...)} builder seam: time passes only
 * through {@link #advance}, so lease expiry and retry backoff are asserted exactly, never waited
 * for. A test can also force an interleaving through it: {@link #onceReadFrom} runs another
 * caller's steps in the middle of a store operation, at the point where it reads the time.
 */
public final class MutableClock extends Clock {
  private final AtomicReference<Hook> hook = new AtomicReference<>();
  private volatile Instant now;

  public MutableClock(Instant start) {
    this.now = start;
  }

  public void advance(Duration duration) {
    now = now.plus(duration);
  }

  /**
   * Runs {@code action} once, before the first read of this clock made from within {@code
   * type.method} (anywhere up the stack) returns; reads from elsewhere do not consume it.
   */
  public void onceReadFrom(Class<?> type, String method, Runnable action) {
    hook.set(new Hook(type.getName(), method, action));
  }

  @Override
  public Instant instant() {
    Hook pending = hook.get();
    if (pending != null && pending.onStack() && hook.compareAndSet(pending, null)) {
      pending.action().run();
    }
    return now;
  }

  @Override
  public ZoneId getZone() {
    return ZoneOffset.UTC;
  }

  @Override
  public Clock withZone(ZoneId zone) {
    return this;
  }

  private record Hook(String className, String method, Runnable action) {
    boolean onStack() {
      return StackWalker.getInstance()
          .walk(
              frames ->
                  frames.anyMatch(
                      f -> f.getClassName().equals(className) && f.getMethodName().equals(method)));
    }
  }
}
