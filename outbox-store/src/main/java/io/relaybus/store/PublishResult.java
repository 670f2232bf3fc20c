package io.relaybus.store;

import java.util.List;
import java.util.Set;

/**
 * What a publish did.
 *
 * @param eventId the event's id
 * @param newEvent whether the event row was created by this publish
 * @param addedHandlers handlers a delivery was created for; handlers the event already had are left
 *     out (an idempotent republish returns an empty list)
 * @param differingFields when the id existed: the fields in which the stored event differs from the
 *     one published, a subset of {@link #FIELDS} in that order ({@code type}, {@code key}, {@code
 *     payload}, {@code contentType}, {@code headers}); empty for a new event or a faithful
 *     republish. The stored event wins either way; a store built with {@code strictRepublish(true)}
 *     throws {@link RepublishConflictException} instead of returning a non-empty list.
 */
public record PublishResult(
    String eventId, boolean newEvent, List<String> addedHandlers, List<String> differingFields) {
  /** The fields compared on republish, in the order {@link #differingFields} lists them. */
  public static final List<String> FIELDS =
      List.of("type", "key", "payload", "contentType", "headers");

  public PublishResult {
    addedHandlers = List.copyOf(addedHandlers);
    differingFields = List.copyOf(differingFields);
    if (!FIELDS.containsAll(differingFields)) {
      throw new IllegalArgumentException(
          "differingFields must be among " + FIELDS + ", but were " + differingFields);
    }
  }

  /** A publish whose event, if it existed, matched the one published. */
  public PublishResult(String eventId, boolean newEvent, List<String> addedHandlers) {
    this(eventId, newEvent, addedHandlers, List.of());
  }

  /** Whether the id existed with another type, key, payload, content type or headers. */
  public boolean conflicting() {
    return !differingFields.isEmpty();
  }

  /**
   * The fields in which a stored event differs from {@code published}, in {@link #FIELDS} order;
   * for the stores. Headers compare as maps (their order does not count).
   */
  public static List<String> differences(
      String type,
      String key,
      byte[] payload,
      String contentType,
      java.util.Map<String, String> headers,
      OutboxEvent published) {
    Set<String> differ = new java.util.HashSet<>();
    if (!java.util.Objects.equals(type, published.type())) {
      differ.add("type");
    }
    if (!java.util.Objects.equals(key, published.key())) {
      differ.add("key");
    }
    if (!java.util.Arrays.equals(payload, published.payload())) {
      differ.add("payload");
    }
    if (!java.util.Objects.equals(contentType, published.contentType())) {
      differ.add("contentType");
    }
    if (!java.util.Objects.equals(headers, published.headers())) {
      differ.add("headers");
    }
    return FIELDS.stream().filter(differ::contains).toList();
  }

  /**
   * This result, or a {@link RepublishConflictException} when {@code strict} and the stored event
   * differs.
   */
  public PublishResult checked(boolean strict) {
    if (strict && conflicting()) {
      throw new RepublishConflictException(eventId, differingFields);
    }
    return this;
  }
}
