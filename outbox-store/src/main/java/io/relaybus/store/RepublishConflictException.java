package io.relaybus.store;

import java.util.List;

/**
 * A store built with {@code strictRepublish(true)} was asked to publish an event id that exists
 * with another type, key, payload, content type or headers. The stored event would win (a republish
 * adds routes, it never rewrites what happened), so the call refuses instead of silently keeping
 * the first version. Usually two different events were given the same id. In the caller's
 * transaction, the call may have written other events of the batch: roll the transaction back.
 */
public class RepublishConflictException extends IllegalArgumentException {
  private final String eventId;
  private final List<String> differingFields;

  public RepublishConflictException(String eventId, List<String> differingFields) {
    super(
        "event id '%s' was already published with a different %s; a republish must repeat the event as first published (strictRepublish is on; nothing of this event was changed)"
            .formatted(eventId, String.join(", ", differingFields)));
    this.eventId = eventId;
    this.differingFields = List.copyOf(differingFields);
  }

  public String eventId() {
    return eventId;
  }

  /** The differing fields, as in {@link PublishResult#differingFields()}. */
  public List<String> differingFields() {
    return differingFields;
  }
}
