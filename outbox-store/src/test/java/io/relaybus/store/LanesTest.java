package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.List;
import org.junit.jupiter.api.Test;

class LanesTest {
  /** Pinned values: a change here would move keys between lanes and break running outboxes. */
  @Test
  void laneIsFnv1aOfTheKeyMod256() {
    assertThat(Lanes.fnv1a32("")).isEqualTo(0x811c9dc5);
    assertThat(Lanes.fnv1a32("a")).isEqualTo(0xe40c292c);
    assertThat(Lanes.fnv1a32("foobar")).isEqualTo(0xbf9cf968);
    assertThat(Lanes.laneOf("a", "ignored")).isEqualTo(0x2c);
    assertThat(Lanes.laneOf("foobar", "ignored")).isEqualTo(0x68);
    assertThat(Lanes.laneOf(null, "foobar")).as("no key: by event id").isEqualTo(0x68);
  }

  @Test
  void splitCoversAllLanesContiguously() {
    assertThat(LaneRange.split(1)).containsExactly(new LaneRange(0, 255));
    assertThat(LaneRange.split(3))
        .containsExactly(new LaneRange(0, 85), new LaneRange(86, 170), new LaneRange(171, 255));
    assertThat(LaneRange.split(1000))
        .hasSize(256)
        .allSatisfy(r -> assertThat(r.size()).isEqualTo(1));
    assertThat(LaneRange.parse("10-20")).isEqualTo(new LaneRange(10, 20));
    assertThat(LaneRange.parse(new LaneRange(3, 9).toString())).isEqualTo(new LaneRange(3, 9));
    assertThat(LaneRange.split(4).stream().mapToInt(LaneRange::size).sum()).isEqualTo(256);
    assertThat(List.of(LaneRange.split(4).get(0).lanes().get(0))).containsExactly(0);
  }

  @Test
  void badRangesAreRejected() {
    assertThatThrownBy(() -> new LaneRange(5, 4)).hasMessageContaining("[5, 4]");
    assertThatThrownBy(() -> LaneRange.parse("x")).hasMessageContaining("'x'");
    assertThatThrownBy(() -> LaneRange.split(0)).hasMessageContaining("parts must be positive");
  }
}
