package io.relaybus.store;

import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * An event's collections given as null are refused naming the argument and the rule, as every other
 * bad part of an event is, not with a NullPointerException from inside the record.
 */
class OutboxEventNullsTest {
  private static final byte[] PAYLOAD = {};

  @Test
  void nullHeadersAreRefusedNamingThem() {
    assertThatThrownBy(
            () -> new OutboxEvent("e1", "t", "k", PAYLOAD, "text/plain", null, List.of("h")))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("headers must not be null (use an empty map)");
  }

  @Test
  void nullHandlersAreRefusedNamingThem() {
    assertThatThrownBy(() -> new OutboxEvent("e1", "t", "k", PAYLOAD, "text/plain", Map.of(), null))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("handlers must not be null");
    assertThatThrownBy(() -> OutboxEvent.builder("t").id("e1").handlers((String[]) null))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessage("handlers must not be null");
  }
}
