package io.relaybus.store;

import java.util.List;

/**
 * What a publish did.
 *
 * @param eventId the event's id
 * @param newEvent whether the event row was created by this publish
 * @param addedHandlers handlers a delivery was created for; handlers the event already had are left
 *     out (an idempotent republish returns an empty list)
 */
public record PublishResult(String eventId, boolean newEvent, List<String> addedHandlers) {
  public PublishResult {
    addedHandlers = List.copyOf(addedHandlers);
  }
}
