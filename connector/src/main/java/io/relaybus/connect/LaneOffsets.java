package io.relaybus.connect;

import io.relaybus.store.ClaimedDelivery;
import io.relaybus.store.LaneRange;
import io.relaybus.store.OutboxStore;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.connect.storage.OffsetStorageReader;

/**
 * The codec of source partitions and offsets. The source partition is the lane, {@code {"lane":
 * 17}}. The offset is not a position (the outbox database is the position): it lists the deliveries
 * of the lane sent and not yet known to be deleted, each as {@code id:fingerprint}, {@code
 * {"emitted": "812:1f0c9a2b33e4d5a6,815:…"}}.
 *
 * <p>Why: with {@code exactly.once.support=required} Connect commits a record's offset in the same
 * transaction as the record, and keeps only the last offset per source partition. After a hard
 * kill, deliveries that reached Kafka but were not deleted yet are pending again; a restarted task
 * reads these offsets and deletes those deliveries instead of sending them twice. Without
 * exactly-once the offsets are not trusted (see {@link OutboxSourceTaskConfig#resumeFromOffsets()})
 * and not computed: every record carries {@link #UNTRACKED}.
 *
 * <p><b>Size.</b> Only the last record of a lane in a {@code poll()} batch carries the full list
 * (sent and unsettled, this batch included); the lane's earlier records of the batch share one
 * offset computed before the batch. Transactions follow {@code poll()} batches ({@code
 * transaction.boundary=poll}), so the last one is the one committed; were a transaction to end
 * mid-batch ({@code transaction.boundary=interval}), its offset would list fewer deliveries than
 * Kafka has, which after a hard kill costs duplicates, never a loss. The list holds the task's
 * unacknowledged and not yet deleted deliveries of the lane (about {@code 4 × batch.size}), and
 * what the lane's offset listed at the task's start that it has not been handed yet (a later
 * incarnation reads only the last offset), less what the outbox no longer holds ({@link
 * #remaining}: deleted after that offset was committed), so offsets cost O(1) entries per record
 * amortized and do not grow from one restart to the next.
 *
 * <p><b>Why a fingerprint.</b> Delivery ids repeat after a database restore, a failover to an
 * asynchronous replica or a schema dropped and set up again; an id alone in an old offset would
 * then name a new delivery, which would be deleted unsent. The fingerprint (64 bits of SHA-256 over
 * the event id and the handler) binds the entry to the delivery's event, and event ids do not
 * repeat (publishing the same id again is the same event). Entries without one, written by versions
 * before it, are ignored: after an upgrade that follows a hard kill, those deliveries are sent
 * again (duplicates, never a loss).
 */
final class LaneOffsets {
  static final String LANE_KEY = "lane";
  static final String EMITTED_KEY = "emitted";

  /** The offset of every record when offsets are not trusted: nothing to compute or keep. */
  static final Map<String, Object> UNTRACKED = Map.of(EMITTED_KEY, "");

  private LaneOffsets() {}

  static Map<String, Object> partition(int lane) {
    return Map.of(LANE_KEY, lane);
  }

  static Map<String, Object> offset(Collection<String> entries) {
    return Map.of(EMITTED_KEY, String.join(",", entries));
  }

  /** The offset entry naming {@code delivery}: {@code id:fingerprint}. */
  static String entry(ClaimedDelivery delivery) {
    return delivery.deliveryId() + ":" + fingerprint(delivery.eventId(), delivery.handler());
  }

  static String fingerprint(String eventId, String handler) {
    try {
      MessageDigest sha = MessageDigest.getInstance("SHA-256");
      sha.update(eventId.getBytes(StandardCharsets.UTF_8));
      sha.update((byte) 0);
      sha.update(handler.getBytes(StandardCharsets.UTF_8));
      return HexFormat.of().formatHex(sha.digest(), 0, 8);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("every Java platform has SHA-256", e);
    }
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
   * The {@code id:fingerprint} entries an offset lists; bare ids (written before fingerprints) are
   * left out.
   *
   * @throws IllegalArgumentException when it is not one of ours
   */
  static Set<String> emitted(Map<String, ?> offset) {
    Object text = offset == null ? null : offset.get(EMITTED_KEY);
    if (!(text instanceof String list) || offset.size() != 1) {
      throw new IllegalArgumentException(
          "source offset must be {\"emitted\": \"id:fingerprint,...\"}, but was " + offset);
    }
    Set<String> entries = new HashSet<>();
    for (String entry : list.split(",")) {
      String item = entry.strip();
      if (item.isEmpty()) {
        continue;
      }
      int colon = item.indexOf(':');
      try {
        Long.parseLong(colon < 0 ? item : item.substring(0, colon));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException(
            "source offset lists '" + item + "', which names no delivery");
      }
      if (colon > 0) {
        entries.add(item);
      }
    }
    return entries;
  }

  /**
   * Of {@code entries} (per lane, as {@link #read} returns them), those whose delivery the outbox
   * still holds. A committed offset names what its task had sent and not settled when it sent the
   * lane's last record; what the task deleted after that (all of it, at a graceful stop) is still
   * named, and no claim would ever hand it out again: kept, it would be listed in the lane's
   * offsets for good, and each restart would add its own.
   */
  static Map<Integer, Set<String>> remaining(OutboxStore store, Map<Integer, Set<String>> entries) {
    Map<Integer, Set<String>> kept = new HashMap<>();
    entries.forEach(
        (lane, listed) -> {
          Set<Long> ids = new HashSet<>();
          listed.forEach(entry -> ids.add(id(entry)));
          Set<Long> held = ids.isEmpty() ? Set.of() : store.remaining(lane, ids);
          Set<String> left = new HashSet<>();
          for (String entry : listed) {
            if (held.contains(id(entry))) {
              left.add(entry);
            }
          }
          if (!left.isEmpty()) {
            kept.put(lane, left);
          }
        });
    return kept;
  }

  private static long id(String entry) {
    return Long.parseLong(entry.substring(0, entry.indexOf(':')));
  }

  /** Per lane of {@code lanes}, the entries its committed offset lists. */
  static Map<Integer, Set<String>> read(OffsetStorageReader reader, LaneRange lanes) {
    List<Map<String, Object>> partitions = new ArrayList<>();
    for (int lane : lanes.lanes()) {
      partitions.add(partition(lane));
    }
    Map<Integer, Set<String>> entries = new HashMap<>();
    reader
        .offsets(partitions)
        .forEach(
            (partition, offset) -> {
              if (offset != null && partition.get(LANE_KEY) instanceof Number lane) {
                entries.put(lane.intValue(), emitted(offset));
              }
            });
    return entries;
  }
}
