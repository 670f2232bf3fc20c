package io.relaybus.store;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;

/**
 * A contiguous range of lanes {@code [first, last]}, the unit a Connect task owns.
 *
 * @param first first lane, inclusive
 * @param last last lane, inclusive
 */
public record LaneRange(int first, int last) {
  public LaneRange {
    if (first < 0 || last >= Lanes.COUNT || first > last) {
      throw new IllegalArgumentException(
          "lane range must satisfy 0 <= first <= last < %d, but was [%d, %d]"
              .formatted(Lanes.COUNT, first, last));
    }
  }

  public static LaneRange all() {
    return new LaneRange(0, Lanes.COUNT - 1);
  }

  /**
   * Splits all lanes into {@code parts} contiguous ranges whose sizes differ by at most one; never
   * more ranges than lanes.
   */
  public static List<LaneRange> split(int parts) {
    Validation.positive("parts", parts);
    int n = Math.min(parts, Lanes.COUNT);
    List<LaneRange> ranges = new ArrayList<>(n);
    int first = 0;
    for (int i = 0; i < n; i++) {
      int size = Lanes.COUNT / n + (i < Lanes.COUNT % n ? 1 : 0);
      ranges.add(new LaneRange(first, first + size - 1));
      first += size;
    }
    return ranges;
  }

  /** Parses {@code "first-last"} as written by {@link #toString()}. */
  public static LaneRange parse(String text) {
    int dash = text.indexOf('-');
    if (dash < 0) {
      throw new IllegalArgumentException(
          "lane range must look like 'first-last', but was '" + text + "'");
    }
    try {
      return new LaneRange(
          Integer.parseInt(text.substring(0, dash).strip()),
          Integer.parseInt(text.substring(dash + 1).strip()));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          "lane range must look like 'first-last', but was '" + text + "'");
    }
  }

  public int size() {
    return last - first + 1;
  }

  public boolean contains(int lane) {
    return lane >= first && lane <= last;
  }

  public List<Integer> lanes() {
    return IntStream.rangeClosed(first, last).boxed().toList();
  }

  @Override
  public String toString() {
    return first + "-" + last;
  }
}
