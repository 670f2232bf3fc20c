package io.relaybus.store.mongodb;

import static com.mongodb.client.model.Filters.eq;
import static org.assertj.core.api.Assertions.assertThat;

import com.mongodb.client.MongoClient;
import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneLease;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxEvent;
import io.relaybus.store.RetryPolicy;
import io.relaybus.store.Timer;
import io.relaybus.store.TimerConflict;
import io.relaybus.store.TimerOutcome;
import io.relaybus.store.TimerResult;
import io.relaybus.store.testing.MongoServers;
import io.relaybus.store.testing.MutableClock;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import org.bson.Document;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * docs/outbox-store.md, Timers: "Dead timers (their send failed maxAttempts times) free their id".
 * A timer whose last attempt is charged by a lane takeover (MongoLanes.charge) dies like one whose
 * send failed (MongoCompletion.fail), so its id must be free afterwards: a new timer under the same
 * id is ARMED.
 */
class TimerKilledByTakeoverChargeFreesItsIdTest {
  private static MongoClient client;

  @BeforeAll
  static void connect() {
    client = MongoServers.client(MongoServers.inProcess());
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  private static OutboxEvent timerEvent(String id) {
    return OutboxEvent.builder("session.expired").id(id).json("{}").handler("h").build();
  }

  @Test
  void aTimerDeadByTakeoverChargeFreesItsId() {
    MutableClock clock = new MutableClock(Instant.parse("2026-01-01T00:00:00Z"));
    MongoOutboxStore store =
        MongoOutboxStore.builder()
            .client(client)
            .database("timer_takeover")
            .collectionPrefix("k1_")
            .retryPolicy(new RetryPolicy(1, Duration.ofSeconds(1), Duration.ofSeconds(1), 0))
            .clock(clock)
            .build();
    store.setup();

    TimerResult armed =
        store.schedule(timerEvent("e1"), Timer.in(Duration.ZERO).named("t1", TimerConflict.FAIL));
    assertThat(armed.outcome()).isEqualTo(TimerOutcome.ARMED);

    List<LaneLease> a =
        store.acquireLanes("a", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    List<ClaimedDelivery> fired = store.claim("a", a, 10);
    assertThat(fired).extracting(ClaimedDelivery::eventId).containsExactly("e1");

    // b takes the lanes over while e1 is in flight: its one attempt is charged, it is dead now
    List<LaneLease> b =
        store.acquireLanes("b", "g", LaneRange.all().lanes(), Duration.ofSeconds(30));
    assertThat(b.stream().mapToInt(LaneLease::charged).sum()).isEqualTo(1);
    Document dead =
        client
            .getDatabase("timer_takeover")
            .getCollection("k1_deliveries")
            .find(eq(Fields.EVENT_ID, "e1"))
            .first();
    assertThat(dead.getString(Fields.STATUS)).isEqualTo(Fields.DEAD);

    // Dead timers free their id: a new timer under "t1" is armed.
    TimerResult again =
        store.schedule(timerEvent("e2"), Timer.in(Duration.ZERO).named("t1", TimerConflict.FAIL));
    assertThat(again).isEqualTo(new TimerResult(TimerOutcome.ARMED, "e2"));
    assertThat(store.claim("b", b, 10)).extracting(ClaimedDelivery::eventId).containsExactly("e2");
  }
}
