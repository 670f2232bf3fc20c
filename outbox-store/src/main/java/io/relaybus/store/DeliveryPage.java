package io.relaybus.store;

import java.util.List;

/**
 * A page of a listing.
 *
 * @param items the deliveries, in id order
 * @param nextAfterId the {@code afterId} of the next page, or {@code null} when this was the last
 */
public record DeliveryPage(List<DeliveryView> items, Long nextAfterId) {
  public DeliveryPage {
    items = List.copyOf(items);
  }
}
