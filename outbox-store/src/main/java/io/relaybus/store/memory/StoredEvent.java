package io.relaybus.store.memory;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * An event row. Type, key, payload and headers are those of the first publish of the id; a
 * republish only adds to {@link #handlers}, which lists every handler the event ever had a delivery
 * for (and so outlives the deliveries, see the inbox).
 */
final class StoredEvent {
  final String id;
  final String type;
  final String key;

  /** Never handed out: {@link #payload()} copies. */
  private final byte[] payload;

  final String contentType;
  final Map<String, String> headers;
  final List<String> handlers = new ArrayList<>();
  final Instant createdAt;

  StoredEvent(
      String id,
      String type,
      String key,
      byte[] payload,
      String contentType,
      Map<String, String> headers,
      Instant createdAt) {
    this.id = id;
    this.type = type;
    this.key = key;
    this.payload = payload.clone();
    this.contentType = contentType;
    this.headers = Map.copyOf(headers);
    this.createdAt = createdAt;
  }

  byte[] payload() {
    return payload.clone();
  }
}
