package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/** The ids the builder generates: time-ordered UUIDs, spread over the lanes like random ones. */
class OutboxEventIdsTest {
  @Test
  void generatedIdsAreVersion7UuidsInTheOrderTheyWereMade() {
    List<String> ids = new ArrayList<>();
    for (int i = 0; i < 10_000; i++) {
      ids.add(OutboxEvent.builder("order.placed").handlers("billing").build().id());
    }
    assertThat(ids).allSatisfy(id -> assertThat(UUID.fromString(id).version()).isEqualTo(7));
    // the events' primary key then grows at its right edge: each id sorts after the one before
    assertThat(ids).isSorted().doesNotHaveDuplicates();
  }

  @Test
  void unkeyedEventsWithGeneratedIdsSpreadOverEveryLane() {
    int[] perLane = new int[Lanes.COUNT];
    int events = 100 * Lanes.COUNT;
    for (int i = 0; i < events; i++) {
      perLane[Lanes.laneOf(null, OutboxEvent.newId())]++;
    }
    // about 100 each; 50 and 150 are five standard deviations off
    for (int lane = 0; lane < Lanes.COUNT; lane++) {
      assertThat(perLane[lane]).as("events in lane %d", lane).isBetween(50, 150);
    }
  }
}
