package io.relaybus.store;

import java.nio.charset.StandardCharsets;

/**
 * The lane function, identical in every store: {@code lane = fnv1a32(utf8(key ?? eventId)) mod
 * 256}, where {@code fnv1a32} is 32-bit FNV-1a (offset basis {@code 0x811c9dc5}, prime {@code
 * 0x01000193}) read as an unsigned number.
 *
 * <p>Worked example: {@code laneOf("order-1", ...)}: fnv1a32 of the bytes {@code 6f 72 64 65 72 2d
 * 31} is {@code 0x2a6d6b2b}... see {@code LanesTest} for pinned values. An application that
 * publishes with plain SQL computes the same value with the {@code <prefix>lane(text)} function the
 * schema installs.
 */
public final class Lanes {
  /** Fixed: the lane is stored in each delivery, so it cannot be a setting. */
  public static final int COUNT = 256;

  private static final int FNV_OFFSET_BASIS = 0x811c9dc5;
  private static final int FNV_PRIME = 0x01000193;

  private Lanes() {}

  /** The lane of an event: by its ordering key, or by its id when it has no key. */
  public static int laneOf(String key, String eventId) {
    return Integer.remainderUnsigned(fnv1a32(key != null ? key : eventId), COUNT);
  }

  static int fnv1a32(String text) {
    int hash = FNV_OFFSET_BASIS;
    for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
      hash ^= b & 0xff;
      hash *= FNV_PRIME;
    }
    return hash;
  }
}
