package io.relaybus.store;

import java.util.Arrays;
import java.util.Locale;
import java.util.stream.Collectors;

/** The status of a delivery as listings show it. */
public enum DeliveryStatus {
  /** Waiting to be sent, or in flight (see {@link DeliveryView#inFlight()}). */
  PENDING,
  /** Dead-lettered: out of attempts, or buried with a reason. Requeue brings it back. */
  DEAD,
  /** Sent and acknowledged; only listed when the store keeps a completion history. */
  COMPLETED;

  public String label() {
    return name().toLowerCase(Locale.ROOT);
  }

  /** Parses a status name case-insensitively; unknown names get an error listing the valid ones. */
  public static DeliveryStatus parse(String text) {
    for (DeliveryStatus s : values()) {
      if (s.label().equalsIgnoreCase(text == null ? "" : text.strip())) {
        return s;
      }
    }
    throw new IllegalArgumentException(
        "status must be one of "
            + Arrays.stream(values()).map(DeliveryStatus::label).collect(Collectors.joining(", "))
            + ", but was "
            + Validation.quote(text));
  }
}
