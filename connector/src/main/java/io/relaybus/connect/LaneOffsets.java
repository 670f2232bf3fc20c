package io.relaybus.connect;

import io.relaybus.store.LaneRange;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.connect.storage.OffsetStorageReader;

/**
 * The codec of source partitions and offsets. The source partition is the lane, {@code {"lane":
 * 17}}. The offset is not a position (the outbox database is the position): it lists the deliveries
 * of the lane sent and not yet known to be deleted, {@code {"emitted": "812,815"}}.
 *
 * <p>Why: with {@code exactly.once.support=required} Connect commits a record's offset in the same
 * transaction as the record. After a hard kill, deliveries that reached Kafka but were not deleted
 * yet are pending again; a restarted task reads these offsets and deletes those deliveries instead
 * of sending them twice. Without exactly-once the offsets are written but not trusted (see {@link
 * OutboxSourceTaskConfig#resumeFromOffsets()}).
 */
final class LaneOffsets {
  static final String LANE_KEY = "lane";
  static final String EMITTED_KEY = "emitted";

  private LaneOffsets() {}

  static Map<String, Object> partition(int lane) {
    return Map.of(LANE_KEY, lane);
  }

  static Map<String, Object> offset(Collection<Long> emitted) {
    return Map.of(
        EMITTED_KEY, emitted.stream().map(String::valueOf).collect(Collectors.joining(",")));
  }

  /**
   * The lane of a source partition.
   *
   * @throws IllegalArgumentException when it is not one of ours
   */
  static int lane(Map<String, ?> partition) {
    Object lane = partition == null ? null : partition.get(LANE_KEY);
    if (!(lane instanceof Number number) || partition.size() != 1) {
      throw new IllegalArgumentException(
          "source partition must be {\"lane\": 0..255}, but was " + partition);
    }
    return new LaneRange(number.intValue(), number.intValue()).first();
  }

  /**
   * The delivery ids an offset lists.
   *
   * @throws IllegalArgumentException when it is not one of ours
   */
  static Set<Long> emitted(Map<String, ?> offset) {
    Object text = offset == null ? null : offset.get(EMITTED_KEY);
    if (!(text instanceof String list) || offset.size() != 1) {
      throw new IllegalArgumentException(
          "source offset must be {\"emitted\": \"id,id,...\"}, but was " + offset);
    }
    Set<Long> ids = new HashSet<>();
    for (String id : list.split(",")) {
      if (!id.isBlank()) {
        try {
          ids.add(Long.parseLong(id.strip()));
        } catch (NumberFormatException e) {
          throw new IllegalArgumentException(
              "source offset lists '" + id + "', which is no delivery id");
        }
      }
    }
    return ids;
  }

  /** Every delivery id the committed offsets of {@code lanes} list. */
  static Set<Long> read(OffsetStorageReader reader, LaneRange lanes) {
    List<Map<String, Object>> partitions = new ArrayList<>();
    for (int lane : lanes.lanes()) {
      partitions.add(partition(lane));
    }
    Set<Long> ids = new HashSet<>();
    for (Map<String, Object> offset : reader.offsets(partitions).values()) {
      if (offset != null) {
        ids.addAll(emitted(offset));
      }
    }
    return ids;
  }
}
