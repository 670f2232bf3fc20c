package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.eq;
import static org.assertj.core.api.Assertions.assertThat;

import com.mongodb.client.MongoClient;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.testing.MongoServers;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * A REPLACE that removed the pending timer and then cannot arm its own event (another caller armed
 * the id in between) must not answer REPLACED for an event that was never stored. The interleaving
 * is forced deterministically: the first store's clock, read at the start of MongoTimers.arm (after
 * remove), runs the second caller's schedule.
 */
class TimerReplaceReportsOnlyWhatItArmedTest {
  private static MongoClient client;

  @BeforeAll
  static void connect() {
    client = MongoServers.client(MongoServers.inProcess());
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  /** A fixed clock that runs a hook once when read from MongoTimers.arm. */
  static final class HookClock extends Clock {
    final AtomicReference<Runnable> onArm = new AtomicReference<>();
    private final Instant now = Instant.parse("2026-01-01T00:00:00Z");

    @Override
    public Instant instant() {
      boolean inArm =
          StackWalker.getInstance()
              .walk(
                  s ->
                      s.anyMatch(
                          f ->
                              f.getClassName().equals(MongoTimers.class.getName())
                                  && f.getMethodName().equals("arm")));
      if (inArm) {
        Runnable hook = onArm.getAndSet(null);
        if (hook != null) {
          hook.run();
        }
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
  }

  private static OutboxEvent timerEvent(String id) {
    return OutboxEvent.builder("session.expired").id(id).json("{}").handler("h").build();
  }

  private static MongoOutboxStore open(Clock clock) {
    MongoOutboxStore s =
        MongoOutboxStore.builder()
            .client(client)
            .database("timer_replace")
            .collectionPrefix("r1_")
            .clock(clock)
            .build();
    s.setup();
    return s;
  }

  @Test
  void replaceRacingAnArmDoesNotReportAnEventItNeverStored() {
    HookClock clock1 = new HookClock();
    MongoOutboxStore first = open(clock1);
    MongoOutboxStore second =
        open(Clock.fixed(Instant.parse("2026-01-01T00:00:00Z"), ZoneOffset.UTC));
    Timer inAMinute = Timer.in(Duration.ofMinutes(1));

    assertThat(first.schedule(timerEvent("e0"), inAMinute.named("t1", TimerConflict.FAIL)))
        .isEqualTo(new TimerResult(TimerOutcome.ARMED, "e0"));

    AtomicReference<TimerResult> secondResult = new AtomicReference<>();
    clock1.onArm.set(
        () ->
            secondResult.set(
                second.schedule(timerEvent("e2"), inAMinute.named("t1", TimerConflict.KEEP))));
    TimerResult replaced =
        first.schedule(timerEvent("e1"), inAMinute.named("t1", TimerConflict.REPLACE));

    // The second caller ran between the first one's remove and arm.
    assertThat(secondResult.get()).isNotNull();
    boolean e1Stored =
        client
                .getDatabase("timer_replace")
                .getCollection("r1_events")
                .find(eq(Fields.ID, "e1"))
                .first()
            != null;
    // Whatever the outcome, an answer naming e1 as the timer's event must mean e1 was armed.
    assertThat(replaced.eventId().equals("e1") && !e1Stored)
        .as(
            "first caller answered %s, second %s; event e1 stored: %s",
            replaced, secondResult.get(), e1Stored)
        .isFalse();
    TimerResult cancelled = first.cancelTimer("h", "t1");
    assertThat(cancelled.outcome()).isEqualTo(TimerOutcome.CANCELLED);
    // the pending timer is the one the last answer named
    assertThat(cancelled.eventId()).isIn(replaced.eventId(), secondResult.get().eventId());
  }
}
