package io.relaybus.store;

import com.fasterxml.uuid.Generators;
import com.fasterxml.uuid.NoArgGenerator;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * An event to publish: what happened, the ordering key it belongs to, its payload and the handlers
 * (routes) that must each receive it once. The connector maps a handler to a Kafka topic.
 *
 * <p>Build one with {@link #builder(String)}; the builder validates every field and names the field
 * and the rule it broke. Instances are immutable.
 *
 * @param id caller-given or generated ({@link #newId()}: a time-ordered UUID, version 7);
 *     publishing the same id again is idempotent
 * @param type what happened, e.g. {@code order.placed}
 * @param key ordering key, or {@code null}: events of one key are delivered in commit order
 * @param payload the body, never {@code null} (may be empty)
 * @param contentType media type of the payload, e.g. {@code application/json}
 * @param headers extra headers carried to the record (e.g. {@code traceparent}), in order
 * @param handlers the routes this event goes to, distinct, at least one
 */
public record OutboxEvent(
    String id,
    String type,
    String key,
    byte[] payload,
    String contentType,
    Map<String, String> headers,
    List<String> handlers) {

  /** UUID version 7 (RFC 9562), monotonic within a millisecond in this JVM. */
  private static final NoArgGenerator IDS = Generators.timeBasedEpochGenerator();

  /**
   * A new event id as {@link Builder#build()} generates it: a UUID of version 7 (RFC 9562), the
   * time in milliseconds first, then random bits. Time-ordered ids keep the store's index of event
   * ids (idempotency, the inbox record) growing at its right edge: a random id (version 4) dirties
   * a random page of that index per publish, which PostgreSQL logs whole after every checkpoint.
   * The id shows when the event was created, to the millisecond.
   */
  public static String newId() {
    return IDS.generate().toString();
  }

  public OutboxEvent {
    Validation.identifierLike("event id", id, Validation.MAX_EVENT_ID_LENGTH);
    Validation.notBlank("type", type, Validation.MAX_TYPE_LENGTH);
    if (key != null) {
      Validation.notBlank("key", key, Validation.MAX_KEY_LENGTH);
    }
    Objects.requireNonNull(payload, "payload must not be null (use an empty array)");
    Validation.notBlank("contentType", contentType, Validation.MAX_TYPE_LENGTH);
    Validation.storable("event id", id);
    Validation.storable("type", type);
    if (key != null) {
      Validation.storable("key", key);
    }
    Validation.storable("contentType", contentType);
    if (headers == null) {
      throw new IllegalArgumentException("headers must not be null (use an empty map)");
    }
    Validation.notNull("handlers", handlers);
    headers = Collections.unmodifiableMap(new LinkedHashMap<>(headers));
    headers.forEach(Validation::header);
    if (handlers.isEmpty()) {
      throw new IllegalArgumentException("handlers must name at least one handler");
    }
    if (handlers.size() > Validation.MAX_HANDLERS) {
      throw new IllegalArgumentException(
          "handlers must name at most %d handlers, but named %d"
              .formatted(Validation.MAX_HANDLERS, handlers.size()));
    }
    LinkedHashSet<String> distinct = new LinkedHashSet<>();
    for (String handler : handlers) {
      Validation.handler(handler);
      if (!distinct.add(handler)) {
        throw new IllegalArgumentException(
            "handlers must be distinct, but '" + handler + "' is listed twice");
      }
    }
    handlers = List.copyOf(distinct);
    payload = payload.clone();
  }

  /** The payload; a copy, so the event stays immutable. */
  @Override
  public byte[] payload() {
    return payload.clone();
  }

  /** The lane this event's deliveries go to: {@link Lanes#laneOf(String, String)}. */
  public int lane() {
    return Lanes.laneOf(key, id);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof OutboxEvent e
        && id.equals(e.id)
        && type.equals(e.type)
        && Objects.equals(key, e.key)
        && Arrays.equals(payload, e.payload)
        && contentType.equals(e.contentType)
        && headers.equals(e.headers)
        && handlers.equals(e.handlers);
  }

  @Override
  public int hashCode() {
    return id.hashCode();
  }

  @Override
  public String toString() {
    // No payload: payloads never reach logs.
    return "OutboxEvent[id=%s, type=%s, key=%s, handlers=%s, %d bytes %s]"
        .formatted(id, type, key, handlers, payload.length, contentType);
  }

  public static Builder builder(String type) {
    return new Builder(type);
  }

  /** Builds an {@link OutboxEvent}; {@link #build()} validates. */
  public static final class Builder {
    private String id;
    private final String type;
    private String key;
    private byte[] payload = new byte[0];
    private String contentType = "application/octet-stream";
    private final Map<String, String> headers = new LinkedHashMap<>();
    private final List<String> handlers = new ArrayList<>();

    private Builder(String type) {
      this.type = type;
    }

    /**
     * Sets the event id; without it {@link #build()} generates one ({@link OutboxEvent#newId()}: a
     * time-ordered UUID).
     */
    public Builder id(String id) {
      this.id = id;
      return this;
    }

    public Builder key(String key) {
      this.key = key;
      return this;
    }

    public Builder payload(byte[] payload, String contentType) {
      this.payload = payload;
      this.contentType = contentType;
      return this;
    }

    /** A UTF-8 JSON payload with content type {@code application/json}. */
    public Builder json(String json) {
      return payload(json.getBytes(java.nio.charset.StandardCharsets.UTF_8), "application/json");
    }

    public Builder header(String name, String value) {
      headers.put(name, value);
      return this;
    }

    public Builder handler(String handler) {
      handlers.add(handler);
      return this;
    }

    public Builder handlers(String... handlers) {
      this.handlers.addAll(Arrays.asList(Validation.notNull("handlers", handlers)));
      return this;
    }

    public OutboxEvent build() {
      return new OutboxEvent(
          id == null ? newId() : id, type, key, payload, contentType, headers, handlers);
    }
  }
}
